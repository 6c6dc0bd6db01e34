//! Address handles (`ibv_create_ah`, `ibv_destroy_ah`, `ibv_init_ah_from_wc`): the address
//! vector a UD send goes to (IBTA 10.5, 11.2.2). An AH belongs to a PD; a kernel AH holds it
//! (the PD's dealloc answers `Busy` while one exists), a user context's does not (rdma-core's
//! pvrdma makes it in user space, unknown to the kernel). The provider checks the attributes and keeps
//! what its device needs (pvrdma: a software address vector, no device command).

use crate::attr::{AhAttr, Gid};
use crate::context::Context;
use crate::device_attr::GidType;
use crate::error::{Error, Result};
use crate::pd::{Pd, PdInner};
use crate::provider::AhOps;
use crate::qp::Qp;
use crate::wr::{UdDest, Wc};
use std::net::Ipv6Addr;
use std::sync::Arc;

/// Bytes of the GRH area at the start of every UD receive buffer (IBTA 11.4.1.2).
pub const GRH_LEN: usize = 40;

/// An address handle. Dropping it destroys it (`ibv_destroy_ah`).
pub struct Ah {
    pd: Arc<PdInner>,
    attr: AhAttr,
    ops: Box<dyn AhOps>,
    /// Whether the AH counts as a user of its PD (a kernel AH; see [`Pd::create_ah`]).
    holds_pd: bool,
}

impl Pd {
    /// Creates an address handle for `attr` in this PD (`ibv_create_ah`).
    ///
    /// Errors: [`Error::InvalidArgument`] for a port the device lacks, an `sgid_index` beyond
    /// its GID table or, on a RoCE device, an address without a global route (`is_global`: a
    /// RoCE AH always carries a GRH, IBTA A16.4.1); [`Error::Unsupported`] for a provider
    /// without AHs; [`Error::DeviceFatal`]. Any flow label is taken: the address vector keeps
    /// its low 20 bits (IBTA 8.3: a 20-bit field), as no layer of Linux's stack refuses more.
    pub fn create_ah(&self, attr: &AhAttr) -> Result<Ah> {
        let pd = &self.inner;
        pd.ctx.live()?;
        let dev = &pd.ctx.device.ops;
        let port = dev.query_port(attr.port_num)?;
        if attr.is_global && u32::from(attr.grh.sgid_index) >= port.gid_tbl_len {
            return Err(Error::InvalidArgument("sgid_index beyond the GID table"));
        }
        let ops = dev.create_ah(&*pd.ops, attr)?;
        // A user context's AH is its library's own (rdma-core's pvrdma builds it in user space,
        // no command): the kernel never counts it, so it does not keep the PD from being
        // deallocated. A kernel AH does, as Linux's `rdma_create_ah` takes a PD reference.
        let holds_pd = pd.ctx.uctx.is_none();
        if holds_pd {
            pd.hold();
        }
        Ok(Ah { pd: pd.clone(), attr: *attr, ops, holds_pd })
    }
}

impl Ah {
    /// The attributes it was created with (`ibv_query_ah` would answer these).
    pub fn attr(&self) -> &AhAttr {
        &self.attr
    }

    /// The provider's own object.
    pub fn provider_ah<T: 'static>(&self) -> Option<&T> {
        self.ops.as_any().downcast_ref()
    }

    /// The destination of a UD send through this AH to QP `remote_qpn` with `remote_qkey`.
    pub fn dest(&self, remote_qpn: u32, remote_qkey: u32) -> UdDest {
        UdDest { ah: self.attr, pd_handle: self.pd.ops.handle(), remote_qpn, remote_qkey }
    }

    /// Destroys the AH (`ibv_destroy_ah`), as dropping it does; the `Result` is the shape of the
    /// other destroys (an AH is held by no other object, so it never comes back).
    pub fn destroy(self) -> std::result::Result<(), (Ah, Error)> {
        drop(self);
        Ok(())
    }

    /// Whether the AH is of the PD `pd`.
    pub fn is_of(&self, pd: &Pd) -> bool {
        Arc::ptr_eq(&self.pd, &pd.inner)
    }
}

impl Drop for Ah {
    fn drop(&mut self) {
        if self.holds_pd {
            self.pd.release();
        }
    }
}

impl std::fmt::Debug for Ah {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ah({:?})", Ipv6Addr::from(self.attr.grh.dgid))
    }
}

