//! `roce_rdma`: the model's side of the VM stage's RDMA WRITE / READ interop case against Linux
//! soft-RoCE (`tests/qemu/l1-rxe.sh`); its counterpart on rxe's side is `tests/rxe/rdma_peer.c`,
//! and the two speak the same TCP exchange (that file's header describes it), so either can face
//! a copy of itself.
//!
//! ```text
//! roce_rdma --roce ADDR [--roce ADDR]... [-g GIDIDX] [-p PORT] [-s LEN] [-m MTU] [-t SECONDS]
//!           [--link-loss P] [--link-seed N] [-a] [HOST]
//! ```
//! The model's device is opened with its RoCE v2 port on the `--roce` addresses
//! (`hca::open_sim`, which binds them as GIDs 1, 2, ... in order); `-g` (default 1) is the GID the
//! QP sends from. Without HOST it listens on the TCP port (default 18516), with HOST it connects.
//! One RC QP, one MR over `[wbuf 2*LEN | rbuf LEN | src LEN | dst LEN | scratch]`; as requester it
//! posts an RDMA WRITE (src to the peer's wbuf), an RDMA READ (the peer's rbuf to dst) and an RDMA
//! WRITE with immediate (src to the second half of the peer's wbuf), and as responder it keeps one
//! receive posted for the peer's immediate. It prints `CHECK read|write|write_imm ok|FAIL` for the
//! bytes it owns and exits 0 only when every completion succeeded and every check passed.
//! With `-a` (both sides give it) it then runs `rdma_peer.c`'s atomics part: a FETCH ADD and two
//! COMPARE SWAPs (one matching, one not) on the peer's atom words, and prints
//! `CHECK fetch_add|cmp_swap|fetch_add_memory|cmp_swap_memory ok|FAIL`.
#![forbid(unsafe_code)]

use hca::open_sim;
use ib_core::{
    access, AhAttr, Cq, Device, Gid, GlobalRoute, Mr, Mtu, Pd, Qp, QpAttr, QpAttrMask as M, QpCap, QpInitAttr, QpState,
    QpType, RecvWr, SendWr, Sge, UserBuffer, Wc, WcOpcode, WcStatus, WrOpcode,
};
use pvrdma_sim::roce::{LinkFaults, RoceConfig};
use pvrdma_sim::SimConfig;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const MSG_LEN: usize = 128;
const TOKEN_LEN: usize = 8;
const SCRATCH: usize = 64;
const IMM_BASE: u32 = 0x5eed_0000;
const WR_WRITE: u64 = 1;
const WR_READ: u64 = 2;
const WR_WRITE_IMM: u64 = 3;
const WR_RECV: u64 = 4;
const WR_FADD: u64 = 5;
const WR_CAS: u64 = 6;
const WR_CAS_MISS: u64 = 7;

/// The command line.
struct Opts {
    roce: Vec<IpAddr>,
    gid_idx: u32,
    port: u16,
    len: usize,
    mtu: u32,
    timeout: Duration,
    faults: LinkFaults,
    host: Option<String>,
    atomics: bool,
}

/// What each side tells the other (the 128-byte message of `rdma_peer.c`).
#[derive(Debug, PartialEq)]
struct Dest {
    qpn: u32,
    psn: u32,
    gid: Gid,
    va: u64,
    rkey: u32,
    len: u32,
    seed: u32,
}

