//! Option values as rdma-core's tools read them, and how a tool fails.

/// A number as `strtol(s, NULL, 0)` reads it in rdma-core's tools: optional leading blanks and
/// sign, then decimal, `0x` hex or `0` octal digits for as long as they last; text without
/// digits reads as 0 (`-n abc` is 0, `-n 10x` is 10). Errors: a value outside `T`.
pub fn number<T: TryFrom<i64>>(s: &str) -> Result<T, String> {
    let v = strtol(s).ok_or_else(|| format!("{s} is out of range"))?;
    T::try_from(v).map_err(|_| format!("{s} is out of range"))
}

/// `strtol(s, NULL, 0)`; `None` where C would saturate (the value does not fit an `i64`).
fn strtol(s: &str) -> Option<i64> {
    let t = s.trim_start();
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let hex = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X"));
    let (digits, radix) = match hex {
        Some(h) if h.starts_with(|c: char| c.is_ascii_hexdigit()) => (h, 16),
        _ if t.starts_with('0') => (t, 8),
        _ => (t, 10),
    };
    let end = digits.find(|c: char| !c.is_digit(radix)).unwrap_or(digits.len());
    let magnitude = if end == 0 { 0 } else { i64::from_str_radix(&digits[..end], radix).ok()? };
    Some(if neg { -magnitude } else { magnitude })
}

/// Why a tool stopped: its message and the exit status rdma-core's tool gives for it.
pub struct Failure {
    /// What to print on stderr.
    pub msg: String,
    /// The exit status.
    pub code: u8,
}

impl From<String> for Failure {
    fn from(msg: String) -> Self {
        Self { msg, code: 1 }
    }
}

impl From<&str> for Failure {
    fn from(msg: &str) -> Self {
        msg.to_owned().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_like_strtol_base_0() {
        assert_eq!(number::<u32>("4096"), Ok(4096));
        assert_eq!(number::<u32>("0x1000"), Ok(4096));
        assert_eq!(number::<u32>("010"), Ok(8));
        assert_eq!(number::<u32>("0"), Ok(0));
        assert_eq!(number::<u32>("10x"), Ok(10));
        assert_eq!(number::<u32>("ten"), Ok(0));
        assert_eq!(number::<u32>(" +7"), Ok(7));
        assert_eq!(number::<i64>("-1"), Ok(-1));
        assert_eq!(number::<u32>("0x"), Ok(0));
        assert_eq!(number::<u32>("089"), Ok(0));
        assert!(number::<u8>("256").is_err());
        assert!(number::<u32>("-1").is_err());
        assert!(number::<i64>("99999999999999999999").is_err());
    }
}
