//! RDMA WRITE, WRITE with immediate and READ through the verbs core (IBTA 9.4.3, 9.4.4;
//! `ibv_send_wr.wr.rdma`) over the model's loopback port: data placement, completions, and
//! the responder's remote access checks by R_Key.

use ib_core::{access, Cq, Device, Mr, Pd, Qp, QpState, RecvWr, SendWr, Sge, Wc, WcOpcode, WcStatus, WrOpcode};
use tests::fixture::*;

const REMOTE: u32 = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;
const LEN: usize = 8192;

/// A requester `a` and a responder `b` on one PD (each with its own CQ for both queues), `a`'s
/// local MR `la` (LOCAL_WRITE) and `b`'s target MR `rb` with `mr_access`; `b` grants
/// `qp_access` (`qp_access_flags`).
struct Rig {
    _dev: Device,
    pd: Pd,
    cq_a: Cq,
    cq_b: Cq,
    a: Qp,
    b: Qp,
    la: Mr,
    rb: Mr,
}

impl Rig {
    fn new(mr_access: u32, qp_access: u32) -> Self {
        let dev = open();
        let pd = dev.alloc_pd().unwrap();
        let (cq_a, cq_b) = (dev.create_cq(32, None).unwrap(), dev.create_cq(32, None).unwrap());
        let (a, b) = (rc_qp(&pd, &cq_a, &cq_a), rc_qp(&pd, &cq_b, &cq_b));
        let gid = gid(&dev);
        connect(&a, b.qpn(), gid);
        b.modify_to_init(1, qp_access).unwrap();
        b.modify_to_rtr(a.qpn(), gid, 0, 1024).unwrap();
        b.modify_to_rts(0).unwrap();
        let la = pd.alloc_mr(LEN, access::LOCAL_WRITE).unwrap();
        let rb = pd.alloc_mr(LEN, mr_access).unwrap();
        Self { _dev: dev, pd, cq_a, cq_b, a, b, la, rb }
    }

    /// Posts `op` from `sges` on `a`.
    fn post(&self, wr_id: u64, opcode: WrOpcode, sges: &[Sge], signaled: bool) {
        let wr = SendWr { wr_id, sg_list: sges, opcode, signaled, solicited: false };
        self.a.post_send(&wr).expect("post_send");
    }

    /// An SGE of `len` bytes at `off` of `mr`.
    fn sge(mr: &Mr, off: u64, len: u32) -> Sge {
        Sge { addr: mr.addr() + off, length: len, lkey: mr.lkey() }
    }

    fn bytes(mr: &Mr, off: usize, len: usize) -> Vec<u8> {
        let mut got = vec![0u8; len];
        mr.read(off, &mut got).unwrap();
        got
    }

    fn one(cq: &Cq) -> Wc {
        poll_n(cq, 1)[0]
    }
}

fn write(remote_addr: u64, rkey: u32) -> WrOpcode {
    WrOpcode::RdmaWrite { remote_addr, rkey }
}

fn read(remote_addr: u64, rkey: u32) -> WrOpcode {
    WrOpcode::RdmaRead { remote_addr, rkey }
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(13).wrapping_add(5)).collect()
}

#[test]
fn write_then_read_back_into_two_sges() {
    let r = Rig::new(REMOTE, REMOTE);
    let msg = pattern(3000);
    r.la.write(0, &msg).unwrap();
    r.post(1, write(r.rb.addr() + 2000, r.rb.rkey()), &[Rig::sge(&r.la, 0, 3000)], true);
    let w = Rig::one(&r.cq_a);
    assert_eq!((w.wr_id, w.status, w.opcode, w.byte_len), (1, WcStatus::Success, WcOpcode::RdmaWrite, 3000));
    assert_eq!(Rig::bytes(&r.rb, 2000, 3000), msg);
    assert_eq!(Rig::bytes(&r.rb, 0, 2000), vec![0; 2000]);

    let sges = [Rig::sge(&r.la, 4000, 1000), Rig::sge(&r.la, 6000, 2000)];
    r.post(2, read(r.rb.addr() + 2000, r.rb.rkey()), &sges, true);
    let c = Rig::one(&r.cq_a);
    assert_eq!((c.wr_id, c.status, c.opcode, c.byte_len), (2, WcStatus::Success, WcOpcode::RdmaRead, 3000));
    assert_eq!(Rig::bytes(&r.la, 4000, 1000), msg[..1000]);
    assert_eq!(Rig::bytes(&r.la, 6000, 2000), msg[1000..]);
    std::thread::sleep(SETTLE);
    assert_eq!(r.cq_b.poll(&mut [Wc::default(); 4]).unwrap(), 0, "no receive WQE consumed");
    assert_eq!(r.b.state().unwrap(), QpState::Rts);
}

