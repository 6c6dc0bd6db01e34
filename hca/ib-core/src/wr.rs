//! Work requests, work completions and notification flags (IBTA 11.4; `ibv_send_wr`,
//! `ibv_recv_wr`, `ibv_wc`, `ibv_req_notify_cq`), with libibverbs's numeric values.

use std::ops::BitOr;

/// A scatter/gather element: `length` bytes at `addr` of the MR with `lkey` (`addr` is in the
/// MR's address space: [`crate::Mr::addr`] plus an offset). `#[repr(C)]` with libibverbs's
/// `struct ibv_sge` layout (16 bytes: `addr`, `length`, `lkey`), so a C layer passes a program's
/// SGE array through without copying it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// Address in the MR's address space.
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// The MR's local key.
    pub lkey: u32,
}

/// Send work request opcode (`enum ibv_wr_opcode`, the ones this stack carries), with the
/// fields `ibv_send_wr` keeps beside it (`imm_data`, `wr.rdma`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrOpcode {
    /// SEND (IBTA 9.4.1): the gathered message goes to the responder's next receive WQE.
    Send,
    /// SEND with 32-bit immediate data (host order here; big-endian on the wire).
    SendWithImm(u32),
    /// RDMA WRITE (IBTA 9.4.3): the gathered message is written at `remote_addr` of the
    /// responder's MR `rkey` names (`ibv_send_wr.wr.rdma`). The MR needs `REMOTE_WRITE`, and so
    /// does the responder QP's `qp_access_flags`; no receive WQE is consumed. Completes with
    /// [`WcOpcode::RdmaWrite`]; a refused access completes [`WcStatus::RemAccessErr`]. A
    /// zero-length write checks no rkey (IBTA C9-88).
    RdmaWrite {
        /// Virtual address in the responder's MR (its address space: [`crate::Mr::addr`] plus
        /// an offset, as for an SGE).
        remote_addr: u64,
        /// The responder MR's remote key ([`crate::Mr::rkey`]).
        rkey: u32,
    },
    /// RDMA WRITE with immediate (IBTA 9.4.3): as [`WrOpcode::RdmaWrite`], and the responder's
    /// next receive WQE completes with [`WcOpcode::RecvRdmaWithImm`], `imm` and the bytes
    /// written (nothing is scattered into it); the request waits for that receive WQE (RNR).
    RdmaWriteWithImm {
        /// Virtual address in the responder's MR.
        remote_addr: u64,
        /// The responder MR's remote key.
        rkey: u32,
        /// Immediate data (host order here; big-endian on the wire).
        imm: u32,
    },
    /// RDMA READ (IBTA 9.4.4): reads as many bytes as the SGEs cover from `remote_addr` of the
    /// responder's MR `rkey` names into the SGEs (their MRs need `LOCAL_WRITE`, else
    /// [`WcStatus::LocProtErr`]). The MR and the responder QP need `REMOTE_READ`. Completes with
    /// [`WcOpcode::RdmaRead`] and `byte_len` the bytes read.
    RdmaRead {
        /// Virtual address in the responder's MR.
        remote_addr: u64,
        /// The responder MR's remote key.
        rkey: u32,
    },
    /// A UD SEND (IBTA 9.8.3; `ibv_send_wr.wr.ud`), with immediate data if `imm` is set, to
    /// the destination [`crate::Ah::dest`] made. Only on a UD QP, whose sends are only these.
    UdSend {
        /// Address handle, remote QPN and Q_Key.
        dest: UdDest,
        /// Immediate data (host order here; big-endian on the wire).
        imm: Option<u32>,
    },
    /// ATOMIC COMPARE SWAP (IBTA 9.4.5; `IBV_WR_ATOMIC_CMP_AND_SWP`): if the 8 bytes at
    /// `remote_addr` of the responder's MR `rkey` names equal `compare`, they become `swap`;
    /// either way their original value is written into the one 8-byte SGE (its MR needs
    /// `LOCAL_WRITE`). Values are 64-bit in host order, as the responder's memory holds them.
    /// The MR and the responder QP need `REMOTE_ATOMIC`; `remote_addr` must be 8-byte aligned
    /// ([`WcStatus::RemInvReqErr`] otherwise). Atomic against every other atomic of the
    /// responder's device (`ATOMIC_HCA`). Completes with [`WcOpcode::CompSwap`], `byte_len` 8.
    AtomicCmpSwp {
        /// Virtual address in the responder's MR (8-byte aligned).
        remote_addr: u64,
        /// The responder MR's remote key.
        rkey: u32,
        /// The value compared with.
        compare: u64,
        /// The value written on a match.
        swap: u64,
    },
    /// ATOMIC FETCH ADD (IBTA 9.4.5; `IBV_WR_ATOMIC_FETCH_AND_ADD`): adds `add` (modulo 2^64)
    /// to the 8 bytes at `remote_addr`, as [`WrOpcode::AtomicCmpSwp`] otherwise. Completes
    /// with [`WcOpcode::FetchAdd`], `byte_len` 8.
    AtomicFetchAdd {
        /// Virtual address in the responder's MR (8-byte aligned).
        remote_addr: u64,
        /// The responder MR's remote key.
        rkey: u32,
        /// The value added.
        add: u64,
    },
    /// An operation passed to the device as the consumer gave it: `opcode` is the
    /// `enum ibv_wr_opcode` value, written into the WQE unchanged (rdma-core's pvrdma provider
    /// maps opcodes one to one and checks none), with the UD address of `ud` for a UD QP (the
    /// provider writes one for every UD work request). For what this stack does not carry (an
    /// opcode it does not know, or one the QP's transport has not, such as an RDMA WRITE on a UD
    /// QP): the device completes it, with an error where it cannot do it. A provider that checks
    /// opcodes for its kernel QPs (Linux's `pvrdma_post_send`) refuses it there.
    Raw {
        /// The `enum ibv_wr_opcode` value.
        opcode: u32,
        /// The destination, for a UD QP.
        ud: Option<UdDest>,
    },
}

