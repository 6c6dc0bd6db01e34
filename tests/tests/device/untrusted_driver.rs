//! An untrusted driver: the model against a hostile one ("the model survives any driver").
//!
//! (From the issue 10 breaker rounds: each test failed while the bug it names was present.)

use ib_core::access;
use ib_core::{Device, SendWr, Sge, WrOpcode};
use pvrdma_abi::cmd::*;
use pvrdma_abi::regs::{DeviceCtl, REG_CTL};
use pvrdma_sim::mem::GuestMemory;
use pvrdma_sim::SimConfig;
use std::time::{Duration, Instant};
use tests::fixture::*;

const PAGE: u64 = 4096;

/// A page directory (one directory page, one table page) listing `pages`.
fn pdir(mem: &GuestMemory, pages: &[u64]) -> u64 {
    let dir = mem.alloc(PAGE).unwrap();
    let table = mem.alloc(PAGE).unwrap();
    mem.write(dir, &table.to_le_bytes()).unwrap();
    for (i, p) in pages.iter().enumerate() {
        mem.write(table + 8 * i as u64, &p.to_le_bytes()).unwrap();
    }
    dir
}

/// A full round trip through the device (commands, doorbells, the port thread, the CQ): proves
/// the model is alive and its port thread still delivers.
fn real_send_works(dev: &Device) {
    let pd = dev.alloc_pd().expect("alloc_pd after the attack");
    let cq = dev.create_cq(16, None).expect("create_cq after the attack");
    let p = pair(dev, &pd, (&cq, &cq), (&cq, &cq));
    p.recv_b(1, 0, 64);
    p.send_a(2, 0, b"still alive", WrOpcode::Send, false);
    let wcs = poll_n(&cq, 2);
    assert!(wcs.iter().all(|w| w.status == ib_core::WcStatus::Success), "{wcs:?}");
    let mut got = [0u8; 11];
    p.mr_b.read(0, &mut got).unwrap();
    assert_eq!(&got, b"still alive");
}

/// BUG: zero-length SENDs towards a QP that has no receive WQE posted are parked by the port
/// without any bound. `qp_bytes_in_flight` throttles on payload *bytes* only, and a zero-length
/// message adds 0 bytes, so `bytes_on_wire` stays 0 and the SQ drain never pauses: every doorbell
/// consumes the WQE, frees its slot for the driver, and adds a `Packet` (and an `InFlight` entry)
/// to the device's heap. A guest with a 16-entry SQ makes the model hold an unbounded number of
/// packets (and every later delivery scans the in-flight list linearly). The same holds with
/// 1-byte messages up to 64 Mi packets per QP with the default config.
/// Violates: "the model survives any driver … grows memory without bound" (SimConfig's own doc:
/// "so a hostile driver cannot make the model buffer unbounded memory").
#[test]
fn zero_length_sends_to_a_receiver_without_wqes_are_bounded() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let pd = dev.alloc_pd().unwrap();
    let cq_a = dev.create_cq(16, None).unwrap();
    let cq_b = dev.create_cq(16, None).unwrap();
    let p = pair(&dev, &pd, (&cq_a, &cq_a), (&cq_b, &cq_b));
    // b never posts a receive. a's SQ has 16 slots.
    const POSTS: u32 = 5000;
    for i in 0..POSTS {
        let wr =
            SendWr { wr_id: u64::from(i), sg_list: &[], opcode: WrOpcode::Send, signaled: false, solicited: false };
        if let Err(e) = p.a.post_send(&wr) {
            // A device that stops consuming the SQ makes the driver's ring full: that is the
            // bound we want.
            assert_eq!(e, ib_core::Error::QueueFull, "post {i}");
            break;
        }
    }
    assert!(sim.device().wait_port_idle(WAIT));
    let parked = sim.device().parked_packets(p.b.qpn());
    // The largest SQ the device allows has 1024 slots; a device that tracks more outstanding
    // sends than that for one QP is buffering on the driver's say-so.
    assert!(parked <= 1024, "the model buffers {parked} packets for one QP with a 16-deep SQ and no data");
}

