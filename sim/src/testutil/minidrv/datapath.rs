//! The mini-driver's data path: posting send and receive WQEs, ringing doorbells, polling CQs
//! and reading the device's rings and interrupt counts.

use super::*;
use pvrdma_abi::event::Eqe;
use pvrdma_abi::ring::{idx_inc, idx_slot};
use pvrdma_abi::verbs::send_flags;
use std::time::{Duration, Instant};
use zerocopy::big_endian::U32 as Be32;
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

impl Drv {
    /// Writes a send WQE at the SQ's producer slot and publishes it (no doorbell).
    pub fn post_send_wqe(&self, qp: &TestQp, wr_id: u64, op: u32, flags: u32, imm: u32, sges: &[Sge]) {
        let hdr = SqWqeHdr {
            wr_id: U64::new(wr_id),
            num_sge: U32::new(sges.len() as u32),
            opcode: U32::new(op),
            send_flags: U32::new(flags),
            ex: Be32::new(imm),
            ..Default::default()
        };
        self.post_wqe(qp, &hdr, sges);
    }

    /// Writes an RDMA WQE (`wr.rdma` = `remote_addr`, `rkey`) and publishes it (no doorbell).
    #[allow(clippy::too_many_arguments)]
    pub fn post_rdma_wqe(
        &self,
        qp: &TestQp,
        wr_id: u64,
        op: u32,
        flags: u32,
        imm: u32,
        remote_addr: u64,
        rkey: u32,
        sges: &[Sge],
    ) {
        let mut hdr = SqWqeHdr {
            wr_id: U64::new(wr_id),
            num_sge: U32::new(sges.len() as u32),
            opcode: U32::new(op),
            send_flags: U32::new(flags),
            ex: Be32::new(imm),
            ..Default::default()
        };
        hdr.wr[..8].copy_from_slice(&remote_addr.to_le_bytes());
        hdr.wr[8..12].copy_from_slice(&rkey.to_le_bytes());
        self.post_wqe(qp, &hdr, sges);
    }

    /// Writes a signaled atomic WQE `op` (`wr.atomic` as Linux's `pvrdma_post_send` fills it:
    /// `remote_addr`, `compare_add`, `swap`, `rkey`), publishes it and rings the SQ doorbell.
    #[allow(clippy::too_many_arguments)]
    pub fn post_atomic_wqe(
        &self,
        qp: &TestQp,
        wr_id: u64,
        op: u32,
        remote_addr: u64,
        rkey: u32,
        compare_add: u64,
        swap: u64,
        sges: &[Sge],
    ) {
        let mut wr = pvrdma_abi::wqe::WrAtomic::new_zeroed();
        (wr.remote_addr, wr.rkey) = (U64::new(remote_addr), U32::new(rkey));
        (wr.compare_add, wr.swap) = (U64::new(compare_add), U64::new(swap));
        let mut hdr = SqWqeHdr {
            wr_id: U64::new(wr_id),
            num_sge: U32::new(sges.len() as u32),
            opcode: U32::new(op),
            send_flags: U32::new(send_flags::SIGNALED),
            ..Default::default()
        };
        hdr.wr.copy_from_slice(wr.as_bytes());
        self.post_wqe(qp, &hdr, sges);
        self.qp_doorbell(qp, pvrdma_abi::uar::UAR_QP_SEND);
    }

    /// Writes `hdr` and `sges` at the SQ's producer slot and publishes it.
    pub fn post_wqe(&self, qp: &TestQp, hdr: &SqWqeHdr, sges: &[Sge]) {
        let mem = self.dev.mem();
        let prod = mem.load_u32(qp.state).unwrap();
        let slot = idx_slot(prod, qp.swr).expect("SQ index");
        let at = qp.sq + u64::from(slot) * qp.sstride;
        mem.write(at, hdr.as_bytes()).unwrap();
        mem.write(at + 80, sges.as_bytes()).unwrap();
        mem.store_u32(qp.state, idx_inc(prod, qp.swr)).unwrap();
    }

    /// Posts a signaled SEND and rings the SQ doorbell.
    pub fn send(&self, qp: &TestQp, wr_id: u64, flags: u32, sges: &[Sge]) {
        self.post_send_wqe(qp, wr_id, wr_opcode::SEND, flags | send_flags::SIGNALED, 0, sges);
        self.qp_doorbell(qp, UAR_QP_SEND);
    }