fn main() -> ExitCode {
    let result = parse(std::env::args().skip(1)).and_then(|o| run(&o));
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            println!("roce_rdma: FAILED");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("roce_rdma: {e}");
            ExitCode::from(2)
        }
    }
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Opts, String> {
    let mut o = Opts {
        roce: Vec::new(),
        gid_idx: 1,
        port: 18516,
        len: 10000,
        mtu: 1024,
        timeout: Duration::from_secs(30),
        faults: LinkFaults::default(),
        host: None,
        atomics: false,
    };
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--roce" => o.roce.push(num(&val()?)?),
            "-g" => o.gid_idx = num(&val()?)?,
            "-p" => o.port = num(&val()?)?,
            "-s" => o.len = num(&val()?)?,
            "-m" => o.mtu = num(&val()?)?,
            "-t" => o.timeout = Duration::from_secs(num(&val()?)?),
            "--link-loss" => o.faults.loss = num(&val()?)?,
            "--link-seed" => o.faults.seed = num(&val()?)?,
            "-a" => o.atomics = true,
            s if s.starts_with('-') => return Err(format!("unknown option {s}")),
            _ if o.host.is_none() => o.host = Some(a),
            _ => return Err(format!("a second host {a}")),
        }
    }
    if o.roce.is_empty() || o.len == 0 || o.len > (u32::MAX as usize) / 8 || Mtu::from_bytes(o.mtu).is_none() {
        return Err("usage: roce_rdma --roce ADDR [-g GIDIDX] [-p PORT] [-s LEN] [-m MTU] [-t S] \
                    [--link-loss P] [--link-seed N] [-a] [HOST]"
            .into());
    }
    Ok(o)
}

fn num<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    s.parse().map_err(|_| format!("not a valid value: {s}"))
}

/// Byte `i` of the pattern a side with `seed` writes and serves (as `rdma_peer.c`'s).
fn pattern(seed: u32, i: usize) -> u8 {
    let i = i as u32;
    i.wrapping_mul(131).wrapping_add((i >> 8).wrapping_mul(7)).wrapping_add(seed.wrapping_mul(29)).wrapping_add(1) as u8
}

fn filled(seed: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| pattern(seed, i)).collect()
}

/// The first byte of `got` that differs from `seed`'s pattern.
fn first_diff(got: &[u8], seed: u32) -> Option<usize> {
    got.iter().enumerate().position(|(i, &b)| b != pattern(seed, i))
}

/// The atomics' values (as `rdma_peer.c`'s): each crosses a 32-bit boundary.
fn atom_init0(seed: u32) -> u64 {
    0x1111_0000_ffff_fff0 + u64::from(seed)
}
fn atom_add(seed: u32) -> u64 {
    0x0000_0001_0000_0010 + (u64::from(seed) << 36)
}
fn atom_init1(seed: u32) -> u64 {
    0xc0c0_0000_0000_0000 | u64::from(seed) << 16 | u64::from(seed)
}
fn atom_swap(seed: u32) -> u64 {
    0x5a5a_0000_0000_0000 | u64::from(seed) << 24 | u64::from(seed)
}

impl Dest {
    fn encode(&self) -> [u8; MSG_LEN] {
        let gid: String = self.gid.iter().map(|b| format!("{b:02x}")).collect();
        let text = format!(
            "RDMAPEER1 {:06x} {:06x} {gid} {:016x} {:08x} {:08x} {:04x}",
            self.qpn, self.psn, self.va, self.rkey, self.len, self.seed
        );
        let mut msg = [0u8; MSG_LEN];
        msg[..text.len()].copy_from_slice(text.as_bytes());
        msg
    }

