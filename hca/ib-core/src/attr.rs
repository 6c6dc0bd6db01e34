//! QP attributes, MTUs and access flags, in the shapes and numeric values of libibverbs's
//! `<infiniband/verbs.h>` (IBTA chapter 11), so a C layer converts them field by field. Device
//! and port attributes are in [`crate::device_attr`].

use std::ops::{BitOr, BitOrAssign};

/// A GID (IBTA 4.1.1): 16 bytes in network order.
pub type Gid = [u8; 16];

/// The RoCE v2 GID of an IP address, as Linux's RoCE GID management makes one from each address
/// of a netdev (`rdma_ip2gid`): an IPv6 address as it is, an IPv4 address IPv4-mapped
/// (`::ffff:a.b.c.d`, RFC 4291 2.5.5.2).
pub fn gid_from_ip(ip: std::net::IpAddr) -> Gid {
    match ip {
        std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        std::net::IpAddr::V6(v6) => v6.octets(),
    }
}

/// A path MTU (`enum ibv_mtu`: 1 = 256 bytes ... 5 = 4096 bytes). A newtype over the raw code,
/// so a value a device reports is kept as it came, never forced into a variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, PartialOrd, Ord, Hash)]
pub struct Mtu(
    /// The `ibv_mtu` code.
    pub u32,
);

impl Mtu {
    /// 256 bytes.
    pub const MTU_256: Mtu = Mtu(1);
    /// 512 bytes.
    pub const MTU_512: Mtu = Mtu(2);
    /// 1024 bytes.
    pub const MTU_1024: Mtu = Mtu(3);
    /// 2048 bytes.
    pub const MTU_2048: Mtu = Mtu(4);
    /// 4096 bytes.
    pub const MTU_4096: Mtu = Mtu(5);

    /// The MTU of `bytes` (256, 512, 1024, 2048 or 4096).
    pub fn from_bytes(bytes: u32) -> Option<Mtu> {
        (1..=5).map(Mtu).find(|m| m.bytes() == Some(bytes))
    }

    /// Bytes, or `None` for a code outside 1..=5.
    pub fn bytes(self) -> Option<u32> {
        (1..=5).contains(&self.0).then(|| 128 << self.0)
    }
}

/// Memory and QP access flags (`enum ibv_access_flags`).
pub mod access {
    /// Local write access.
    pub const LOCAL_WRITE: u32 = 1 << 0;
    /// Remote write access.
    pub const REMOTE_WRITE: u32 = 1 << 1;
    /// Remote read access.
    pub const REMOTE_READ: u32 = 1 << 2;
    /// Remote atomic access.
    pub const REMOTE_ATOMIC: u32 = 1 << 3;
    /// Memory-window binding.
    pub const MW_BIND: u32 = 1 << 4;
    /// Zero-based addressing.
    pub const ZERO_BASED: u32 = 1 << 5;
    /// On-demand paging (`IBV_ACCESS_ON_DEMAND`).
    pub const ON_DEMAND: u32 = 1 << 6;
    /// Huge pages (`IBV_ACCESS_HUGETLB`): a hint the kernel ignores.
    pub const HUGETLB: u32 = 1 << 7;
    /// `IB_ACCESS_FLUSH_GLOBAL` (Linux 6.2): RDMA FLUSH to global visibility.
    pub const FLUSH_GLOBAL: u32 = 1 << 8;
    /// `IB_ACCESS_FLUSH_PERSISTENT` (Linux 6.2): RDMA FLUSH to persistence.
    pub const FLUSH_PERSISTENT: u32 = 1 << 9;
    /// `IBV_ACCESS_RELAXED_ORDERING`, the first optional bit.
    pub const RELAXED_ORDERING: u32 = 1 << 20;
    /// `IBV_ACCESS_OPTIONAL_RANGE` (bits 20 to 29): hints a device may ignore, which the kernel
    /// takes from any caller (Linux `IB_ACCESS_OPTIONAL`).
    pub const OPTIONAL_RANGE: u32 = 0x3ff0_0000;
    /// Every bit Linux's `ib_check_mr_access` takes (`IB_ACCESS_SUPPORTED`: bits 0 to 9 and the
    /// optional range); the others are `EINVAL`.
    pub const SUPPORTED: u32 = ((FLUSH_PERSISTENT << 1) - 1) | OPTIONAL_RANGE;
    /// Checks an MR's `flags` as Linux's `ib_check_mr_access` (include/rdma/ib_verbs.h, Linux
    /// 6.2) does for `ibv_reg_mr` on a device without on-demand paging or RDMA FLUSH (pvrdma):
    /// remote write or atomic access only together with local write (IBTA 10.6.3.1), then no bit
    /// outside [`SUPPORTED`] — both [`crate::Error::InvalidArgument`] (`EINVAL`); then
    /// [`ON_DEMAND`], [`FLUSH_GLOBAL`] and [`FLUSH_PERSISTENT`] are
    /// [`crate::Error::Unsupported`] (`EOPNOTSUPP`). Memory-window binding, zero-based
    /// addressing, `HUGETLB` and the optional range (relaxed ordering) are taken.
    pub fn check(flags: u32) -> crate::Result<()> {
        if flags & (REMOTE_WRITE | REMOTE_ATOMIC) != 0 && flags & LOCAL_WRITE == 0 {
            return Err(crate::Error::InvalidArgument("remote write or atomic needs local write"));
        }
        if flags & !SUPPORTED != 0 {
            return Err(crate::Error::InvalidArgument("unknown access bits"));
        }
        if flags & ON_DEMAND != 0 {
            return Err(crate::Error::Unsupported("on-demand paging"));
        }
        if flags & (FLUSH_GLOBAL | FLUSH_PERSISTENT) != 0 {
            return Err(crate::Error::Unsupported("RDMA FLUSH"));
        }
        Ok(())
    }
}