/// Hostile commands through the driver's command channel: every one must be refused with an
/// error (never a panic, hang or broken device), and the device must still carry traffic.
#[test]
fn hostile_commands_are_refused_and_the_device_keeps_working() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device();
    let mem = d.mem();
    let pd = dev.alloc_pd().unwrap();
    let data = mem.alloc(4 * PAGE).unwrap();
    let good = pdir(mem, &[data, data + PAGE, data + 2 * PAGE, data + 3 * PAGE]);
    // A directory whose table is itself and whose entries are itself.
    let selfdir = mem.alloc(PAGE).unwrap();
    for i in 0..512u64 {
        mem.write(selfdir + 8 * i, &selfdir.to_le_bytes()).unwrap();
    }
    let dsr = u64::from(d.reg_read(pvrdma_abi::regs::REG_DSRHIGH)) << 32
        | u64::from(d.reg_read(pvrdma_abi::regs::REG_DSRLOW));
    let bad_dirs = [0u64, 1, u64::MAX, u64::MAX - PAGE + 1, good + 8, dsr, selfdir, data + 4 * PAGE];
    for (i, dir) in bad_dirs.iter().enumerate() {
        for (cqe, nchunks) in [(0, 2), (u32::MAX, 2), (1 << 31, u32::MAX), (16, 0), (16, u32::MAX)] {
            let r = pv(&dev).post_command(CreateCq {
                pdir_dma: (*dir).into(),
                cqe: cqe.into(),
                nchunks: nchunks.into(),
                ..Default::default()
            });
            assert!(r.is_err(), "CREATE_CQ dir #{i} cqe {cqe} nchunks {nchunks}: {r:?}");
        }
    }
    // A CQ over the self-referential directory: ring state, entries and directory all one page.
    // Accepting it is fine (QEMU would too); what matters is what happens next.
    let selfcq = pv(&dev).post_command(CreateCq {
        pdir_dma: selfdir.into(),
        cqe: 16.into(),
        nchunks: 2.into(),
        ..Default::default()
    });
    // MRs: wrapping, huge, zero, past the directory.
    let mrs = [
        (u64::MAX - 10, 100u64, 1u32, 0u32),
        (0, u64::MAX, 4, 0),
        (0, 0, 1, 0),
        (PAGE - 1, 4 * PAGE, 4, 0),
        (u64::MAX, 1, 1, access::ZERO_BASED),
        (0, 1 << 40, u32::MAX, 0),
    ];
    for (start, length, nchunks, acc) in mrs {
        let r = pv(&dev).post_command(CreateMr {
            start: start.into(),
            length: length.into(),
            pdir_dma: good.into(),
            pd_handle: pd.handle().into(),
            access_flags: acc.into(),
            nchunks: nchunks.into(),
            ..Default::default()
        });
        if start == u64::MAX && acc == access::ZERO_BASED {
            // Zero-based: the start is only a label; accepted or not, no panic.
            if let Ok(m) = r {
                pv(&dev).post_command(DestroyMr { mr_handle: m.mr_handle, ..Default::default() }).unwrap();
            }
            continue;
        }
        assert!(r.is_err(), "CREATE_MR start {start:#x} length {length:#x}: {r:?}");
    }
    // QPs with absurd geometry.
    let cq = dev.create_cq(16, None).unwrap();
    for (swr, rwr, ssge, rsge, total, send) in [
        (0u32, 16u32, 1u32, 1u32, 3u16, 1u16),
        (u32::MAX, 16, 1, 1, 3, 1),
        (16, 16, u32::MAX, 1, 3, 1),
        (16, 16, 1, 1, 0, 0),
        (16, 16, 1, 1, u16::MAX, u16::MAX),
        (16, 16, 1, 1, 2, 5),
        (1 << 31, 1 << 31, 4, 4, u16::MAX, 1),
    ] {
        let r = pv(&dev).post_command(CreateQp {
            pdir_dma: good.into(),
            pd_handle: pd.handle().into(),
            send_cq_handle: cq.handle().into(),
            recv_cq_handle: cq.handle().into(),
            max_send_wr: swr.into(),
            max_recv_wr: rwr.into(),
            max_send_sge: ssge.into(),
            max_recv_sge: rsge.into(),
            total_chunks: total.into(),
            send_chunks: send.into(),
            qp_type: pvrdma_abi::verbs::qp_type::RC,
            ..Default::default()
        });
        assert!(r.is_err(), "CREATE_QP {swr} {rwr} {ssge} {rsge} {total} {send}: {r:?}");
    }
    // Handles 0 / 0xffffff / u32::MAX / destroyed.
    for h in [0u32, 0x0080_0000, 0x00ff_ffff, u32::MAX] {
        assert!(pv(&dev).post_command(DestroyCq { cq_handle: h.into(), ..Default::default() }).is_err());
        assert!(pv(&dev).post_command(DestroyQp { qp_handle: h.into(), ..Default::default() }).is_err());
        assert!(pv(&dev).post_command(DestroyMr { mr_handle: h.into(), ..Default::default() }).is_err());
        assert!(pv(&dev).post_command(DestroyUc { ctx_handle: h.into(), ..Default::default() }).is_err());
        let mut m = ModifyQp { qp_handle: h.into(), ..Default::default() };
        m.attr_mask.set(u32::MAX);
        assert!(pv(&dev).post_command(m).is_err());
        assert!(pv(&dev).post_command(QueryQp { qp_handle: h.into(), ..Default::default() }).is_err());
        for page in 0..4u64 {
            for off in [0u64, 4, 8, 12, 4095] {
                for bits in [0u32, 0xc000_0000, 0x6000_0000, 0x8000_0000] {
                    d.uar_write(page * PAGE + off, bits | (h & 0x00ff_ffff));
                }
            }
        }
    }
    if let Ok(c) = selfcq {
        // Arm it and publish into it: the device writes its CQEs over its own directory.
        let arm = doorbell::DoorbellOp::CqArmNext.encode(c.cq_handle.get(), doorbell::ArmEncoding::Ibta).unwrap();
        d.uar_write(u64::from(arm.offset), arm.value);
        for _ in 0..40 {
            d.post_cqe(c.cq_handle.get(), &Default::default(), false);
        }
        let _ = pv(&dev).post_command(DestroyCq { cq_handle: c.cq_handle, ..Default::default() });
    }
    assert_eq!(d.state(), pvrdma_sim::DeviceState::Active);
    assert!(!dev.is_fatal(), "a refused command made the driver fatal");
    real_send_works(&dev);
}

