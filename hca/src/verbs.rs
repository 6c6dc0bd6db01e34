//! The plain verbs types: attributes, work requests, flags, events and statistics
//! (the shapes of IBTA chapter 11 and Linux's `ib_verbs.h`, reduced to what this driver does).

use crate::cq::Cq;
use pvrdma_abi::dsr::DeviceCaps;
use pvrdma_abi::verbs::{mtu, port_state};
use std::fmt;
use std::ops::BitOr;

/// Device attributes (IBTA 11.2.1.2 Query HCA), from the DSR's `caps` the device fills in when the
/// DSR is loaded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version.
    pub fw_ver: u64,
    /// Node GUID as a number (the wire value, big-endian in the caps, converted).
    pub node_guid: u64,
    /// System image GUID (as a number).
    pub sys_image_guid: u64,
    /// PCI vendor ID (0x15ad).
    pub vendor_id: u32,
    /// PCI device ID (0x0820).
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
    /// Entries of the port's GID table.
    pub gid_tbl_len: u32,
    /// Entries of the port's P_Key table.
    pub max_pkeys: u16,
    /// UAR pages (the kernel's included).
    pub max_uar: u32,
}

impl From<&DeviceCaps> for DeviceAttr {
    fn from(c: &DeviceCaps) -> Self {
        Self {
            fw_ver: c.fw_ver.get(),
            node_guid: c.node_guid.get(),
            sys_image_guid: c.sys_image_guid.get(),
            vendor_id: c.vendor_id.get(),
            vendor_part_id: c.vendor_part_id.get(),
            hw_ver: c.hw_ver.get(),
            phys_port_cnt: c.phys_port_cnt,
            max_qp: c.max_qp.get(),
            max_qp_wr: c.max_qp_wr.get(),
            max_sge: c.max_sge.get(),
            max_cq: c.max_cq.get(),
            max_cqe: c.max_cqe.get(),
            max_mr: c.max_mr.get(),
            max_pd: c.max_pd.get(),
            max_mr_size: c.max_mr_size.get(),
            page_size_cap: c.page_size_cap.get(),
            gid_tbl_len: c.gid_tbl_len.get(),
            max_pkeys: c.max_pkeys.get(),
            max_uar: c.max_uar.get(),
        }
    }
}

/// Port state (IBTA 14.2.5.6 PortInfo PortState; `enum pvrdma_port_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PortState {
    /// No state change / unknown (also what an out-of-range device value decodes to).
    #[default]
    Nop,
    /// Link down.
    Down,
    /// Link up, not yet armed (also QP INIT).
    Init,
    /// Armed.
    Armed,
    /// Active: traffic flows.
    Active,
    /// Active, deferring (IBTA 1.2).
    ActiveDefer,
}

impl PortState {
    /// Decodes the device's value; unknown values are [`PortState::Nop`] (never trusted).
    pub fn from_raw(v: u32) -> Self {
        match v {
            port_state::DOWN => Self::Down,
            port_state::INIT => Self::Init,
            port_state::ARMED => Self::Armed,
            port_state::ACTIVE => Self::Active,
            port_state::ACTIVE_DEFER => Self::ActiveDefer,
            _ => Self::Nop,
        }
    }