/// QP transport service type (`enum ibv_qp_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum QpType {
    /// Reliable connected (`IBV_QPT_RC`).
    #[default]
    Rc,
    /// Unreliable datagram (`IBV_QPT_UD`): each send names its destination with an address
    /// handle, a remote QPN and a Q_Key ([`crate::WrOpcode::UdSend`]); messages up to the port's
    /// MTU; receives start with the 40-byte GRH area.
    Ud,
    /// The port's GSI QP, QP1 (IBTA 13.5.1; Linux's `IB_QPT_GSI`): a UD QP whose number is 1,
    /// that carries General Services MADs (the CM's among them) with the GSI Q_Key `0x80010000`.
    /// Kernel consumers only ([`crate::Pd::create_qp`] refuses it in a user context, as Linux
    /// does for `ib_uverbs`), one per port; [`crate::gsi::GsiAgent`] is its consumer.
    Gsi,
}

/// QP state (IBTA 10.3.1; `enum ibv_qp_state`, same numbering).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, PartialOrd, Ord, Hash)]
pub enum QpState {
    /// RESET: just created.
    #[default]
    Reset = 0,
    /// INIT.
    Init = 1,
    /// Ready to receive.
    Rtr = 2,
    /// Ready to send.
    Rts = 3,
    /// Send queue drained.
    Sqd = 4,
    /// Send queue error.
    Sqe = 5,
    /// Error: work requests are flushed.
    Err = 6,
}

impl QpState {
    /// Decodes an `ibv_qp_state` value.
    pub fn from_raw(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::Reset,
            1 => Self::Init,
            2 => Self::Rtr,
            3 => Self::Rts,
            4 => Self::Sqd,
            5 => Self::Sqe,
            6 => Self::Err,
            _ => return None,
        })
    }

    /// The `ibv_qp_state` value.
    pub fn raw(self) -> u32 {
        self as u32
    }
}

/// QP queue sizes (IBTA 11.2.5.1; `ibv_qp_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct QpCap {
    /// Send work requests outstanding at once.
    pub max_send_wr: u32,
    /// Receive work requests outstanding at once.
    pub max_recv_wr: u32,
    /// SGEs per send work request.
    pub max_send_sge: u32,
    /// SGEs per receive work request.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send (0: none).
    pub max_inline_data: u32,
}

/// The global route of an address vector (`ibv_global_route`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct GlobalRoute {
    /// Destination GID.
    pub dgid: Gid,
    /// Flow label: the header carries its low 20 bits (IBTA 8.3); the bits above are taken and
    /// dropped, as Linux's stack passes any value.
    pub flow_label: u32,
    /// Index of the source GID in the port's GID table.
    pub sgid_index: u8,
    /// Hop limit (RoCE: the IP TTL / hop limit).
    pub hop_limit: u8,
    /// Traffic class (RoCE: the IP DSCP/ECN byte).
    pub traffic_class: u8,
}

