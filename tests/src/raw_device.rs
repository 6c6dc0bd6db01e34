//! A pvrdma function driven by hand, below the driver: its own DSR (which a test may spoil), raw
//! commands posted byte for byte, page directories of any shape. `tests::command_errors` uses it
//! to send the device what no correct driver sends and to record what comes back.
//!
//! Every access goes through [`Platform`], so the same bytes reach the model and QEMU 7.2 (over
//! qtest). Every wait is bounded by [`REPLY_WAIT`]; a platform that dies meanwhile (QEMU crashed
//! or stopped answering) is reported by the `fault` check the owner passes in.

use hca::platform::{Iova, Platform, PlatformError};
use pvrdma_abi::cmd::{CmdHdr, CmdRequest, RespHdr};
use pvrdma_abi::dsr::{DeviceCaps, Dsr, GosInfo, RingPageInfo};
use pvrdma_abi::pdir::PDIR_ENTRIES;
use pvrdma_abi::regs::{DeviceCtl, IntrVector, REG_CTL, REG_DSRHIGH, REG_DSRLOW, REG_ERR, REG_REQUEST};
use pvrdma_abi::{PAGE_SIZE, PVRDMA_ROCEV1_VERSION};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zerocopy::{FromBytes, IntoBytes};

/// Bound on a command's response and interrupt (both devices answer inside the `REQUEST` write).
pub const REPLY_WAIT: Duration = Duration::from_secs(1);

const PAGE: u64 = PAGE_SIZE as u64;

/// What one `REQUEST` write brought back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The response's `ack` word (0: no response was written).
    pub ack: u32,
    /// The response's `err` byte.
    pub err: u8,
    /// `REG_ERR` read after the command.
    pub reg_err: u32,
    /// Whether the command interrupt (vector 0) came within [`REPLY_WAIT`].
    pub irq: bool,
}

/// A device address range of whole pages, one allocation.
#[derive(Clone, Copy, Debug)]
pub struct Pages {
    /// Device address of the first page.
    pub base: Iova,
    /// Number of pages.
    pub count: u64,
}

impl Pages {
    /// Device address of page `i`.
    pub fn page(&self, i: u64) -> Iova {
        self.base + i * PAGE
    }
}

/// The function, its command and response slots, and the DSR page.
pub struct RawDevice {
    platform: Arc<dyn Platform>,
    cmd_slot: Iova,
    resp_slot: Iova,
    dsr: Iova,
    cookie: AtomicU64,
}

impl RawDevice {
    /// Allocates the slots and the DSR page on `platform` (nothing is written to the device).
    ///
    /// Errors: the platform's, when DMA memory cannot be had.
    pub fn new(platform: Arc<dyn Platform>) -> Result<Self, PlatformError> {
        let cmd_slot = platform.dma_alloc(PAGE)?;
        let resp_slot = platform.dma_alloc(PAGE)?;
        let dsr = platform.dma_alloc(PAGE)?;
        Ok(Self { platform, cmd_slot, resp_slot, dsr, cookie: AtomicU64::new(0x5eed_0000) })
    }

    /// The platform underneath.
    pub fn platform(&self) -> &Arc<dyn Platform> {
        &self.platform
    }

    /// `count` zeroed pages. Panics when the platform has no memory left (a harness fault).
    pub fn pages(&self, count: u64) -> Pages {
        let base = self.platform.dma_alloc(count * PAGE).expect("DMA memory for a raw device");
        Pages { base, count }
    }

    /// A page directory listing `pages` in order: one table per 512 pages, each table followed
    /// by a zeroed guard page (so a device that reads past a table's end reads zeros, not the
    /// next table). Returns the directory's device address.
    pub fn pdir(&self, pages: &[Iova]) -> Iova {
        let tables = pages.len().div_ceil(PDIR_ENTRIES).max(1) as u64;
        let dir = self.pages(1).base;
        let area = self.pages(2 * tables);
        for (t, chunk) in pages.chunks(PDIR_ENTRIES).enumerate() {
            let table = area.page(2 * t as u64);
            self.write_u64(dir + 8 * t as u64, table);
            let bytes: Vec<u8> = chunk.iter().flat_map(|p| p.to_le_bytes()).collect();
            self.write(table, &bytes);
        }
        dir
    }

    /// A device ring of `num_pages` pages (ring state first) and its page directory, as the DSR
    /// describes it: `num_pages` is written as given, the directory lists `listed` pages.
    pub fn ring_info(&self, num_pages: u32, listed: u64) -> RingPageInfo {
        let pages = self.pages(listed.max(1));
        let list: Vec<Iova> = (0..listed).map(|i| pages.page(i)).collect();
        RingPageInfo { num_pages: num_pages.into(), pdir_dma: self.pdir(&list).into(), ..Default::default() }
    }

