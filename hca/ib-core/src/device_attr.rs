//! Device and port attributes (IBTA 11.2.1.2 and 11.2.1.3), in the shapes and numeric values of
//! libibverbs's `ibv_device_attr` and `ibv_port_attr`, so a C layer converts them field by field
//! and `ibv_devinfo`'s output can be reproduced from them.

use std::fmt;

/// Device attributes (IBTA 11.2.1.2 Query HCA; `ibv_device_attr`), as the provider read them
/// from the device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version, as the device reports it (how it prints is the provider's:
    /// see `DeviceOps::fw_ver_string`).
    pub fw_ver: u64,
    /// Node GUID as a number (the wire value, converted).
    pub node_guid: u64,
    /// System image GUID (as a number).
    pub sys_image_guid: u64,
    /// PCI vendor ID.
    pub vendor_id: u32,
    /// PCI device ID.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
    /// Most QPs.
    pub max_qp: u32,
    /// Most work requests per queue.
    pub max_qp_wr: u32,
    /// Most SGEs per work request.
    pub max_sge: u32,
    /// Most CQs.
    pub max_cq: u32,
    /// Most entries per CQ.
    pub max_cqe: u32,
    /// Most MRs.
    pub max_mr: u32,
    /// Most PDs.
    pub max_pd: u32,
    /// Largest MR in bytes.
    pub max_mr_size: u64,
    /// Bit n set: pages of 2^n bytes supported.
    pub page_size_cap: u64,
    /// Entries of each port's GID table.
    pub gid_tbl_len: u32,
    /// Entries of each port's P_Key table.
    pub max_pkeys: u16,
    /// UAR pages (the kernel's included); 0 for a device without.
    pub max_uar: u32,
    /// [`device_cap`] bits.
    pub device_cap_flags: u32,
    /// Most SGEs per RDMA READ work request.
    pub max_sge_rd: u32,
    /// Most outstanding RDMA READs and atomics a QP takes as responder.
    pub max_qp_rd_atom: u32,
    /// Most outstanding RDMA READs and atomics an EE context takes as responder (0: no EEs).
    pub max_ee_rd_atom: u32,
    /// Most responder resources for RDMA READs and atomics, device-wide.
    pub max_res_rd_atom: u32,
    /// Most outstanding RDMA READs and atomics a QP initiates.
    pub max_qp_init_rd_atom: u32,
    /// Most outstanding RDMA READs and atomics an EE context initiates (0: no EEs).
    pub max_ee_init_rd_atom: u32,
    /// Atomic operation support.
    pub atomic_cap: AtomicCap,
    /// Most EE contexts (reliable datagram; 0 here).
    pub max_ee: u32,
    /// Most RD domains (0 here).
    pub max_rdd: u32,
    /// Most memory windows.
    pub max_mw: u32,
    /// Most raw IPv6 QPs.
    pub max_raw_ipv6_qp: u32,
    /// Most raw Ethertype QPs.
    pub max_raw_ethy_qp: u32,
    /// Most multicast groups.
    pub max_mcast_grp: u32,
    /// Most QPs per multicast group.
    pub max_mcast_qp_attach: u32,
    /// Most QPs attached to multicast groups, device-wide.
    pub max_total_mcast_qp_attach: u32,
    /// Most address handles.
    pub max_ah: u32,
    /// Most fast memory regions (obsolete in Linux; 0 here).
    pub max_fmr: u32,
    /// Most remaps per FMR.
    pub max_map_per_fmr: u32,
    /// Most SRQs.
    pub max_srq: u32,
    /// Most work requests per SRQ.
    pub max_srq_wr: u32,
    /// Most SGEs per SRQ work request.
    pub max_srq_sge: u32,
    /// Local CA ACK delay (IBTA 9.7.6.1.3: 4.096 µs × 2^value).
    pub local_ca_ack_delay: u8,
    /// Completion vectors (`ibv_context.num_comp_vectors`): interrupt vectors CQ events can use.
    pub num_comp_vectors: u32,
}

/// `enum ibv_device_cap_flags` bits of [`DeviceAttr::device_cap_flags`], with their names as
/// `ibv_devinfo -v` prints them.
pub mod device_cap {
    /// Every bit libibverbs names, with its name.
    pub const NAMES: [(u32, &str); 24] = [
        (1, "RESIZE_MAX_WR"),
        (1 << 1, "BAD_PKEY_CNTR"),
        (1 << 2, "BAD_QKEY_CNTR"),
        (1 << 3, "RAW_MULTI"),
        (1 << 4, "AUTO_PATH_MIG"),
        (1 << 5, "CHANGE_PHY_PORT"),
        (1 << 6, "UD_AV_PORT_ENFORCE"),
        (1 << 7, "CURR_QP_STATE_MOD"),
        (1 << 8, "SHUTDOWN_PORT"),
        (1 << 9, "INIT_TYPE"),
        (PORT_ACTIVE_EVENT, "PORT_ACTIVE_EVENT"),
        (1 << 11, "SYS_IMAGE_GUID"),
        (RC_RNR_NAK_GEN, "RC_RNR_NAK_GEN"),
        (1 << 13, "SRQ_RESIZE"),
        (1 << 14, "N_NOTIFY_CQ"),
        (1 << 17, "MEM_WINDOW"),
        (1 << 18, "UD_IP_CSUM"),
        (1 << 20, "XRC"),
        (MEM_MGT_EXTENSIONS, "MEM_MGT_EXTENSIONS"),
        (1 << 23, "MEM_WINDOW_TYPE_2A"),
        (1 << 24, "MEM_WINDOW_TYPE_2B"),
        (1 << 25, "RC_IP_CSUM"),
        (1 << 26, "RAW_IP_CSUM"),
        (1 << 29, "MANAGED_FLOW_STEERING"),
    ];
    /// `IBV_DEVICE_PORT_ACTIVE_EVENT`: the device reports PORT_ACTIVE.
    pub const PORT_ACTIVE_EVENT: u32 = 1 << 10;
    /// `IBV_DEVICE_RC_RNR_NAK_GEN`: the device sends RNR NAKs for RC.
    pub const RC_RNR_NAK_GEN: u32 = 1 << 12;
    /// `IBV_DEVICE_MEM_MGT_EXTENSIONS`: fast registration and invalidation.
    pub const MEM_MGT_EXTENSIONS: u32 = 1 << 21;
}

