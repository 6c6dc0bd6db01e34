//! What `hca pingpong` sends, and what it accepts as received.
//!
//! Both ends in this process: each end sends its own pattern per message, checked by the other.
//!
//! One end per process (`--roce`), so that either end can be the unmodified `ibv_rc_pingpong`:
//! that program sends and receives in one buffer, so it echoes what it last received; with `-c`
//! its client zeroes the first byte of each page of that buffer before its first send, and its
//! server finally checks that the first byte of each page it received is zero (rdma-core
//! `rc_pingpong.c`; its buffer is otherwise filled with 0x7b). So here the client sends
//! [`wire_pattern`] (zero at each page start, distinct per message) and checks that the server
//! sent back exactly that; the server echoes what it received, and checks that it is either this
//! tool's [`wire_pattern`] or `ibv_rc_pingpong`'s buffer (its client's messages are all its
//! first one, echoed back and forth).

/// The byte `ibv_rc_pingpong` fills its buffer with.
const RC_PINGPONG_FILL: u8 = 0x7b;

/// The payload of message `seq` from the client (or server) end, both ends in this process:
/// distinct per message and end.
pub fn pattern(seq: u32, from_client: bool, size: usize) -> Vec<u8> {
    let salt = if from_client { 0x5a } else { 0xa5 };
    let byte = |i: usize| (i as u32).wrapping_mul(7).wrapping_add(seq.wrapping_mul(31) + salt) as u8;
    let mut p: Vec<u8> = (0..size).map(byte).collect();
    let n = size.min(4);
    p[..n].copy_from_slice(&seq.to_le_bytes()[..n]);
    p
}

/// The client's message `seq` on the wire: [`pattern`] with the first byte of each `page`-byte
/// page zero, which `ibv_rc_pingpong -c`'s server checks.
pub fn wire_pattern(seq: u32, size: usize, page: usize) -> Vec<u8> {
    let mut p = pattern(seq, true, size);
    for b in p.iter_mut().step_by(page.max(1)) {
        *b = 0;
    }
    p
}

/// Whether `got` is what a server may receive as message `seq`: this tool's client's
/// [`wire_pattern`], or `ibv_rc_pingpong`'s buffer (0x7b, with or without `-c`'s zero page
/// starts).
pub fn server_accepts(got: &[u8], seq: u32, page: usize) -> bool {
    let page = page.max(1);
    let filled = |p: &[u8]| {
        let rest_filled = p[1..].iter().all(|&b| b == RC_PINGPONG_FILL);
        (p[0] == 0 || p[0] == RC_PINGPONG_FILL) && rest_filled
    };
    got == wire_pattern(seq, got.len(), page).as_slice() || got.chunks(page).all(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_differ_per_message_and_end() {
        assert_ne!(pattern(1, true, 64), pattern(2, true, 64));
        assert_ne!(pattern(1, true, 64), pattern(1, false, 64));
        assert_eq!(pattern(3, true, 1).len(), 1);
    }

    #[test]
    fn wire_patterns_pass_ibv_rc_pingpongs_check_and_differ_per_message() {
        let p = wire_pattern(5, 3 * 4096 + 10, 4096);
        assert!([0, 4096, 8192, 12288].iter().all(|&i| p[i] == 0));
        assert_ne!(wire_pattern(5, 64, 4096), wire_pattern(6, 64, 4096));
        assert_eq!(wire_pattern(9, 1, 4096), [0]);
    }

    #[test]
    fn the_server_accepts_ours_or_ibv_rc_pingpongs_buffer_and_nothing_else() {
        assert!(server_accepts(&wire_pattern(7, 9000, 4096), 7, 4096));
        assert!(!server_accepts(&wire_pattern(6, 9000, 4096), 7, 4096), "a stale message");
        let mut theirs = vec![0x7b; 9000];
        assert!(server_accepts(&theirs, 3, 4096));
        theirs[4096] = 0;
        assert!(server_accepts(&theirs, 3, 4096), "-c zeroes page starts");
        theirs[4097] = 0;
        assert!(!server_accepts(&theirs, 3, 4096));
    }
}