#[test]
fn write_with_immediate_completes_a_receive() {
    let r = Rig::new(REMOTE, REMOTE);
    let sge = [Rig::sge(&r.rb, 7000, 64)];
    r.b.post_recv(&RecvWr { wr_id: 70, sg_list: &sge }).unwrap();
    r.la.write(0, b"with immediate").unwrap();
    let op = WrOpcode::RdmaWriteWithImm { remote_addr: r.rb.addr() + 10, rkey: r.rb.rkey(), imm: 0xfeed_f00d };
    r.post(3, op, &[Rig::sge(&r.la, 0, 14)], true);
    let rx = Rig::one(&r.cq_b);
    assert_eq!((rx.wr_id, rx.status, rx.opcode), (70, WcStatus::Success, WcOpcode::RecvRdmaWithImm));
    // RC: no source QP; IBV_WC_GRH on every receive, as Linux rxe (issue 21 §5).
    assert_eq!((rx.byte_len, rx.imm_data, rx.src_qp, rx.grh), (14, Some(0xfeed_f00d), 0, true));
    let tx = Rig::one(&r.cq_a);
    // The sender's completion says WITH_IMM too (rxe's make_send_cqe), with imm_data 0.
    assert_eq!((tx.wr_id, tx.opcode, tx.byte_len, tx.imm_data), (3, WcOpcode::RdmaWrite, 14, Some(0)));
    assert_eq!(Rig::bytes(&r.rb, 10, 14), b"with immediate");
    assert_eq!(Rig::bytes(&r.rb, 7000, 14), vec![0; 14], "nothing scattered into the receive");
}

/// `op` of 16 bytes fails with `REM_ACCESS_ERR`; both QPs end in ERR (the responder's posted
/// receive flushed) and neither MR changed.
fn refused(r: &Rig, op: WrOpcode) {
    r.la.write(0, &[0xaa; 16]).unwrap();
    r.rb.write(LEN - 16, &[0x55; 16]).unwrap();
    let rsge = [Rig::sge(&r.rb, 100, 8)];
    r.b.post_recv(&RecvWr { wr_id: 9, sg_list: &rsge }).unwrap();
    r.post(1, op, &[Rig::sge(&r.la, 0, 16)], true);
    let c = Rig::one(&r.cq_a);
    assert_eq!((c.wr_id, c.status), (1, WcStatus::RemAccessErr), "{op:?}");
    // An error completion carries no length or immediate (Linux rxe's make_send_cqe; issue 21 §5).
    assert_eq!((c.byte_len, c.imm_data, c.grh), (0, None, false), "{op:?}");
    let f = Rig::one(&r.cq_b);
    assert_eq!((f.wr_id, f.status), (9, WcStatus::WrFlushErr), "the responder moved to ERR");
    assert_eq!(r.a.state().unwrap(), QpState::Err);
    assert_eq!(r.b.state().unwrap(), QpState::Err);
    assert_eq!(Rig::bytes(&r.la, 0, 16), vec![0xaa; 16]);
    assert_eq!(Rig::bytes(&r.rb, 0, 16), vec![0; 16]);
    assert_eq!(Rig::bytes(&r.rb, LEN - 16, 16), vec![0x55; 16]);
}

#[test]
fn an_mr_without_remote_write_refuses_a_write() {
    let r = Rig::new(access::LOCAL_WRITE | access::REMOTE_READ, REMOTE);
    refused(&r, write(r.rb.addr(), r.rb.rkey()));
}

