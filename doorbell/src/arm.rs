//! The per-CQ arm doorbell, made with every CQ, kernel and user alike, on the kernel's page.

use crate::doorbells::Doorbells;
use crate::encoding::ArmEncoding;
use crate::handle::CqHandle;
use crate::uar::UarTable;
use crate::DoorbellError;

/// The arm doorbell of one CQ on the kernel's UAR page, so the driver can arm any CQ it created
/// — a user context's too (mthca gives only kernel CQs one, so its kernel cannot re-arm a user
/// CQ). Encodes the arm for the device's [`ArmEncoding`].
///
/// Ordering: the arm is one 32-bit write after [`crate::barrier::io_wmb`] (the CQ's `cons_head`
/// store before it). A consumer re-polls after arming (IBTA: CQEs queued before an arm raise no
/// event); on pvrdma that re-poll sees every CQE the device wrote before taking the arm, because
/// the UAR write traps into the device and takes effect before it returns.
#[derive(Clone)]
pub struct CqArmDoorbell {
    kernel: Doorbells,
    cq: CqHandle,
    encoding: ArmEncoding,
}

impl CqArmDoorbell {
    /// The arm doorbell of `cq` (of any owner) on `table`'s kernel page, for a device arming as
    /// `encoding`. Always the kernel's page: never revoked, and allowed to ring every CQ.
    pub fn new(table: &UarTable, cq: CqHandle, encoding: ArmEncoding) -> Self {
        Self { kernel: table.kernel_doorbells(), cq, encoding }
    }

    /// The CQ.
    pub fn cq(&self) -> CqHandle {
        self.cq
    }

    /// Arms the CQ for its next completion (IBTA NEXT_COMPLETION): `ARM`, or `ARM|ARM_SOL` on
    /// QEMU 7.2. Every encoding expresses it and the kernel page rings any CQ, so it cannot fail.
    pub fn arm_next(&self) {
        let rung = self.kernel.cq_arm_next(&self.cq, self.encoding);
        debug_assert!(rung.is_ok(), "the kernel page arms any CQ for next");
    }

    /// Arms the CQ for its next solicited completion (IBTA SOLICITED).
    ///
    /// Errors: [`DoorbellError::Unsupported`], ringing nothing, where the encoding cannot
    /// express it (QEMU 7.2).
    pub fn arm_solicited(&self) -> Result<(), DoorbellError> {
        self.kernel.cq_arm_solicited(&self.cq, self.encoding)
    }

    /// Whether the device can arm for solicited completions only.
    pub fn can_arm_solicited(&self) -> bool {
        self.encoding == ArmEncoding::Ibta
    }
}
