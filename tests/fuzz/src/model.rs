//! A minimal driver over the model (`pvrdma-sim`) for the two model targets: it writes a valid DSR,
//! activates the device, posts commands through the command slot and `REQUEST`, builds page
//! directories and rings UAR doorbells — the device's public surface only, as a guest driver.
//!
//! Set-up failures are model bugs and panic (the fuzzer reports them); everything the fuzz input
//! controls goes through [`Model::post_raw`], [`Model::mem`] and [`SimDevice::uar_write`], whose
//! outcomes are checked against the device's contract instead.

use pvrdma_abi::cmd::{self, ack_for, CmdRequest, RespHdr};
use pvrdma_abi::dsr::{Dsr, RingPageInfo};
use pvrdma_abi::regs::{DeviceCtl, REG_CTL, REG_DSRHIGH, REG_DSRLOW, REG_REQUEST};
use pvrdma_abi::verbs::{qp_attr_mask as m, qp_state, qp_type, Gid, QpAttr};
use pvrdma_abi::wqe::{rq_wqe_stride, sq_wqe_stride};
use pvrdma_sim::{DeviceState, Profile, SimConfig, SimDevice, UAR_BASE_PFN};
use std::sync::Arc;
use std::time::Duration;
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// Bytes of a page.
pub const PAGE: u64 = 4096;
/// Bytes of guest memory the fuzzed model may hand out: small, so a run that grows it is seen.
pub const MEM_LIMIT: u64 = 64 << 20;
/// The GID bound at index 0.
pub const GID0: Gid = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x12, 0x34, 0x56];
/// Bound on the port going idle after a doorbell (the model delivers on the ringing thread at
/// link latency 0; anything near this bound is a hang).
pub const SETTLE: Duration = Duration::from_secs(5);

/// A model configuration for fuzzing: the default one with [`MEM_LIMIT`] bytes of guest memory and
/// small wire budgets.
pub fn config() -> SimConfig {
    SimConfig {
        mem_limit: MEM_LIMIT,
        qp_bytes_in_flight: 1 << 20,
        device_packets_in_flight: 256,
        device_bytes_in_flight: 4 << 20,
        ..SimConfig::default()
    }
}

/// What a command did, as the driver sees it in the response slot.
#[derive(Debug)]
pub struct Answer {
    /// The response header (`ack` 0 if the device wrote none).
    pub hdr: RespHdr,
    /// The whole response slot's first bytes (the largest response).
    pub bytes: Vec<u8>,
    /// Command interrupts raised by the request.
    pub irqs: u64,
}

/// A ring's memory: the ring-state page, then the entries.
#[derive(Clone, Copy, Debug)]
pub struct Ring {
    /// Device address of the ring-state page.
    pub state: u64,
    /// Device address of entry 0.
    pub entries: u64,
    /// Entries.
    pub elems: u32,
    /// Bytes per entry.
    pub stride: u64,
}

/// A QP as the driver made it.
#[derive(Clone, Copy, Debug)]
pub struct Qp {
    /// Its number (handle).
    pub qpn: u32,
    /// The ring-state page (SQ words at 0, RQ words at 8).
    pub state: u64,
    /// The send ring.
    pub sq: Ring,
    /// The receive ring.
    pub rq: Ring,
}

/// An MR as the driver made it.
#[derive(Clone, Copy, Debug)]
pub struct Mr {
    /// Its handle.
    pub handle: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
    /// Virtual address of byte 0.
    pub va: u64,
    /// Bytes.
    pub len: u64,
}

/// The model with a loaded, activated DSR.
pub struct Model {
    /// The device.
    pub dev: Arc<SimDevice>,
    /// Ring-state pages of the DSR's async-event and CQ-notification rings.
    pub event_rings: [u64; 2],
    cmd_slot: u64,
    resp_slot: u64,
    cookie: u64,
}

/// Bytes of the largest response (QUERY_QP's).
pub const MAX_RESPONSE: usize = core::mem::size_of::<cmd::QueryQpResp>();

impl Model {
    /// A new device of the IBTA profile with a valid DSR (device rings of two pages each),
    /// activated.
    pub fn new() -> Self {
        Self::with_profile(Profile::Ibta)
    }

    /// [`Model::new`] with `profile`.
    pub fn with_profile(profile: Profile) -> Self {
        Self::with_config(SimConfig { profile, ..config() })
    }

