//! PCI configuration cycles (`outl 0xcf8` / `inl 0xcfc`): finding the function, sizing and placing
//! its BARs, enabling MSI-X towards the mailboxes.

use super::wire::{parse_hex, CmdFault};
use super::{BarInfo, QtestOptions, QtestPlatform, BAR_WINDOW_END, MAILBOX_STRIDE, MSIX_DATA, PAGE};
use crate::platform::PlatformError;
use pvrdma_abi::regs::{bar, REG_MACH};
use pvrdma_abi::{PCI_DEVICE_ID_VMWARE_PVRDMA, PCI_VENDOR_ID_VMWARE};
use std::sync::atomic::Ordering;

/// Configuration-space offsets and bits.
pub(super) const CFG_COMMAND: u32 = 0x04;
pub(super) const CFG_HEADER: u32 = 0x0c;
pub(super) const CFG_BAR0: u32 = 0x10;
pub(super) const CFG_CAP_PTR: u32 = 0x34;
pub(super) const CMD_MEMORY: u32 = 1 << 1;
pub(super) const CMD_BUS_MASTER: u32 = 1 << 2;
pub(super) const STATUS_CAP_LIST: u32 = 1 << (16 + 4);
pub(super) const CAP_ID_MSIX: u32 = 0x11;
pub(super) const MSIX_ENABLE: u32 = 1 << 31;
pub(super) const MSIX_FUNCTION_MASK: u32 = 1 << 30;

impl QtestPlatform {
    pub(super) fn cfg_addr(dev: u8, func: u8, reg: u32) -> u32 {
        0x8000_0000 | (u32::from(dev) << 11) | (u32::from(func) << 8) | (reg & 0xfc)
    }

    pub(super) fn cfg_read(&self, dev: u8, func: u8, reg: u32) -> Result<u32, PlatformError> {
        // Address and data cycles under one lock hold, so no other thread's cycle slips between.
        let mut c = self.conn.lock();
        let mut go = |line: String| {
            self.round_trips.fetch_add(1, Ordering::Relaxed);
            c.cmd(&line).map_err(|e| match e {
                CmdFault::Dead(m) | CmdFault::Refused(m) => PlatformError::Io(m),
            })
        };
        go(format!("outl 0xcf8 {:#x}", Self::cfg_addr(dev, func, reg)))?;
        let v = go("inl 0xcfc".into())?;
        parse_hex(&v).map(|v| v as u32).ok_or_else(|| PlatformError::Io(format!("inl: {v:?}")))
    }

    pub(super) fn cfg_write(&self, dev: u8, func: u8, reg: u32, value: u32) -> Result<(), PlatformError> {
        let mut c = self.conn.lock();
        let mut go = |line: String| {
            self.round_trips.fetch_add(1, Ordering::Relaxed);
            c.cmd(&line).map(drop).map_err(|e| match e {
                CmdFault::Dead(m) | CmdFault::Refused(m) => PlatformError::Io(m),
            })
        };
        go(format!("outl 0xcf8 {:#x}", Self::cfg_addr(dev, func, reg)))?;
        go(format!("outl 0xcfc {value:#x}"))
    }

    pub(super) fn find_function(&self) -> Result<(u8, u8), PlatformError> {
        let want = u32::from(PCI_VENDOR_ID_VMWARE) | u32::from(PCI_DEVICE_ID_VMWARE_PVRDMA) << 16;
        for dev in 0..32u8 {
            let id = self.cfg_read(dev, 0, 0)?;
            if id & 0xffff == 0xffff {
                continue;
            }
            let multi = self.cfg_read(dev, 0, CFG_HEADER)? & (0x80 << 16) != 0;
            for func in 0..if multi { 8u8 } else { 1 } {
                let id = if func == 0 { id } else { self.cfg_read(dev, func, 0)? };
                if id == want {
                    return Ok((dev, func));
                }
            }
        }
        Err(PlatformError::Io(format!(
            "no pvrdma function ({PCI_VENDOR_ID_VMWARE:04x}:{PCI_DEVICE_ID_VMWARE_PVRDMA:04x}) on bus 0"
        )))
    }

