//! The one place doorbell values are built and taken apart (`vmw_pvrdma-abi.h`'s UAR layout):
//! the driver encodes typed operations, the device model decodes writes, each for the device's
//! arm encoding.
//!
//! | doorbell | offset | value |
//! |---|---|---|
//! | QP send / recv | 0 | `SEND` bit 30 / `RECV` bit 31, QPN in bits 0..24 |
//! | CQ arm next | 4 | IBTA: `ARM` bit 30; QEMU 7.2: `ARM\|ARM_SOL` |
//! | CQ arm solicited | 4 | IBTA: `ARM_SOL` bit 29; QEMU 7.2: cannot be expressed |
//! | CQ poll | 4 | `POLL` bit 31 |
//! | SRQ recv | 8 | `RECV` bit 30 |

use pvrdma_abi::uar::*;

/// How a device wants CQ arms encoded. Found at probe from the device itself
/// (design decision 15), never from the backend that reaches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ArmEncoding {
    /// As Linux's pvrdma driver and IBTA: `ARM` for next, `ARM_SOL` for solicited; both together
    /// arm for next (the union).
    #[default]
    Ibta,
    /// QEMU 7.2 (`pvrdma_uar_write`): only `ARM|ARM_SOL` arms (for any completion), `ARM` alone
    /// clears an arm, `ARM_SOL` alone does nothing; so "next" is `ARM|ARM_SOL` and solicited-only
    /// arming cannot be expressed.
    Qemu72,
}

/// One typed doorbell operation (the handle goes beside it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DoorbellOp {
    /// New send WQEs on a QP.
    QpSend,
    /// New receive WQEs on a QP.
    QpRecv,
    /// Arm a CQ for its next completion (IBTA NEXT_COMPLETION).
    CqArmNext,
    /// Arm a CQ for its next solicited completion (IBTA SOLICITED).
    CqArmSolicited,
    /// The consumer polled the CQ (QEMU polls its backend CQ on it).
    CqPoll,
    /// New receive WQEs on an SRQ.
    SrqRecv,
}

/// One 32-bit doorbell write: where in the UAR page, and the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DoorbellWrite {
    /// Byte offset within the 4 KiB UAR page.
    pub offset: u32,
    /// The little-endian value.
    pub value: u32,
}

impl DoorbellOp {
    /// The write that performs `self` on object `handle` (its low 24 bits) for a device arming
    /// as `enc`; `None` where the device cannot express it (solicited on QEMU 7.2).
    pub fn encode(self, handle: u32, enc: ArmEncoding) -> Option<DoorbellWrite> {
        let (offset, bits) = match (self, enc) {
            (DoorbellOp::QpSend, _) => (UAR_QP_OFFSET, UAR_QP_SEND),
            (DoorbellOp::QpRecv, _) => (UAR_QP_OFFSET, UAR_QP_RECV),
            (DoorbellOp::CqArmNext, ArmEncoding::Ibta) => (UAR_CQ_OFFSET, UAR_CQ_ARM),
            (DoorbellOp::CqArmNext, ArmEncoding::Qemu72) => (UAR_CQ_OFFSET, UAR_CQ_ARM | UAR_CQ_ARM_SOL),
            (DoorbellOp::CqArmSolicited, ArmEncoding::Ibta) => (UAR_CQ_OFFSET, UAR_CQ_ARM_SOL),
            (DoorbellOp::CqArmSolicited, ArmEncoding::Qemu72) => return None,
            (DoorbellOp::CqPoll, _) => (UAR_CQ_OFFSET, UAR_CQ_POLL),
            (DoorbellOp::SrqRecv, _) => (UAR_SRQ_OFFSET, UAR_SRQ_RECV),
        };
        Some(DoorbellWrite { offset, value: bits | (handle & UAR_HANDLE_MASK) })
    }
}

/// What a CQ doorbell asks of the CQ's arm, as a device of one encoding reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqArmRequest {
    /// Arm for the next completion.
    Next,
    /// Arm for the next solicited completion (IBTA devices only).
    Solicited,
    /// Clear the arm (QEMU 7.2 reads `ARM` alone so).
    Disarm,
}

/// A doorbell write as the device reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// The QP doorbell: either bit or both.
    Qp {
        /// The QPN (low 24 bits of the value).
        handle: u32,
        /// `SEND` was set: new send WQEs.
        send: bool,
        /// `RECV` was set: new receive WQEs.
        recv: bool,
    },
    /// The CQ doorbell: an arm request (if any) and whether `POLL` was set.
    Cq {
        /// The CQ handle.
        handle: u32,
        /// What the arm bits ask, read for the device's encoding.
        arm: Option<CqArmRequest>,
        /// `POLL` was set.
        poll: bool,
    },
    /// The SRQ doorbell.
    Srq {
        /// The SRQ handle.
        handle: u32,
        /// `RECV` was set: new receive WQEs.
        recv: bool,
    },
    /// An offset that holds no doorbell.
    Unknown,
}

