//! A hostile device for driver tests: the model underneath, with one 32-bit word of a command's
//! response rewritten after the device wrote it (before the driver reads it), to try what the
//! driver does with a value it should not trust.

use crate::intercept::{Hooks, Intercept};
use hca::platform::sim::SimPlatform;
use hca::platform::Platform;
use pvrdma_abi::cmd::ack_for;
use pvrdma_abi::dsr::Dsr;
use pvrdma_abi::regs::{REG_DSRHIGH, REG_DSRLOW, REG_REQUEST};
use pvrdma_sim::SimDevice;
use std::sync::Mutex;
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
    opcode: u32,
    offset: u64,
    f: Mutex<Box<dyn FnMut(u32) -> u32 + Send>>,
}

impl Rewrite {
    /// A fresh model whose responses to `opcode` get the word at `offset` rewritten by `f`.
    pub fn new(opcode: u32, offset: u64, f: impl FnMut(u32) -> u32 + Send + 'static) -> Intercept<Self> {
        let sim = SimPlatform::new(pvrdma_sim::SimConfig::default());
        Intercept { sim, hooks: Self { opcode, offset, f: Mutex::new(Box::new(f)) } }
    }
}

impl Hooks for Rewrite {
    fn reg_write(&self, sim: &SimPlatform, offset: u32, value: u32) {
        sim.reg_write(offset, value);
        if offset != REG_REQUEST {
            return;
        }
        let d = sim.device();
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
