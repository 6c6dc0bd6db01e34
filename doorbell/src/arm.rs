//! The per-CQ arm doorbell.

use crate::db::Doorbells;
use pvrdma_abi::uar::{UAR_CQ_ARM, UAR_CQ_ARM_SOL, UAR_CQ_POLL};

/// How a device wants "arm for next completion" encoded on the CQ doorbell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ArmEncoding {
    /// As Linux's pvrdma driver and IBTA: `ARM` for next, `ARM_SOL` for solicited.
    #[default]
    Ibta,
    /// QEMU 7.2: only `ARM|ARM_SOL` arms (for any completion) and `ARM` alone clears an arm, so
    /// "next" is `ARM|ARM_SOL` and solicited-only arming cannot be expressed.
    Qemu72,
}

/// The arm doorbell of one CQ, created with every CQ (kernel or user context) on the kernel's UAR
/// page, so the kernel side can arm any CQ it created.
#[derive(Clone)]
pub struct CqArmDoorbell {
    db: Doorbells,
    handle: u32,
    encoding: ArmEncoding,
}

impl CqArmDoorbell {
    /// The arm doorbell of CQ `handle`, rung through `db` (the kernel's page for kernel-side arms).
    pub fn new(db: Doorbells, handle: u32, encoding: ArmEncoding) -> Self {
        Self { db, handle, encoding }
    }

    /// The CQ handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// Arms the CQ for its next completion (IBTA NEXT_COMPLETION).
    pub fn arm_next(&self) {
        let bits = match self.encoding {
            ArmEncoding::Ibta => UAR_CQ_ARM,
            ArmEncoding::Qemu72 => UAR_CQ_ARM | UAR_CQ_ARM_SOL,
        };
        self.db.cq(self.handle, bits);
    }

    /// Arms the CQ for its next solicited completion (IBTA SOLICITED).
    ///
    /// Returns `false`, ringing nothing, where the encoding cannot express it (QEMU 7.2).
    pub fn arm_solicited(&self) -> bool {
        match self.encoding {
            ArmEncoding::Ibta => {
                self.db.cq(self.handle, UAR_CQ_ARM_SOL);
                true
            }
            ArmEncoding::Qemu72 => false,
        }
    }

    /// Tells the device the consumer polled (QEMU polls its backend on it).
    pub fn poll(&self) {
        self.db.cq(self.handle, UAR_CQ_POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::UarMmio;
    use crate::uar::UarTable;
    use parking_lot::Mutex;
    use std::sync::Arc;

    #[derive(Default)]
    struct Recorder(Mutex<Vec<(u64, u32)>>);
    impl UarMmio for Recorder {
        fn uar_write32(&self, offset: u64, value: u32) {
            self.0.lock().push((offset, value));
        }
    }

    #[test]
    fn arms_are_encoded_per_device() {
        let rec = Arc::new(Recorder::default());
        let table = UarTable::new(0, 4);
        let user = table.alloc().unwrap();
        let kdb = Doorbells::new(rec.clone(), table.kernel_page());
        let ibta = CqArmDoorbell::new(kdb.clone(), 0x1_000005, ArmEncoding::Ibta);
        ibta.arm_next();
        assert!(ibta.arm_solicited());
        let q = CqArmDoorbell::new(kdb, 5, ArmEncoding::Qemu72);
        q.arm_next();
        assert!(!q.arm_solicited());
        Doorbells::new(rec.clone(), user).qp_send(9);
        let w = rec.0.lock().clone();
        assert_eq!(w, vec![(4, 0x4000_0005), (4, 0x2000_0005), (4, 0x6000_0005), (4096, 0x4000_0009)]);
    }
}