    /// [`Model::new`] with `cfg`.
    pub fn with_config(cfg: SimConfig) -> Self {
        let dev = SimDevice::new(cfg);
        let mem = dev.mem();
        let dsr = mem.alloc(PAGE).expect("DSR page");
        let cmd_slot = mem.alloc(PAGE).expect("command slot");
        let resp_slot = mem.alloc(PAGE).expect("response slot");
        let mut d = Dsr::new_zeroed();
        d.driver_version = U32::new(pvrdma_abi::PVRDMA_ROCEV1_VERSION);
        d.cmd_slot_dma = U64::new(cmd_slot);
        d.resp_slot_dma = U64::new(resp_slot);
        let (async_ring, async_state) = dev_ring(&dev, 2);
        let (cq_ring, cq_state) = dev_ring(&dev, 2);
        d.async_ring_pages = async_ring;
        d.cq_ring_pages = cq_ring;
        d.uar_pfn = U64::new(UAR_BASE_PFN);
        mem.write(dsr, d.as_bytes()).expect("DSR write");
        dev.reg_write(REG_DSRLOW, dsr as u32);
        dev.reg_write(REG_DSRHIGH, (dsr >> 32) as u32);
        dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
        assert_eq!(dev.state(), DeviceState::Active, "a valid DSR did not activate the device");
        Self { dev, event_rings: [async_state, cq_state], cmd_slot, resp_slot, cookie: 0x1000 }
    }

    /// Guest memory.
    pub fn mem(&self) -> &pvrdma_sim::mem::GuestMemory {
        self.dev.mem()
    }

    /// A fresh cookie.
    pub fn next_cookie(&mut self) -> u64 {
        self.cookie += 1;
        self.cookie
    }

    /// Zeroes the response slot, copies `bytes` into the command slot, writes `REQUEST` and
    /// reads the response back.
    pub fn post_raw(&mut self, bytes: &[u8]) -> Answer {
        let mem = self.dev.mem();
        mem.zero(self.resp_slot, MAX_RESPONSE as u64).expect("response slot");
        mem.zero(self.cmd_slot, cmd::SLOT_SIZE as u64).expect("command slot");
        mem.write(self.cmd_slot, &bytes[..bytes.len().min(cmd::SLOT_SIZE)]).expect("command slot");
        let before = self.dev.vectors().raised(0);
        self.dev.reg_write(REG_REQUEST, 0);
        let irqs = self.dev.vectors().raised(0) - before;
        self.dev.vectors().wait(0, Duration::ZERO);
        let mut out = vec![0u8; MAX_RESPONSE];
        mem.read(self.resp_slot, &mut out).expect("response slot");
        let hdr = RespHdr::read_from_prefix(&out).expect("header").0;
        Answer { hdr, bytes: out, irqs }
    }

    /// Posts a typed request and returns its response and `err`, checking the protocol.
    pub fn post<C: CmdRequest>(&mut self, mut req: C) -> (C::Response, u8) {
        let cookie = self.next_cookie();
        req.hdr_mut().response = U64::new(cookie);
        req.hdr_mut().cmd = U32::new(C::OPCODE);
        let a = self.post_raw(req.as_bytes());
        check_answer(&self.dev, C::OPCODE, cookie, &a, DeviceState::Active);
        let resp = C::Response::read_from_prefix(&a.bytes).expect("response").0;
        (resp, a.hdr.err)
    }

    /// Posts a request that must succeed (set-up).
    pub fn ok<C: CmdRequest>(&mut self, req: C) -> C::Response {
        let (resp, err) = self.post(req);
        assert_eq!(err, 0, "set-up command {} failed", cmd::opcode::name(C::OPCODE));
        resp
    }

    /// Allocates `pages` pages and a page directory listing them; returns (directory, first page).
    pub fn paged(&self, pages: u64) -> (u64, u64) {
        let base = self.mem().alloc(pages * PAGE).expect("ring pages");
        let list: Vec<u64> = (0..pages).map(|i| base + i * PAGE).collect();
        (build_pdir(&self.dev, &list), base)
    }

    /// A CQ of `cqe` entries of context `ctx`; returns (handle, ring).
    pub fn create_cq(&mut self, ctx: u32, cqe: u32) -> (u32, Ring) {
        let pages = 1 + (u64::from(cqe) * 64).div_ceil(PAGE);
        let (dir, base) = self.paged(pages);
        let resp = self.ok(cmd::CreateCq {
            pdir_dma: U64::new(dir),
            ctx_handle: U32::new(ctx),
            cqe: U32::new(cqe),
            nchunks: U32::new(pages as u32),
            ..Default::default()
        });
        let ring = Ring { state: base, entries: base + PAGE, elems: cqe, stride: 64 };
        (resp.cq_handle.get(), ring)
    }