/// An address vector (`ibv_ah_attr`). RoCE needs the global route (`is_global`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AhAttr {
    /// The global route (used when `is_global`).
    pub grh: GlobalRoute,
    /// Destination LID (0 on RoCE).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// The address has a global route header.
    pub is_global: bool,
    /// Local port.
    pub port_num: u8,
}

/// QP attributes (`ibv_qp_attr`): what [`crate::Qp::modify_qp`] sets (the fields its
/// [`QpAttrMask`] names) and [`crate::Qp::query_qp`] reads back from the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct QpAttr {
    /// The state to move to (modify) or the current one (query).
    pub qp_state: QpState,
    /// The state the caller believes current (with [`QpAttrMask::CUR_STATE`]).
    pub cur_qp_state: QpState,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Path migration state (`enum ibv_mig_state`).
    pub path_mig_state: u32,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Receive PSN: 24 bits (IBTA 9.7.1); a modify keeps the low 24, as Linux's
    /// `_ib_modify_qp` masks.
    pub rq_psn: u32,
    /// Send PSN, as `rq_psn`.
    pub sq_psn: u32,
    /// Destination QP number: the device keeps its low 24 bits (IBTA 9.2).
    pub dest_qp_num: u32,
    /// Remote access flags ([`access`]).
    pub qp_access_flags: u32,
    /// Queue sizes (query only).
    pub cap: QpCap,
    /// Primary path.
    pub ah_attr: AhAttr,
    /// Alternate path.
    pub alt_ah_attr: AhAttr,
    /// P_Key index.
    pub pkey_index: u16,
    /// Alternate P_Key index.
    pub alt_pkey_index: u16,
    /// Raise SQ_DRAINED when the SQ drains.
    pub en_sqd_async_notify: u8,
    /// The SQ is draining (query only).
    pub sq_draining: u8,
    /// Outstanding RDMA READs/atomics as initiator.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA READs/atomics as responder.
    pub max_dest_rd_atomic: u8,
    /// Minimum RNR NAK timer (IBTA 9.7.5.2.8 encoding).
    pub min_rnr_timer: u8,
    /// Port number.
    pub port_num: u8,
    /// Local ACK timeout: 4.096 us * 2^timeout (0: infinite).
    pub timeout: u8,
    /// Transport retries (0..=7).
    pub retry_cnt: u8,
    /// RNR retries (0..=7, 7 = infinite).
    pub rnr_retry: u8,
    /// Alternate port.
    pub alt_port_num: u8,
    /// Alternate path's ACK timeout.
    pub alt_timeout: u8,
}

/// Which [`QpAttr`] fields a modify sets or a query asks for (`enum ibv_qp_attr_mask`, same bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct QpAttrMask(
    /// The `ibv_qp_attr_mask` bits.
    pub u32,
);

impl QpAttrMask {
    /// The state (`qp_state`).
    pub const STATE: Self = Self(1 << 0);
    /// The state the caller believes current (`cur_qp_state`).
    pub const CUR_STATE: Self = Self(1 << 1);
    /// `en_sqd_async_notify`.
    pub const EN_SQD_ASYNC_NOTIFY: Self = Self(1 << 2);
    /// Remote access flags (`qp_access_flags`).
    pub const ACCESS_FLAGS: Self = Self(1 << 3);
    /// `pkey_index`.
    pub const PKEY_INDEX: Self = Self(1 << 4);
    /// `port_num`.
    pub const PORT: Self = Self(1 << 5);
    /// `qkey` (UD).
    pub const QKEY: Self = Self(1 << 6);
    /// The primary path (`ah_attr`).
    pub const AV: Self = Self(1 << 7);
    /// `path_mtu`.
    pub const PATH_MTU: Self = Self(1 << 8);
    /// The local ACK timeout (`timeout`).
    pub const TIMEOUT: Self = Self(1 << 9);
    /// `retry_cnt`.
    pub const RETRY_CNT: Self = Self(1 << 10);
    /// `rnr_retry`.
    pub const RNR_RETRY: Self = Self(1 << 11);
    /// `rq_psn`.
    pub const RQ_PSN: Self = Self(1 << 12);
    /// `max_rd_atomic`.
    pub const MAX_QP_RD_ATOMIC: Self = Self(1 << 13);
    /// The alternate path (`alt_ah_attr`, `alt_pkey_index`, `alt_port_num`, `alt_timeout`).
    pub const ALT_PATH: Self = Self(1 << 14);
    /// `min_rnr_timer`.
    pub const MIN_RNR_TIMER: Self = Self(1 << 15);
    /// `sq_psn`.
    pub const SQ_PSN: Self = Self(1 << 16);
    /// `max_dest_rd_atomic`.
    pub const MAX_DEST_RD_ATOMIC: Self = Self(1 << 17);
    /// `path_mig_state`.
    pub const PATH_MIG_STATE: Self = Self(1 << 18);
    /// Queue sizes (`cap`; not modifiable here).
    pub const CAP: Self = Self(1 << 19);
    /// `dest_qp_num`.
    pub const DEST_QPN: Self = Self(1 << 20);
    /// Every attribute a query can ask for.
    pub const ALL: Self = Self((1 << 21) - 1);
}