    /// The numeric value (`ibv_port_state`).
    pub fn raw(self) -> u32 {
        match self {
            Self::Nop => port_state::NOP,
            Self::Down => port_state::DOWN,
            Self::Init => port_state::INIT,
            Self::Armed => port_state::ARMED,
            Self::Active => port_state::ACTIVE,
            Self::ActiveDefer => port_state::ACTIVE_DEFER,
        }
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

/// Port attributes (IBTA 11.2.1.3 Query HCA port), from QUERY_PORT. MTUs in bytes (0 if the
/// device reported an unknown MTU code).
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
}

impl From<&pvrdma_abi::verbs::PortAttr> for PortAttr {
    fn from(a: &pvrdma_abi::verbs::PortAttr) -> Self {
        Self {
            state: PortState::from_raw(a.state.get()),
            max_mtu: mtu::bytes(a.max_mtu.get()).unwrap_or(0),
            active_mtu: mtu::bytes(a.active_mtu.get()).unwrap_or(0),
            gid_tbl_len: a.gid_tbl_len.get(),
            pkey_tbl_len: a.pkey_tbl_len.get(),
            lid: a.lid.get(),
            max_msg_sz: a.max_msg_sz.get(),
            active_width: a.active_width,
            active_speed: a.active_speed,
            phys_state: a.phys_state,
        }
    }
}

/// The MTU code (`enum pvrdma_mtu`) for a size in bytes (256, 512, 1024, 2048 or 4096).
pub fn mtu_code(bytes: u32) -> Option<u32> {
    (mtu::MTU_256..=mtu::MTU_4096).find(|&c| mtu::bytes(c) == Some(bytes))
}

/// QP transport service type. Only RC so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpType {
    /// Reliable connected (`PVRDMA_QPT_RC`).
    Rc,
}

/// Requested QP queue sizes (IBTA 11.2.5.1). Work-request counts are rounded up to powers of two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCap {
    /// Send work requests outstanding at once.
    pub max_send_wr: u32,
    /// Receive work requests outstanding at once.
    pub max_recv_wr: u32,
    /// SGEs per send work request.
    pub max_send_sge: u32,
    /// SGEs per receive work request.
    pub max_recv_sge: u32,
}

/// QP creation attributes: the CQs the QP completes into, its sizes and type.
pub struct QpInitAttr<'a> {
    /// CQ for send completions.
    pub send_cq: &'a Cq,
    /// CQ for receive completions.
    pub recv_cq: &'a Cq,
    /// Queue sizes.
    pub cap: QpCap,
    /// Transport service.
    pub qp_type: QpType,
    /// Every send WR produces a CQE, whatever its `signaled` flag.
    pub sq_sig_all: bool,
}

/// QP state (IBTA 10.3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    /// RESET: just created.
    Reset,
    /// Link up, not yet armed (also QP INIT).
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained.
    Sqd,
    /// Send queue error.
    Sqe,
    /// Error: work requests are flushed.
    Err,
}

impl QpState {
    /// The `enum pvrdma_qp_state` value.
    pub fn raw(self) -> u32 {
        use pvrdma_abi::verbs::qp_state::*;
        match self {
            Self::Reset => RESET,
            Self::Init => INIT,
            Self::Rtr => RTR,
            Self::Rts => RTS,
            Self::Sqd => SQD,
            Self::Sqe => SQE,
            Self::Err => ERR,
        }
    }
}

/// A scatter/gather element: `length` bytes at `addr` of the MR with `lkey`
/// (`addr` is in the MR's address space: [`crate::Mr::addr`] plus an offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// Address in the MR's address space.
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// The MR's local key.
    pub lkey: u32,
}

/// Send work request opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrOpcode {
    /// SEND.
    Send,
    /// SEND with 32-bit immediate data (carried big-endian on the wire).
    SendWithImm(u32),
}

/// A send work request (IBTA 11.4.1.1).
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    /// Returned in the work completion.
    pub wr_id: u64,
    /// The buffers (gathered for a send, scattered into for a receive).
    pub sg_list: &'a [Sge],
    /// The operation.
    pub opcode: WrOpcode,
    /// Produce a CQE on success (always produced on error or with `sq_sig_all`).
    pub signaled: bool,
    /// Set the solicited-event bit: the responder's SOLICITED arm fires on its receive CQE.
    pub solicited: bool,
}

/// A receive work request (IBTA 11.4.1.2).
#[derive(Clone, Copy, Debug)]
pub struct RecvWr<'a> {
    /// Returned in the work completion.
    pub wr_id: u64,
    /// The buffers (gathered for a send, scattered into for a receive).
    pub sg_list: &'a [Sge],
}