/// A raw command with an opcode the device does not know (the trait is open on purpose: the
/// channel is how diagnostics post raw commands).
#[derive(
    Clone, Copy, Default, zerocopy::FromBytes, zerocopy::IntoBytes, zerocopy::Immutable, zerocopy::KnownLayout,
)]
#[repr(C)]
struct Unknown<const OP: u32> {
    hdr: CmdHdr,
    junk: [u8; 32],
}
impl<const OP: u32> CmdRequest for Unknown<OP> {
    const OPCODE: u32 = OP;
    type Response = NoopResp;
    fn hdr_mut(&mut self) -> &mut CmdHdr {
        &mut self.hdr
    }
}

#[test]
fn unknown_opcodes_are_refused_not_fatal() {
    let (dev, _sim) = hca::open_sim(SimConfig::default()).unwrap();
    let junk = [0xa5u8; 32];
    assert!(pv(&dev).post_command(Unknown::<{ opcode::MAX + 1 }> { hdr: CmdHdr::default(), junk }).is_err());
    assert!(pv(&dev).post_command(Unknown::<0x7fff_ffff> { hdr: CmdHdr::default(), junk }).is_err());
    assert!(pv(&dev).post_command(Unknown::<{ opcode::RESIZE_CQ }> { hdr: CmdHdr::default(), junk }).is_err());
    assert!(!dev.is_fatal());
    real_send_works(&dev);
}

