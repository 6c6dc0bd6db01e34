//! A hostile device for driver tests: the model underneath, with one 32-bit word of a command's
//! response rewritten after the device wrote it (before the driver reads it), to try what the
//! driver does with a value it should not trust.

use hca::platform::sim::SimPlatform;
use hca::platform::{Iova, Platform, PlatformError};
use pvrdma_abi::cmd::ack_for;
use pvrdma_abi::dsr::Dsr;
use pvrdma_abi::regs::{REG_DSRHIGH, REG_DSRLOW, REG_REQUEST};
use pvrdma_sim::SimDevice;
use std::sync::Mutex;
use std::time::Duration;
use zerocopy::FromBytes;

/// The DSR the driver loaded into `d`.
pub fn dsr(d: &SimDevice) -> Dsr {
    let at = u64::from(d.reg_read(REG_DSRHIGH)) << 32 | u64::from(d.reg_read(REG_DSRLOW));
    let mut b = vec![0u8; core::mem::size_of::<Dsr>()];
    d.mem().read(at, &mut b).unwrap();
    Dsr::read_from_bytes(&b).unwrap()
}

/// Rewrites the word at byte `offset` of every response to command `opcode` with `f`.
pub struct Rewrite {
    /// The model underneath.
    pub sim: SimPlatform,
    opcode: u32,
    offset: u64,
    f: Mutex<Box<dyn FnMut(u32) -> u32 + Send>>,
}

impl Rewrite {
    /// A fresh model whose responses to `opcode` get the word at `offset` rewritten by `f`.
    pub fn new(opcode: u32, offset: u64, f: impl FnMut(u32) -> u32 + Send + 'static) -> Self {
        let sim = SimPlatform::new(pvrdma_sim::SimConfig::default());
        Self { sim, opcode, offset, f: Mutex::new(Box::new(f)) }
    }

    fn rewrite(&self) {
        let d = self.sim.device();
        let resp = dsr(d).resp_slot_dma.get();
        if d.mem().load_u32(resp + 8).unwrap_or(0) != ack_for(self.opcode) {
            return;
        }
        let at = resp + self.offset;
        let old = d.mem().load_u32(at).unwrap();
        let new = (self.f.lock().unwrap())(old);
        d.mem().store_u32(at, new).unwrap();
    }
}

impl Platform for Rewrite {
    fn name(&self) -> String {
        "sim-rewrite".into()
    }
    fn pci_id(&self) -> (u16, u16) {
        self.sim.pci_id()
    }
    fn reg_read(&self, o: u32) -> u32 {
        self.sim.reg_read(o)
    }
    fn reg_write(&self, o: u32, v: u32) {
        self.sim.reg_write(o, v);
        if o == REG_REQUEST {
            self.rewrite();
        }
    }
    fn uar_write(&self, o: u64, v: u32) {
        self.sim.uar_write(o, v)
    }
    fn uar_base_pfn(&self) -> u64 {
        self.sim.uar_base_pfn()
    }
    fn uar_pages(&self) -> u32 {
        self.sim.uar_pages()
    }
    fn dma_alloc(&self, len: u64) -> Result<Iova, PlatformError> {
        self.sim.dma_alloc(len)
    }
    fn dma_free(&self, iova: Iova) {
        self.sim.dma_free(iova)
    }
    fn dma_read(&self, iova: Iova, buf: &mut [u8]) -> Result<(), PlatformError> {
        self.sim.dma_read(iova, buf)
    }
    fn dma_write(&self, iova: Iova, data: &[u8]) -> Result<(), PlatformError> {
        self.sim.dma_write(iova, data)
    }
    fn dma_load_u32(&self, iova: Iova) -> Result<u32, PlatformError> {
        self.sim.dma_load_u32(iova)
    }
    fn dma_store_u32(&self, iova: Iova, v: u32) -> Result<(), PlatformError> {
        self.sim.dma_store_u32(iova, v)
    }
    fn wait_vector(&self, v: u16, t: Duration) -> u32 {
        self.sim.wait_vector(v, t)
    }
    unsafe fn map_user(&self, addr: usize, len: usize) -> Result<Iova, PlatformError> {
        // SAFETY: the caller's promise is passed on unchanged.
        unsafe { self.sim.map_user(addr, len) }
    }
    fn unmap_user(&self, iova: Iova) {
        self.sim.unmap_user(iova)
    }
}