/// A send work request (IBTA 11.4.1.1).
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    /// Returned in the work completion.
    pub wr_id: u64,
    /// The buffers to gather.
    pub sg_list: &'a [Sge],
    /// The operation.
    pub opcode: WrOpcode,
    /// Produce a CQE on success (always produced on error or with `sq_sig_all`).
    pub signaled: bool,
    /// Set the solicited-event bit: the responder's SOLICITED arm fires on its receive CQE.
    pub solicited: bool,
}

/// A receive work request (IBTA 11.4.1.2).
#[derive(Clone, Copy, Debug)]
pub struct RecvWr<'a> {
    /// Returned in the work completion.
    pub wr_id: u64,
    /// The buffers to scatter into.
    pub sg_list: &'a [Sge],
}

/// Completion status (`enum ibv_wc_status`); codes without a variant of their own are `Other`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WcStatus {
    /// The work request completed.
    #[default]
    Success,
    /// Local length error (e.g. a message longer than the receive buffer).
    LocLenErr,
    /// Local QP operation error.
    LocQpOpErr,
    /// Local protection error (a bad lkey or address).
    LocProtErr,
    /// Flushed: the QP was in the error state.
    WrFlushErr,
    /// Bad response: the responder answered with an unexpected opcode.
    BadRespErr,
    /// Local access error.
    LocAccessErr,
    /// Remote invalid request: the responder NAKed the request as invalid (e.g. a message longer
    /// than its receive buffer, an opcode it does not take).
    RemInvReqErr,
    /// Remote access error.
    RemAccessErr,
    /// Remote operation error.
    RemOpErr,
    /// Transport retries exhausted.
    RetryExcErr,
    /// Receiver-not-ready retries exhausted.
    RnrRetryExcErr,
    /// Fatal error.
    FatalErr,
    /// General error; also what a provider reports for a CQE it cannot trust.
    GeneralErr,
    /// Any other `ibv_wc_status` code.
    Other(u32),
}

impl WcStatus {
    /// The `ibv_wc_status` value.
    pub fn raw(self) -> u32 {
        match self {
            Self::Success => 0,
            Self::LocLenErr => 1,
            Self::LocQpOpErr => 2,
            Self::LocProtErr => 4,
            Self::WrFlushErr => 5,
            Self::BadRespErr => 7,
            Self::LocAccessErr => 8,
            Self::RemInvReqErr => 9,
            Self::RemAccessErr => 10,
            Self::RemOpErr => 11,
            Self::RetryExcErr => 12,
            Self::RnrRetryExcErr => 13,
            Self::FatalErr => 19,
            Self::GeneralErr => 21,
            Self::Other(v) => v,
        }
    }

    /// Decodes an `ibv_wc_status` value.
    pub fn from_raw(v: u32) -> Self {
        [
            Self::Success,
            Self::LocLenErr,
            Self::LocQpOpErr,
            Self::LocProtErr,
            Self::WrFlushErr,
            Self::BadRespErr,
            Self::LocAccessErr,
            Self::RemInvReqErr,
            Self::RemAccessErr,
            Self::RemOpErr,
            Self::RetryExcErr,
            Self::RnrRetryExcErr,
            Self::FatalErr,
            Self::GeneralErr,
        ]
        .into_iter()
        .find(|s| s.raw() == v)
        .unwrap_or(Self::Other(v))
    }

    /// libibverbs's text for the status (`ibv_wc_status_str`), "unknown" past its table.
    pub fn as_str(self) -> &'static str {
        const TEXT: [&str; 24] = [
            "success",
            "local length error",
            "local QP operation error",
            "local EE context operation error",
            "local protection error",
            "Work Request Flushed Error",
            "memory management operation error",
            "bad response error",
            "local access error",
            "remote invalid request error",
            "remote access error",
            "remote operation error",
            "transport retry counter exceeded",
            "RNR retry counter exceeded",
            "local RDD violation error",
            "remote invalid RD request",
            "aborted error",
            "invalid EE context number",
            "invalid EE context state",
            "fatal error",
            "response timeout error",
            "general error",
            "TM error",
            "TM software rendezvous",
        ];
        TEXT.get(self.raw() as usize).copied().unwrap_or("unknown")
    }
}

