//! MSI-X vectors as counters (like an eventfd each): the device raises, the driver waits — or,
//! for a vector the driver gave a handler, the raising thread runs the handler itself, as a CPU
//! runs an interrupt handler on the spot, with no thread hand-off in between.

use parking_lot::{Condvar, Mutex};
use pvrdma_abi::regs::MAX_INTERRUPTS;
use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

const N: usize = MAX_INTERRUPTS as usize;

/// A driver's interrupt handler for one vector, run on the thread that raises it.
pub type VectorHandler = Arc<dyn Fn() + Send + Sync>;

thread_local! {
    /// This thread is running a vector handler: a raise from inside it (the handler rang a
    /// doorbell that raised again) is left pending for the driver's vector thread, so a handler
    /// never re-enters itself.
    static IN_HANDLER: Cell<bool> = const { Cell::new(false) };
}

/// The three MSI-X vectors of the function: 0 command response, 1 async event, 2 CQ notification.
///
/// Each vector has its own condition variable, so raising one wakes only that vector's waiter
/// (as each MSI-X vector has its own eventfd under VFIO).
#[derive(Default)]
pub struct MsixVectors {
    state: Mutex<VectorState>,
    cond: [Condvar; N],
}

#[derive(Default)]
struct VectorState {
    pending: [u32; N],
    raised: [u64; N],
    masked: [bool; N],
    handlers: [Option<VectorHandler>; N],
}

/// Marks this thread as in a handler until dropped (a panicking handler too).
struct InHandler;

impl InHandler {
    fn enter() -> Self {
        IN_HANDLER.set(true);
        Self
    }
}

impl Drop for InHandler {
    fn drop(&mut self) {
        IN_HANDLER.set(false);
    }
}

impl MsixVectors {
    /// Raises `vector`: runs its handler on this thread if it has one, is unmasked and this
    /// thread is not already in a handler; otherwise adds one to its pending count and wakes its
    /// waiter. A masked vector's interrupts stay pending until it is unmasked. Unknown vectors
    /// are ignored. Call with no lock held that the handler may take.
    pub fn raise(&self, vector: u16) {
        let v = vector as usize;
        let mut s = self.state.lock();
        if v >= N {
            return;
        }
        s.raised[v] += 1;
        let handler = s.handlers[v].clone().filter(|_| !s.masked[v] && !IN_HANDLER.get());
        if let Some(handler) = handler {
            drop(s);
            let _inside = InHandler::enter();
            handler();
            return;
        }
        s.pending[v] = s.pending[v].saturating_add(1);
        if !s.masked[v] {
            self.cond[v].notify_all();
        }
    }

    /// Gives `vector` a handler run by the raising thread (`None` removes it: raises are
    /// counted and waited for again). The driver's vector thread keeps waiting with a bound,
    /// for what a masked vector left pending. Returns `false` for an unknown vector.
    pub fn set_handler(&self, vector: u16, handler: Option<VectorHandler>) -> bool {
        match self.state.lock().handlers.get_mut(vector as usize) {
            Some(h) => {
                *h = handler;
                true
            }
            None => false,
        }
    }

    /// Waits up to `timeout` for `vector` to have pending interrupts, then takes them all (eventfd
    /// read semantics). Returns how many were pending; 0 on timeout or for an unknown vector.
    pub fn wait(&self, vector: u16, timeout: Duration) -> u32 {
        let v = vector as usize;
        if v >= N {
            return 0;
        }
        let deadline = osdep::deadline_after(timeout);
        let mut s = self.state.lock();
        while s.pending[v] == 0 || s.masked[v] {
            if self.cond[v].wait_until(&mut s, deadline).timed_out() {
                break;
            }
        }
        if s.masked[v] {
            return 0;
        }
        std::mem::take(&mut s.pending[v])
    }

    /// Masks or unmasks `vector` (the MSI-X vector control bit).
    pub fn set_masked(&self, vector: u16, masked: bool) {
        let mut s = self.state.lock();
        if let Some(m) = s.masked.get_mut(vector as usize) {
            *m = masked;
            self.cond[vector as usize].notify_all();
        }
    }

    /// Interrupts raised on `vector` since the device was created (for tests and reports).
    pub fn raised(&self, vector: u16) -> u64 {
        self.state.lock().raised.get(vector as usize).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_takes_all_pending_and_times_out() {
        let m = MsixVectors::default();
        m.raise(2);
        m.raise(2);
        assert_eq!(m.wait(2, Duration::from_millis(1)), 2);
        assert_eq!(m.wait(2, Duration::from_millis(1)), 0);
        m.set_masked(1, true);
        m.raise(1);
        assert_eq!(m.wait(1, Duration::from_millis(1)), 0);
        m.set_masked(1, false);
        assert_eq!(m.wait(1, Duration::from_millis(1)), 1);
        assert_eq!(m.raised(2), 2);
        m.raise(9);
        assert_eq!(m.wait(9, Duration::ZERO), 0);
        m.raise(0);
        assert_eq!(m.wait(0, Duration::MAX), 1);
    }

    #[test]
    fn a_handler_runs_on_the_raising_thread_and_never_inside_itself() {
        let m = Arc::new(MsixVectors::default());
        let runs = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let (m2, r2) = (Arc::downgrade(&m), runs.clone());
        let handler: VectorHandler = Arc::new(move || {
            r2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if let Some(m) = m2.upgrade() {
                m.raise(2); // from inside: left pending
            }
        });
        assert!(m.set_handler(2, Some(handler)));
        assert!(!m.set_handler(9, None));
        m.raise(2);
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(m.wait(2, Duration::ZERO), 1, "the nested raise waits for the vector thread");
        m.set_masked(2, true);
        m.raise(2);
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1, "masked: no handler");
        m.set_masked(2, false);
        assert_eq!(m.wait(2, Duration::ZERO), 1);
        assert_eq!(m.raised(2), 3);
    }
}
