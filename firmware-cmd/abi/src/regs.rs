//! BAR1 register offsets and the typed values written to them (`pvrdma_dev_api.h`).

/// BAR numbers of the PCI function.
pub mod bar {
    /// BAR0: MSI-X table and PBA.
    pub const MSIX: u8 = 0;
    /// BAR1: device registers (32-bit, little-endian).
    pub const REG: u8 = 1;
    /// BAR2: UAR pages, 4 KiB each.
    pub const UAR: u8 = 2;
}

/// R: device API version (17 on QEMU 7.2).
pub const REG_VERSION: u32 = 0x00;
/// W: DSR device address, low 32 bits.
pub const REG_DSRLOW: u32 = 0x04;
/// W: DSR device address, high 32 bits; the write makes the device load the DSR and fill in `caps`.
pub const REG_DSRHIGH: u32 = 0x08;
/// W: a [`DeviceCtl`] value.
pub const REG_CTL: u32 = 0x0c;
/// W: any value: execute the command in the DSR's command slot.
pub const REG_REQUEST: u32 = 0x10;
/// R: device error; after a command, QEMU stores the negated errno of a failed command here.
pub const REG_ERR: u32 = 0x14;
/// R: interrupt cause (an [`IntrCause`] bit set).
pub const REG_ICR: u32 = 0x18;
/// R/W: interrupt mask.
pub const REG_IMR: u32 = 0x1c;
/// R/W: MAC address, low 32 bits.
pub const REG_MACL: u32 = 0x20;
/// R/W: MAC address, high 16 bits.
pub const REG_MACH: u32 = 0x24;
/// Size of BAR1 in bytes.
pub const REG_BAR_SIZE: u32 = 0x1000;

/// Values of `REG_CTL` (`enum pvrdma_device_ctl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum DeviceCtl {
    /// Activate the device after the DSR is loaded.
    Activate = 0,
    /// Resume after a quiesce.
    Unquiesce = 1,
    /// Reset the device: every object is destroyed, the DSR forgotten.
    Reset = 2,
}

impl TryFrom<u32> for DeviceCtl {
    type Error = u32;
    fn try_from(v: u32) -> Result<Self, u32> {
        match v {
            0 => Ok(Self::Activate),
            1 => Ok(Self::Unquiesce),
            2 => Ok(Self::Reset),
            other => Err(other),
        }
    }
}

/// MSI-X vectors of the function (`enum pvrdma_intr_vector`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum IntrVector {
    /// Command response ready.
    Response = 0,
    /// An entry was written to the async-event ring.
    Async = 1,
    /// An entry was written to the CQ-notification ring.
    Cq = 2,
}

/// Number of MSI-X vectors (`PVRDMA_MAX_INTERRUPTS`).
pub const MAX_INTERRUPTS: u16 = 3;

/// Interrupt cause bits (`enum pvrdma_intr_cause`): bit n is vector n.
pub struct IntrCause;
impl IntrCause {
    /// Command response.
    pub const RESPONSE: u32 = 1 << 0;
    /// Async event.
    pub const ASYNC: u32 = 1 << 1;
    /// CQ notification.
    pub const CQ: u32 = 1 << 2;
}
