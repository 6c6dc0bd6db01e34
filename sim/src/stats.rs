//! The device's counters: [`SimStats`], the snapshot a test reads, and the live atomic counters
//! behind it.

use pvrdma_abi::regs::MAX_INTERRUPTS;
use std::sync::atomic::{AtomicU64, Ordering};

/// Declares the device's counters once: [`SimStats`], the snapshot a test reads, and the live
/// atomic counters behind it (no lock on the data path).
macro_rules! sim_stats {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// Counters a test can read (all since the device was created; RESET does not clear
        /// them).
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct SimStats {
            $($(#[$doc])* pub $name: u64,)*
            /// Interrupts raised per vector (0 command, 1 async, 2 CQ).
            pub interrupts: [u64; MAX_INTERRUPTS as usize],
            /// Host bytes the device's objects cost now (`SimConfig::host_budget`).
            pub host_bytes: u64,
            /// The host-memory budget in bytes.
            pub host_budget: u64,
        }

        /// The live counters, one atomic each.
        #[derive(Default)]
        pub(crate) struct Counters {
            $(pub $name: AtomicU64,)*
            pub interrupts: [AtomicU64; MAX_INTERRUPTS as usize],
        }

        impl Counters {
            pub(crate) fn snapshot(&self) -> SimStats {
                SimStats {
                    $($name: self.$name.load(Ordering::Relaxed),)*
                    interrupts: std::array::from_fn(|v| self.interrupts[v].load(Ordering::Relaxed)),
                    host_bytes: 0,
                    host_budget: 0,
                }
            }
        }
    };
}

sim_stats! {
    /// Commands executed (`REQUEST` writes of 0 with a DSR loaded).
    commands,
    /// Commands that answered a nonzero `err` (or whose slot was unreadable).
    failed_commands,
    /// `REQUEST` writes ignored: a value other than 0, no DSR, or the device is broken.
    ignored_requests,
    /// BAR2 writes.
    doorbells,
    /// BAR2 writes refused: unowned page, foreign or unknown handle, unknown offset,
    /// broken device.
    refused_doorbells,
    /// CQ doorbells with the POLL bit.
    cq_polls,
    /// CQEs written to CQ rings.
    cqes_written,
    /// CQEs dropped: the CQ was full (overflow) or already in error.
    cqes_dropped_overflow,
    /// CQ overflows (IBTA profile: each puts a CQ in error and posts CQ_ERR).
    cq_overflows,
    /// CQs put in error by an out-of-range `cons_head`.
    cq_ring_faults,
    /// CQ-notification entries written.
    cq_notifications,
    /// CQ-notification entries dropped (ring full or broken).
    notifications_dropped,
    /// Async events written.
    async_events,
    /// Async events dropped (ring full or broken).
    async_events_dropped,
    /// Interrupts suppressed by `REG_IMR`.
    interrupts_masked,
    /// QP ring faults (an index out of range or ring memory gone): the QP went to ERR.
    qp_ring_faults,
    /// Packets put on the wire.
    packets_sent,
    /// Packets delivered into a receive WQE.
    packets_delivered,
    /// Packets that found no receive WQE (RNR) when first tried, or first tried after an
    /// unanswered try: each then waits (or fails at once with `rnr_retry` 0).
    packets_parked,
    /// Packets whose delivery failed (the sender completed with an error: the responder's, or
    /// its retries ran out).
    packets_failed,
    /// Tries of a packet no responder answered (loopback port; tried again after its sender's
    /// `timeout`).
    packets_unanswered,
    /// Local ACK timeouts of unanswered packets (loopback port: each costs one of the sender's
    /// `retry_cnt`, the one past it fails the packet `RETRY_EXC_ERR`).
    packets_timeouts,
    /// Packets tried again once the RNR timer (the responder's `min_rnr_timer`) ran out
    /// (loopback port).
    packets_rnr_retries,
    /// Packets dropped because their sender was gone or had flushed them.
    packets_dropped,
    /// Times a QP's SQ drain paused: its SQ depth of sends outstanding, `qp_bytes_in_flight`, or
    /// the device's wire budget (`device_packets_in_flight`, `device_bytes_in_flight`) reached.
    sq_throttled,
    /// RoCE port: UDP datagrams sent (after the link's faults: a duplicate counts twice).
    roce_tx_packets,
    /// RoCE port: packets that could not be encoded or whose `send_to` failed (lost).
    roce_tx_errors,
    /// RoCE port: UDP datagrams received.
    roce_rx_packets,
    /// RoCE port: receive errors of a socket.
    roce_rx_errors,
    /// RoCE port: packets dropped for a bad ICRC (IPv6; IPv4 ICRCs cannot be checked).
    roce_rx_dropped_icrc,
    /// RoCE port: packets dropped as truncated or malformed (bad version, opcode, headers,
    /// pad, lengths).
    roce_rx_dropped_malformed,
    /// RoCE port: packets dropped for a P_Key other than 0xffff.
    roce_rx_dropped_pkey,
    /// RoCE port: packets dropped for their destination QP: unknown, not in RTR/RTS, not
    /// connected to the sender's address, or with no requester for an ACK.
    roce_rx_dropped_qp,
    /// RoCE port: requests with a PSN ahead of the expected one, ACKs, NAKs and READ responses
    /// of PSNs never sent, NAKs of PSNs already acknowledged, and duplicate READ requests
    /// outside every READ executed.
    roce_rx_dropped_psn,
    /// RoCE port: duplicate requests (acknowledged again) and duplicate READ responses.
    roce_rx_duplicates,
    /// RoCE port: ACKs sent by responders.
    roce_acks_sent,
    /// RoCE port: NAKs sent (PSN sequence errors and fatal NAKs).
    roce_naks_sent,
    /// RoCE port: RNR NAKs sent (a SEND found no receive WQE).
    roce_rnr_naks_sent,
    /// RoCE port: NAKs received by requesters (RNR NAKs not included).
    roce_naks_received,
    /// RoCE port: RNR NAKs received by requesters.
    roce_rnr_naks_received,
    /// RoCE port: local ACK timeouts of requesters.
    roce_timeouts,
    /// RoCE port: packets sent again (after a timeout, a NAK or an RNR wait).
    roce_retransmits,
    /// RoCE port: packets the link dropped ([`crate::roce::LinkFaults::loss`]).
    roce_injected_loss,
    /// RoCE port: packets the link held back behind the next one.
    roce_injected_reorder,
    /// RoCE port: packets the link sent twice.
    roce_injected_duplicate,
    /// RoCE port: packets the capture file could not take.
    roce_pcap_errors,
    /// UD sends longer than the port's MTU: no packet sent, completed `SUCCESS` (IBTA
    /// C10-93.1.1, as Linux rxe).
    ud_oversize_dropped,
    /// UD datagrams dropped for their destination: no such QP (QP1 while no GSI QP exists), not
    /// UD or GSI, not in RTR/RTS, or a destination GID not on the port. The counters `ud_*`
    /// count the GSI QP's datagrams as any UD QP's.
    ud_dropped_qp,
    /// UD datagrams dropped for a Q_Key other than the receiver's (IBTA 10.2.5; the GSI QP's is
    /// `0x80010000`, IBTA 13.4.4).
    ud_dropped_qkey,
    /// UD datagrams dropped because the receiver had no receive WQE posted.
    ud_dropped_no_recv,
    /// UD datagrams dropped for their length: more than a MAD (256 bytes) for the GSI QP.
    ud_dropped_oversize,
    /// UD datagrams delivered into a receive WQE.
    ud_delivered,
    /// Atomics (COMPARE SWAP, FETCH ADD) executed by responders, on either port.
    atomics_executed,
    /// RoCE port: duplicate atomic requests answered from the saved result, not executed again.
    roce_atomic_replays,
}
