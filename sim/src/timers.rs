//! The RC transport timers' encodings, one for both ports (the loopback's `port/` and the RoCE
//! requester, `roce/requester.rs`): the local ACK timeout (IBTA 9.7.6.1.3, `timeout` =
//! 4.096 µs × 2^timeout) and the RNR NAK timer (IBTA 9.7.5.2.8, Table 45).

use pvrdma_abi::verbs::QpAttr;
use std::time::Duration;

/// `rnr_retry` 7: retry for ever (IBTA 9.7.5.2.8).
pub const RNR_RETRY_INFINITE: u8 = 7;

/// A requester's retry attributes (its QP's, as MODIFY_QP set them at RTR -> RTS or in SQD).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    /// The local ACK timeout ([`retransmit_timeout`] of `timeout`; `None`: never times out).
    pub timeout: Option<Duration>,
    /// Retransmissions after a timeout or a PSN sequence error before `RETRY_EXC_ERR`.
    pub retry_cnt: u8,
    /// Tries again after an RNR NAK before `RNR_RETRY_EXC_ERR` ([`RNR_RETRY_INFINITE`]: no end).
    pub rnr_retry: u8,
}

impl Retry {
    /// The retry attributes of a QP with attributes `a`.
    pub fn of(a: &QpAttr) -> Self {
        Self { timeout: retransmit_timeout(a.timeout), retry_cnt: a.retry_cnt, rnr_retry: a.rnr_retry }
    }
}

/// The shortest retransmission timeout the model waits: a `timeout` below ~10 ms (code 12) is
/// raised to it, so a lossy link or an absent responder does not spin a port's thread on timers
/// (Linux rxe keeps a floor of its own in jiffies).
pub const MIN_RETRANSMIT: Duration = Duration::from_millis(10);

/// The local ACK timeout of QP attribute `timeout` (5 bits): `None` for 0 (infinite: the
/// requester never times out, IBTA 9.7.6.1.3), else 4.096 µs × 2^timeout, at least
/// [`MIN_RETRANSMIT`].
pub fn retransmit_timeout(timeout: u8) -> Option<Duration> {
    if timeout == 0 {
        return None;
    }
    let ns = 4096u64 << u32::from(timeout.min(31));
    Some(Duration::from_nanos(ns).max(MIN_RETRANSMIT))
}

/// The RNR NAK timer field (5 bits) in microseconds (IBTA Table 45): code 0 is 655.36 ms, codes
/// 1..=31 run from 0.01 ms to 491.52 ms.
const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840, 5_120, 7_680,
    10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840, 245_760, 327_680, 491_520,
];

/// How long a requester waits after an RNR NAK whose AETH carries timer code `code`.
pub fn rnr_delay(code: u8) -> Duration {
    Duration::from_micros(u64::from(RNR_TIMER_US[usize::from(code & 0x1f)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_follow_the_tables() {
        assert_eq!(retransmit_timeout(0), None);
        assert_eq!(retransmit_timeout(1), Some(MIN_RETRANSMIT));
        assert_eq!(retransmit_timeout(14), Some(Duration::from_nanos(4096 << 14)));
        assert_eq!(retransmit_timeout(31), Some(Duration::from_nanos(4096 << 31)));
        assert_eq!(rnr_delay(0), Duration::from_micros(655_360));
        assert_eq!(rnr_delay(1), Duration::from_micros(10));
        assert_eq!(rnr_delay(12), Duration::from_micros(640));
        assert_eq!(rnr_delay(31), Duration::from_micros(491_520));
    }
}
