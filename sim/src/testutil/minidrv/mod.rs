//! A mini-driver for tests: allocates guest memory, writes a DSR, posts raw commands through the
//! command slot and REQUEST, builds page directories, posts WQEs and rings UAR doorbells. It uses
//! only the device's public surface and the ABI, as a driver would. Its waits are bounded
//! ([`WAIT`]); it panics on what a test must not see (it is for tests only).

use crate::{SimConfig, SimDevice, UAR_BASE_PFN};
use pvrdma_abi::cmd::*;
use pvrdma_abi::dsr::{Dsr, RingPageInfo};
use pvrdma_abi::regs::*;
use pvrdma_abi::uar::*;
use pvrdma_abi::verbs::{access, qp_attr_mask as m, qp_state, qp_type, Gid, QpAttr};
use pvrdma_abi::wqe::*;
mod datapath;

use std::sync::Arc;
use std::time::Duration;
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// The page size of guest memory.
pub const PAGE: u64 = 4096;
/// The bound of every wait.
pub const WAIT: Duration = Duration::from_secs(2);
/// The GID the mini-driver binds at index 0.
pub const GID0: Gid = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x12, 0x34, 0x56];

/// A ring the device produces into (CQ, async, notification): ring state page and entry base.
#[derive(Clone, Copy, Debug)]
pub struct DevRing {
    pub state: u64,
    pub entries: u64,
    pub elems: u32,
    pub size: u64,
}

/// A CQ the mini-driver created: its handle and its ring.
#[derive(Clone, Copy, Debug)]
pub struct TestCq {
    pub handle: u32,
    pub ring: DevRing,
}

/// A QP the mini-driver created: its QPN, its ring-state page, its SQ and RQ (first page,
/// depth, stride) and its doorbell page.
#[derive(Clone, Copy, Debug)]
pub struct TestQp {
    pub qpn: u32,
    pub state: u64,
    pub sq: u64,
    pub rq: u64,
    pub swr: u32,
    pub rwr: u32,
    pub sstride: u64,
    pub rstride: u64,
    /// UAR page the driver rings this QP's doorbell on.
    pub page: u32,
}

/// An MR the mini-driver registered.
#[derive(Clone, Copy, Debug)]
pub struct TestMr {
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
    /// Virtual address of the first byte.
    pub va: u64,
    /// Device address of the first byte.
    pub iova: u64,
    /// Bytes.
    pub len: u64,
}

/// The retry attributes of a connection: the requester's `timeout`, `retry_cnt`, `rnr_retry`
/// (RTS) and the responder's `min_rnr_timer` (RTR).
#[derive(Clone, Copy, Debug)]
pub struct Retries {
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
}

/// The mini-driver: a device, its DSR, its command and response slots and its device rings.
pub struct Drv {
    pub dev: Arc<SimDevice>,
    pub dsr: u64,
    pub cmd_slot: u64,
    pub resp_slot: u64,
    pub async_ring: DevRing,
    pub cq_ring: DevRing,
    cookie: u64,
}

impl Drv {
    /// A device with a loaded, activated DSR whose device rings have 2 pages each.
    pub fn new(cfg: SimConfig) -> Self {
        Self::new_on(SimDevice::new(cfg))
    }

    /// Loads a fresh DSR on `dev` (after a RESET) and activates it.
    pub fn new_on(dev: Arc<SimDevice>) -> Self {
        let d = Self::load(dev, 2);
        d.dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
        assert_eq!(d.dev.reg_read(REG_ERR), 0);
        d
    }

    /// Allocates and writes a DSR with `ring_pages` pages per device ring and loads it.
    pub fn load(dev: Arc<SimDevice>, ring_pages: u32) -> Self {
        let mem = dev.mem();
        let dsr = mem.alloc(PAGE).unwrap();
        let cmd_slot = mem.alloc(PAGE).unwrap();
        let resp_slot = mem.alloc(PAGE).unwrap();
        let (async_info, async_ring) = Self::dev_ring(&dev, ring_pages, 8);
        let (cq_info, cq_ring) = Self::dev_ring(&dev, ring_pages, 4);
        let mut d = Dsr::new_zeroed();
        d.driver_version = U32::new(pvrdma_abi::PVRDMA_ROCEV1_VERSION);
        d.cmd_slot_dma = U64::new(cmd_slot);
        d.resp_slot_dma = U64::new(resp_slot);
        d.async_ring_pages = async_info;
        d.cq_ring_pages = cq_info;
        d.uar_pfn = U64::new(UAR_BASE_PFN);
        mem.write(dsr, d.as_bytes()).unwrap();
        dev.reg_write(REG_DSRLOW, dsr as u32);
        dev.reg_write(REG_DSRHIGH, (dsr >> 32) as u32);
        Self { dev, dsr, cmd_slot, resp_slot, async_ring, cq_ring, cookie: 0x1000 }
    }