    fn decode(msg: &[u8]) -> Result<Self, String> {
        let text = std::str::from_utf8(msg).map_err(|_| "peer message is not text")?.trim_end_matches('\0');
        let bad = || format!("malformed peer message {text:?}");
        let f: Vec<&str> = text.split(' ').collect();
        if f.len() != 8 || f[0] != "RDMAPEER1" || f[3].len() != 32 || !f[3].bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let hex32 = |s: &str| u32::from_str_radix(s, 16).map_err(|_| bad());
        let mut gid = [0u8; 16];
        for (i, g) in gid.iter_mut().enumerate() {
            *g = u8::from_str_radix(&f[3][2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Self {
            qpn: hex32(f[1])?,
            psn: hex32(f[2])?,
            gid,
            va: u64::from_str_radix(f[4], 16).map_err(|_| bad())?,
            rkey: hex32(f[5])?,
            len: hex32(f[6])?,
            seed: hex32(f[7])?,
        })
    }
}

/// The verbs objects of this side.
struct Side {
    qp: Qp,
    cq: Cq,
    mr: Mr,
    buf: UserBuffer,
    _pd: Pd,
}

/// Offsets of the regions in the MR.
struct Layout {
    len: usize,
}

impl Layout {
    fn wbuf(&self) -> usize {
        0
    }
    fn rbuf(&self) -> usize {
        2 * self.len
    }
    fn src(&self) -> usize {
        3 * self.len
    }
    fn dst(&self) -> usize {
        4 * self.len
    }
    fn scratch(&self) -> usize {
        5 * self.len
    }
    /// The two atom words (8-byte aligned), then the three atomics' results.
    fn atom(&self) -> usize {
        (5 * self.len + SCRATCH + 7) & !7
    }
    fn total(&self) -> usize {
        self.atom() + 5 * 8
    }
}

fn run(o: &Opts) -> Result<bool, String> {
    let roce = RoceConfig { faults: o.faults.clone(), ..RoceConfig::new(o.roce.clone()) };
    let (dev, sim) = open_sim(SimConfig { roce: Some(roce), ..Default::default() })
        .map_err(|e| format!("opening the model with its RoCE port: {e}"))?;
    let lay = Layout { len: o.len };
    let seed = initial(0xfff) + 1;
    let side = Side::new(&dev, &lay, seed).map_err(|e| format!("verbs setup: {e}"))?;
    let gid = dev.query_gid(1, o.gid_idx).map_err(|e| format!("can't read sgid of index {}: {e}", o.gid_idx))?;
    let want = o.gid_idx.checked_sub(1).and_then(|i| o.roce.get(i as usize)).map(|a| ib_core::gid_from_ip(*a));
    if gid == [0; 16] || want.is_some_and(|w| w != gid) {
        return Err(format!(
            "GID index {} holds {}, not the --roce address open_sim binds there",
            o.gid_idx,
            Ipv6Addr::from(gid)
        ));
    }
    let me = Dest {
        qpn: side.qp.qpn(),
        psn: initial(0xff_ffff),
        gid,
        va: side.mr.addr(),
        rkey: side.mr.rkey(),
        len: o.len as u32,
        seed,
    };
    let mut tcp = connect_tcp(o)?;
    let peer = exchange(&mut tcp, &me, o.host.is_some())?;
    if peer.len as usize != o.len {
        return Err(format!("the peer's length {} differs from ours ({})", peer.len, o.len));
    }
    println!("local  QPN {:#08x} PSN {:#08x} seed {:#06x} GID {}", me.qpn, me.psn, me.seed, Ipv6Addr::from(me.gid));
    println!(
        "remote QPN {:#08x} PSN {:#08x} seed {:#06x} GID {}",
        peer.qpn,
        peer.psn,
        peer.seed,
        Ipv6Addr::from(peer.gid)
    );
    side.connect(&me, &peer, o).map_err(|e| format!("to RTR/RTS: {e}"))?;
    token(&mut tcp, "ready")?;
    side.post_requests(&lay, &peer, seed).map_err(|e| format!("post_send: {e}"))?;
    let (failed, imm_wc) = side.wait(o.timeout)?;
    let mut ok = failed == 0;
    ok &= side.check_bytes("read", lay.dst(), o.len, peer.seed)?;
    ok &= side.check_bytes("write", lay.wbuf(), o.len, peer.seed)?;
    ok &= side.check_imm(&lay, imm_wc, &peer)?;
    if o.atomics {
        ok &= side.atomics(&mut tcp, &lay, &me, &peer, o.timeout)?;
    }
    token(&mut tcp, "done")?;
    let s = sim.device().stats();
    println!(
        "MODEL: roce_injected_loss {} roce_timeouts {} roce_retransmits {} roce_rx_duplicates {}",
        s.roce_injected_loss, s.roce_timeouts, s.roce_retransmits, s.roce_rx_duplicates
    );
    println!("roce_rdma: {}", if ok { "all checks passed" } else { "some check failed" });
    Ok(ok)
}

/// A value below `mask` + 1 that differs per run (as `lrand48` seeded by pid and time).
fn initial(mask: u32) -> u32 {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    (nanos ^ std::process::id().wrapping_mul(0x9e37_79b9)) & mask
}

fn connect_tcp(o: &Opts) -> Result<TcpStream, String> {
    match &o.host {
        Some(h) => {
            TcpStream::connect((h.as_str(), o.port)).map_err(|e| format!("cannot connect to {h} port {}: {e}", o.port))
        }
        None => {
            let l = TcpListener::bind(("::", o.port))
                .or_else(|_| TcpListener::bind(("0.0.0.0", o.port)))
                .map_err(|e| format!("cannot listen on port {}: {e}", o.port))?;
            l.accept().map(|(s, _)| s).map_err(|e| format!("accept: {e}"))
        }
    }
}

/// The client sends first, then the server.
fn exchange(tcp: &mut TcpStream, me: &Dest, client: bool) -> Result<Dest, String> {
    let mut msg = [0u8; MSG_LEN];
    let io = |e: std::io::Error| format!("TCP exchange: {e}");
    if client {
        tcp.write_all(&me.encode()).map_err(io)?;
        tcp.read_exact(&mut msg).map_err(io)?;
    } else {
        tcp.read_exact(&mut msg).map_err(io)?;
        tcp.write_all(&me.encode()).map_err(io)?;
    }
    Dest::decode(&msg)
}

/// Sends the 8-byte token `word` and expects the same from the peer.
fn token(tcp: &mut TcpStream, word: &str) -> Result<(), String> {
    let mut out = [0u8; TOKEN_LEN];
    out[..word.len()].copy_from_slice(word.as_bytes());
    let mut got = [0u8; TOKEN_LEN];
    tcp.write_all(&out).and_then(|_| tcp.read_exact(&mut got)).map_err(|e| format!("TCP {word}: {e}"))?;
    if got != out {
        return Err(format!("expected the peer's {word:?}, got {:?}", String::from_utf8_lossy(&got)));
    }
    Ok(())
}

impl Side {
    fn new(dev: &Device, lay: &Layout, seed: u32) -> ib_core::Result<Self> {
        let pd = dev.alloc_pd()?;
        let buf = UserBuffer::new(lay.total())?;
        buf.write(lay.rbuf(), &filled(seed, lay.len))?;
        buf.write(lay.src(), &filled(seed, lay.len))?;
        buf.write(lay.atom(), &atom_init0(seed).to_ne_bytes())?;
        buf.write(lay.atom() + 8, &atom_init1(seed).to_ne_bytes())?;
        let remote = access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
        let mr = pd.reg_buffer(&buf, access::LOCAL_WRITE | remote)?;
        let cq = dev.create_cq(16, None)?;
        let cap = QpCap { max_send_wr: 8, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let attr = QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            cap,
            qp_type: QpType::Rc,
            sq_sig_all: false,
            qp_context: 0,
            srq: None,
        };
        let qp = pd.create_qp(&attr)?;
        qp.modify_to_init(1, remote)?;
        let sge = Sge { addr: mr.addr() + lay.scratch() as u64, length: SCRATCH as u32, lkey: mr.lkey() };
        qp.post_recv(&RecvWr { wr_id: WR_RECV, sg_list: &[sge] })?;
        Ok(Self { qp, cq, mr, buf, _pd: pd })
    }

    /// RTR and RTS with `ibv_rc_pingpong`'s attributes and 4 outstanding RDMA READs each way.
    fn connect(&self, me: &Dest, peer: &Dest, o: &Opts) -> ib_core::Result<()> {
        let mtu = Mtu::from_bytes(o.mtu).ok_or(ib_core::Error::InvalidArgument("path MTU"))?;
        let grh = GlobalRoute { dgid: peer.gid, sgid_index: o.gid_idx as u8, hop_limit: 1, ..Default::default() };
        let rtr = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: mtu,
            dest_qp_num: peer.qpn,
            rq_psn: peer.psn,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 12,
            ah_attr: AhAttr { grh, is_global: true, port_num: 1, ..Default::default() },
            ..Default::default()
        };
        let m = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
        self.qp.modify_qp(&rtr, m)?;
        let rts = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: me.psn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 4,
            ..Default::default()
        };
        self.qp.modify_qp(&rts, M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC)
    }

