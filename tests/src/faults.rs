//! A broken device for driver tests: the model behind knobs that make it fail the ways hardware
//! and hypervisors fail — registers reading all-ones (surprise removal), a command never
//! answered, a command held in flight until the test lets it go, late CQ interrupts, and an
//! async-event vector that does not fire.

use crate::intercept::{Hooks, Intercept};
use crate::rewrite::dsr;
use hca::platform::sim::SimPlatform;
use hca::platform::Platform;
use pvrdma_abi::regs::REG_REQUEST;
use pvrdma_sim::SimConfig;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// No opcode.
const NO_OP: u32 = u32::MAX;
/// The longest a held command is held.
const HOLD_LIMIT: Duration = Duration::from_secs(5);

/// The knobs; each is off until a test turns it.
pub struct Faults {
    ones_after_reads: AtomicU64,
    reads: AtomicU64,
    swallow_op: AtomicU32,
    hold_op: AtomicU32,
    holding: AtomicBool,
    released: AtomicBool,
    cq_irq_delay_ms: AtomicU64,
    cq_irqs: AtomicU64,
    stall_async: AtomicBool,
}

impl Faults {
    /// A fresh model with `cfg` and every knob off.
    pub fn new(cfg: SimConfig) -> Intercept<Self> {
        let hooks = Self {
            ones_after_reads: AtomicU64::new(u64::MAX),
            reads: AtomicU64::new(0),
            swallow_op: AtomicU32::new(NO_OP),
            hold_op: AtomicU32::new(NO_OP),
            holding: AtomicBool::new(false),
            released: AtomicBool::new(false),
            cq_irq_delay_ms: AtomicU64::new(0),
            cq_irqs: AtomicU64::new(0),
            stall_async: AtomicBool::new(false),
        };
        Intercept { sim: SimPlatform::new(cfg), hooks }
    }

    /// Register reads after the first `n` return all-ones.
    pub fn all_ones_after_reads(&self, n: u64) {
        self.ones_after_reads.store(n, Ordering::SeqCst);
    }

    /// The next command with `opcode` is never run nor answered.
    pub fn swallow_next(&self, opcode: u32) {
        self.swallow_op.store(opcode, Ordering::SeqCst);
    }

    /// The next command with `opcode` is held in flight until [`Faults::release`] (at most
    /// five seconds); [`Faults::holding`] says when it is.
    pub fn hold_next(&self, opcode: u32) {
        self.released.store(false, Ordering::SeqCst);
        self.hold_op.store(opcode, Ordering::SeqCst);
    }

    /// Whether a held command is in flight.
    pub fn holding(&self) -> bool {
        self.holding.load(Ordering::SeqCst)
    }

    /// Lets a held command run.
    pub fn release(&self) {
        self.released.store(true, Ordering::SeqCst);
    }

    /// Every CQ interrupt after the first reaches the driver `ms` milliseconds late (0: on time).
    pub fn delay_cq_interrupts(&self, ms: u64) {
        self.cq_irq_delay_ms.store(ms, Ordering::SeqCst);
    }

    /// While `on`, the driver's async-event thread stays in its wait for vector 1 (at most five
    /// seconds), so what the device writes to the async ring stays there.
    pub fn stall_async_vector(&self, on: bool) {
        self.stall_async.store(on, Ordering::SeqCst);
    }

    fn take(knob: &AtomicU32, op: u32) -> bool {
        knob.compare_exchange(op, NO_OP, Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }

    fn hold(&self) {
        self.holding.store(true, Ordering::SeqCst);
        let end = Instant::now() + HOLD_LIMIT;
        while !self.released.load(Ordering::SeqCst) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.holding.store(false, Ordering::SeqCst);
    }
}

impl Hooks for Faults {
    fn reg_read(&self, sim: &SimPlatform, offset: u32) -> u32 {
        if self.reads.fetch_add(1, Ordering::SeqCst) >= self.ones_after_reads.load(Ordering::SeqCst) {
            return u32::MAX;
        }
        sim.reg_read(offset)
    }

    fn reg_write(&self, sim: &SimPlatform, offset: u32, value: u32) {
        if offset == REG_REQUEST {
            let d = sim.device();
            let op = d.mem().load_u32(dsr(d).cmd_slot_dma.get() + 8).unwrap_or(0);
            if Self::take(&self.swallow_op, op) {
                return;
            }
            if Self::take(&self.hold_op, op) {
                self.hold();
            }
        }
        sim.reg_write(offset, value)
    }

    fn wait_vector(&self, sim: &SimPlatform, vector: u16, timeout: Duration) -> u32 {
        let end = Instant::now() + HOLD_LIMIT;
        while vector == 1 && self.stall_async.load(Ordering::SeqCst) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        let n = sim.wait_vector(vector, timeout);
        let delay = self.cq_irq_delay_ms.load(Ordering::SeqCst);
        if vector == 2 && n > 0 && self.cq_irqs.fetch_add(1, Ordering::SeqCst) >= 1 && delay > 0 {
            std::thread::sleep(Duration::from_millis(delay));
        }
        n
    }
}