    fn dev_ring(dev: &SimDevice, pages: u32, size: u64) -> (RingPageInfo, DevRing) {
        let (dir, base) = paged(dev, u64::from(pages));
        let info = RingPageInfo { num_pages: U32::new(pages), reserved: U32::ZERO, pdir_dma: U64::new(dir) };
        let elems = ((u64::from(pages) - 1) * PAGE / size) as u32;
        (info, DevRing { state: base, entries: base + PAGE, elems, size })
    }

    /// A fresh cookie (the request header's `response`, which the device echoes).
    pub fn next_cookie(&mut self) -> u64 {
        self.cookie += 1;
        self.cookie
    }

    /// Posts `req` and returns its response and the `err` byte, checking ack, cookie, one
    /// vector-0 interrupt, and ERR = -err.
    pub fn post<C: CmdRequest>(&mut self, mut req: C) -> (C::Response, u8) {
        let cookie = self.next_cookie();
        req.hdr_mut().response = U64::new(cookie);
        req.hdr_mut().cmd = U32::new(C::OPCODE);
        let (resp, hdr) = self.post_raw(req.as_bytes(), core::mem::size_of::<C::Response>());
        assert_eq!(hdr.ack.get(), ack_for(C::OPCODE), "ack of opcode {}", C::OPCODE);
        assert_eq!(hdr.response.get(), cookie, "cookie of opcode {}", C::OPCODE);
        let resp = C::Response::read_from_bytes(&resp).unwrap();
        (resp, hdr.err)
    }

    /// Posts `req` and returns its response, asserting success.
    pub fn ok<C: CmdRequest>(&mut self, req: C) -> C::Response {
        let (resp, err) = self.post(req);
        assert_eq!(err, 0, "opcode {} failed", C::OPCODE);
        resp
    }

    /// Posts `req` and returns the errno it failed with.
    pub fn err<C: CmdRequest>(&mut self, req: C) -> u8 {
        self.post(req).1
    }

    /// Writes raw bytes to the command slot, rings REQUEST, and returns `len` response bytes and
    /// the response header.
    pub fn post_raw(&mut self, bytes: &[u8], len: usize) -> (Vec<u8>, RespHdr) {
        let (resp, irqs) = self.post_unchecked(bytes, len);
        assert_eq!(irqs, 1, "one command interrupt");
        let hdr = RespHdr::read_from_prefix(&resp).unwrap().0;
        let expect_err = pvrdma_abi::errno::reg_value(hdr.err);
        assert_eq!(self.dev.reg_read(REG_ERR), expect_err);
        (resp, hdr)
    }

    /// Zeroes both slots, writes `bytes` (at most a slot's) to the command slot, rings REQUEST
    /// and takes the command interrupts; returns the response slot's first `len` bytes (at least
    /// a header's) and the command interrupts the REQUEST raised, checking nothing: for requests
    /// a device may leave unanswered (a Broken device, a hostile request).
    pub fn post_unchecked(&self, bytes: &[u8], len: usize) -> (Vec<u8>, u64) {
        let mem = self.dev.mem();
        let len = len.max(core::mem::size_of::<RespHdr>());
        mem.zero(self.resp_slot, len.max(64) as u64).unwrap();
        mem.zero(self.cmd_slot, SLOT_SIZE as u64).unwrap();
        mem.write(self.cmd_slot, &bytes[..bytes.len().min(SLOT_SIZE)]).unwrap();
        let before = self.dev.vectors().raised(0);
        self.dev.reg_write(REG_REQUEST, 0);
        let irqs = self.dev.vectors().raised(0) - before;
        self.dev.vectors().wait(0, Duration::ZERO);
        let mut resp = vec![0u8; len];
        mem.read(self.resp_slot, &mut resp).unwrap();
        (resp, irqs)
    }

    pub fn bind_gid(&mut self, index: u32, gid: Gid) {
        let gid_type = pvrdma_abi::dsr::GID_TYPE_FLAG_ROCE_V1;
        let (mtu, vlan) = (U32::new(1024), U32::new(0xfff));
        self.ok(CreateBind { index: U32::new(index), new_gid: gid, gid_type, mtu, vlan, ..Default::default() });
    }

