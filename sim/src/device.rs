//! STUB (to be replaced by the sim implementation): the public surface of the device model.

use crate::intr::MsixVectors;
use crate::mem::GuestMemory;
use std::sync::Arc;
use std::time::Duration;

/// Page frame number of BAR2 (the UAR pages) as the model places it.
pub const UAR_BASE_PFN: u64 = 0xfe000;

/// Which observable behaviour the model follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Profile {
    /// IBTA semantics (the default).
    #[default]
    Ibta,
    /// QEMU 7.2's quirks where they are safe.
    Qemu72,
}

/// Model configuration.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub profile: Profile,
    /// Modelled one-way wire latency of the loopback port.
    pub link_latency: Duration,
    /// Bytes of guest memory the driver may allocate.
    pub mem_limit: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self { profile: Profile::Ibta, link_latency: Duration::ZERO, mem_limit: 1 << 30 }
    }
}

/// Counters a test can read.
#[derive(Clone, Debug, Default)]
pub struct SimStats {
    pub commands: u64,
    pub refused_doorbells: u64,
}

/// The device.
pub struct SimDevice {
    mem: GuestMemory,
    vectors: MsixVectors,
}

impl SimDevice {
    pub fn new(cfg: SimConfig) -> Arc<Self> {
        Arc::new(Self { mem: GuestMemory::new(cfg.mem_limit), vectors: MsixVectors::default() })
    }
    pub fn reg_read(&self, _offset: u32) -> u32 {
        0
    }
    pub fn reg_write(&self, _offset: u32, _value: u32) {}
    pub fn uar_write(&self, _offset: u64, _value: u32) {}
    pub fn mem(&self) -> &GuestMemory {
        &self.mem
    }
    pub fn vectors(&self) -> &MsixVectors {
        &self.vectors
    }
    pub fn stats(&self) -> SimStats {
        SimStats::default()
    }
}