/// Reads a write of `value` at byte `offset` of a UAR page as a device arming as `enc` does.
pub fn decode(offset: u32, value: u32, enc: ArmEncoding) -> Decoded {
    let handle = value & UAR_HANDLE_MASK;
    let set = |bit: u32| value & bit != 0;
    match offset {
        UAR_QP_OFFSET => Decoded::Qp { handle, send: set(UAR_QP_SEND), recv: set(UAR_QP_RECV) },
        UAR_CQ_OFFSET => {
            let arm = match (enc, set(UAR_CQ_ARM), set(UAR_CQ_ARM_SOL)) {
                (ArmEncoding::Ibta, true, _) => Some(CqArmRequest::Next),
                (ArmEncoding::Ibta, false, true) => Some(CqArmRequest::Solicited),
                (ArmEncoding::Qemu72, true, true) => Some(CqArmRequest::Next),
                (ArmEncoding::Qemu72, true, false) => Some(CqArmRequest::Disarm),
                (_, false, _) => None,
            };
            Decoded::Cq { handle, arm, poll: set(UAR_CQ_POLL) }
        }
        UAR_SRQ_OFFSET => Decoded::Srq { handle, recv: set(UAR_SRQ_RECV) },
        _ => Decoded::Unknown,
    }
}

/// Splits a byte offset of BAR2 into (UAR page index, offset within the page); `None` past the
/// BAR (QEMU 7.2's BAR2 is [`UAR_BAR_SIZE`]).
pub fn split_bar_offset(offset: u64) -> Option<(u32, u32)> {
    if offset >= UAR_BAR_SIZE {
        return None;
    }
    Some(((offset / UAR_PAGE_SIZE) as u32, (offset % UAR_PAGE_SIZE) as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPS: [DoorbellOp; 6] = [
        DoorbellOp::QpSend,
        DoorbellOp::QpRecv,
        DoorbellOp::CqArmNext,
        DoorbellOp::CqArmSolicited,
        DoorbellOp::CqPoll,
        DoorbellOp::SrqRecv,
    ];

    /// What decoding an encoded operation must give back.
    fn expected(op: DoorbellOp, h: u32) -> Decoded {
        match op {
            DoorbellOp::QpSend => Decoded::Qp { handle: h, send: true, recv: false },
            DoorbellOp::QpRecv => Decoded::Qp { handle: h, send: false, recv: true },
            DoorbellOp::CqArmNext => Decoded::Cq { handle: h, arm: Some(CqArmRequest::Next), poll: false },
            DoorbellOp::CqArmSolicited => Decoded::Cq { handle: h, arm: Some(CqArmRequest::Solicited), poll: false },
            DoorbellOp::CqPoll => Decoded::Cq { handle: h, arm: None, poll: true },
            DoorbellOp::SrqRecv => Decoded::Srq { handle: h, recv: true },
        }
    }

    #[test]
    fn every_operation_round_trips_on_both_encodings() {
        for enc in [ArmEncoding::Ibta, ArmEncoding::Qemu72] {
            for op in OPS {
                let Some(w) = op.encode(0x00ab_cdef, enc) else {
                    assert_eq!((op, enc), (DoorbellOp::CqArmSolicited, ArmEncoding::Qemu72));
                    continue;
                };
                assert_eq!(decode(w.offset, w.value, enc), expected(op, 0x00ab_cdef), "{op:?} {enc:?}");
            }
        }
    }

    #[test]
    fn the_encodings_differ_where_qemu_did() {
        let arm = UAR_CQ_ARM | 5;
        assert_eq!(decode(4, arm, ArmEncoding::Ibta), decode(4, arm | UAR_CQ_ARM_SOL, ArmEncoding::Ibta));
        let Decoded::Cq { arm: a, .. } = decode(4, arm, ArmEncoding::Qemu72) else { panic!() };
        assert_eq!(a, Some(CqArmRequest::Disarm));
        let Decoded::Cq { arm: a, .. } = decode(4, UAR_CQ_ARM_SOL | 5, ArmEncoding::Qemu72) else { panic!() };
        assert_eq!(a, None);
        assert_eq!(decode(12, 0, ArmEncoding::Ibta), Decoded::Unknown);
        assert_eq!(split_bar_offset(4096 + 4), Some((1, 4)));
        assert_eq!(split_bar_offset(UAR_BAR_SIZE), None);
    }
}
