//! The objects a soak worker drives: groups, each a context (the kernel's or a user context) with
//! its PD, one completion channel, a few CQs on that channel and connected RC pairs whose QPs pick
//! their send and receive CQs at random among the group's (so CQs are shared by several QPs and
//! by both queues of a QP).

use super::ledger::{QpLedger, Wire, SLOT};
use ib_core::{access, CompChannel, Context, Cq, Device, Mr, Pd, Qp, QpCap, QpInitAttr, QpType, UserBuffer};
use std::collections::HashMap;

/// Largest send and receive queue depth of a QP (the test never has more outstanding per queue
/// than its QP's depth).
pub const DEPTH: u32 = 16;
/// The depths a QP is created with: small ones wrap their rings often.
const DEPTHS: [u32; 5] = [1, 2, 5, 8, DEPTH];
/// CQs per group.
pub const CQS: usize = 3;
/// RC pairs per group.
pub const PAIRS: usize = 6;
/// CQEs per CQ, at least what every queue of a group can have outstanding (2 × 12 QPs × 16), so
/// no CQ can overflow.
const CQ_SIZES: [u32; 3] = [384, 500, 1024];

/// A CQ and what the test asked of it.
pub struct CqSlot {
    /// The CQ (on the group's channel).
    pub cq: Cq,
    /// `req_notify` calls made.
    pub arms: u64,
    /// Completion events taken for it from the channel.
    pub events: u64,
}

/// One QP of a pair, with its MR of buffer slots and its ledgers.
pub struct End {
    /// The QP.
    pub qp: Qp,
    /// `2 × DEPTH` slots of [`SLOT`] bytes: the first `DEPTH` for sends, the rest for receives;
    /// over DMA memory (`alloc_mr`) or over the consumer's own memory (`reg_buffer`).
    pub mr: Mr,
    /// Its outstanding work requests.
    pub ledger: QpLedger,
    /// Its send and receive queue depth.
    pub depth: u32,
    /// Free send slots.
    pub send_free: Vec<u32>,
    /// Free receive slots.
    pub recv_free: Vec<u32>,
    /// Index of its send CQ in the group.
    pub scq: usize,
    /// Index of its receive CQ in the group.
    pub rcq: usize,
    /// The test moved this QP to ERR (its later requests must flush; its peer's sends may fail
    /// with RETRY_EXC_ERR).
    pub in_err: bool,
    /// Messages it sent to its peer that the peer has not received.
    pub wire: Wire,
}

impl End {
    /// Byte offset in the MR of send slot `slot`.
    pub fn send_off(slot: u32) -> u64 {
        u64::from(slot) * u64::from(SLOT)
    }

    /// Byte offset in the MR of receive slot `slot`.
    pub fn recv_off(slot: u32) -> u64 {
        u64::from(DEPTH + slot) * u64::from(SLOT)
    }
}

/// Two QPs connected to each other.
pub struct Pair {
    /// The two QPs.
    pub ends: [End; 2],
    /// While the test holds the pair in error: the step at which it recovers it.
    pub recover_at: Option<u64>,
}

impl Pair {
    /// Whether either QP was moved to ERR by the test.
    pub fn errored(&self) -> bool {
        self.ends.iter().any(|e| e.in_err)
    }

    /// Whether every request of both QPs completed.
    pub fn is_idle(&self) -> bool {
        self.ends.iter().all(|e| e.ledger.is_empty())
    }

    /// Whether either QP completes into CQ `ci`.
    pub fn uses_cq(&self, ci: usize) -> bool {
        self.ends.iter().any(|e| e.scq == ci || e.rcq == ci)
    }
}

/// A context and its objects.
pub struct Group {
    /// The kernel's context or a user context.
    pub ctx: Context,
    /// Every object's PD.
    pub pd: Pd,
    /// Every CQ's completion channel.
    pub ch: CompChannel,
    /// The CQs.
    pub cqs: Vec<CqSlot>,
    /// The pairs; `None` while a slot is being refilled.
    pub pairs: Vec<Option<Pair>>,
    /// QP number -> (pair slot, end).
    pub qpns: HashMap<u32, (usize, usize)>,
}