    fn sge(&self, offset: usize, len: usize) -> Sge {
        Sge { addr: self.mr.addr() + offset as u64, length: len as u32, lkey: self.mr.lkey() }
    }

    fn post_requests(&self, lay: &Layout, peer: &Dest, seed: u32) -> ib_core::Result<()> {
        let (src, dst) = (self.sge(lay.src(), lay.len), self.sge(lay.dst(), lay.len));
        let rkey = peer.rkey;
        let ops = [
            (WR_WRITE, src, WrOpcode::RdmaWrite { remote_addr: peer.va, rkey }),
            (WR_READ, dst, WrOpcode::RdmaRead { remote_addr: peer.va + 2 * lay.len as u64, rkey }),
            (
                WR_WRITE_IMM,
                src,
                WrOpcode::RdmaWriteWithImm { remote_addr: peer.va + lay.len as u64, rkey, imm: IMM_BASE | seed },
            ),
        ];
        for (wr_id, sge, opcode) in ops {
            self.qp.post_send(&SendWr { wr_id, sg_list: &[sge], opcode, signaled: true, solicited: false })?;
        }
        Ok(())
    }

    /// Polls until the three requests and the one receive completed; how many failed, and the
    /// receive's completion.
    fn wait(&self, timeout: Duration) -> Result<(usize, Wc), String> {
        let mut imm = Wc::default();
        let failed = self.wait_n(4, timeout, |w| {
            if w.wr_id == WR_RECV {
                imm = *w;
            }
        })?;
        Ok((failed, imm))
    }