    pub fn create_uc(&mut self, page: u32) -> u32 {
        let pfn = (UAR_BASE_PFN + u64::from(page)) as u32;
        self.ok(CreateUc { pfn: U32::new(pfn), ..Default::default() }).ctx_handle.get()
    }

    pub fn create_pd(&mut self, ctx: u32) -> u32 {
        self.ok(CreatePd { ctx_handle: U32::new(ctx), ..Default::default() }).pd_handle.get()
    }

    /// A CQ request for `cqe` entries over freshly allocated pages (not posted).
    pub fn cq_request(&self, ctx: u32, cqe: u32) -> (CreateCq, DevRing) {
        let pages = 1 + (u64::from(cqe) * 64).div_ceil(PAGE);
        let (dir, base) = paged(&self.dev, pages);
        let req = CreateCq {
            pdir_dma: U64::new(dir),
            ctx_handle: U32::new(ctx),
            cqe: U32::new(cqe),
            nchunks: U32::new(pages as u32),
            ..Default::default()
        };
        (req, DevRing { state: base, entries: base + PAGE, elems: cqe, size: 64 })
    }

    pub fn create_cq(&mut self, ctx: u32, cqe: u32) -> TestCq {
        let (req, ring) = self.cq_request(ctx, cqe);
        let resp = self.ok(req);
        assert_eq!(resp.cqe.get(), cqe);
        TestCq { handle: resp.cq_handle.get(), ring }
    }

    /// A QP request (RC, `wr` entries each way, `sge` SGEs each) over fresh pages (not posted).
    pub fn qp_request(&self, pd: u32, scq: u32, rcq: u32, wr: u32, sge: u32) -> (CreateQp, TestQp) {
        let sstride = u64::from(sq_wqe_stride(sge).expect("small SGE count"));
        let rstride = u64::from(rq_wqe_stride(sge).expect("small SGE count"));
        let sp = (u64::from(wr) * sstride).div_ceil(PAGE);
        let rp = (u64::from(wr) * rstride).div_ceil(PAGE);
        let total = 1 + sp + rp;
        let (dir, base) = paged(&self.dev, total);
        let req = CreateQp {
            pdir_dma: U64::new(dir),
            pd_handle: U32::new(pd),
            send_cq_handle: U32::new(scq),
            recv_cq_handle: U32::new(rcq),
            max_send_wr: U32::new(wr),
            max_recv_wr: U32::new(wr),
            max_send_sge: U32::new(sge),
            max_recv_sge: U32::new(sge),
            total_chunks: U16::new(total as u16),
            send_chunks: U16::new(sp as u16),
            qp_type: qp_type::RC,
            ..Default::default()
        };
        let qp = TestQp {
            qpn: 0,
            state: base,
            sq: base + PAGE,
            rq: base + (1 + sp) * PAGE,
            swr: wr,
            rwr: wr,
            sstride,
            rstride,
            page: 0,
        };
        (req, qp)
    }

    pub fn create_qp(&mut self, pd: u32, scq: u32, rcq: u32, wr: u32) -> TestQp {
        let (req, mut qp) = self.qp_request(pd, scq, rcq, wr, 2);
        let resp = self.ok(req);
        qp.qpn = resp.qpn.get();
        assert!(qp.qpn >= 2);
        qp
    }

    pub fn modify(&mut self, qpn: u32, mask: u32, attrs: QpAttr) -> u8 {
        self.err(ModifyQp { qp_handle: U32::new(qpn), attr_mask: U32::new(mask), attrs, ..Default::default() })
    }

    /// RESET -> INIT -> RTR -> RTS towards `dest`, with GID index 0 both ways and the retry
    /// attributes of [`Drv::connect_access`].
    pub fn connect(&mut self, qp: u32, dest: u32) {
        self.connect_access(qp, dest, 0);
    }

    /// [`Drv::connect`] with `qp_access_flags` `access`, `rnr_retry` 7 (for ever) and
    /// `min_rnr_timer` 12 (0.64 ms), as the verbs core's `modify_to_rtr`/`modify_to_rts` set
    /// them, and `retry_cnt` 7 with `timeout` 1 (the model's 10 ms floor), so a request nobody
    /// answers fails within 80 ms.
    pub fn connect_access(&mut self, qp: u32, dest: u32, access: u32) {
        self.connect_with(qp, dest, access, Retries { timeout: 1, retry_cnt: 7, rnr_retry: 7, min_rnr_timer: 12 });
    }

