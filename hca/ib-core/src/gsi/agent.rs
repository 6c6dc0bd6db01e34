//! One port's GSI agent: its objects in the device's kernel context, QP1 brought to RTS, its
//! receive buffers kept posted, sends through cached address handles, and its readiness fd (an
//! epoll instance over the receive CQ's completion channel and the backlog's eventfd: readable
//! while a completion event waits or received MADs do).

use super::buffers::{AhCache, AhKey, Backlog, Received, Slots};
use super::{GsiAddr, GSI_QKEY, MAD_SIZE, RECV_BUFFERS, SEND_SLOTS};
use crate::ah::{ah_attr_from_wc, Ah, GRH_LEN};
use crate::attr::{access, AhAttr, GlobalRoute, QpAttr, QpAttrMask as M, QpCap, QpState, QpType};
use crate::cq::Cq;
use crate::error::{Error, Result};
use crate::events::channel::CompChannel;
use crate::mr::Mr;
use crate::pd::Pd;
use crate::qp::{Qp, QpInitAttr};
use crate::registry::Device;
use crate::sys::{Epoll, EventFd};
use crate::wr::{NotifyFlags, RecvWr, SendWr, Sge, Wc, WcStatus, WrOpcode};
use std::os::fd::RawFd;

/// Bytes of one receive buffer: the GRH area, then one MAD.
const RECV_LEN: usize = GRH_LEN + MAD_SIZE;
/// Bytes of a MAD's common header (IBTA 13.4.2).
const MAD_HEADER: usize = 24;
/// Address handles kept.
const AH_CACHE: usize = 64;
/// Completions taken per poll.
const BATCH: usize = 16;
/// Most polls of the receive CQ per [`Agent::recv`] (so a flood cannot keep it from returning).
const MAX_POLLS: usize = 2 * RECV_BUFFERS as usize / BATCH;
/// The hop limit of a send that asks for 0.
const DEFAULT_HOP_LIMIT: u8 = 64;

/// A port's GSI agent. Fields drop in order: QP1 first, the PD and the device last.
pub(super) struct Agent {
    qp: Qp,
    ahs: AhCache<Ah>,
    recv_cq: Cq,
    send_cq: Cq,
    channel: CompChannel,
    rx: Mr,
    tx: Mr,
    slots: Slots,
    backlog: Backlog,
    /// Readable (count 1) while the backlog holds MADs, or more completions may wait.
    ready: EventFd,
    signaled: bool,
    epoll: Epoll,
    _pd: Pd,
    dev: Device,
    port: u8,
    /// A completion came back in error: QP1 is in ERR and is restarted at the next call.
    broken: bool,
    dropped: u64,
}