impl QpAttrMask {
    /// Whether every bit of `other` is set.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The bits of `self` not in `other`.
    pub fn without(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }

    /// The raw bits.
    pub fn bits(self) -> u32 {
        self.0
    }
}

impl BitOr for QpAttrMask {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

impl BitOrAssign for QpAttrMask {
    fn bitor_assign(&mut self, rhs: Self) {
        self.0 |= rhs.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtus_and_states() {
        assert_eq!(Mtu::from_bytes(1024), Some(Mtu::MTU_1024));
        assert_eq!(Mtu::MTU_4096.bytes(), Some(4096));
        assert_eq!(Mtu(0).bytes(), None);
        assert_eq!(Mtu::from_bytes(1000), None);
        assert_eq!(QpState::from_raw(3), Some(QpState::Rts));
        assert_eq!(QpState::from_raw(7), None);
    }

    /// Issue 21 §3: the MR access rule is Linux's `ib_check_mr_access`.
    #[test]
    fn access_rules() {
        use crate::Error::{InvalidArgument as Inval, Unsupported};
        assert!(access::check(0).is_ok());
        assert!(access::check(access::LOCAL_WRITE | access::REMOTE_WRITE).is_ok());
        assert!(matches!(access::check(access::REMOTE_WRITE), Err(Inval(_))));
        assert!(matches!(access::check(access::REMOTE_ATOMIC), Err(Inval(_))));
        for taken in [access::MW_BIND, access::ZERO_BASED, access::HUGETLB, access::RELAXED_ORDERING, 1 << 29] {
            assert!(access::check(access::LOCAL_WRITE | taken).is_ok(), "{taken:#x}");
        }
        assert!(matches!(access::check(access::ON_DEMAND), Err(Unsupported(_))));
        assert!(matches!(access::check(access::FLUSH_GLOBAL), Err(Unsupported(_))));
        assert!(matches!(access::check(access::FLUSH_PERSISTENT), Err(Unsupported(_))));
        for bad in [1 << 10, 1 << 19, 1 << 30, 1 << 31] {
            assert!(matches!(access::check(bad), Err(Inval(_))), "{bad:#x}");
        }
        assert!(matches!(access::check(access::REMOTE_WRITE | access::ON_DEMAND), Err(Inval(_))), "local write first");
    }

    #[test]
    fn gids_from_ip_addresses() {
        let v4 = gid_from_ip("10.9.0.1".parse().unwrap());
        assert_eq!(v4, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 9, 0, 1]);
        let v6: std::net::Ipv6Addr = "fd00::1".parse().unwrap();
        assert_eq!(gid_from_ip(v6.into()), v6.octets());
    }
}

/// SRQ attributes (`ibv_srq_attr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrqAttr {
    /// Receive work requests the SRQ holds.
    pub max_wr: u32,
    /// SGEs per receive work request.
    pub max_sge: u32,
    /// The limit: when fewer work requests than this stay posted, SRQ_LIMIT_REACHED fires once
    /// (0: not armed). Ignored at create, as `ibv_create_srq` ignores it.
    pub srq_limit: u32,
}

/// Which [`SrqAttr`] fields [`crate::Srq::modify`] sets (`enum ibv_srq_attr_mask`, same bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct SrqAttrMask(
    /// The `ibv_srq_attr_mask` bits.
    pub u32,
);

impl SrqAttrMask {
    /// Resize to `max_wr` (`IBV_SRQ_MAX_WR`).
    pub const MAX_WR: Self = Self(1 << 0);
    /// Arm the limit (`IBV_SRQ_LIMIT`).
    pub const LIMIT: Self = Self(1 << 1);

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The bits.
    pub fn bits(self) -> u32 {
        self.0
    }
}