/// Flags of [`crate::Cq::req_notify`] (IBTA 11.4.2.5 Request Completion Notification,
/// `ib_cq_notify_flags`). Combine with `|`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct NotifyFlags(u32);

impl NotifyFlags {
    /// Fire on the next completion of any kind.
    pub const NEXT_COMPLETION: Self = Self(1 << 1);
    /// Fire on the next solicited completion (or error completion).
    pub const SOLICITED: Self = Self(1 << 0);
    /// Report (return `true`) if CQEs may already be queued, so the caller polls again.
    pub const REPORT_MISSED_EVENTS: Self = Self(1 << 2);

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The raw bits.
    pub fn bits(self) -> u32 {
        self.0
    }
}

impl BitOr for NotifyFlags {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

/// Counters the driver keeps itself (design decision 13: interrupts counted in the driver).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverStats {
    /// Interrupts taken per MSI-X vector: 0 command, 1 async event, 2 CQ notification.
    pub interrupts: [u64; 3],
    /// Completion events delivered (one per fired arm).
    pub cq_events: u64,
    /// Async events received from the device.
    pub async_events: u64,
    /// CQ-notification entries that fired no event: an unknown handle, or a CQ the driver had not
    /// armed (QEMU 7.2 writes one per CQE).
    pub spurious_cq_notifications: u64,
}

/// An asynchronous event (IBTA 11.6.3; `enum pvrdma_eqe_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncEvent {
    /// The CQ overflowed (pvrdma's only CQ event; the driver reports it as overrun).
    CqErr {
        /// The CQ's handle.
        cq: u32,
    },
    /// The QP entered the error state.
    QpFatal {
        /// The QP's handle (its QPN).
        qp: u32,
    },
    /// Catastrophic device error: the device is unusable.
    DeviceFatal,
    /// The port became active.
    PortActive(u8),
    /// The port went down.
    PortErr(u8),
    /// Any other event type, with its raw info word.
    Other {
        /// The `pvrdma_eqe_type` value.
        type_: u32,
        /// The entry's info word (an object handle or port number).
        info: u32,
    },
}

impl AsyncEvent {
    /// Decodes an async-ring entry.
    pub fn from_eqe(type_: u32, info: u32) -> Self {
        use pvrdma_abi::event::EqeType;
        match EqeType::try_from(type_) {
            Ok(EqeType::CqErr) => Self::CqErr { cq: info },
            Ok(EqeType::QpFatal) => Self::QpFatal { qp: info },
            Ok(EqeType::DeviceFatal) => Self::DeviceFatal,
            Ok(EqeType::PortActive) if info <= 0xff => Self::PortActive(info as u8),
            Ok(EqeType::PortErr) if info <= 0xff => Self::PortErr(info as u8),
            _ => Self::Other { type_, info },
        }
    }
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
    fn mtu_codes() {
        assert_eq!(mtu_code(1024), Some(3));
        assert_eq!(mtu_code(4096), Some(5));
        assert_eq!(mtu_code(1000), None);
    }

    #[test]
    fn notify_flags_combine() {
        let f = NotifyFlags::NEXT_COMPLETION | NotifyFlags::REPORT_MISSED_EVENTS;
        assert!(f.contains(NotifyFlags::REPORT_MISSED_EVENTS));
        assert!(!f.contains(NotifyFlags::SOLICITED));
    }

    #[test]
    fn async_events_decode() {
        assert_eq!(AsyncEvent::from_eqe(0, 5), AsyncEvent::CqErr { cq: 5 });
        assert_eq!(AsyncEvent::from_eqe(8, 0), AsyncEvent::DeviceFatal);
        assert_eq!(AsyncEvent::from_eqe(9, 1), AsyncEvent::PortActive(1));
        assert_eq!(AsyncEvent::from_eqe(9, 300), AsyncEvent::Other { type_: 9, info: 300 });
        assert_eq!(AsyncEvent::from_eqe(99, 1), AsyncEvent::Other { type_: 99, info: 1 });
    }
}
