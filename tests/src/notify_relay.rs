//! A relay of the CQ-notification ring, for tests of what the driver does with the entries a
//! slow, broken or hostile device writes there.
//!
//! At DSR load the model is handed a private CQ-notification ring; a relay thread copies what the
//! model writes there into the driver's ring, and can delay, drop, duplicate or add entries on the
//! way, and records CQ handles and arm doorbells.

use crate::intercept::{Hooks, Intercept};
use hca::platform::sim::SimPlatform;
use hca::platform::Platform;
use pvrdma_abi::cmd::{ack_for, opcode};
use pvrdma_abi::dsr::Dsr;
use pvrdma_abi::regs::{REG_DSRHIGH, REG_DSRLOW, REG_REQUEST};
use pvrdma_abi::ring::{idx_inc, idx_slot, ring_count, RX_CONS_HEAD, RX_PROD_TAIL};
use pvrdma_sim::SimConfig;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zerocopy::{FromBytes, IntoBytes};

/// Entries of the driver's ring (and the private one).
pub const ELEMS: u32 = 1024;

#[derive(Default)]
struct Rings {
    /// (state page, entries page) of the device's private ring.
    dev: Option<(u64, u64)>,
    /// (state page, entries page) of the driver's ring.
    drv: Option<(u64, u64)>,
    dev_cons: u32,
    drv_prod: u32,
    /// Entries on their way to the driver: (release time, handle).
    pending: VecDeque<(Instant, u32)>,
    /// A producer index shown to the driver instead of the real one, once set.
    bad_prod: Option<u32>,
}

/// What the relay does; every knob off by default.
#[derive(Default)]
pub struct RelayRules {
    /// Every device entry reaches the driver this much later.
    pub delay: Duration,
    /// Drop every device entry.
    pub drop_all: bool,
    /// Each device entry is forwarded this many extra times.
    pub duplicate: u32,
    /// After the `n`th CREATE_CQ (0-based) succeeds, add an entry naming the new CQ at the next
    /// doorbell, once the driver has the CQ (an entry the driver finds before it registered the
    /// CQ is a report from before the CQ existed, and the driver drops it as such).
    pub inject_after_create_cq: Option<usize>,
    /// At every CQ arm doorbell (ARM or ARM_SOL bit), add an entry naming the CQ.
    pub inject_on_arm: bool,
    /// At every CQ arm doorbell, add an entry naming this handle.
    pub inject_other_on_arm: Option<u32>,
    /// Before the first CQ is created, fill the driver's ring with this many entries naming
    /// `junk_handle`.
    pub junk_before_first_cq: u32,
    /// The handle junk entries name.
    pub junk_handle: u32,
    /// Before the first CQ is created, write this producer index into the driver's ring.
    pub bad_prod_before_first_cq: Option<u32>,
    /// An entry that finds the driver's ring full is dropped (as QEMU 7.2 drops it), not kept.
    pub drop_when_full: bool,
    /// At the first SQ doorbell, add this many entries naming `junk_handle`.
    pub junk_on_first_send: u32,
    /// From the first SQ doorbell until the second (at most 3 s), the driver's CQ vector thread
    /// is held in its wait (so it does not drain in between).
    pub stall_cq_vector_between_sends: bool,
}

/// The relay's state, its rules and what it recorded.
pub struct NotifyRelay {
    rings: Mutex<Rings>,
    /// What the relay does (a test may change them while it runs).
    pub rules: Mutex<RelayRules>,
    /// CQ handles the device created, in order.
    pub cq_handles: Mutex<Vec<u32>>,
    /// CQ doorbells with an arm bit: (handle, bits).
    pub arms: Mutex<Vec<(u32, u32)>>,
    stop: Arc<AtomicBool>,
    sends: std::sync::atomic::AtomicU32,
    /// The CQ `inject_after_create_cq` names, until the next doorbell.
    created_cq_entry: Mutex<Option<u32>>,
}

const PAGE: u64 = 4096;

fn page_of(sim: &SimPlatform, dir: u64, i: u64) -> u64 {
    let m = sim.device().mem();
    let table = m.read_u64(dir).unwrap();
    m.read_u64(table + 8 * i).unwrap()
}

fn dsr_addr(sim: &SimPlatform) -> u64 {
    u64::from(sim.reg_read(REG_DSRHIGH)) << 32 | u64::from(sim.reg_read(REG_DSRLOW))
}

impl NotifyRelay {
    /// A model with `cfg` behind the relay; the relay thread runs every 200 µs until the
    /// platform is dropped.
    pub fn new(cfg: SimConfig, rules: RelayRules) -> Arc<Intercept<NotifyRelay>> {
        let stop = Arc::new(AtomicBool::new(false));
        let hooks = NotifyRelay {
            rings: Mutex::new(Rings::default()),
            rules: Mutex::new(rules),
            cq_handles: Mutex::new(Vec::new()),
            arms: Mutex::new(Vec::new()),
            stop: stop.clone(),
            sends: Default::default(),
            created_cq_entry: Mutex::new(None),
        };
        let plat = Arc::new(Intercept { sim: SimPlatform::new(cfg), hooks });
        let weak = Arc::downgrade(&plat);
        std::thread::spawn(move || loop {
            if stop.load(Ordering::Acquire) {
                return;
            }
            let Some(p) = weak.upgrade() else { return };
            p.hooks.forward(&p.sim);
            drop(p);
            std::thread::sleep(Duration::from_micros(200));
        });
        plat
    }