    pub(super) fn place_bars(&mut self, opts: &QtestOptions) -> Result<(), PlatformError> {
        let (d, f) = self.bdf;
        let cmd = self.cfg_read(d, f, CFG_COMMAND)?;
        self.cfg_write(d, f, CFG_COMMAND, cmd & 0xffff_0000 & !(CMD_MEMORY | CMD_BUS_MASTER))?;
        let mut found = Vec::new();
        let mut i = 0u32;
        while i < 6 {
            let reg = CFG_BAR0 + 4 * i;
            let orig = self.cfg_read(d, f, reg)?;
            if orig & 1 != 0 {
                i += 1; // an I/O BAR: pvrdma has none; leave it alone
                continue;
            }
            let is64 = (orig >> 1) & 3 == 2;
            self.cfg_write(d, f, reg, u32::MAX)?;
            let lo = self.cfg_read(d, f, reg)? & !0xf;
            let hi = if is64 {
                self.cfg_write(d, f, reg + 4, u32::MAX)?;
                self.cfg_read(d, f, reg + 4)?
            } else {
                u32::MAX
            };
            let mask = u64::from(hi) << 32 | u64::from(lo);
            if lo != 0 {
                found.push(BarInfo { index: i, size: (!mask).wrapping_add(1), is64 });
            }
            i += if is64 { 2 } else { 1 };
        }
        let mut order = found.clone();
        order.sort_by_key(|b| std::cmp::Reverse(b.size));
        let mut cursor = opts.bar_base;
        for b in &order {
            if !b.size.is_power_of_two() {
                return Err(PlatformError::Io(format!("BAR{} size {:#x}", b.index, b.size)));
            }
            let addr = cursor.div_ceil(b.size) * b.size;
            let end = addr
                .checked_add(b.size)
                .filter(|e| *e <= BAR_WINDOW_END)
                .ok_or_else(|| PlatformError::Io(format!("BAR{} ({:#x} bytes) does not fit", b.index, b.size)))?;
            let reg = CFG_BAR0 + 4 * b.index;
            self.cfg_write(d, f, reg, addr as u32)?;
            if b.is64 {
                self.cfg_write(d, f, reg + 4, (addr >> 32) as u32)?;
            }
            if b.index < 3 {
                self.bars[b.index as usize] = addr;
            }
            match u8::try_from(b.index) {
                Ok(bar::REG) => self.regs_len = b.size,
                Ok(bar::UAR) => self.uar_len = b.size,
                _ => {}
            }
            cursor = end;
        }
        if self.regs_len < u64::from(REG_MACH) + 4 || self.uar_len < PAGE {
            return Err(PlatformError::Io(format!(
                "pvrdma BARs: registers {:#x} bytes, UAR {:#x} bytes",
                self.regs_len, self.uar_len
            )));
        }
        self.cfg_write(d, f, CFG_COMMAND, (cmd & 0xffff_0000) | (cmd & 0xffff) | CMD_MEMORY | CMD_BUS_MASTER)
    }

    pub(super) fn enable_msix(&mut self) -> Result<(), PlatformError> {
        let (d, f) = self.bdf;
        if self.cfg_read(d, f, CFG_COMMAND)? & STATUS_CAP_LIST == 0 {
            return Err(PlatformError::Io("pvrdma has no capability list".into()));
        }
        let mut cap = self.cfg_read(d, f, CFG_CAP_PTR)? & 0xfc;
        for _ in 0..48 {
            if cap == 0 {
                break;
            }
            let w = self.cfg_read(d, f, cap)?;
            if w & 0xff == CAP_ID_MSIX {
                let n = ((w >> 16) & 0x7ff) + 1;
                let table = self.cfg_read(d, f, cap + 4)?;
                let bir = (table & 7) as usize;
                let base = *self
                    .bars
                    .get(bir)
                    .filter(|a| **a != 0)
                    .ok_or_else(|| PlatformError::Io(format!("MSI-X table in unassigned BAR{bir}")))?;
                let tbase = base + u64::from(table & !7);
                for v in 0..n {
                    let e = tbase + 16 * u64::from(v);
                    let target = self.mailbox + MAILBOX_STRIDE * u64::from(v);
                    self.writel(e, target as u32)?;
                    self.writel(e + 4, (target >> 32) as u32)?;
                    self.writel(e + 8, MSIX_DATA | (v & 0xff))?;
                    self.writel(e + 12, 0)?; // vector control: unmasked
                }
                self.cfg_write(d, f, cap, (w | MSIX_ENABLE) & !MSIX_FUNCTION_MASK)?;
                self.vectors = u16::try_from(n).unwrap_or(u16::MAX).min((PAGE / MAILBOX_STRIDE) as u16);
                return Ok(());
            }
            cap = (w >> 8) & 0xfc;
        }
        Err(PlatformError::Io("pvrdma has no MSI-X capability".into()))
    }
}
