//! Option values as rdma-core's tools read them, and how a tool fails.

/// A number as `strtol(s, NULL, 0)` reads it in rdma-core's tools: decimal, `0x` hex or `0` octal.
pub fn number<T: TryFrom<u64>>(s: &str) -> Result<T, String> {
    let t = s.trim();
    let (digits, radix) = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => (h, 16),
        None if t.len() > 1 && t.starts_with('0') => (&t[1..], 8),
        None => (t, 10),
    };
    let v = u64::from_str_radix(digits, radix).map_err(|_| format!("{s:?} is not a number"))?;
    T::try_from(v).map_err(|_| format!("{s} is out of range"))
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
        assert!(number::<u8>("256").is_err());
        assert!(number::<u32>("ten").is_err());
    }
}