    /// Polls until `want` completions arrived, each shown to `seen`; how many failed.
    fn wait_n(&self, want: usize, timeout: Duration, mut seen: impl FnMut(&Wc)) -> Result<usize, String> {
        let start = Instant::now();
        let (mut done, mut failed) = (0, 0);
        let mut wc = [Wc::default(); 4];
        while done < want {
            let n = self.cq.poll(&mut wc).map_err(|e| format!("poll_cq: {e}"))?;
            if n == 0 {
                if start.elapsed() > timeout {
                    return Err(format!("only {done} of {want} completions after {} s", timeout.as_secs()));
                }
                std::thread::yield_now();
            }
            for w in &wc[..n] {
                done += 1;
                if w.status != WcStatus::Success {
                    eprintln!("roce_rdma: wr_id {} completed with {:?}", w.wr_id, w.status);
                    failed += 1;
                }
                seen(w);
            }
        }
        Ok(failed)
    }

    /// The `-a` part: three atomics on the peer's atom words, the checks of what they returned,
    /// then (after the "atomic" token) those of this side's own words.
    fn atomics(
        &self,
        tcp: &mut TcpStream,
        lay: &Layout,
        me: &Dest,
        peer: &Dest,
        timeout: Duration,
    ) -> Result<bool, String> {
        let remote = peer.va + ((5 * peer.len as usize + SCRATCH + 7) & !7) as u64;
        let rkey = peer.rkey;
        let res = |i: usize| self.sge(lay.atom() + 16 + 8 * i, 8);
        let ops = [
            (WR_FADD, res(0), WrOpcode::AtomicFetchAdd { remote_addr: remote, rkey, add: atom_add(me.seed) }),
            (
                WR_CAS,
                res(1),
                WrOpcode::AtomicCmpSwp {
                    remote_addr: remote + 8,
                    rkey,
                    compare: atom_init1(peer.seed),
                    swap: atom_swap(me.seed),
                },
            ),
            (
                WR_CAS_MISS,
                res(2),
                WrOpcode::AtomicCmpSwp { remote_addr: remote + 8, rkey, compare: atom_init1(peer.seed), swap: !0 },
            ),
        ];
        for (wr_id, sge, opcode) in ops {
            let wr = SendWr { wr_id, sg_list: &[sge], opcode, signaled: true, solicited: false };
            self.qp.post_send(&wr).map_err(|e| format!("post_send atomic: {e}"))?;
        }
        let mut opcodes = [None; 3];
        let failed = self.wait_n(3, timeout, |w| {
            if let Some(o) = opcodes.get_mut(w.wr_id.wrapping_sub(WR_FADD) as usize) {
                *o = Some(w.opcode);
            }
        })?;
        let got = |i: usize| self.u64_at(lay.atom() + 8 * i);
        let mut ok = failed == 0;
        ok &= check(
            "fetch_add",
            if opcodes[0] != Some(WcOpcode::FetchAdd) {
                Some(format!("completion opcode {:?}", opcodes[0]))
            } else {
                differs("returned", got(2)?, atom_init0(peer.seed))
            },
        );
        ok &= check(
            "cmp_swap",
            if opcodes[1..] != [Some(WcOpcode::CompSwap); 2] {
                Some(format!("completion opcodes {:?}", &opcodes[1..]))
            } else {
                differs("the matching one returned", got(3)?, atom_init1(peer.seed)).or(differs(
                    "the missing one returned",
                    got(4)?,
                    atom_swap(me.seed),
                ))
            },
        );
        token(tcp, "atomic")?;
        ok &= check(
            "fetch_add_memory",
            differs("word 0 holds", got(0)?, atom_init0(me.seed).wrapping_add(atom_add(peer.seed))),
        );
        ok &= check("cmp_swap_memory", differs("word 1 holds", got(1)?, atom_swap(peer.seed)));
        Ok(ok)
    }