    /// An RC QP of `wr` work requests of 2 SGEs each way, on PD `pd`, completing into `scq` and
    /// `rcq`.
    pub fn create_qp(&mut self, pd: u32, scq: u32, rcq: u32, wr: u32) -> Qp {
        let sstride = u64::from(sq_wqe_stride(2).expect("stride"));
        let rstride = u64::from(rq_wqe_stride(2).expect("stride"));
        let sp = (u64::from(wr) * sstride).div_ceil(PAGE);
        let rp = (u64::from(wr) * rstride).div_ceil(PAGE);
        let (dir, base) = self.paged(1 + sp + rp);
        let resp = self.ok(cmd::CreateQp {
            pdir_dma: U64::new(dir),
            pd_handle: U32::new(pd),
            send_cq_handle: U32::new(scq),
            recv_cq_handle: U32::new(rcq),
            max_send_wr: U32::new(wr),
            max_recv_wr: U32::new(wr),
            max_send_sge: U32::new(2),
            max_recv_sge: U32::new(2),
            total_chunks: U16::new((1 + sp + rp) as u16),
            send_chunks: U16::new(sp as u16),
            qp_type: qp_type::RC,
            ..Default::default()
        });
        Qp {
            qpn: resp.qpn.get(),
            state: base,
            sq: Ring { state: base, entries: base + PAGE, elems: wr, stride: sstride },
            rq: Ring { state: base + 8, entries: base + (1 + sp) * PAGE, elems: wr, stride: rstride },
        }
    }

    /// RESET -> INIT -> RTR -> RTS towards `dest` with GID index 0 (set-up: each step must
    /// succeed).
    pub fn connect(&mut self, qpn: u32, dest: u32) {
        assert_eq!(self.try_connect(qpn, dest), 0, "set-up MODIFY_QP of QP {qpn} failed");
    }

    /// [`Model::connect`] that stops at the first step the device refuses and returns its errno
    /// (0: connected). A QP can fail legitimately between steps: its CQ may overflow on the port
    /// thread meanwhile (with a link latency), which moves it to ERR.
    pub fn try_connect(&mut self, qpn: u32, dest: u32) -> u8 {
        let mut a = QpAttr::new_zeroed();
        let go = |model: &mut Self, state: u32, mask: u32, a: &mut QpAttr| {
            a.qp_state = U32::new(state);
            let req = cmd::ModifyQp {
                qp_handle: U32::new(qpn),
                attr_mask: U32::new(mask | m::STATE),
                attrs: *a,
                ..Default::default()
            };
            model.post(req).1
        };
        a.port_num = 1;
        a.qp_access_flags = U32::new(pvrdma_abi::verbs::access::LOCAL_WRITE | pvrdma_abi::verbs::access::REMOTE_WRITE);
        let err = go(self, qp_state::INIT, m::PORT | m::PKEY_INDEX | m::ACCESS_FLAGS, &mut a);
        if err != 0 {
            return err;
        }
        a.dest_qp_num = U32::new(dest);
        a.path_mtu = U32::new(pvrdma_abi::verbs::mtu::MTU_1024);
        a.ah_attr.grh.dgid = GID0;
        a.ah_attr.ah_flags = pvrdma_abi::verbs::AH_GRH;
        a.ah_attr.port_num = 1;
        let err = go(self, qp_state::RTR, m::AV | m::DEST_QPN | m::PATH_MTU | m::RQ_PSN, &mut a);
        if err != 0 {
            return err;
        }
        go(self, qp_state::RTS, m::SQ_PSN, &mut a)
    }

    /// An MR of `len` bytes at virtual address `va` over fresh pages, with `access`.
    pub fn create_mr(&mut self, pd: u32, va: u64, len: u64, access: u32) -> Mr {
        let pages = (va % PAGE + len).div_ceil(PAGE);
        let (dir, _) = self.paged(pages);
        let resp = self.ok(cmd::CreateMr {
            start: U64::new(va),
            length: U64::new(len),
            pdir_dma: U64::new(dir),
            pd_handle: U32::new(pd),
            access_flags: U32::new(access),
            nchunks: U32::new(pages as u32),
            ..Default::default()
        });
        Mr { handle: resp.mr_handle.get(), lkey: resp.lkey.get(), rkey: resp.rkey.get(), va, len }
    }

    /// Binds `gid` at `index`.
    pub fn bind_gid(&mut self, index: u32, gid: Gid) {
        // As Linux's driver binds: one RoCE v1 GID, MTU 1024 bytes, no VLAN (0xfff).
        self.ok(cmd::CreateBind {
            index: U32::new(index),
            new_gid: gid,
            mtu: U32::new(1024),
            vlan: U32::new(0xfff),
            gid_type: pvrdma_abi::dsr::GID_TYPE_FLAG_ROCE_V1,
            ..Default::default()
        });
    }