    /// Adds an entry naming `handle` to the driver's ring now.
    /// (Whatever the device wrote before stays ahead of it.)
    pub fn inject(&self, sim: &SimPlatform, handle: u32) {
        self.forward(sim);
        let mut r = self.rings.lock().unwrap();
        r.pending.push_back((Instant::now(), handle));
        self.push_pending(sim, &mut r);
    }

    /// The driver's ring: (producer as the relay wrote it, driver's consumer).
    pub fn driver_ring(&self, sim: &SimPlatform) -> Option<(u32, u32)> {
        let r = self.rings.lock().unwrap();
        let (state, _) = r.drv?;
        Some((r.drv_prod, sim.device().mem().load_u32(state + RX_CONS_HEAD).unwrap_or(u32::MAX)))
    }

    fn forward(&self, sim: &SimPlatform) {
        let mut r = self.rings.lock().unwrap();
        let Some((dstate, dentries)) = r.dev else { return };
        let m = sim.device().mem();
        let rules = self.rules.lock().unwrap();
        let Ok(prod) = m.load_u32(dstate + RX_PROD_TAIL) else { return };
        while ring_count(prod, r.dev_cons, ELEMS).unwrap_or(0) > 0 {
            let slot = idx_slot(r.dev_cons, ELEMS).unwrap();
            let h = m.load_u32(dentries + 4 * u64::from(slot)).unwrap();
            r.dev_cons = idx_inc(r.dev_cons, ELEMS);
            if rules.drop_all {
                continue;
            }
            for _ in 0..=rules.duplicate {
                r.pending.push_back((Instant::now() + rules.delay, h));
            }
        }
        let _ = m.store_u32(dstate + RX_CONS_HEAD, r.dev_cons);
        drop(rules);
        self.push_pending(sim, &mut r);
    }

    fn push_pending(&self, sim: &SimPlatform, r: &mut Rings) {
        let Some((state, entries)) = r.drv else { return };
        let m = sim.device().mem();
        let now = Instant::now();
        while let Some(&(t, h)) = r.pending.front() {
            if t > now {
                break;
            }
            let cons = m.load_u32(state + RX_CONS_HEAD).unwrap_or(0);
            match ring_count(r.drv_prod, cons, ELEMS) {
                Some(n) if n < ELEMS => {}
                _ if self.rules.lock().unwrap().drop_when_full => {
                    r.pending.pop_front();
                    continue;
                }
                _ => return, // full (or the driver wrote garbage): keep it for later
            }
            r.pending.pop_front();
            let slot = idx_slot(r.drv_prod, ELEMS).unwrap();
            m.store_u32(entries + 4 * u64::from(slot), h).unwrap();
            r.drv_prod = idx_inc(r.drv_prod, ELEMS);
            let shown = r.bad_prod.unwrap_or(r.drv_prod);
            m.store_u32(state + RX_PROD_TAIL, shown).unwrap();
        }
    }

    /// Redirects the device to a private ring at DSR load.
    fn load_dsr(&self, sim: &SimPlatform, value: u32) {
        let at = u64::from(value) << 32 | u64::from(sim.reg_read(REG_DSRLOW));
        let m = sim.device().mem();
        let mut b = vec![0u8; std::mem::size_of::<Dsr>()];
        m.read(at, &mut b).unwrap();
        let mut dsr = Dsr::read_from_bytes(&b).unwrap();
        let dir = dsr.cq_ring_pages.pdir_dma.get();
        let drv = (page_of(sim, dir, 0), page_of(sim, dir, 1));
        let (pdir, table, state, entries) =
            (m.alloc(PAGE).unwrap(), m.alloc(PAGE).unwrap(), m.alloc(PAGE).unwrap(), m.alloc(PAGE).unwrap());
        m.zero(state, PAGE).unwrap();
        m.write(pdir, &table.to_le_bytes()).unwrap();
        m.write(table, &state.to_le_bytes()).unwrap();
        m.write(table + 8, &entries.to_le_bytes()).unwrap();
        dsr.cq_ring_pages.pdir_dma.set(pdir);
        dsr.cq_ring_pages.num_pages.set(2);
        m.write(at, dsr.as_bytes()).unwrap();
        {
            let mut r = self.rings.lock().unwrap();
            *r = Rings { dev: Some((state, entries)), drv: Some(drv), ..Default::default() };
        }
        sim.reg_write(REG_DSRHIGH, value);
        // Give the driver its DSR back (with the caps the device wrote).
        m.read(at, &mut b).unwrap();
        let mut dsr = Dsr::read_from_bytes(&b).unwrap();
        dsr.cq_ring_pages.pdir_dma.set(dir);
        m.write(at, dsr.as_bytes()).unwrap();
    }
}