/// Creates a group on a new user context, or on the kernel's (`kernel`), with `PAIRS` pairs
/// whose CQs `pick` chooses.
pub fn new_group(dev: &Device, kernel: bool, pick: &mut fastrand::Rng) -> Group {
    let ctx = if kernel { (**dev).clone() } else { dev.alloc_ucontext().expect("alloc_ucontext") };
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let ch = ctx.create_comp_channel().expect("create_comp_channel");
    let cqs = (0..CQS).map(|_| new_cq(&ctx, &ch, pick)).collect();
    let mut g = Group { ctx, pd, ch, cqs, pairs: Vec::new(), qpns: HashMap::new() };
    for slot in 0..PAIRS {
        g.pairs.push(None);
        let p = new_pair(dev, &g, pick);
        g.put_pair(slot, p);
    }
    g
}

/// A CQ of `ctx` on `ch`, of a size `pick` chooses.
pub fn new_cq(ctx: &Context, ch: &CompChannel, pick: &mut fastrand::Rng) -> CqSlot {
    let size = CQ_SIZES[pick.usize(..CQ_SIZES.len())];
    CqSlot { cq: ctx.create_cq(size, Some(ch)).expect("create_cq"), arms: 0, events: 0 }
}

fn new_end(g: &Group, pick: &mut fastrand::Rng) -> End {
    let (scq, rcq) = (pick.usize(..CQS), pick.usize(..CQS));
    let depth = DEPTHS[pick.usize(..DEPTHS.len())];
    let attr = QpInitAttr {
        send_cq: &g.cqs[scq].cq,
        recv_cq: &g.cqs[rcq].cq,
        cap: QpCap { max_send_wr: depth, max_recv_wr: depth, max_send_sge: 2, max_recv_sge: 2, max_inline_data: 0 },
        qp_type: QpType::Rc,
        sq_sig_all: false,
        qp_context: 0,
        srq: None,
    };
    let qp = g.pd.create_qp(&attr).expect("create_qp");
    let len = (2 * DEPTH * SLOT) as usize;
    // Half the MRs over DMA memory the provider allocates, half over the consumer's own pages.
    let mr = if pick.bool() {
        g.pd.alloc_mr(len, access::LOCAL_WRITE).expect("alloc_mr")
    } else {
        let buf = UserBuffer::new(len).expect("a user buffer");
        g.pd.reg_buffer(&buf, access::LOCAL_WRITE).expect("reg_buffer")
    };
    End {
        ledger: QpLedger::new(qp.qpn()),
        qp,
        mr,
        depth,
        send_free: (0..depth).collect(),
        recv_free: (0..depth).collect(),
        scq,
        rcq,
        in_err: false,
        wire: Wire::default(),
    }
}

/// Two new QPs of `g`, connected to each other (RTS).
pub fn new_pair(dev: &Device, g: &Group, pick: &mut fastrand::Rng) -> Pair {
    let ends = [new_end(g, pick), new_end(g, pick)];
    connect(dev, &ends);
    Pair { ends, recover_at: None }
}

/// Brings both QPs (in RESET) to RTS towards each other; a request towards a peer in ERR fails
/// `RETRY_EXC_ERR` after one 10 ms timeout (`fixture::connect_impatient`).
pub fn connect(dev: &Device, ends: &[End; 2]) {
    let gid = crate::fixture::gid(dev);
    crate::fixture::connect_impatient(&ends[0].qp, ends[1].qp.qpn(), gid);
    crate::fixture::connect_impatient(&ends[1].qp, ends[0].qp.qpn(), gid);
}

impl Group {
    /// Puts pair `p` in slot `slot` and indexes its QPs.
    pub fn put_pair(&mut self, slot: usize, p: Pair) {
        for (e, end) in p.ends.iter().enumerate() {
            self.qpns.insert(end.qp.qpn(), (slot, e));
        }
        self.pairs[slot] = Some(p);
    }

    /// Takes pair `slot` out and forgets its QPs.
    pub fn take_pair(&mut self, slot: usize) -> Pair {
        let p = self.pairs[slot].take().expect("pair present");
        for end in &p.ends {
            self.qpns.remove(&end.qp.qpn());
        }
        p
    }
}