/// The address vector that answers a UD receive completion `wc` whose buffer began with `grh`,
/// as libibverbs's `ibv_init_ah_from_wc` builds it: `port_num` and the completion's `sl`,
/// `dlid`, path bits (0 here: RoCE); with `IBV_WC_GRH`, a global route back to the sender — its
/// source address as `dgid`, the local GID it was sent to found in `port_num`'s table as
/// `sgid_index`, hop limit, traffic class and flow label from the header. The header is IPv4
/// (RoCE v2) when its first nibble is not 6 and bytes 20-39 hold an IPv4 header (or when both
/// look plausible and the IPv4 checksum holds, as libibverbs decides); otherwise IPv6 (next
/// header UDP: RoCE v2; 0x1B: RoCE v1).
///
/// Errors: [`Error::InvalidArgument`] for a multicast destination, a header of neither version,
/// or a local GID not in the table; provider errors from the port query.
pub fn ah_attr_from_wc(ctx: &Context, port_num: u8, wc: &Wc, grh: &[u8; GRH_LEN]) -> Result<AhAttr> {
    let vtf = u32::from_be_bytes([grh[0], grh[1], grh[2], grh[3]]);
    let mut a = AhAttr { port_num, ..Default::default() };
    a.grh.flow_label = vtf & 0xf_ffff;
    if !wc.grh {
        return Ok(a);
    }
    a.is_global = true;
    let ip4 = &grh[20..40];
    let v6 = vtf >> 28 == 6;
    let is_v4 = if !v6 { ip4[0] >> 4 == 4 } else { ip4[0] & 0xf == 5 && ipv4_sum_ok(ip4) };
    let (local, remote, ty) = if is_v4 {
        let d: [u8; 4] = ip4[16..20].try_into().unwrap_or_default();
        let s: [u8; 4] = ip4[12..16].try_into().unwrap_or_default();
        if d[0] >> 4 == 0xe {
            return Err(Error::InvalidArgument("multicast destination"));
        }
        a.grh.hop_limit = ip4[8];
        a.grh.traffic_class = ip4[1];
        let map = |v: [u8; 4]| std::net::Ipv4Addr::from(v).to_ipv6_mapped().octets();
        (map(d), map(s), GidType::RoceV2)
    } else if v6 {
        let dgid: Gid = grh[24..40].try_into().unwrap_or_default();
        let sgid: Gid = grh[8..24].try_into().unwrap_or_default();
        if dgid[0] == 0xff {
            return Err(Error::InvalidArgument("multicast destination"));
        }
        let ty = match grh[6] {
            17 => GidType::RoceV2,
            0x1b => GidType::RoceV1,
            _ => return Err(Error::InvalidArgument("GRH of an unknown next header")),
        };
        a.grh.hop_limit = grh[7];
        a.grh.traffic_class = (vtf >> 20) as u8;
        (dgid, sgid, ty)
    } else {
        return Err(Error::InvalidArgument("GRH of neither IPv4 nor IPv6"));
    };
    a.grh.dgid = remote;
    a.grh.sgid_index = find_gid_index(ctx, port_num, &local, ty)?;
    Ok(a)
}

/// The index of `gid` of type `ty` in `port`'s GID table (libibverbs's `ibv_find_gid_index`).
fn find_gid_index(ctx: &Context, port: u8, gid: &Gid, ty: GidType) -> Result<u8> {
    let dev = &ctx.inner.device.ops;
    let len = dev.query_port(port)?.gid_tbl_len.min(256);
    (0..len)
        .find(|&i| {
            dev.query_gid(port, i).is_ok_and(|g| g == *gid) && dev.query_gid_type(port, i).is_ok_and(|t| t == ty)
        })
        .map(|i| i as u8)
        .ok_or(Error::InvalidArgument("the GID the datagram was sent to is not in the table"))
}

/// Whether a 20-byte IPv4 header's checksum holds (RFC 791).
fn ipv4_sum_ok(h: &[u8]) -> bool {
    let mut sum: u32 = h.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

impl Qp {
    /// Brings a UD QP from RESET to RTS (`ibv_ud_pingpong`'s three modifies): INIT on `port`
    /// with P_Key index 0 and `qkey`, RTR, RTS sending from PSN `sq_psn`.
    pub fn modify_ud_to_rts(&self, port: u8, qkey: u32, sq_psn: u32) -> Result<()> {
        use crate::attr::{QpAttr, QpAttrMask as M, QpState};
        let init = QpAttr { qp_state: QpState::Init, port_num: port, qkey, ..Default::default() };
        self.modify_qp(&init, M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY)?;
        self.modify_qp(&QpAttr { qp_state: QpState::Rtr, ..Default::default() }, M::STATE)?;
        let rts = QpAttr { qp_state: QpState::Rts, sq_psn, ..Default::default() };
        self.modify_qp(&rts, M::STATE | M::SQ_PSN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ud_transitions_take_a_qkey_where_rc_takes_a_path() {
        use crate::attr::{
            QpAttrMask as M,
            QpState::{Init, Reset, Rtr, Rts, Sqe},
            QpType::Ud,
        };
        use crate::qp_state::{check, required};
        let init = M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY;
        assert_eq!(check(Reset, Init, Ud, init), Ok(()));
        assert!(matches!(check(Reset, Init, Ud, init.without(M::QKEY)), Err(Error::InvalidArgument(_))));
        assert!(matches!(check(Reset, Init, Ud, init | M::ACCESS_FLAGS), Err(Error::InvalidArgument(_))));
        assert_eq!(check(Init, Rtr, Ud, M::STATE), Ok(()));
        assert!(matches!(check(Init, Rtr, Ud, M::STATE | M::AV), Err(Error::InvalidArgument(_))));
        assert!(matches!(check(Init, Rtr, Ud, M::STATE | M::DEST_QPN), Err(Error::InvalidArgument(_))));
        assert!(matches!(check(Rtr, Rts, Ud, M::STATE), Err(Error::InvalidArgument(_))));
        assert_eq!(check(Rtr, Rts, Ud, M::STATE | M::SQ_PSN | M::QKEY), Ok(()));
        assert_eq!(check(Sqe, Rts, Ud, M::STATE), Ok(()), "SQE -> RTS is UD's");
        assert_eq!(required(Rtr, Rts, Ud), Some(M::STATE | M::SQ_PSN));
        assert_eq!(check(Init, Rts, Ud, M::STATE), Err(Error::InvalidState));
    }

    #[test]
    fn ipv4_checksums_are_checked() {
        let mut h = [0x45u8, 0, 0, 60, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2];
        assert!(!ipv4_sum_ok(&h));
        let mut sum: u32 = h.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        assert!(ipv4_sum_ok(&h));
    }
}
