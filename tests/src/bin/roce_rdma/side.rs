//! The QP's side of the case: its buffer layout, the requests it posts as requester, what it
//! checks of the completions and of the bytes it owns, and the atomics part.

use crate::{
    token, Dest, Opts, IMM_BASE, SCRATCH, WR_CAS, WR_CAS_MISS, WR_FADD, WR_READ, WR_RECV, WR_WRITE, WR_WRITE_IMM,
};
use ib_core::{
    access, AhAttr, Cq, Device, GlobalRoute, Mr, Mtu, Pd, Qp, QpAttr, QpAttrMask as M, QpCap, QpInitAttr, QpState,
    QpType, RecvWr, SendWr, Sge, UserBuffer, Wc, WcOpcode, WcStatus, WrOpcode,
};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Byte `i` of the pattern a side with `seed` writes and serves (as `rdma_peer.c`'s).
pub(crate) fn pattern(seed: u32, i: usize) -> u8 {
    let i = i as u32;
    i.wrapping_mul(131).wrapping_add((i >> 8).wrapping_mul(7)).wrapping_add(seed.wrapping_mul(29)).wrapping_add(1) as u8
}

pub(crate) fn filled(seed: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| pattern(seed, i)).collect()
}

/// The first byte of `got` that differs from `seed`'s pattern.
pub(crate) fn first_diff(got: &[u8], seed: u32) -> Option<usize> {
    got.iter().enumerate().position(|(i, &b)| b != pattern(seed, i))
}

/// The atomics' values (as `rdma_peer.c`'s): each crosses a 32-bit boundary.
pub(crate) fn atom_init0(seed: u32) -> u64 {
    0x1111_0000_ffff_fff0 + u64::from(seed)
}

pub(crate) fn atom_add(seed: u32) -> u64 {
    0x0000_0001_0000_0010 + (u64::from(seed) << 36)
}

pub(crate) fn atom_init1(seed: u32) -> u64 {
    0xc0c0_0000_0000_0000 | u64::from(seed) << 16 | u64::from(seed)
}

pub(crate) fn atom_swap(seed: u32) -> u64 {
    0x5a5a_0000_0000_0000 | u64::from(seed) << 24 | u64::from(seed)
}

/// The verbs objects of this side.
pub(crate) struct Side {
    pub(crate) qp: Qp,
    pub(crate) cq: Cq,
    pub(crate) mr: Mr,
    pub(crate) buf: UserBuffer,
    pub(crate) _pd: Pd,
}

/// Offsets of the regions in the MR.
pub(crate) struct Layout {
    pub(crate) len: usize,
}

impl Layout {
    pub(crate) fn wbuf(&self) -> usize {
        0
    }
    pub(crate) fn rbuf(&self) -> usize {
        2 * self.len
    }
    pub(crate) fn src(&self) -> usize {
        3 * self.len
    }
    pub(crate) fn dst(&self) -> usize {
        4 * self.len
    }
    pub(crate) fn scratch(&self) -> usize {
        5 * self.len
    }
    /// The two atom words (8-byte aligned), then the three atomics' results.
    pub(crate) fn atom(&self) -> usize {
        (5 * self.len + SCRATCH + 7) & !7
    }
    pub(crate) fn total(&self) -> usize {
        self.atom() + 5 * 8
    }
}

/// A value below `mask` + 1 that differs per run (as `lrand48` seeded by pid and time).
pub(crate) fn initial(mask: u32) -> u32 {
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    (nanos ^ std::process::id().wrapping_mul(0x9e37_79b9)) & mask
}

impl Side {
    pub(crate) fn new(dev: &Device, lay: &Layout, seed: u32) -> ib_core::Result<Self> {
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
    pub(crate) fn connect(&self, me: &Dest, peer: &Dest, o: &Opts) -> ib_core::Result<()> {
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

    pub(crate) fn sge(&self, offset: usize, len: usize) -> Sge {
        Sge { addr: self.mr.addr() + offset as u64, length: len as u32, lkey: self.mr.lkey() }
    }

    pub(crate) fn post_requests(&self, lay: &Layout, peer: &Dest, seed: u32) -> ib_core::Result<()> {
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
    pub(crate) fn wait(&self, timeout: Duration) -> Result<(usize, Wc), String> {
        let mut imm = Wc::default();
        let failed = self.wait_n(4, timeout, |w| {
            if w.wr_id == WR_RECV {
                imm = *w;
            }
        })?;
        Ok((failed, imm))
    }

    /// Polls until `want` completions arrived, each shown to `seen`; how many failed.
    pub(crate) fn wait_n(&self, want: usize, timeout: Duration, mut seen: impl FnMut(&Wc)) -> Result<usize, String> {
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
    pub(crate) fn atomics(
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

    pub(crate) fn u64_at(&self, offset: usize) -> Result<u64, String> {
        let mut b = [0u8; 8];
        self.buf.read(offset, &mut b).map_err(|e| e.to_string())?;
        Ok(u64::from_ne_bytes(b))
    }

    pub(crate) fn check_bytes(&self, name: &str, offset: usize, len: usize, seed: u32) -> Result<bool, String> {
        let mut got = vec![0u8; len];
        self.buf.read(offset, &mut got).map_err(|e| e.to_string())?;
        Ok(check(name, first_diff(&got, seed).map(|i| format!("byte {i} differs from the peer's pattern"))))
    }

    pub(crate) fn check_imm(&self, lay: &Layout, wc: Wc, peer: &Dest) -> Result<bool, String> {
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
pub(crate) fn differs(what: &str, got: u64, want: u64) -> Option<String> {
    (got != want).then(|| format!("{what} {got:#018x} (want {want:#018x})"))
}

/// Prints the check's line; whether it passed.
pub(crate) fn check(name: &str, failure: Option<String>) -> bool {
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