    /// A user context on UAR page `page`; returns its handle.
    pub fn create_uc(&mut self, page: u32) -> u32 {
        let pfn = (UAR_BASE_PFN + u64::from(page)) as u32;
        self.ok(cmd::CreateUc { pfn: U32::new(pfn), ..Default::default() }).ctx_handle.get()
    }

    /// A PD of context `ctx`.
    pub fn create_pd(&mut self, ctx: u32) -> u32 {
        self.ok(cmd::CreatePd { ctx_handle: U32::new(ctx), ..Default::default() }).pd_handle.get()
    }

    /// Waits (bounded) until the port has nothing in flight; a port that never gets there is a
    /// hang and panics.
    pub fn settle(&self) {
        assert!(self.dev.wait_port_idle(SETTLE), "the model's port did not go idle within {SETTLE:?}");
    }

    /// `CTL = RESET` (every object destroyed, the DSR forgotten): the device must end Inactive.
    pub fn reset(&self) {
        self.dev.reg_write(REG_CTL, DeviceCtl::Reset as u32);
        assert_eq!(self.dev.state(), DeviceState::Inactive, "RESET did not leave the device Inactive");
    }

    /// Checks the invariants every run ends with: guest memory within its limit.
    pub fn check_bounded(&self) {
        let used = self.mem().used();
        assert!(used <= MEM_LIMIT, "guest memory {used} beyond its limit {MEM_LIMIT}");
    }
}

impl Default for Model {
    fn default() -> Self {
        Self::new()
    }
}

/// The command protocol as the driver relies on it (design decision 10): a device that was
/// `before` (not Broken) answers every `REQUEST` with the opcode's ack, the request's cookie, and
/// exactly one command interrupt; a Broken one answers nothing. The one exception is QEMU 7.2's
/// RESIZE_CQ, which its profile leaves unanswered as QEMU does (no response, the interrupt
/// raised; the driver's probe reads that as "no RESIZE_CQ").
pub fn check_answer(dev: &SimDevice, opcode: u32, cookie: u64, a: &Answer, before: DeviceState) {
    let ack = a.hdr.ack.get();
    if ack == 0 {
        let broken = before == DeviceState::Broken || dev.state() == DeviceState::Broken;
        let unanswered = opcode == cmd::opcode::RESIZE_CQ && dev.config().profile == Profile::Qemu72;
        assert!(
            broken || unanswered,
            "no response to opcode {opcode:#x} from a device that is not Broken ({before:?})"
        );
        if !broken {
            assert_eq!(a.irqs, 1, "command interrupts for QEMU 7.2's unanswered RESIZE_CQ");
        }
        return;
    }
    assert_eq!(ack, expected_ack(dev, opcode), "ack of opcode {opcode:#x}");
    assert_eq!(a.hdr.response.get(), cookie, "cookie of opcode {opcode:#x}");
    assert_eq!(a.irqs, 1, "command interrupts for opcode {opcode:#x}");
}

/// The ack `opcode` gets: its own, except on the QEMU 7.2 profile, whose command table lists
/// QUERY_SRQ and MODIFY_SRQ swapped as QEMU 7.2's does (each answers with the other's ack).
fn expected_ack(dev: &SimDevice, opcode: u32) -> u32 {
    use cmd::opcode::{MODIFY_SRQ, QUERY_SRQ};
    match opcode {
        MODIFY_SRQ if dev.config().profile == Profile::Qemu72 => ack_for(QUERY_SRQ),
        QUERY_SRQ if dev.config().profile == Profile::Qemu72 => ack_for(MODIFY_SRQ),
        _ => ack_for(opcode),
    }
}

/// The DSR's description of a device-produced ring of `pages` pages (ring state + entries), and
/// its ring-state page.
fn dev_ring(dev: &SimDevice, pages: u32) -> (RingPageInfo, u64) {
    let base = dev.mem().alloc(u64::from(pages) * PAGE).expect("ring pages");
    let list: Vec<u64> = (0..u64::from(pages)).map(|i| base + i * PAGE).collect();
    let dir = build_pdir(dev, &list);
    (RingPageInfo { num_pages: U32::new(pages), reserved: U32::ZERO, pdir_dma: U64::new(dir) }, base)
}

/// Builds a page directory (directory page plus table pages) listing `pages`.
pub fn build_pdir(dev: &SimDevice, pages: &[u64]) -> u64 {
    let mem = dev.mem();
    let dir = mem.alloc(PAGE).expect("directory page");
    for (t, chunk) in pages.chunks(512).enumerate() {
        let table = mem.alloc(PAGE).expect("table page");
        mem.write(dir + 8 * t as u64, &table.to_le_bytes()).expect("directory entry");
        for (i, p) in chunk.iter().enumerate() {
            mem.write(table + 8 * i as u64, &p.to_le_bytes()).expect("table entry");
        }
    }
    dir
}
