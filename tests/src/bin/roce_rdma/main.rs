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
//!
//! The options and the TCP exchange are here; the QP's side of the case is [`side`].
#![forbid(unsafe_code)]

use hca::open_sim;
use ib_core::{Gid, Mtu};
use pvrdma_sim::roce::{LinkFaults, RoceConfig};
use pvrdma_sim::SimConfig;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

mod side;
use side::{initial, Layout, Side};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::side::{filled, first_diff};

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