    /// [`Drv::connect`] with `qp_access_flags` `access` and the retry attributes `r`.
    pub fn connect_with(&mut self, qp: u32, dest: u32, access: u32, r: Retries) {
        for (mask, attrs) in connect_steps(dest, access, r) {
            assert_eq!(self.modify(qp, mask, attrs), 0);
        }
    }

    /// A `len`-byte MR over one page ([`aliased_pdir`]), with LOCAL_WRITE; returns its lkey.
    pub fn aliased_mr(&mut self, pd: u32, len: u64) -> u32 {
        let (dir, _) = aliased_pdir(&self.dev);
        self.ok(CreateMr {
            length: U64::new(len),
            pdir_dma: U64::new(dir),
            pd_handle: U32::new(pd),
            access_flags: U32::new(access::LOCAL_WRITE),
            nchunks: U32::new((len / PAGE) as u32),
            ..Default::default()
        })
        .lkey
        .get()
    }

    /// An MR of `len` bytes whose first byte is at virtual address `va` (any alignment).
    pub fn create_mr(&mut self, pd: u32, va: u64, len: u64, access: u32) -> TestMr {
        let off = va % PAGE;
        let pages = (off + len).div_ceil(PAGE);
        let (dir, base) = paged(&self.dev, pages);
        let resp = self.ok(CreateMr {
            start: U64::new(va),
            length: U64::new(len),
            pdir_dma: U64::new(dir),
            pd_handle: U32::new(pd),
            access_flags: U32::new(access),
            nchunks: U32::new(pages as u32),
            ..Default::default()
        });
        assert_ne!(resp.lkey.get(), resp.rkey.get());
        let (handle, lkey, rkey) = (resp.mr_handle.get(), resp.lkey.get(), resp.rkey.get());
        TestMr { handle, lkey, rkey, va, iova: base + off, len }
    }
}

/// Good RTR attributes towards `dest`: a global route from GID [`GID0`] (hop limit 64), port 1,
/// MTU 1024; with [`RTR_MASK`].
pub fn rtr(dest: u32) -> QpAttr {
    let mut a = QpAttr::new_zeroed();
    a.qp_state = U32::new(qp_state::RTR);
    a.dest_qp_num = U32::new(dest);
    a.path_mtu = U32::new(3);
    a.ah_attr.grh.dgid = GID0;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.ah_flags = pvrdma_abi::verbs::AH_GRH;
    a.ah_attr.port_num = 1;
    a
}

/// The three MODIFY_QPs (attribute mask, attributes) of [`Drv::connect_with`]: RESET -> INIT
/// with `qp_access_flags` `access`, INIT -> RTR towards `dest` with GID index 0 and
/// `min_rnr_timer`, RTR -> RTS with the requester's retry attributes of `r`.
pub fn connect_steps(dest: u32, access: u32, r: Retries) -> [(u32, QpAttr); 3] {
    let mut a = QpAttr::new_zeroed();
    a.qp_access_flags = U32::new(access);
    a.qp_state = U32::new(qp_state::INIT);
    a.port_num = 1;
    let init = (m::STATE | m::PORT | m::PKEY_INDEX | m::ACCESS_FLAGS, a);
    a.qp_state = U32::new(qp_state::RTR);
    a.dest_qp_num = U32::new(dest);
    a.path_mtu = U32::new(3);
    a.ah_attr.grh.dgid = GID0;
    a.ah_attr.grh.sgid_index = 0;
    a.ah_attr.ah_flags = pvrdma_abi::verbs::AH_GRH;
    a.ah_attr.port_num = 1;
    a.min_rnr_timer = r.min_rnr_timer;
    let rtr = (m::STATE | m::AV | m::DEST_QPN | m::PATH_MTU | m::RQ_PSN | m::MIN_RNR_TIMER, a);
    a.qp_state = U32::new(qp_state::RTS);
    (a.timeout, a.retry_cnt, a.rnr_retry) = (r.timeout, r.retry_cnt, r.rnr_retry);
    let rts = (m::STATE | m::SQ_PSN | m::TIMEOUT | m::RETRY_CNT | m::RNR_RETRY, a);
    [init, rtr, rts]
}

/// The attributes [`rtr`] sets.
pub const RTR_MASK: u32 = m::STATE | m::AV | m::DEST_QPN | m::PATH_MTU;