/// As `ibv_rc_pingpong` prints a status: its text and its number, "remote invalid request
/// error (9)".
impl std::fmt::Display for WcStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.as_str(), self.raw())
    }
}

/// Completion opcode (`enum ibv_wc_opcode`); unknown codes are `Other`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WcOpcode {
    /// A send.
    #[default]
    Send,
    /// An RDMA WRITE.
    RdmaWrite,
    /// An RDMA READ.
    RdmaRead,
    /// An atomic compare and swap.
    CompSwap,
    /// An atomic fetch and add.
    FetchAdd,
    /// A receive.
    Recv,
    /// An RDMA WRITE with immediate, on the receive side.
    RecvRdmaWithImm,
    /// Any other code.
    Other(u32),
}

impl WcOpcode {
    /// Whether this is a receive-side completion.
    pub fn is_recv(self) -> bool {
        matches!(self, Self::Recv | Self::RecvRdmaWithImm)
    }
}

/// One work completion (`ibv_wc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Wc {
    /// The work request's ID, as posted.
    pub wr_id: u64,
    /// Completion status.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// Bytes received (receive completions), written (the responder's RDMA WRITE with
    /// immediate) or read (RDMA READ; 8 for an atomic); the message length of a send or RDMA
    /// WRITE completion.
    pub byte_len: u32,
    /// The local QP's number.
    pub qp_num: u32,
    /// The remote QP of a UD receive completion (0 on RC: IBTA 11.4.2.1 defines it for UD only,
    /// and Linux rxe reports 0).
    pub src_qp: u32,
    /// `IBV_WC_WITH_IMM`: on a receive completion that carried immediate data, the data (host
    /// order); on the send completion of SEND or RDMA WRITE with immediate, the device's value
    /// (0 from the model, as Linux rxe's `make_send_cqe`, which sets the flag there too).
    pub imm_data: Option<u32>,
    /// `IBV_WC_GRH`: set on every successful receive, as Linux rxe reports a RoCE receive of any
    /// QP type; on a UD receive the buffer starts with the 40-byte GRH area, which `byte_len`
    /// counts.
    pub grh: bool,
}

/// Flags of [`crate::Cq::req_notify`] (IBTA 11.4.2.5 Request Completion Notification; the bits
/// of Linux's `ib_cq_notify_flags`). Combine with `|`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct NotifyFlags(u32);

impl NotifyFlags {
    /// Fire on the next solicited completion (or error completion).
    pub const SOLICITED: Self = Self(1 << 0);
    /// Fire on the next completion of any kind.
    pub const NEXT_COMPLETION: Self = Self(1 << 1);
    /// Report (return `true`) if CQEs may already be queued, so the caller polls again.
    pub const REPORT_MISSED_EVENTS: Self = Self(1 << 2);

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The raw bits.
    pub fn bits(self) -> u32 {
        self.0
    }
}

impl BitOr for NotifyFlags {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_ibv_values() {
        for v in 0..40 {
            assert_eq!(WcStatus::from_raw(v).raw(), v);
        }
        assert_eq!(WcStatus::from_raw(5), WcStatus::WrFlushErr);
    }

    #[test]
    fn statuses_print_as_ibv_wc_status_str() {
        assert_eq!(WcStatus::from_raw(9).to_string(), "remote invalid request error (9)");
        assert_eq!(WcStatus::RetryExcErr.to_string(), "transport retry counter exceeded (12)");
        assert_eq!(WcStatus::WrFlushErr.as_str(), "Work Request Flushed Error");
        assert_eq!(WcStatus::Other(23).as_str(), "TM software rendezvous");
        assert_eq!(WcStatus::Other(24).to_string(), "unknown (24)");
    }

    #[test]
    fn notify_flags_combine() {
        let f = NotifyFlags::NEXT_COMPLETION | NotifyFlags::REPORT_MISSED_EVENTS;
        assert!(f.contains(NotifyFlags::REPORT_MISSED_EVENTS));
        assert!(!f.contains(NotifyFlags::SOLICITED));
    }
}

/// Where one UD send goes (`ibv_send_wr.wr.ud`): an AH's address vector and the PD it was made
/// in, the remote QPN, the remote Q_Key (bit 31 set: the sending QP's own Q_Key, IBTA 10.2.5).
/// Made by [`crate::Ah::dest`], so it always names a checked address vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdDest {
    /// The AH's attributes.
    pub ah: crate::attr::AhAttr,
    /// The device handle of the AH's PD.
    pub pd_handle: u32,
    /// Destination QPN (24 bits).
    pub remote_qpn: u32,
    /// Destination Q_Key.
    pub remote_qkey: u32,
}
