//! The CM's clocks and bounds: IBTA's 4.096 µs * 2^n times in milliseconds as `cm.c` rounds
//! them, the local ACK timeout a REQ carries, and the limits that keep a peer from growing the
//! CM's state without bound.

use std::time::Duration;

/// `cm_convert_to_ms` of Linux's `drivers/infiniband/core/cm.c`: 4.096 µs * 2^n, as whole
/// milliseconds `2^(n - 8)` (at least 1 ms). IBTA times are 5-bit; larger values are clamped to
/// 31 so no shift overflows.
pub fn iba_time_ms(iba_time: u8) -> u64 {
    1u64 << u32::from(iba_time.min(31)).saturating_sub(8)
}

/// `cm_ack_timeout` of `cm.c`: 4.096 µs * 2^t >= 4.096 µs * 2^ack_delay + 2 * packet life time
/// (IBTA 12.7.34, Local ACK Timeout), rounding up only when the other term is within 50 %.
pub fn ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let ca = i32::from(ca_ack_delay);
    let mut t = i32::from(packet_life_time) + 1;
    if t >= ca {
        t += i32::from(ca >= t - 1);
    } else {
        t = ca + i32::from(t >= ca - 1);
    }
    t.min(31) as u8
}

/// The REQ's retransmission timeout, as `ib_send_cm_req` derives it: twice the path's packet
/// life time (the REQ there, the REP back) plus the time the remote CM takes to answer.
pub fn req_timeout(packet_life_time: u8, remote_cm_response_timeout: u8) -> Duration {
    Duration::from_millis(iba_time_ms(packet_life_time) * 2 + iba_time_ms(remote_cm_response_timeout))
}

/// How many IDs the CM holds at most (alive and in time-wait); REQs and SIDR_REQs beyond it
/// are dropped and counted ([`super::types::CmStats::dropped_id_limit`]). IDs the consumer
/// creates are not refused (`create_id` cannot fail), but count toward it.
pub const MAX_IDS: usize = 16384;

/// The largest `max_cm_retries` a REQ carries (a 4-bit field).
pub const MAX_CM_RETRIES: u8 = 15;

/// `IB_CM_MRA_FLAG_DELAY` of `ib_cm.h`: an MRA service timeout with this bit set only changes
/// the state; no MRA is sent (the consumer expects to answer soon).
pub const MRA_FLAG_DELAY: u8 = 0x80;

/// The device's `local_ca_ack_delay` (pvrdma reports 0), which REP carries as Target ACK Delay
/// and REQ's Local ACK Timeout includes.
pub const CA_ACK_DELAY: u8 = 0;

/// The longest a REQ for a service ID nobody listens on waits for its listener before it is
/// rejected (`recv::held`).
pub const LISTEN_GRACE: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_round_as_linux_does() {
        assert_eq!(iba_time_ms(0), 1);
        assert_eq!(iba_time_ms(8), 1);
        assert_eq!(iba_time_ms(18), 1024);
        assert_eq!(iba_time_ms(20), 4096);
        assert_eq!(iba_time_ms(255), 1 << 23);
        // RoCE paths: packet life time 16 (cma.c's CMA_IBOE_PACKET_LIFETIME), response 20.
        assert_eq!(req_timeout(16, 20), Duration::from_millis(256 * 2 + 4096));
        assert_eq!(ack_timeout(0, 16), 17);
        assert_eq!(ack_timeout(16, 16), 18);
        assert_eq!(ack_timeout(20, 16), 20);
        assert_eq!(ack_timeout(20, 18), 21);
        assert_eq!(ack_timeout(0, 31), 31);
    }
}