/// A QP in INIT (GID 0 bound, its own PD and CQ of 16), ready for attribute attacks.
pub fn init_qp(d: &mut Drv) -> u32 {
    d.bind_gid(0, GID0);
    let pd = d.create_pd(0);
    let cq = d.create_cq(0, 16).handle;
    let qp = d.create_qp(pd, cq, cq, 8).qpn;
    let mut a = QpAttr::new_zeroed();
    a.qp_state = U32::new(qp_state::INIT);
    a.port_num = 1;
    assert_eq!(d.modify(qp, m::STATE | m::PORT | m::PKEY_INDEX | m::ACCESS_FLAGS, a), 0);
    qp
}

/// A page directory naming one table 512 times, whose 512 entries name one page: 12 KiB of guest
/// memory that describes 1 GiB. Returns the directory and the page.
pub fn aliased_pdir(dev: &SimDevice) -> (u64, u64) {
    let mem = dev.mem();
    let (dir, table, page) = (mem.alloc(PAGE).unwrap(), mem.alloc(PAGE).unwrap(), mem.alloc(PAGE).unwrap());
    mem.write(dir, &table.to_le_bytes().repeat(512)).unwrap();
    mem.write(table, &page.to_le_bytes().repeat(512)).unwrap();
    (dir, page)
}

/// Allocates `pages` contiguous pages and a page directory listing them; returns (directory,
/// first page).
pub fn paged(dev: &SimDevice, pages: u64) -> (u64, u64) {
    let base = dev.mem().alloc(pages * PAGE).unwrap();
    let list: Vec<u64> = (0..pages).map(|i| base + i * PAGE).collect();
    (build_pdir(dev, &list), base)
}

/// Builds a page directory (directory page plus table pages) listing `pages`.
pub fn build_pdir(dev: &SimDevice, pages: &[u64]) -> u64 {
    let mem = dev.mem();
    let dir = mem.alloc(PAGE).unwrap();
    for (t, chunk) in pages.chunks(512).enumerate() {
        let table = mem.alloc(PAGE).unwrap();
        mem.write(dir + 8 * t as u64, &table.to_le_bytes()).unwrap();
        for (i, p) in chunk.iter().enumerate() {
            mem.write(table + 8 * i as u64, &p.to_le_bytes()).unwrap();
        }
    }
    dir
}

/// An SGE.
pub fn sge(addr: u64, length: u32, lkey: u32) -> Sge {
    Sge { addr: U64::new(addr), length: U32::new(length), lkey: U32::new(lkey) }
}

/// Two connected RC QPs on one PD, each with its own CQ (used for both its queues), plus a
/// send MR and a receive MR.
pub struct Pair {
    pub d: Drv,
    pub pd: u32,
    pub cq_a: TestCq,
    pub cq_b: TestCq,
    pub a: TestQp,
    pub b: TestQp,
    pub src: TestMr,
    pub dst: TestMr,
}

impl Pair {
    pub fn new(cfg: SimConfig, cqe: u32) -> Self {
        let mut d = Drv::new(cfg);
        d.bind_gid(0, GID0);
        let pd = d.create_pd(0);
        let cq_a = d.create_cq(0, cqe);
        let cq_b = d.create_cq(0, cqe);
        let a = d.create_qp(pd, cq_a.handle, cq_a.handle, 16);
        let b = d.create_qp(pd, cq_b.handle, cq_b.handle, 16);
        d.connect(a.qpn, b.qpn);
        d.connect(b.qpn, a.qpn);
        let src = d.create_mr(pd, 0x7000_0000_0123, 3 * PAGE, 0);
        let dst = d.create_mr(pd, 0x7100_0000_0456, 3 * PAGE, pvrdma_abi::verbs::access::LOCAL_WRITE);
        Self { d, pd, cq_a, cq_b, a, b, src, dst }
    }

    /// Sends `msg` from A (placed at offset `off` of the send MR) into B's receive MR at `off`.
    pub fn send_msg(&self, wr_id: u64, flags: u32, msg: &[u8], off: u64) {
        let d = &self.d;
        d.dev.mem().write(self.src.iova + off, msg).unwrap();
        d.send(&self.a, wr_id, flags, &[sge(self.src.va + off, msg.len() as u32, self.src.lkey)]);
    }

    /// Posts a receive of up to `len` bytes at `off` of B's receive MR.
    pub fn post_recv(&self, wr_id: u64, off: u64, len: u32) {
        self.d.recv(&self.b, wr_id, &[sge(self.dst.va + off, len, self.dst.lkey)]);
    }
}
