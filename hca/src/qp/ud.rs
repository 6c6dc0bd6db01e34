//! UD on pvrdma: address handles and the send WQE's `wr.ud`. A pvrdma AH is a software object
//! (Linux's `pvrdma_create_ah` and rdma-core's build the address vector with no device
//! command); each UD send carries the AH's address vector, the remote QPN and the remote Q_Key
//! in its WQE (`pvrdma_post_send`).

use crate::device::DeviceInner;
use crate::pd::Pd;
use ib_core::provider::AhOps;
use ib_core::{AhAttr, Error, Result, UdDest, WcOpcode, WrOpcode};
use pvrdma_abi::wqe::{wr_opcode, Av, SqWqeHdr, WrUd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use zerocopy::IntoBytes;

/// `src_path_bits` bit 7: the address vector carries a GRH (set by rdma-core's
/// `pvrdma_create_ah`).
const AV_GRH: u8 = 0x80;

/// A pvrdma address handle: checked attributes, nothing on the device; a kernel AH is counted
/// against the device's `max_ah` (Linux's `pvrdma_create_ah`), a user context's is not
/// (rdma-core's provider builds it in user space, counted by nothing). Each send through it
/// builds its address vector from the core's copy of the attributes ([`UdDest`]) into the WQE,
/// as `pvrdma_post_send` copies the AH's vector.
pub struct Ah {
    dev: Arc<DeviceInner>,
    /// Counted against `max_ah` (a kernel AH).
    counted: bool,
}

impl Ah {
    /// Checks `attr` as Linux's `pvrdma_create_ah` does (a global route, a port of the
    /// device) and builds its address vector in `pd`.
    ///
    /// Errors: [`Error::InvalidArgument`] without a global route (RoCE: IBTA A16.4.1), for a
    /// port the device lacks, a zero `dgid` or an `sgid_index` that names no GID;
    /// [`Error::NoResources`] (`ENOMEM`) for a kernel AH when `max_ah` kernel AHs exist;
    /// [`Error::DeviceFatal`]. Unlike Linux, a global
    /// unicast IPv6 `dgid` is taken (Linux takes only link-local, multicast and IPv4-mapped
    /// GIDs, its GID cache's RoCE addresses; the model routes any RoCE v2 GID).
    pub fn create(pd: &Pd, attr: &AhAttr) -> Result<Ah> {
        pd.dev.live()?;
        if !attr.is_global {
            return Err(Error::InvalidArgument("RoCE needs a global route (is_global)"));
        }
        pd.dev.check_port(attr.port_num)?;
        if attr.grh.dgid == [0u8; 16] {
            return Err(Error::InvalidArgument("a zero destination GID"));
        }
        // As an RC QP's address vector at RTR (the device checks it there), and as rdma-core's
        // pvrdma provider, whose AH resolves the source address from the GID, refuses.
        if pd.dev.gids.get(u32::from(attr.grh.sgid_index))?.is_none() {
            return Err(Error::InvalidArgument("sgid_index names no GID"));
        }
        let counted = pd.uctx.is_none();
        let max = pd.dev.attr.max_ah;
        let room = |n: u32| (n < max).then_some(n + 1);
        if counted && pd.dev.ahs.fetch_update(Ordering::AcqRel, Ordering::Acquire, room).is_err() {
            return Err(Error::NoResources("max_ah address handles exist"));
        }
        Ok(Ah { dev: pd.dev.clone(), counted })
    }
}

impl Drop for Ah {
    fn drop(&mut self) {
        if self.counted {
            self.dev.ahs.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl AhOps for Ah {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The address vector of `attr` in PD `pd` (rdma-core's `pvrdma_create_ah`): port and PD in
/// `port_pd`, traffic class and flow label, the GRH flag in `src_path_bits`.
fn av(pd: u32, attr: &AhAttr) -> Av {
    let mut av = Av::default();
    av.port_pd.set(pd | (u32::from(attr.port_num) << 24));
    av.sl_tclass_flowlabel.set((u32::from(attr.grh.traffic_class) << 20) | (attr.grh.flow_label & 0xf_ffff));
    av.dgid = attr.grh.dgid;
    av.src_path_bits = attr.src_path_bits | AV_GRH;
    av.gid_index = attr.grh.sgid_index;
    av.hop_limit = attr.grh.hop_limit;
    av.stat_rate = attr.static_rate;
    av
}

/// A UD send on an RC QP is refused (it names a destination the QP has none for); on a kernel
/// UD QP only SEND and SEND with immediate are posted, as Linux's `pvrdma_post_send` checks
/// ("invalid send opcode"). A user QP's other opcodes ([`WrOpcode::Raw`]) go to the device as
/// rdma-core's `pvrdma_post_send` writes them, checking no opcode.
///
/// Errors: [`Error::InvalidArgument`].
pub(crate) fn check_opcode(ud: bool, kernel: bool, op: &WrOpcode) -> Result<()> {
    const SEND: u32 = 2;
    const SEND_WITH_IMM: u32 = 3;
    match op {
        WrOpcode::UdSend { .. } if !ud => Err(Error::InvalidArgument("a UD send on a connected QP")),
        WrOpcode::UdSend { .. } => Ok(()),
        WrOpcode::Raw { opcode, .. } if ud && kernel && !matches!(*opcode, SEND | SEND_WITH_IMM) => {
            Err(Error::InvalidArgument("a UD QP sends only SENDs"))
        }
        WrOpcode::Raw { .. } => Ok(()),
        _ if ud && kernel => Err(Error::InvalidArgument("a UD QP sends only UD SENDs (with an address handle)")),
        _ => Ok(()),
    }
}

/// Fills `wr.ud` (and `ex` for immediate data) of a UD send to `dest`; returns its opcode and
/// the opcode of its completion.
pub(crate) fn set_wr_ud(hdr: &mut SqWqeHdr, dest: &UdDest, imm: Option<u32>) -> (u32, WcOpcode) {
    let mut ud = WrUd::default();
    ud.remote_qpn.set(dest.remote_qpn);
    ud.remote_qkey.set(dest.remote_qkey);
    ud.av = av(dest.pd_handle, &dest.ah);
    hdr.wr.copy_from_slice(ud.as_bytes());
    match imm {
        Some(imm) => {
            hdr.ex.set(imm);
            (wr_opcode::SEND_WITH_IMM, WcOpcode::Send)
        }
        None => (wr_opcode::SEND, WcOpcode::Send),
    }
}
