//! 24-bit PSN arithmetic (IBTA 9.7.1: PSNs wrap at 2^24 and compare within a window of 2^23).

/// PSNs are 24 bits wide.
pub const PSN_MASK: u32 = 0xff_ffff;

/// `psn + n` modulo 2^24 (only the low 24 bits of either input count).
pub fn add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & PSN_MASK
}

/// `a - b` as a signed distance in `[-2^23, 2^23)`: positive when `a` is after `b` in the
/// 2^23 window of IBTA 9.7.1 (only the low 24 bits of either input count).
pub fn diff(a: u32, b: u32) -> i32 {
    // Shifting the 24-bit difference into the top of an i32 and back sign-extends bit 23.
    ((a.wrapping_sub(b) << 8) as i32) >> 8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_wraps_at_2_24() {
        assert_eq!(add(0xff_fffe, 1), 0xff_ffff);
        assert_eq!(add(0xff_ffff, 1), 0);
        assert_eq!(add(0xff_ffff, 3), 2);
        assert_eq!(add(5, PSN_MASK + 1), 5);
        assert_eq!(add(0x1ff_ffff, 0), 0xff_ffff);
    }

    #[test]
    fn diff_across_the_wrap() {
        assert_eq!(diff(0, 0xff_ffff), 1);
        assert_eq!(diff(0xff_ffff, 0), -1);
        assert_eq!(diff(2, 0xff_fffe), 4);
        assert_eq!(diff(0xff_fffe, 2), -4);
        assert_eq!(diff(7, 7), 0);
    }

    #[test]
    fn diff_at_the_window_edges() {
        assert_eq!(diff(0x7f_ffff, 0), 0x7f_ffff);
        assert_eq!(diff(0x80_0000, 0), -0x80_0000);
        assert_eq!(diff(0, 0x80_0000), -0x80_0000);
        assert_eq!(diff(0, 0x7f_ffff), -0x7f_ffff);
        assert_eq!(diff(0x100_0005, 5), 0, "bits above 24 are ignored");
    }

    #[test]
    fn add_and_diff_agree() {
        for base in [0, 1, 0x7f_ffff, 0x80_0000, 0xff_fff0, 0xff_ffff] {
            for n in [0u32, 1, 15, 0x7f_ffff] {
                assert_eq!(diff(add(base, n), base), n as i32, "base {base:#x} n {n:#x}");
            }
        }
    }
}
