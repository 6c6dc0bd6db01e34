//! RESIZE_CQ against the model: the queued CQEs move in order to the pages the CQ's page
//! directory lists now, the ring state is rewritten; every refusal leaves the old ring working;
//! the QEMU 7.2 profile answers nothing, as QEMU 7.2.

use crate::limits::MAX_CQE;
use crate::testutil::minidrv::*;
use crate::{Profile, SimConfig};
use pvrdma_abi::cmd::*;
use pvrdma_abi::regs::{REG_ERR, REG_REQUEST};
use pvrdma_abi::wqe::Cqe;
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, IntoBytes};

/// Rewrites the directory at `dir` in place to list `pages` (new table pages).
fn relist(d: &Drv, dir: u64, pages: &[u64]) {
    let fresh = build_pdir(&d.dev, pages);
    let mut entries = vec![0u8; PAGE as usize];
    d.dev.mem().read(fresh, &mut entries).unwrap();
    d.dev.mem().write(dir, &entries).unwrap();
}

fn resize(handle: u32, cqe: u32) -> ResizeCq {
    ResizeCq { cq_handle: U32::new(handle), cqe: U32::new(cqe), ..Default::default() }
}

fn wr_id_at(d: &Drv, entries: u64, slot: u64) -> u64 {
    let mut b = [0u8; 64];
    d.dev.mem().read(entries + 64 * slot, &mut b).unwrap();
    Cqe::read_from_bytes(&b).unwrap().wr_id.get()
}

fn publish(d: &Drv, handle: u32, wr_id: u64) {
    let cqe = Cqe { wr_id: U64::new(wr_id), ..Default::default() };
    assert!(d.dev.post_cqe(handle, &cqe, false));
}

#[test]
fn resize_moves_the_queued_cqes_and_refusals_change_nothing() {
    let mut d = Drv::new(SimConfig::default());
    let (req, ring) = d.cq_request(0, 4);
    let h = d.ok(req).cq_handle.get();
    let dir = req.pdir_dma.get();
    let dev = d.dev.clone();
    let mem = dev.mem();
    // Wrap first: 3 in, 3 consumed, then 3 more (slots 3, 0, 1).
    (0..3).for_each(|i| publish(&d, h, 100 + i));
    mem.store_u32(ring.state + 12, 3).unwrap();
    (0..3).for_each(|i| publish(&d, h, i));

    assert_eq!(d.err(resize(77, 8)), 22, "no such CQ");
    assert_eq!(d.err(resize(h, 12)), 22, "not a power of two");
    assert_eq!(d.err(resize(h, MAX_CQE * 2)), 22, "above max_cqe");
    assert_eq!(d.err(resize(h, 2)), 22, "below the 3 queued");
    let new = mem.alloc(PAGE).unwrap();
    let other_state = mem.alloc(PAGE).unwrap();
    relist(&d, dir, &[other_state, new]);
    assert_eq!(d.err(resize(h, 8)), 22, "page 0 is no longer the ring state");
    relist(&d, dir, &[ring.state, 0xdead_0000]);
    assert_eq!(d.err(resize(h, 8)), 22, "a page outside guest memory");
    assert_eq!(d.dev.cq_status(h).unwrap().entries, 4, "unchanged");
    assert_eq!(mem.load_u32(ring.state + 8).unwrap(), 6, "the old ring's producer");

    relist(&d, dir, &[ring.state, new]);
    assert_eq!(d.ok(resize(h, 8)).cqe.get(), 8);
    assert_eq!((mem.load_u32(ring.state + 8).unwrap(), mem.load_u32(ring.state + 12).unwrap()), (3, 0));
    assert_eq!((0..3).map(|s| wr_id_at(&d, new, s)).collect::<Vec<_>>(), [0, 1, 2], "in order from slot 0");
    assert_eq!(d.dev.cq_status(h).unwrap().entries, 8);
    publish(&d, h, 3);
    assert_eq!(wr_id_at(&d, new, 3), 3, "the next CQE follows them in the new ring");
    assert_eq!(mem.load_u32(ring.state + 8).unwrap(), 4);
    // Down to 4 with 4 queued: full, and the next CQE overflows the CQ (IBTA profile).
    let small = mem.alloc(PAGE).unwrap();
    relist(&d, dir, &[ring.state, small]);
    assert_eq!(d.ok(resize(h, 4)).cqe.get(), 4);
    assert_eq!((0..4).map(|s| wr_id_at(&d, small, s)).collect::<Vec<_>>(), [0, 1, 2, 3]);
    publish(&d, h, 4);
    assert!(d.dev.cq_status(h).unwrap().error, "a full resized CQ overflows as any other");
}

#[test]
fn qemu72_leaves_resize_cq_unanswered() {
    let mut d = Drv::new(SimConfig { profile: Profile::Qemu72, ..SimConfig::default() });
    let cq = d.create_cq(0, 4);
    let dev = d.dev.clone();
    let mem = dev.mem();
    mem.zero(d.resp_slot, 64).unwrap();
    let mut req = resize(cq.handle, 8);
    req.hdr.response = U64::new(0x77);
    req.hdr.cmd = U32::new(opcode::RESIZE_CQ);
    mem.write(d.cmd_slot, req.as_bytes()).unwrap();
    d.dev.reg_write(REG_REQUEST, 0);
    assert_eq!(d.dev.vectors().wait(0, WAIT), 1, "the command interrupt, as QEMU posts it");
    let mut resp = [0u8; 24];
    mem.read(d.resp_slot, &mut resp).unwrap();
    assert_eq!(resp, [0u8; 24], "no response written: no ack, no cookie");
    assert_eq!(d.dev.reg_read(REG_ERR), 0xffff, "QEMU's initial err");
    assert_eq!(d.dev.cq_status(cq.handle).unwrap().entries, 4);
    // The device carries on.
    d.create_pd(0);
}