#[test]
fn a_qp_without_remote_read_refuses_a_read() {
    let r = Rig::new(REMOTE, access::LOCAL_WRITE | access::REMOTE_WRITE);
    refused(&r, read(r.rb.addr() + LEN as u64 - 16, r.rb.rkey()));
}

#[test]
fn one_byte_out_of_bounds_is_refused() {
    let r = Rig::new(REMOTE, REMOTE);
    refused(&r, write(r.rb.addr() + LEN as u64 - 15, r.rb.rkey()));
    let r = Rig::new(REMOTE, REMOTE);
    refused(&r, read(r.rb.addr() - 1, r.rb.rkey()));
}

#[test]
fn an_unknown_rkey_or_another_pds_rkey_is_refused() {
    let r = Rig::new(REMOTE, REMOTE);
    refused(&r, write(r.rb.addr(), r.rb.rkey() ^ 0x4000_0000));
    let r = Rig::new(REMOTE, REMOTE);
    let other = r._dev.alloc_pd().unwrap();
    let foreign = other.alloc_mr(LEN, REMOTE).unwrap();
    refused(&r, write(foreign.addr(), foreign.rkey()));
    assert_eq!(Rig::bytes(&foreign, 0, 16), vec![0; 16]);
    let r = Rig::new(REMOTE, REMOTE);
    refused(&r, read(r.rb.addr(), r.rb.lkey()));
}

#[test]
fn zero_length_operations_check_no_rkey() {
    let r = Rig::new(REMOTE, REMOTE);
    r.post(1, write(0, 0), &[], true);
    r.post(2, read(u64::MAX, 0xbad), &[], true);
    let wcs = poll_n(&r.cq_a, 2);
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status, w.opcode, w.byte_len)).collect();
    assert_eq!(
        got,
        vec![(1, WcStatus::Success, WcOpcode::RdmaWrite, 0), (2, WcStatus::Success, WcOpcode::RdmaRead, 0)]
    );
}

#[test]
fn a_read_into_an_mr_without_local_write_is_a_local_protection_error() {
    let r = Rig::new(REMOTE, REMOTE);
    r.rb.write(0, &[7; 32]).unwrap();
    let ro = r.pd.alloc_mr(4096, 0).unwrap();
    r.post(1, read(r.rb.addr(), r.rb.rkey()), &[Rig::sge(&ro, 0, 32)], true);
    let c = Rig::one(&r.cq_a);
    assert_eq!((c.wr_id, c.status), (1, WcStatus::LocProtErr));
    assert_eq!(Rig::bytes(&ro, 0, 32), vec![0; 32]);
    assert_eq!(r.b.state().unwrap(), QpState::Rts, "the responder did nothing wrong");
}

#[test]
fn selective_signaling_with_rdma_operations() {
    let r = Rig::new(REMOTE, REMOTE);
    r.la.write(0, &pattern(256)).unwrap();
    for i in 0..12u64 {
        let off = i * 256;
        r.post(i, write(r.rb.addr() + off, r.rb.rkey()), &[Rig::sge(&r.la, 0, 256)], false);
    }
    r.post(100, read(r.rb.addr() + 11 * 256, r.rb.rkey()), &[Rig::sge(&r.la, 4096, 256)], true);
    let c = Rig::one(&r.cq_a);
    assert_eq!((c.wr_id, c.status, c.opcode), (100, WcStatus::Success, WcOpcode::RdmaRead));
    assert_eq!(Rig::bytes(&r.la, 4096, 256), pattern(256), "the READ saw the earlier WRITEs");
    std::thread::sleep(SETTLE);
    assert_eq!(r.cq_a.poll(&mut [Wc::default(); 4]).unwrap(), 0, "the unsignaled WRITEs have no CQE");
    r.post(101, write(r.rb.addr(), r.rb.rkey() ^ 1), &[Rig::sge(&r.la, 0, 8)], false);
    let c = Rig::one(&r.cq_a);
    assert_eq!((c.wr_id, c.status), (101, WcStatus::RemAccessErr), "an unsignaled error completes");
}