    fn u64_at(&self, offset: usize) -> Result<u64, String> {
        let mut b = [0u8; 8];
        self.buf.read(offset, &mut b).map_err(|e| e.to_string())?;
        Ok(u64::from_ne_bytes(b))
    }

    fn check_bytes(&self, name: &str, offset: usize, len: usize, seed: u32) -> Result<bool, String> {
        let mut got = vec![0u8; len];
        self.buf.read(offset, &mut got).map_err(|e| e.to_string())?;
        Ok(check(name, first_diff(&got, seed).map(|i| format!("byte {i} differs from the peer's pattern"))))
    }

    fn check_imm(&self, lay: &Layout, wc: Wc, peer: &Dest) -> Result<bool, String> {
        let want = IMM_BASE | peer.seed;
        let why = if wc.status != WcStatus::Success || wc.opcode != WcOpcode::RecvRdmaWithImm {
            Some(format!("receive completion {:?} {:?}", wc.status, wc.opcode))
        } else if wc.byte_len as usize != lay.len || wc.imm_data != Some(want) {
            Some(format!(
                "byte_len {} (want {}), immediate {:x?} (want {want:#010x})",
                wc.byte_len, lay.len, wc.imm_data
            ))
        } else {
            None
        };
        match why {
            Some(w) => Ok(check("write_imm", Some(w))),
            None => self.check_bytes("write_imm", lay.wbuf() + lay.len, lay.len, peer.seed),
        }
    }
}

/// Why `got` is not `want`, if it is not.
fn differs(what: &str, got: u64, want: u64) -> Option<String> {
    (got != want).then(|| format!("{what} {got:#018x} (want {want:#018x})"))
}

/// Prints the check's line; whether it passed.
fn check(name: &str, failure: Option<String>) -> bool {
    match failure {
        None => {
            println!("CHECK {name} ok");
            true
        }
        Some(why) => {
            println!("CHECK {name} FAIL: {why}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_round_trips_and_matches_the_c_format() {
        let d = Dest {
            qpn: 0x11,
            psn: 0xabcdef,
            gid: [0xfd; 16],
            va: 0x7f00_1234_5000,
            rkey: 0x1234,
            len: 10000,
            seed: 0x7c5,
        };
        let msg = d.encode();
        assert!(msg.starts_with(b"RDMAPEER1 000011 abcdef fdfdfdfd"));
        assert_eq!(Dest::decode(&msg).unwrap(), d);
        assert!(Dest::decode(b"RDMAPEER1 zz").is_err());
        let mut bad = msg;
        bad[24..27].copy_from_slice("é0".as_bytes()); // a multibyte character inside the GID
        assert!(Dest::decode(&bad).is_err());
    }

    #[test]
    fn patterns_differ_per_seed_and_are_checked() {
        let p = filled(3, 600);
        assert_eq!(first_diff(&p, 3), None);
        assert_eq!(first_diff(&p, 4), Some(0));
    }
}
