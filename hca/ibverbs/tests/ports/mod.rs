//! The fixture of the C-entry-point tests that run on both ports of the model: the loopback port
//! (two contexts on device 0) and the RoCE v2 port (devices 1 and 2, each on its own loopback
//! address it holds, talking UDP over the host's stack). A test that uses them runs its body in
//! [`run`].
#![allow(dead_code)]

use ibverbs_compat::abi::*;
use ibverbs_compat::*;
use std::ptr::null_mut;
use std::time::Duration;

/// How long a test waits for completions or an event before it fails.
pub const WAIT: Duration = Duration::from_secs(20);

/// Which port a pair talks over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Port {
    Loopback,
    Roce,
}

/// Both ports, for tests that run on each.
pub const PORTS: [Port; 2] = [Port::Loopback, Port::Roce];

/// The variable a test's child is told its RoCE devices' two addresses in (`A,B`).
const ADDRS_ENV: &str = "HCA_TEST_ROCE_ADDRS";

/// Runs `body` with the devices of this process named (a loopback model, then two models with
/// RoCE ports, UDP 4791 each, on 127/8 addresses of their own): the library opens them once per
/// process, from `HCA_DEVICES`, so the test runs as a child of its binary told two fresh
/// addresses, and again with others while the library finds one taken (another run holds it):
/// [`netlease::child::retried`]. The child's devices hold their addresses for its whole run.
pub fn run(body: impl FnOnce()) {
    let pick = |f: &mut netlease::Fresh| format!("{},{}", f.v4(), f.v4());
    netlease::child::retried(ADDRS_ENV, pick, || {
        let addrs = std::env::var(ADDRS_ENV).expect("the child's addresses");
        let (a, b) = addrs.split_once(',').expect("two addresses");
        std::env::set_var("HCA_DEVICES", format!("model;model,roce={a};model,roce={b}"));
        check_opened([a, b]);
        body()
    })
}

/// Checks that the library opened all three devices; one it left out because its address is
/// taken ends the child as [`netlease::child::taken`].
fn check_opened(addrs: [&str; 2]) {
    // SAFETY: the list is NULL-terminated, its entries devices of this library; freed after use.
    let held: Vec<std::net::IpAddr> = unsafe {
        let mut n = 0;
        let list = ibv_get_device_list(&mut n);
        let held = (0..n as usize)
            .filter_map(|i| test_model(*list.add(i)))
            .filter_map(|m| m.device().config().roce.as_ref().map(|r| r.addrs[0]))
            .collect();
        ibv_free_device_list(list);
        held
    };
    for a in addrs {
        let ip: std::net::IpAddr = a.parse().expect("an address");
        if held.contains(&ip) {
            continue;
        }
        // Left out: taken if it cannot be bound now either (the library said why on stderr).
        match std::net::UdpSocket::bind((ip, pvrdma_sim::roce::ROCE_V2_UDP_PORT)) {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => netlease::child::taken(&format!("{ip}: {e}")),
            other => panic!("the library left the RoCE device on {ip} out ({other:?}): see its line on stderr"),
        }
    }
}

pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A context on device `index` of the list.
pub fn open(index: usize) -> (*mut ibv_context, hca::platform::sim::SimPlatform) {
    // SAFETY: the list is NULL-terminated; `index` is checked against its length.
    unsafe {
        let mut n = 0;
        let list = ibv_get_device_list(&mut n);
        assert!(!list.is_null() && index < n as usize, "device {index} of {n} (HCA_DEVICES set by init)");
        let dev = *list.add(index);
        let ctx = ibv_open_device(dev);
        let model = test_model(dev).expect("a model device");
        ibv_free_device_list(list);
        assert!(!ctx.is_null(), "ibv_open_device: errno {}", errno());
        (ctx, model)
    }
}