    /// A correct DSR: both slots, a two-page async ring and a two-page CQ-notification ring, the
    /// kernel's UAR page. `spoil` may change any of it before it is written.
    pub fn load_dsr(&self, spoil: impl FnOnce(&Self, &mut Dsr)) {
        let mut dsr = Dsr {
            driver_version: PVRDMA_ROCEV1_VERSION.into(),
            gos_info: GosInfo::linux_64(),
            cmd_slot_dma: self.cmd_slot.into(),
            resp_slot_dma: self.resp_slot.into(),
            async_ring_pages: self.ring_info(2, 2),
            cq_ring_pages: self.ring_info(2, 2),
            uar_pfn: self.platform.uar_base_pfn().into(),
            ..Default::default()
        };
        spoil(self, &mut dsr);
        self.write(self.dsr, dsr.as_bytes());
        self.platform.reg_write(REG_DSRLOW, self.dsr as u32);
        self.platform.reg_write(REG_DSRHIGH, (self.dsr >> 32) as u32);
    }

    /// The capabilities the device wrote into the DSR.
    pub fn caps(&self) -> DeviceCaps {
        let mut b = vec![0u8; size_of::<Dsr>()];
        let _ = self.platform.dma_read(self.dsr, &mut b);
        Dsr::read_from_bytes(&b).map(|d| d.caps).unwrap_or_default()
    }

    /// Writes `CTL = ACTIVATE` and returns `REG_ERR` read afterwards.
    pub fn activate(&self) -> u32 {
        self.platform.reg_write(REG_CTL, DeviceCtl::Activate as u32);
        self.reg_err()
    }

    /// `REG_ERR`.
    pub fn reg_err(&self) -> u32 {
        self.platform.reg_read(REG_ERR)
    }

    /// Posts `req` (its header filled in here) and returns what came back, with the response's
    /// payload when one was written.
    pub fn post<C: CmdRequest>(&self, mut req: C) -> (Reply, Option<C::Response>) {
        req.hdr_mut().cmd.set(C::OPCODE);
        let reply = self.post_bytes(req.as_mut_bytes());
        let mut b = vec![0u8; size_of::<C::Response>()];
        let resp = (reply.ack != 0 && self.platform.dma_read(self.resp_slot, &mut b).is_ok())
            .then(|| C::Response::read_from_bytes(&b).ok())
            .flatten();
        (reply, resp)
    }

    /// Posts a request of opcode `opcode` with no payload but its header and eight zero bytes.
    pub fn post_opcode(&self, opcode: u32) -> Reply {
        let mut b = [0u8; size_of::<CmdHdr>() + 8];
        let hdr = CmdHdr { cmd: opcode.into(), ..Default::default() };
        b[..size_of::<CmdHdr>()].copy_from_slice(hdr.as_bytes());
        self.post_bytes(&mut b)
    }

    /// Stamps a fresh cookie into `req` (a request, header first), clears the response header,
    /// writes `REQUEST = 0` and collects the answer within [`REPLY_WAIT`].
    fn post_bytes(&self, req: &mut [u8]) -> Reply {
        let cookie = self.cookie.fetch_add(1, Ordering::Relaxed);
        req[..8].copy_from_slice(&cookie.to_le_bytes());
        self.write(self.resp_slot, RespHdr::default().as_bytes());
        self.write(self.cmd_slot, req);
        let vector = IntrVector::Response as u16;
        let _stale = self.platform.wait_vector(vector, Duration::ZERO);
        self.platform.reg_write(REG_REQUEST, 0);
        let irq = self.platform.wait_vector(vector, REPLY_WAIT) > 0;
        let mut h = [0u8; size_of::<RespHdr>()];
        let _ = self.platform.dma_read(self.resp_slot, &mut h);
        let hdr = RespHdr::read_from_bytes(&h).unwrap_or_default();
        Reply { ack: hdr.ack.get(), err: hdr.err, reg_err: self.reg_err(), irq }
    }

    /// Writes `data` at `iova`; a dead platform is found by the owner's fault check.
    pub fn write(&self, iova: Iova, data: &[u8]) {
        let _ = self.platform.dma_write(iova, data);
    }

    fn write_u64(&self, iova: Iova, v: u64) {
        self.write(iova, &v.to_le_bytes());
    }
}