/// RESET written behind the driver's back while two threads keep traffic flowing: the model must
/// not panic (its port thread must survive), and a new driver on the same function must work.
#[test]
fn reset_while_traffic_flows_keeps_the_port_alive() {
    let (dev, sim) = hca::open_sim_with(
        SimConfig::default(),
        hca::ProbeOptions { cmd_timeout: Duration::from_millis(200), ..Default::default() },
    )
    .unwrap();
    {
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(1024, None).unwrap();
        let p = pair(&dev, &pd, (&cq, &cq), (&cq, &cq));
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let sge = [Sge { addr: p.mr_b.addr(), length: 64, lkey: p.mr_b.lkey() }];
                    let _ = p.b.post_recv(&ib_core::RecvWr { wr_id: i, sg_list: &sge });
                    let sge = [Sge { addr: p.mr_a.addr(), length: 64, lkey: p.mr_a.lkey() }];
                    let wr =
                        SendWr { wr_id: i, sg_list: &sge, opcode: WrOpcode::Send, signaled: true, solicited: false };
                    let _ = p.a.post_send(&wr);
                    let mut wc = [ib_core::Wc::default(); 16];
                    let _ = cq.poll(&mut wc);
                    i += 1;
                }
            });
            std::thread::sleep(Duration::from_millis(100));
            sim.device().reg_write(REG_CTL, DeviceCtl::Reset as u32);
            std::thread::sleep(Duration::from_millis(100));
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
    }
    let name = dev.name();
    drop(dev);
    // The reset may have made the device fatal: the fatal fan-out's thread holds the old driver
    // instance until it is done, and its teardown resets the function. Probe again once it has
    // let go, as a new driver waits for the old one to release a PCI function.
    let t = Instant::now();
    while ib_core::device_list().iter().any(|d| d.name == name) && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let dev2 = hca::probe(std::sync::Arc::new(sim.clone()), Default::default()).expect("re-probe after RESET");
    real_send_works(&dev2);
}

/// Two threads writing REQUEST (with whatever is in the slot) while the driver posts commands,
/// and DSR reloads of the same DSR: the device serializes, never panics.
#[test]
fn concurrent_raw_requests_and_dsr_reloads_do_not_break_the_model() {
    let (dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let d = sim.device().clone();
    let deadline = Instant::now() + Duration::from_millis(300);
    std::thread::scope(|s| {
        for _ in 0..2 {
            let d = d.clone();
            s.spawn(move || {
                while Instant::now() < deadline {
                    d.reg_write(pvrdma_abi::regs::REG_REQUEST, 0);
                    let hi = d.reg_read(pvrdma_abi::regs::REG_DSRHIGH);
                    d.reg_write(pvrdma_abi::regs::REG_DSRHIGH, hi);
                }
            });
        }
    });
    assert_eq!(d.state(), pvrdma_sim::DeviceState::Active);
    // The driver may have seen garbage responses meanwhile; a fresh driver must work.
    drop(dev);
    let dev2 = hca::probe(std::sync::Arc::new(sim.clone()), Default::default()).expect("re-probe");
    real_send_works(&dev2);
}

/// BUG: `GuestMemory::alloc` rounds `len` up to whole pages with unchecked arithmetic. For a
/// length within a page of `u64::MAX` the rounded size wraps to 0 in release builds, so the call
/// *succeeds* and returns a zero-length region (debug builds panic instead). Violates decision 11
/// spirit ("validates … without panicking") and "the model survives any driver": an allocation
/// of 2^64 bytes must be refused (`Exhausted`).
#[test]
fn guest_memory_refuses_absurd_allocations() {
    let (_dev, sim) = hca::open_sim(SimConfig::default()).unwrap();
    let mem = sim.device().mem();
    for len in [u64::MAX, u64::MAX - 4094, 1 << 63] {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| mem.alloc(len)));
        match r {
            Ok(Err(_)) => {}
            Ok(Ok(iova)) => panic!("alloc({len:#x}) succeeded at {iova:#x}"),
            Err(_) => panic!("alloc({len:#x}) panicked"),
        }
    }
}