/// One end: a context with a PD, a send CQ, a receive CQ and 64 KiB registered with every
/// access right.
pub struct Side {
    pub ctx: *mut ibv_context,
    pub model: hca::platform::sim::SimPlatform,
    pub pd: *mut ibv_pd,
    pub scq: *mut ibv_cq,
    pub rcq: *mut ibv_cq,
    pub mr: *mut ibv_mr,
    pub buf: Vec<u8>,
    /// The GID index of the port's address this end sends from (0 loopback, 1 RoCE v2).
    pub gid_index: u8,
}

/// Every access right of an MR (local write, remote write, read, atomic).
pub const ALL_ACCESS: i32 = 0xf;

impl Side {
    pub fn open(index: usize, gid_index: u8) -> Self {
        let (ctx, model) = open(index);
        let mut buf = vec![0u8; 1 << 16];
        // SAFETY: an open context; the buffer outlives the MR (deregistered in `close`).
        unsafe {
            let pd = ibv_alloc_pd(ctx);
            let scq = ibv_create_cq(ctx, 64, null_mut(), null_mut(), 0);
            let rcq = ibv_create_cq(ctx, 64, null_mut(), null_mut(), 0);
            let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), ALL_ACCESS);
            assert!(!pd.is_null() && !scq.is_null() && !rcq.is_null() && !mr.is_null(), "errno {}", errno());
            Side { ctx, model, pd, scq, rcq, mr, buf, gid_index }
        }
    }

    pub fn lkey(&self) -> u32 {
        // SAFETY: a live MR.
        unsafe { (*self.mr).lkey }
    }

    pub fn rkey(&self) -> u32 {
        // SAFETY: a live MR.
        unsafe { (*self.mr).rkey }
    }

    /// The address of byte `off` of the buffer.
    pub fn addr(&self, off: usize) -> u64 {
        self.buf.as_ptr() as u64 + off as u64
    }

    pub fn sge(&self, off: usize, len: u32) -> ibv_sge {
        ibv_sge { addr: self.addr(off), length: len, lkey: self.lkey() }
    }

    pub fn gid(&self) -> [u8; 16] {
        let mut g = ibv_gid::default();
        // SAFETY: an open context.
        assert_eq!(unsafe { ibv_query_gid(self.ctx, 1, i32::from(self.gid_index), &mut g) }, 0);
        g.raw
    }

    /// The address vector towards `to`.
    pub fn ah_attr(&self, to: &Side) -> ibv_ah_attr {
        let grh = ibv_global_route {
            dgid: ibv_gid { raw: to.gid() },
            sgid_index: self.gid_index,
            hop_limit: 64,
            ..Default::default()
        };
        ibv_ah_attr { grh, is_global: 1, port_num: 1, ..Default::default() }
    }

    /// A QP of `qp_type` on this side's PD and CQs; `srq` may be NULL.
    pub fn qp(&self, qp_type: u32, srq: *mut ibv_srq) -> *mut ibv_qp {
        let cap =
            ibv_qp_cap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 4, max_recv_sge: 4, max_inline_data: 64 };
        let mut a = ibv_qp_init_attr {
            qp_context: null_mut(),
            send_cq: self.scq,
            recv_cq: self.rcq,
            srq,
            cap,
            qp_type,
            sq_sig_all: 0,
        };
        // SAFETY: this side's PD and CQs.
        let qp = unsafe { ibv_create_qp(self.pd, &mut a) };
        assert!(!qp.is_null(), "ibv_create_qp: errno {}", errno());
        qp
    }

    /// Deregisters, destroys and closes everything of this side (its QPs are gone).
    pub fn close(self) {
        // SAFETY: objects of this side, no longer used.
        unsafe {
            assert_eq!(ibv_dereg_mr(self.mr), 0);
            assert_eq!(ibv_destroy_cq(self.scq), 0);
            assert_eq!(ibv_destroy_cq(self.rcq), 0);
            assert_eq!(ibv_dealloc_pd(self.pd), 0);
            assert_eq!(ibv_close_device(self.ctx), 0);
        }
    }
}

/// The two ends of `port`: on the loopback port two contexts of device 0, on the RoCE port
/// devices 1 and 2.
pub fn sides(port: Port) -> (Side, Side) {
    match port {
        Port::Loopback => (Side::open(0, 0), Side::open(0, 0)),
        Port::Roce => (Side::open(1, 1), Side::open(2, 1)),
    }
}

