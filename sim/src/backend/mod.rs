//! The data path ([`Backend`], as QEMU's `hw/rdma/rdma_backend.c` is the data path of its
//! `rdma_rm.c` resources): the device's context ([`Ctx`]), its resource tables, the GID table,
//! the loopback wire ([`PortQueue`], whose budget both ports keep) and the RoCE port's send side
//! ([`Transport`]); and a QP's half of the data path: drain the SQ (`send`), receive into the RQ
//! (`recv`, `responder`), complete and flush (`complete`), UD datagrams (`ud`), and the MR
//! accesses by lkey and rkey (`mr`).
//!
//! The ports sit above it: the loopback port's delivery (`port`) and the RoCE port (`roce`) call
//! into the QPs; the QPs reach the RoCE port only through [`Transport`].

mod complete;
pub(crate) mod mr;
mod recv;
mod responder;
mod send;
pub(crate) mod ud;

use crate::ctx::{Ctx, Effects};
use crate::packet::Packet;
use crate::qp::Qp;
use crate::srq::Srq;
use crate::table::{GidEntry, Objects};
use crate::wire::PortQueue;
use parking_lot::Mutex;
use pvrdma_abi::verbs::QpAttr;
use std::sync::Arc;

/// The RoCE port as the data path and the commands see it (implemented by `roce::RocePort`).
pub(crate) trait Transport: Send + Sync {
    /// Puts the message `pkt` of QP `qp` (attributes `a`, its state lock held) on the wire.
    /// Errors: the completion status of a message the port cannot send (no usable source
    /// address).
    fn post(&self, b: &Backend, qp: &Qp, a: &QpAttr, pkt: Packet, fx: &mut Effects) -> Result<(), u32>;
    /// Hands QP `qp`'s requester the attributes `a` MODIFY_QP just changed in SQD. Called under
    /// the QP's lock.
    fn reconfigure(&self, b: &Backend, qp: &Qp, a: &QpAttr);
}

/// What the data path and the commands work on: the device's context, its resources and its
/// wire. Dereferences to the [`Ctx`] it extends.
pub(crate) struct Backend {
    pub ctx: Ctx,
    pub objects: Mutex<Objects>,
    pub gids: Mutex<Vec<Option<GidEntry>>>,
    pub port: PortQueue,
    /// The RoCE v2 port, when [`crate::SimConfig::roce`] is set.
    pub roce: Option<Arc<dyn Transport>>,
}

#[cfg(test)]
impl Backend {
    /// A backend on its own, without a device above it, ports or threads: for the unit tests of
    /// the layers that take one (the RoCE port's receiver).
    pub(crate) fn for_tests(cfg: crate::SimConfig) -> Backend {
        let port = PortQueue::new(cfg.device_packets_in_flight, cfg.device_bytes_in_flight, cfg.link_latency.is_zero());
        Backend {
            ctx: Ctx::new(cfg),
            objects: Mutex::new(Objects::new(0x5eed)),
            gids: Mutex::new(vec![None; crate::limits::GID_TBL_LEN as usize]),
            port,
            roce: None,
        }
    }
}

impl std::ops::Deref for Backend {
    type Target = Ctx;
    fn deref(&self) -> &Ctx {
        &self.ctx
    }
}

impl Backend {
    /// The QP named `handle`.
    pub(crate) fn qp(&self, handle: u32) -> Option<Arc<Qp>> {
        self.objects.lock().qps.get(handle).cloned()
    }

    /// The SRQ named `handle`.
    pub(crate) fn srq(&self, handle: u32) -> Option<Arc<Srq>> {
        self.objects.lock().srqs.get(handle).cloned()
    }

    /// The GID table entry at `index`, if bound.
    pub(crate) fn gid_entry(&self, index: u8) -> Option<GidEntry> {
        self.gids.lock().get(index as usize).copied().flatten()
    }

    /// Reserves room for a message of `len` bytes of QP `qpn` on the device's wire (the loopback's
    /// or the RoCE port's: [`PortQueue::try_reserve`] keeps the budget of both).
    pub(crate) fn wire_reserve(&self, qpn: u32, len: u64) -> bool {
        self.port.try_reserve(qpn, len)
    }

    /// Returns a reservation of [`Backend::wire_reserve`] whose message was not sent.
    pub(crate) fn wire_unreserve(&self, len: u64, fx: &mut Effects) {
        self.port.unreserve(len, fx);
    }

    /// Puts the message `pkt` of QP `qp` (attributes `a`, its state lock held) on the port's
    /// wire: the loopback, or the RoCE port. Errors: the completion status of a message the
    /// RoCE port cannot send (no usable source address).
    pub(crate) fn transmit(&self, qp: &Qp, a: &QpAttr, pkt: Packet, fx: &mut Effects) -> Result<(), u32> {
        match &self.roce {
            Some(r) => r.post(self, qp, a, pkt, fx),
            None => {
                self.port.transmit(pkt, self.cfg.link_latency);
                Ok(())
            }
        }
    }

    /// Does the deferred work ([`Backend::settle_effects`]), hands any packet it sent to the port
    /// thread and raises the CQ-notification vector if an arm fired. Call with no lock held
    /// but the command lock.
    pub(crate) fn settle(&self, mut fx: Effects) {
        self.settle_effects(&mut fx);
        self.port.hand_off();
        self.raise_fired(&mut fx);
    }

    /// Moves the QPs of CQs that went into error to ERR (which may put more CQs in error),
    /// resumes the SQ drains the wire budget paused once a packet left the wire, then wakes the
    /// port for kicked QPs.
    pub(crate) fn settle_effects(&self, fx: &mut Effects) {
        while !fx.errored_cqs.is_empty() || fx.resume_starved {
            let uids = std::mem::take(&mut fx.errored_cqs);
            let qps: Vec<Arc<Qp>> = self
                .objects
                .lock()
                .qps
                .values()
                .filter(|q| uids.contains(&q.send_cq.uid) || uids.contains(&q.recv_cq.uid))
                .cloned()
                .collect();
            for qp in qps {
                qp.force_error(self, fx);
            }
            if std::mem::take(&mut fx.resume_starved) {
                // Each resumed QP takes what room there is and, if refused again, waits for the
                // next packet to leave: resume_starved is set only when one did.
                for qpn in self.port.take_starved() {
                    if let Some(qp) = self.qp(qpn) {
                        qp.resume_send(self, fx);
                    }
                }
            }
        }
        for qpn in std::mem::take(&mut fx.kicks) {
            self.port.kick_if_parked(qpn);
        }
    }
}
