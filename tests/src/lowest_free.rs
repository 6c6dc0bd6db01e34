//! The model with QP numbers and CQ handles handed out as QEMU 7.2 hands them out: the lowest
//! free one, so a destroyed object's number comes straight back (the model itself rotates). The
//! hooks translate the numbers in CREATE_QP / CREATE_CQ responses and in the requests that name
//! a QP or CQ (DESTROY_QP, MODIFY_QP, QUERY_QP, DESTROY_CQ); the data path is not translated, so
//! tests on this platform use objects, commands and injected events, not messages.

use crate::intercept::{Hooks, Intercept};
use crate::rewrite::dsr;
use hca::platform::sim::SimPlatform;
use hca::platform::Platform;
use pvrdma_abi::cmd::{ack_for, opcode};
use pvrdma_abi::regs::REG_REQUEST;
use pvrdma_sim::SimConfig;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Offset of the handle in the requests that name one and in the create responses.
const HANDLE_AT: u64 = 16;

/// The number tables: the driver's (lowest-free) number -> the model's.
#[derive(Default)]
pub struct LowestFree {
    tables: Mutex<Tables>,
}

#[derive(Default)]
struct Tables {
    qps: BTreeMap<u32, u32>,
    cqs: BTreeMap<u32, u32>,
}

impl LowestFree {
    /// A fresh default model behind lowest-free numbering.
    pub fn new() -> Intercept<Self> {
        Intercept { sim: SimPlatform::new(SimConfig::default()), hooks: Self::default() }
    }
}

impl Tables {
    fn table(&mut self, op: u32) -> Option<&mut BTreeMap<u32, u32>> {
        match op {
            opcode::DESTROY_QP | opcode::MODIFY_QP | opcode::QUERY_QP | opcode::CREATE_QP => Some(&mut self.qps),
            opcode::DESTROY_CQ | opcode::CREATE_CQ => Some(&mut self.cqs),
            _ => None,
        }
    }
}

impl Hooks for LowestFree {
    fn reg_write(&self, sim: &SimPlatform, offset: u32, value: u32) {
        if offset != REG_REQUEST {
            return sim.reg_write(offset, value);
        }
        let d = sim.device();
        let slots = dsr(d);
        let (cmd, resp) = (slots.cmd_slot_dma.get(), slots.resp_slot_dma.get());
        let op = d.mem().load_u32(cmd + 8).unwrap_or(0);
        let mut tables = self.tables.lock().unwrap();
        let named = !matches!(op, opcode::CREATE_QP | opcode::CREATE_CQ);
        let mut virt = None;
        if let (true, Some(table)) = (named, tables.table(op)) {
            let v = d.mem().load_u32(cmd + HANDLE_AT).unwrap_or(0);
            // An unknown number goes to one the model never hands out, so the model refuses it.
            let real = table.get(&v).copied().unwrap_or(0x00ff_fff0);
            d.mem().store_u32(cmd + HANDLE_AT, real).unwrap();
            virt = Some(v);
        }
        sim.reg_write(offset, value);
        let ok = d.mem().load_u32(resp + 12).unwrap_or(1) & 0xff == 0;
        if !ok || d.mem().load_u32(resp + 8).unwrap_or(0) != ack_for(op) {
            return;
        }
        let (create, first) = match op {
            opcode::CREATE_QP => (true, 2),
            opcode::CREATE_CQ => (true, 1),
            _ => (false, 0),
        };
        let Some(table) = tables.table(op) else { return };
        if create {
            let real = d.mem().load_u32(resp + HANDLE_AT).unwrap();
            let v = (first..).find(|h| !table.contains_key(h)).unwrap();
            table.insert(v, real);
            d.mem().store_u32(resp + HANDLE_AT, v).unwrap();
        } else if let (Some(v), opcode::DESTROY_QP | opcode::DESTROY_CQ) = (virt, op) {
            table.remove(&v);
        }
    }
}