pub fn modify(qp: *mut ibv_qp, a: &mut ibv_qp_attr, mask: u32) -> i32 {
    // SAFETY: a live QP of this library.
    unsafe { ibv_modify_qp(qp, a, mask as i32) }
}

pub const STATE: u32 = 1;
const INIT_MASK: u32 = STATE | 1 << 3 | 1 << 4 | 1 << 5;
const RTR_MASK: u32 = STATE | 1 << 7 | 1 << 8 | 1 << 12 | 1 << 15 | 1 << 17 | 1 << 20;
const RTS_MASK: u32 = STATE | 1 << 9 | 1 << 10 | 1 << 11 | 1 << 13 | 1 << 16;
const UD_INIT_MASK: u32 = STATE | 1 << 4 | 1 << 5 | 1 << 6;
const UD_RTS_MASK: u32 = STATE | 1 << 16;

/// Brings RC `qp` of `from` to RTS towards `remote` of `to`, as `ibv_rc_pingpong` does (short
/// ACK timeout: a destroy lingers four of them on the RoCE port).
pub fn connect(from: &Side, qp: *mut ibv_qp, to: &Side, remote: *mut ibv_qp) {
    let mut a = ibv_qp_attr { qp_state: 1, port_num: 1, qp_access_flags: 0xe, ..Default::default() };
    assert_eq!(modify(qp, &mut a, INIT_MASK), 0, "INIT");
    // SAFETY: a live QP.
    let dest_qp_num = unsafe { (*remote).qp_num };
    let ah_attr = from.ah_attr(to);
    let mut a = ibv_qp_attr {
        qp_state: 2,
        path_mtu: 3,
        dest_qp_num,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        ah_attr,
        ..Default::default()
    };
    assert_eq!(modify(qp, &mut a, RTR_MASK), 0, "RTR");
    let mut a =
        ibv_qp_attr { qp_state: 3, timeout: 10, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 4, ..Default::default() };
    assert_eq!(modify(qp, &mut a, RTS_MASK), 0, "RTS");
}

/// The Q_Key of every UD QP here.
pub const QKEY: u32 = 0x1111_2222;

/// Brings UD `qp` to RTS.
pub fn ud_rts(qp: *mut ibv_qp) {
    let mut a = ibv_qp_attr { qp_state: 1, port_num: 1, qkey: QKEY, ..Default::default() };
    assert_eq!(modify(qp, &mut a, UD_INIT_MASK), 0, "UD INIT");
    let mut a = ibv_qp_attr { qp_state: 2, ..Default::default() };
    assert_eq!(modify(qp, &mut a, STATE), 0, "UD RTR");
    let mut a = ibv_qp_attr { qp_state: 3, ..Default::default() };
    assert_eq!(modify(qp, &mut a, UD_RTS_MASK), 0, "UD RTS");
}

/// Moves `qp` to ERR.
pub fn to_error(qp: *mut ibv_qp) {
    let mut a = ibv_qp_attr { qp_state: 6, ..Default::default() };
    assert_eq!(modify(qp, &mut a, STATE), 0, "ERR");
}

/// Two RC QPs, `qa` on `a` and `qb` on `b`, connected to each other.
pub struct RcPair {
    pub a: Side,
    pub b: Side,
    pub qa: *mut ibv_qp,
    pub qb: *mut ibv_qp,
}

impl RcPair {
    pub fn new(port: Port) -> Self {
        let (a, b) = sides(port);
        let (qa, qb) = (a.qp(IBV_QPT_RC, null_mut()), b.qp(IBV_QPT_RC, null_mut()));
        connect(&a, qa, &b, qb);
        connect(&b, qb, &a, qa);
        RcPair { a, b, qa, qb }
    }

    pub fn close(self) {
        destroy_qp(self.qa);
        destroy_qp(self.qb);
        self.a.close();
        self.b.close();
    }
}

