//! Faults injected on the link ([`super::LinkFaults`]): each packet the port sends may be lost,
//! held back behind the next one (reordered) or sent twice, as drawn from a generator seeded
//! with `LinkFaults::seed`. Only sent packets meet faults: received ones are the peer's link's.

use super::LinkFaults;
use crate::device::Core;
use parking_lot::Mutex;
use std::net::SocketAddr;

/// A packet ready for a socket: the socket's index, the destination, and the UDP payload.
#[derive(Clone, Debug)]
pub struct Outgoing {
    pub sock: usize,
    pub dst: SocketAddr,
    pub bytes: Vec<u8>,
}

struct State {
    rng: fastrand::Rng,
    /// A packet held back: it goes out after the next one (or when the link goes idle).
    held: Option<Outgoing>,
}

/// The link's fault injector. Its lock is a leaf.
pub struct Link {
    faults: LinkFaults,
    st: Mutex<State>,
}

impl Link {
    /// A link injecting `faults`.
    pub fn new(faults: LinkFaults) -> Self {
        let st = State {
            rng: fastrand::Rng::with_seed(faults.seed),
            held: None,
        };
        Self {
            faults,
            st: Mutex::new(st),
        }
    }

    /// Decides the fate of `pkt`: appends to `out` what goes on the wire now, in order (nothing
    /// if lost or held; twice if duplicated; a packet held earlier after it). Counts each fault.
    pub fn pass(&self, core: &Core, pkt: Outgoing, out: &mut Vec<Outgoing>) {
        let f = &self.faults;
        let mut st = self.st.lock();
        let mut hit = |p: f64| p > 0.0 && st.rng.f64() < p;
        if hit(f.loss) {
            core.count(|c| &c.roce_injected_loss);
            return;
        }
        let dup = hit(f.duplicate);
        let hold = hit(f.reorder);
        if hold && st.held.is_none() {
            core.count(|c| &c.roce_injected_reorder);
            st.held = Some(pkt);
            return;
        }
        if dup {
            core.count(|c| &c.roce_injected_duplicate);
            out.push(pkt.clone());
        }
        out.push(pkt);
        out.extend(st.held.take());
    }

    /// Takes the packet held back, if any (the link went idle: it goes out now).
    pub fn release_held(&self, out: &mut Vec<Outgoing>) {
        out.extend(self.st.lock().held.take());
    }
}
