//! Faults injected on the link ([`super::LinkFaults`]), in both directions: each packet the port
//! sends, and each datagram it receives, may be lost, held back behind the next one (reordered)
//! or passed twice, as drawn from generators seeded with `LinkFaults::seed` (one per direction,
//! so a run can be repeated).

use super::LinkFaults;
use crate::backend::Backend;
use parking_lot::Mutex;
use std::net::SocketAddr;

/// A packet ready for a socket: the socket's index, the destination, and the UDP payload.
#[derive(Clone, Debug)]
pub struct Outgoing {
    pub sock: usize,
    pub dst: SocketAddr,
    pub bytes: Vec<u8>,
}

/// A datagram received: the socket's index, the sender, and the UDP payload.
#[derive(Clone, Debug)]
pub struct Incoming {
    pub sock: usize,
    pub peer: SocketAddr,
    pub bytes: Vec<u8>,
}

/// One direction's fault injector.
pub struct Faults<T> {
    faults: LinkFaults,
    rng: fastrand::Rng,
    /// A packet held back: it goes on after the next one (or when the link goes idle).
    held: Option<T>,
}

impl<T: Clone> Faults<T> {
    /// An injector of `faults`, its generator seeded with `faults.seed` mixed with `stream`.
    pub fn new(faults: &LinkFaults, stream: u64) -> Self {
        let rng = fastrand::Rng::with_seed(faults.seed ^ stream);
        Self { faults: faults.clone(), rng, held: None }
    }

    /// Whether any fault is configured (else [`Faults::pass`] passes everything through).
    pub fn active(&self) -> bool {
        let f = &self.faults;
        f.loss > 0.0 || f.reorder > 0.0 || f.duplicate > 0.0
    }

    /// Decides the fate of `pkt`: appends to `out` what goes on now, in order (nothing if lost
    /// or held; twice if duplicated; a packet held earlier after it). Counts each fault.
    pub fn pass(&mut self, core: &Backend, pkt: T, out: &mut Vec<T>) {
        let f = &self.faults;
        let rng = &mut self.rng;
        let mut hit = |p: f64| p > 0.0 && rng.f64() < p;
        if hit(f.loss) {
            core.count(|c| &c.roce_injected_loss);
            return;
        }
        let dup = hit(f.duplicate);
        let hold = hit(f.reorder);
        if hold && self.held.is_none() {
            core.count(|c| &c.roce_injected_reorder);
            self.held = Some(pkt);
            return;
        }
        if dup {
            core.count(|c| &c.roce_injected_duplicate);
            out.push(pkt.clone());
        }
        out.push(pkt);
        out.extend(self.held.take());
    }

    /// Takes the packet held back, if any (the link went idle: it goes on now).
    pub fn release_held(&mut self, out: &mut Vec<T>) {
        out.extend(self.held.take());
    }
}

/// The sending direction, shared by every thread that sends. Its lock is a leaf, taken only
/// when a fault is configured (a faultless link passes every packet through untouched).
pub struct Link {
    faults: Mutex<Faults<Outgoing>>,
    active: bool,
}

impl Link {
    /// A link injecting `faults` on what is sent.
    pub fn new(faults: &LinkFaults) -> Self {
        let faults = Faults::new(faults, 0);
        let active = faults.active();
        Self { faults: Mutex::new(faults), active }
    }

    /// [`Faults::pass`] for a packet sent.
    pub fn pass(&self, core: &Backend, pkt: Outgoing, out: &mut Vec<Outgoing>) {
        if self.active {
            self.faults.lock().pass(core, pkt, out);
        } else {
            out.push(pkt);
        }
    }

    /// [`Faults::release_held`] for the sending direction.
    pub fn release_held(&self, out: &mut Vec<Outgoing>) {
        if self.active {
            self.faults.lock().release_held(out);
        }
    }
}