pub fn destroy_qp(qp: *mut ibv_qp) {
    // SAFETY: a live QP of this library, not used after.
    assert_eq!(unsafe { ibv_destroy_qp(qp) }, 0);
}

pub fn qpn(qp: *mut ibv_qp) -> u32 {
    // SAFETY: a live QP.
    unsafe { (*qp).qp_num }
}

/// A signaled send WR of `opcode` over `sg` (`num_sge` of them).
pub fn send_wr(wr_id: u64, opcode: u32, sg: *mut ibv_sge, num_sge: i32) -> ibv_send_wr {
    // SAFETY: all-zero is a valid `ibv_send_wr` (NULL pointers).
    let mut w: ibv_send_wr = unsafe { std::mem::zeroed() };
    (w.wr_id, w.sg_list, w.num_sge, w.opcode, w.send_flags) = (wr_id, sg, num_sge, opcode, IBV_SEND_SIGNALED);
    w
}

/// Posts `wr` (a chain) through the ops table, as the header's `ibv_post_send`.
pub fn post_send(qp: *mut ibv_qp, wr: &mut ibv_send_wr) -> i32 {
    let mut bad = null_mut();
    // SAFETY: a live QP; the chain is ours.
    unsafe { ((*(*qp).context).ops.post_send.unwrap())(qp, wr, &mut bad) }
}

/// Posts one receive WR over `sg` (`num_sge` of them) through the ops table.
pub fn post_recv(qp: *mut ibv_qp, wr_id: u64, sg: *mut ibv_sge, num_sge: i32) -> i32 {
    let mut w = ibv_recv_wr { wr_id, next: null_mut(), sg_list: sg, num_sge };
    let mut bad = null_mut();
    // SAFETY: a live QP; the WR is ours.
    unsafe { ((*(*qp).context).ops.post_recv.unwrap())(qp, &mut w, &mut bad) }
}

pub fn poll(cq: *mut ibv_cq, wc: &mut [ibv_wc]) -> i32 {
    // SAFETY: a live CQ; `wc` has room for its length.
    unsafe { ((*(*cq).context).ops.poll_cq.unwrap())(cq, wc.len() as i32, wc.as_mut_ptr()) }
}

/// Polls until `n` completions came (within [`WAIT`]).
pub fn poll_n(cq: *mut ibv_cq, n: usize) -> Vec<ibv_wc> {
    let mut out = Vec::new();
    let mut wc = [ibv_wc::default(); 16];
    let done = ib_core::time::poll_until(WAIT, || {
        let k = poll(cq, &mut wc);
        assert!(k >= 0, "poll: {k}");
        out.extend_from_slice(&wc[..k as usize]);
        out.len() >= n
    });
    assert!(
        done,
        "only {} of {n} completions: {:?}",
        out.len(),
        out.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>()
    );
    out
}

/// Polls for `within` and returns whatever came.
pub fn poll_for(cq: *mut ibv_cq, within: Duration) -> Vec<ibv_wc> {
    let mut out = Vec::new();
    let mut wc = [ibv_wc::default(); 16];
    ib_core::time::poll_until(within, || {
        let k = poll(cq, &mut wc);
        out.extend_from_slice(&wc[..k.max(0) as usize]);
        false
    });
    out
}

/// The next async event of `ctx` within `within`, acknowledged: (type, element pointer).
pub fn async_event(ctx: *mut ibv_context, within: Duration) -> Option<(u32, *mut libc::c_void)> {
    let mut ev = ibv_async_event { element: ibv_async_event_element { port_num: -1 }, event_type: 99 };
    // SAFETY: an open context; its async fd made non-blocking; `ev` is writable.
    unsafe {
        let fd = (*ctx).async_fd;
        libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK);
        let mut got = None;
        ib_core::time::poll_until(within, || {
            if ibv_get_async_event(ctx, &mut ev) == 0 {
                got = Some((ev.event_type, ev.element.srq));
                ibv_ack_async_event(&mut ev);
                return true;
            }
            false
        });
        got
    }
}