/// `enum ibv_port_cap_flags` bits of [`PortAttr::port_cap_flags`] this stack sets.
pub mod port_cap {
    /// `IBV_PORT_CM_SUP`: connection management is supported on the port.
    pub const CM_SUP: u32 = 1 << 16;
}

/// Atomic operation support (`enum ibv_atomic_cap`, same values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AtomicCap {
    /// No atomics.
    #[default]
    None = 0,
    /// Atomic within this HCA.
    Hca = 1,
    /// Atomic against every agent of the host.
    Glob = 2,
}

/// A port's link layer (`IBV_LINK_LAYER_*`, same values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LinkLayer {
    /// Not reported.
    #[default]
    Unspecified = 0,
    /// InfiniBand.
    InfiniBand = 1,
    /// Ethernet (RoCE).
    Ethernet = 2,
}

/// What a GID table entry is for on a RoCE port (sysfs `gid_attrs/types`; `ibv_query_gid_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GidType {
    /// IB or RoCE v1 (GRH on Ethernet).
    RoceV1,
    /// RoCE v2 (UDP/IP).
    RoceV2,
}

/// Port state (IBTA 14.2.5.6 PortInfo PortState; `enum ibv_port_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PortState {
    /// No state change / unknown (also what an out-of-range device value decodes to).
    #[default]
    Nop,
    /// Link down.
    Down,
    /// Link up, not yet armed.
    Init,
    /// Armed.
    Armed,
    /// Active: traffic flows.
    Active,
    /// Active, deferring (IBTA 1.2).
    ActiveDefer,
}

impl PortState {
    /// Decodes an `ibv_port_state` value; unknown values are [`PortState::Nop`].
    pub fn from_raw(v: u32) -> Self {
        match v {
            1 => Self::Down,
            2 => Self::Init,
            3 => Self::Armed,
            4 => Self::Active,
            5 => Self::ActiveDefer,
            _ => Self::Nop,
        }
    }

    /// The `ibv_port_state` value.
    pub fn raw(self) -> u32 {
        self as u32
    }
}

impl fmt::Display for PortState {
    /// As `ibv_devinfo` prints it: `PORT_ACTIVE (4)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Self::Nop => "PORT_NOP",
            Self::Down => "PORT_DOWN",
            Self::Init => "PORT_INIT",
            Self::Armed => "PORT_ARMED",
            Self::Active => "PORT_ACTIVE",
            Self::ActiveDefer => "PORT_ACTIVE_DEFER",
        };
        write!(f, "{name} ({})", self.raw())
    }
}

/// Port attributes (IBTA 11.2.1.3 Query HCA port; `ibv_port_attr`). Unlike `ibv_port_attr` (and
/// [`crate::QpAttr::path_mtu`]), the MTUs here are in bytes, not `ibv_mtu` codes (0 if the device
/// reported a code it should not): convert with [`crate::Mtu::from_bytes`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortAttr {
    /// Logical port state.
    pub state: PortState,
    /// Largest MTU the port supports, bytes.
    pub max_mtu: u32,
    /// Active MTU, bytes.
    pub active_mtu: u32,
    /// Entries of the port's GID table.
    pub gid_tbl_len: u32,
    /// Entries of the P_Key table.
    pub pkey_tbl_len: u16,
    /// Base LID (0 on RoCE).
    pub lid: u16,
    /// Largest message in bytes.
    pub max_msg_sz: u32,
    /// Active link width (IBTA encoding).
    pub active_width: u8,
    /// Active link speed (IBTA encoding).
    pub active_speed: u8,
    /// Physical port state (IBTA encoding; 5 = LinkUp).
    pub phys_state: u8,
    /// `IBV_PORT_*` capability bits (IBTA 14.2.5.6 PortInfo CapabilityMask).
    pub port_cap_flags: u32,
    /// P_Key violations counted.
    pub bad_pkey_cntr: u32,
    /// Q_Key violations counted.
    pub qkey_viol_cntr: u32,
    /// The subnet manager's LID (0 on RoCE).
    pub sm_lid: u16,
    /// LID mask control.
    pub lmc: u8,
    /// Virtual lanes supported (IBTA encoding: 1 = VL0 ... 5 = VL0-14).
    pub max_vl_num: u8,
    /// The subnet manager's service level.
    pub sm_sl: u8,
    /// Subnet timeout (4.096 µs × 2^value).
    pub subnet_timeout: u8,
    /// InitTypeReply (IBTA 14.2.5.6).
    pub init_type_reply: u8,
    /// The link layer.
    pub link_layer: LinkLayer,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_state_prints_like_ibv_devinfo() {
        assert_eq!(PortState::Active.to_string(), "PORT_ACTIVE (4)");
        assert_eq!(PortState::from_raw(77), PortState::Nop);
    }

    #[test]
    fn device_cap_names_are_distinct_bits() {
        let all = device_cap::NAMES.iter().fold(0u32, |acc, (bit, _)| {
            assert_eq!(bit.count_ones(), 1);
            assert_eq!(acc & bit, 0);
            acc | bit
        });
        assert_eq!(all.count_ones() as usize, device_cap::NAMES.len());
    }
}