    /// Writes a receive WQE and rings the RQ doorbell.
    pub fn recv(&self, qp: &TestQp, wr_id: u64, sges: &[Sge]) {
        let mem = self.dev.mem();
        let prod = mem.load_u32(qp.state + 8).unwrap();
        let slot = idx_slot(prod, qp.rwr).expect("RQ index");
        let hdr = RqWqeHdr { wr_id: U64::new(wr_id), num_sge: U32::new(sges.len() as u32), total_len: U32::ZERO };
        let at = qp.rq + u64::from(slot) * qp.rstride;
        mem.write(at, hdr.as_bytes()).unwrap();
        mem.write(at + 16, sges.as_bytes()).unwrap();
        mem.store_u32(qp.state + 8, idx_inc(prod, qp.rwr)).unwrap();
        self.qp_doorbell(qp, UAR_QP_RECV);
    }

    pub fn qp_doorbell(&self, qp: &TestQp, bits: u32) {
        self.dev.uar_write(u64::from(qp.page) * PAGE + u64::from(UAR_QP_OFFSET), bits | qp.qpn);
    }

    /// Rings the CQ doorbell of `cq` with `bits` on UAR page `page`.
    pub fn cq_doorbell(&self, page: u32, cq: u32, bits: u32) {
        self.dev.uar_write(u64::from(page) * PAGE + u64::from(UAR_CQ_OFFSET), bits | cq);
    }

    /// Takes the next CQE, if any.
    pub fn poll(&self, cq: &TestCq) -> Option<Cqe> {
        let raw = self.take(&cq.ring)?;
        Some(Cqe::read_from_bytes(&raw).unwrap())
    }

    /// Waits for `n` CQEs (bounded).
    pub fn wait_cqes(&self, cq: &TestCq, n: usize) -> Vec<Cqe> {
        let deadline = Instant::now() + WAIT;
        let mut out = Vec::new();
        while out.len() < n && Instant::now() < deadline {
            match self.poll(cq) {
                Some(c) => out.push(c),
                None => std::thread::sleep(Duration::from_micros(100)),
            }
        }
        out
    }

    /// Drains the CQ-notification ring.
    pub fn notifications(&self) -> Vec<u32> {
        std::iter::from_fn(|| self.take(&self.cq_ring)).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
    }

    /// Drains the async-event ring.
    pub fn async_events(&self) -> Vec<(u32, u32)> {
        std::iter::from_fn(|| self.take(&self.async_ring))
            .map(|b| Eqe::read_from_bytes(&b).unwrap())
            .map(|e| (e.type_.get(), e.info.get()))
            .collect()
    }

    /// Consumes one entry of a device-produced ring.
    fn take(&self, r: &DevRing) -> Option<Vec<u8>> {
        let mem = self.dev.mem();
        let prod = mem.load_u32(r.state + 8).unwrap();
        let cons = mem.load_u32(r.state + 12).unwrap();
        if prod == cons {
            return None;
        }
        let slot = idx_slot(cons, r.elems).unwrap();
        let mut raw = vec![0u8; r.size as usize];
        mem.read(r.entries + u64::from(slot) * r.size, &mut raw).unwrap();
        mem.store_u32(r.state + 12, idx_inc(cons, r.elems)).unwrap();
        Some(raw)
    }

    /// Entries queued in `cq` without consuming them.
    pub fn queued(&self, r: &DevRing) -> u32 {
        let mem = self.dev.mem();
        let prod = mem.load_u32(r.state + 8).unwrap();
        let cons = mem.load_u32(r.state + 12).unwrap();
        pvrdma_abi::ring::ring_count(prod, cons, r.elems).unwrap()
    }

    /// Takes every pending interrupt of `vector` without waiting.
    pub fn irqs(&self, vector: u16) -> u32 {
        self.dev.vectors().wait(vector, Duration::ZERO)
    }

    /// Waits until the port has nothing in flight.
    pub fn settle(&self) {
        assert!(self.dev.wait_port_idle(WAIT), "port did not go idle");
    }
}