impl Drop for NotifyRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

impl Hooks for NotifyRelay {
    fn reg_write(&self, sim: &SimPlatform, offset: u32, value: u32) {
        if offset == REG_DSRHIGH {
            return self.load_dsr(sim, value);
        }
        if offset != REG_REQUEST {
            return sim.reg_write(offset, value);
        }
        let d = sim.device();
        let at = dsr_addr(sim);
        let mut b = vec![0u8; std::mem::size_of::<Dsr>()];
        d.mem().read(at, &mut b).unwrap();
        let dsr = Dsr::read_from_bytes(&b).unwrap();
        let (cmd, resp) = (dsr.cmd_slot_dma.get(), dsr.resp_slot_dma.get());
        let op = d.mem().load_u32(cmd + 8).unwrap_or(0);
        if op == opcode::CREATE_CQ && self.cq_handles.lock().unwrap().is_empty() {
            let rules = self.rules.lock().unwrap();
            let (n, h, bad) = (rules.junk_before_first_cq, rules.junk_handle, rules.bad_prod_before_first_cq);
            drop(rules);
            for _ in 0..n {
                self.inject(sim, h);
            }
            if let Some(p) = bad {
                let mut r = self.rings.lock().unwrap();
                r.bad_prod = Some(p);
                let (state, _) = r.drv.unwrap();
                d.mem().store_u32(state + RX_PROD_TAIL, p).unwrap();
            }
        }
        sim.reg_write(offset, value);
        let ok = d.mem().load_u32(resp + 12).unwrap_or(1) & 0xff == 0;
        if op == opcode::CREATE_CQ && ok && d.mem().load_u32(resp + 8).unwrap_or(0) == ack_for(op) {
            let h = d.mem().load_u32(resp + 16).unwrap();
            let n = {
                let mut v = self.cq_handles.lock().unwrap();
                v.push(h);
                v.len() - 1
            };
            if self.rules.lock().unwrap().inject_after_create_cq == Some(n) {
                *self.created_cq_entry.lock().unwrap() = Some(h);
            }
        }
    }

    fn uar_write(&self, sim: &SimPlatform, offset: u64, value: u32) {
        use pvrdma_abi::uar::{UAR_CQ_ARM, UAR_CQ_ARM_SOL, UAR_CQ_OFFSET, UAR_HANDLE_MASK, UAR_QP_OFFSET, UAR_QP_SEND};
        let created = self.created_cq_entry.lock().unwrap().take();
        if let Some(h) = created {
            self.inject(sim, h);
        }
        if offset & 0xfff == UAR_QP_OFFSET as u64 && value & UAR_QP_SEND != 0 {
            let k = self.sends.fetch_add(1, Ordering::SeqCst) + 1;
            if k == 2 && self.rules.lock().unwrap().stall_cq_vector_between_sends {
                // The driver drains what is there before the second message goes.
                let end = Instant::now() + Duration::from_secs(2);
                while Instant::now() < end {
                    match self.driver_ring(sim) {
                        Some((p, c)) if p != c => std::thread::sleep(Duration::from_micros(100)),
                        _ => break,
                    }
                }
            }
            let n = std::mem::take(&mut self.rules.lock().unwrap().junk_on_first_send);
            let h = self.rules.lock().unwrap().junk_handle;
            for _ in 0..n {
                self.inject(sim, h);
            }
        }
        let is_cq = offset & 0xfff == UAR_CQ_OFFSET as u64;
        let arm = value & (UAR_CQ_ARM | UAR_CQ_ARM_SOL);
        if is_cq && arm != 0 {
            let h = value & UAR_HANDLE_MASK;
            self.arms.lock().unwrap().push((h, arm));
            let (me, other) = {
                let r = self.rules.lock().unwrap();
                (r.inject_on_arm, r.inject_other_on_arm)
            };
            if me {
                self.inject(sim, h);
            }
            if let Some(o) = other {
                self.inject(sim, o);
            }
        }
        sim.uar_write(offset, value);
    }

    fn wait_vector(&self, sim: &SimPlatform, vector: u16, timeout: Duration) -> u32 {
        if vector == 2 && self.rules.lock().unwrap().stall_cq_vector_between_sends {
            let end = Instant::now() + Duration::from_secs(3);
            let mut stalled = false;
            while self.sends.load(Ordering::SeqCst) == 1 && Instant::now() < end {
                stalled = true;
                std::thread::sleep(Duration::from_micros(100));
            }
            if stalled {
                self.forward(sim);
                return 0;
            }
        }
        let n = sim.wait_vector(vector, timeout);
        if vector == 2 {
            self.forward(sim);
        }
        n
    }
}
