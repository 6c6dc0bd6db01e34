//! MSI-X vectors as counters (like an eventfd each): the device raises, the driver waits.

use parking_lot::{Condvar, Mutex};
use pvrdma_abi::regs::MAX_INTERRUPTS;
use std::time::Duration;

const N: usize = MAX_INTERRUPTS as usize;

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
}

impl MsixVectors {
    /// Raises `vector`: adds one to its pending count and wakes its waiter. A masked vector's
    /// interrupts stay pending until it is unmasked. Unknown vectors are ignored.
    pub fn raise(&self, vector: u16) {
        let v = vector as usize;
        let mut s = self.state.lock();
        if v >= N {
            return;
        }
        s.pending[v] = s.pending[v].saturating_add(1);
        s.raised[v] += 1;
        if !s.masked[v] {
            self.cond[v].notify_all();
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
}