impl Agent {
    /// Makes the objects, brings QP1 to RTS and posts every receive buffer.
    pub(super) fn open(dev: &Device, port: u8) -> Result<Agent> {
        let pd = dev.alloc_pd()?;
        let channel = dev.create_comp_channel()?;
        channel.set_nonblocking(true)?;
        let recv_cq = dev.create_cq(RECV_BUFFERS, Some(&channel))?;
        let send_cq = dev.create_cq(SEND_SLOTS, None)?;
        let cap = QpCap {
            max_send_wr: SEND_SLOTS,
            max_recv_wr: RECV_BUFFERS,
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let init = QpInitAttr {
            send_cq: &send_cq,
            recv_cq: &recv_cq,
            cap,
            qp_type: QpType::Gsi,
            sq_sig_all: true,
            qp_context: 0,
            srq: None,
        };
        let qp = pd.create_qp(&init)?;
        let rx = pd.alloc_mr(RECV_BUFFERS as usize * RECV_LEN, access::LOCAL_WRITE)?;
        let tx = pd.alloc_mr(SEND_SLOTS as usize * MAD_SIZE, 0)?;
        let ready = EventFd::new()?;
        ready.set_nonblocking(true)?;
        let epoll = Epoll::new(&[channel.fd(), ready.raw()])?;
        let mut agent = Agent {
            qp,
            ahs: AhCache::new(AH_CACHE),
            recv_cq,
            send_cq,
            channel,
            rx,
            tx,
            slots: Slots::new(SEND_SLOTS),
            backlog: Backlog::new(RECV_BUFFERS as usize),
            ready,
            signaled: false,
            epoll,
            _pd: pd,
            dev: dev.clone(),
            port,
            broken: false,
            dropped: 0,
        };
        agent.start()?;
        Ok(agent)
    }

    pub(super) fn fd(&self) -> RawFd {
        self.epoll.raw()
    }

    pub(super) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Sends not yet completed, after taking the completions there are.
    pub(super) fn sends_in_flight(&mut self) -> Result<usize> {
        self.reclaim()?;
        Ok(self.slots.in_flight())
    }

    /// RESET -> INIT (P_Key index 0, the GSI Q_Key) -> RTR -> RTS, every receive buffer posted,
    /// every send slot free, the receive CQ armed.
    fn start(&mut self) -> Result<()> {
        let init = QpAttr { qp_state: QpState::Init, port_num: self.port, qkey: GSI_QKEY, ..Default::default() };
        self.qp.modify_qp(&init, M::STATE | M::PKEY_INDEX | M::QKEY | M::PORT)?;
        self.qp.modify_qp(&QpAttr { qp_state: QpState::Rtr, ..Default::default() }, M::STATE)?;
        self.qp.modify_qp(&QpAttr { qp_state: QpState::Rts, ..Default::default() }, M::STATE | M::SQ_PSN)?;
        // One chain: one doorbell for every buffer.
        let sges: Vec<[Sge; 1]> = (0..RECV_BUFFERS).map(|i| [self.recv_sge(i)]).collect();
        let wrs: Vec<RecvWr<'_>> =
            sges.iter().enumerate().map(|(i, sge)| RecvWr { wr_id: i as u64, sg_list: sge }).collect();
        self.qp.post_recv_list(&wrs).map_err(|(_, e)| e)?;
        self.slots.reset();
        self.recv_cq.req_notify(NotifyFlags::NEXT_COMPLETION)?;
        self.broken = false;
        Ok(())
    }

    /// After a completion in error: QP1 back to RESET (its WQEs dropped), what its CQs still
    /// hold taken, then [`Agent::start`] again.
    fn revive(&mut self) -> Result<()> {
        if !self.broken {
            return Ok(());
        }
        tracing::warn!(port = self.port, "GSI QP in error: restarted");
        self.qp.modify_qp(&QpAttr { qp_state: QpState::Reset, ..Default::default() }, M::STATE)?;
        let mut wc = [Wc::default(); BATCH];
        for cq in [&self.send_cq, &self.recv_cq] {
            for _ in 0..MAX_POLLS {
                if cq.poll(&mut wc)? < BATCH {
                    break;
                }
            }
        }
        self.start()
    }

    /// The SGE of receive buffer `i`.
    fn recv_sge(&self, i: u32) -> Sge {
        Sge { addr: self.rx.addr() + u64::from(i) * RECV_LEN as u64, length: RECV_LEN as u32, lkey: self.rx.lkey() }
    }

    fn post_recv(&self, i: u32) -> Result<()> {
        self.qp.post_recv(&RecvWr { wr_id: u64::from(i), sg_list: &[self.recv_sge(i)] })
    }

    /// Sends `mad` to `to` (see [`super::GsiAgent::send`]).
    pub(super) fn send(&mut self, to: &GsiAddr, mad: &[u8]) -> Result<()> {
        if mad.is_empty() || mad.len() > MAD_SIZE {
            return Err(Error::InvalidArgument("a MAD is 1 to 256 bytes"));
        }
        if to.pkey_index != 0 {
            return Err(Error::InvalidArgument("the GSI QP sends with P_Key index 0"));
        }
        if self.dev.query_gid(self.port, u32::from(to.sgid_index)).map_or(true, |g| g == [0; 16]) {
            return Err(Error::InvalidArgument("sgid_index names no GID of the port"));
        }
        self.reclaim()?;
        self.revive()?;
        let slot = self.slots.take().ok_or(Error::QueueFull)?;
        let posted = self.post_send(slot, to, mad);
        if posted.is_err() {
            self.slots.give(slot);
        }
        posted
    }

    fn post_send(&mut self, slot: u32, to: &GsiAddr, mad: &[u8]) -> Result<()> {
        let off = slot as usize * MAD_SIZE;
        self.tx.write(off, mad)?;
        let hop_limit = if to.hop_limit == 0 { DEFAULT_HOP_LIMIT } else { to.hop_limit };
        let key: AhKey = (to.gid, to.sgid_index, to.flow_label & 0xf_ffff, hop_limit, to.traffic_class);
        let (pd, port) = (&self._pd, self.port);
        let ah = self.ahs.get_or_make(key, || {
            let grh = GlobalRoute {
                dgid: to.gid,
                flow_label: key.2,
                sgid_index: to.sgid_index,
                hop_limit,
                traffic_class: to.traffic_class,
            };
            pd.create_ah(&AhAttr { grh, is_global: true, port_num: port, ..Default::default() })
        })?;
        let dest = ah.dest(to.qpn & 0x00ff_ffff, to.qkey);
        // Two SGEs, the MAD's common header then the rest, as Linux's MAD layer posts a MAD
        // (`ib_create_send_mad`) and as QEMU 7.2 wants QP1's sends (`mad_send` takes exactly two).
        let addr = self.tx.addr() + off as u64;
        let head = mad.len().min(MAD_HEADER) as u32;
        let sges = [
            Sge { addr, length: head, lkey: self.tx.lkey() },
            Sge { addr: addr + u64::from(head), length: mad.len() as u32 - head, lkey: self.tx.lkey() },
        ];
        let wr = SendWr {
            wr_id: u64::from(slot),
            sg_list: &sges,
            opcode: WrOpcode::UdSend { dest, imm: None },
            signaled: true,
            solicited: false,
        };
        self.qp.post_send(&wr)
    }

    /// Frees the send slots whose sends completed; one in error marks QP1 broken.
    fn reclaim(&mut self) -> Result<()> {
        let mut wc = [Wc::default(); BATCH];
        for _ in 0..=SEND_SLOTS as usize / BATCH {
            let n = self.send_cq.poll(&mut wc)?;
            for w in &wc[..n] {
                self.slots.give(u32::try_from(w.wr_id).unwrap_or(u32::MAX));
                if w.status != WcStatus::Success {
                    tracing::warn!(status = %w.status, "GSI send failed");
                    self.broken = true;
                }
            }
            if n < BATCH {
                break;
            }
        }
        Ok(())
    }

    /// Takes the next received MAD (see [`super::GsiAgent::recv`]).
    pub(super) fn recv(&mut self, buf: &mut [u8]) -> Result<(GsiAddr, usize)> {
        self.revive()?;
        while self.channel.try_get_cq_event().is_some() {
            self.recv_cq.ack_events(1);
        }
        let mut more = self.take_completions()?;
        // Armed, then polled once more: what came before the arm raises no event (IBTA).
        if self.recv_cq.req_notify(NotifyFlags::NEXT_COMPLETION | NotifyFlags::REPORT_MISSED_EVENTS)? {
            more = self.take_completions()?;
        }
        let got = self.backlog.pop();
        self.sync_ready(more);
        let r = got.ok_or(Error::WouldBlock)?;
        let n = r.len.min(buf.len());
        buf[..n].copy_from_slice(&r.mad[..n]);
        Ok((r.from, r.len))
    }

    /// Polls the receive CQ (at most [`MAX_POLLS`] times); `true` if it may hold more.
    fn take_completions(&mut self) -> Result<bool> {
        let mut wc = [Wc::default(); BATCH];
        for _ in 0..MAX_POLLS {
            let n = self.recv_cq.poll(&mut wc)?;
            for w in &wc[..n] {
                self.on_recv(w)?;
            }
            if n < BATCH {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// One receive completion: its MAD into the backlog with where it came from, its buffer
    /// posted again. What cannot be read is dropped and counted.
    fn on_recv(&mut self, w: &Wc) -> Result<()> {
        let Some(i) = u32::try_from(w.wr_id).ok().filter(|&i| i < RECV_BUFFERS) else {
            self.dropped += 1;
            return Ok(());
        };
        if w.status != WcStatus::Success {
            if w.status != WcStatus::WrFlushErr {
                self.dropped += 1;
            }
            self.broken = true;
            return Ok(());
        }
        let off = i as usize * RECV_LEN;
        let mut grh = [0u8; GRH_LEN];
        self.rx.read(off, &mut grh)?;
        let len = (w.byte_len as usize).saturating_sub(GRH_LEN).min(MAD_SIZE);
        let mut mad = [0u8; MAD_SIZE];
        self.rx.read(off + GRH_LEN, &mut mad[..len])?;
        if self.post_recv(i).is_err() {
            self.broken = true;
        }
        let from = ah_attr_from_wc(self.dev.context(), self.port, w, &grh).ok().filter(|a| a.is_global);
        let Some(a) = from.filter(|_| len > 0) else {
            self.dropped += 1;
            return Ok(());
        };
        let from = GsiAddr {
            gid: a.grh.dgid,
            qpn: w.src_qp,
            qkey: GSI_QKEY,
            flow_label: a.grh.flow_label,
            pkey_index: 0,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
        };
        if !self.backlog.push(Received { from, len, mad }) {
            self.dropped += 1;
        }
        Ok(())
    }

    /// The backlog's eventfd readable exactly while MADs wait (or `more` completions may).
    fn sync_ready(&mut self, more: bool) {
        let want = more || !self.backlog.is_empty();
        if want && !self.signaled {
            self.ready.signal();
        } else if !want && self.signaled {
            self.ready.consume();
        }
        self.signaled = want;
    }
}
