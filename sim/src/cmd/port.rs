//! The port's commands: QUERY_PORT, QUERY_PKEY (its attributes), CREATE_BIND, DESTROY_BIND (its
//! GID table).

use crate::backend::Backend;
use crate::errno::{CmdResult, Errno};
use crate::limits;
use crate::table::GidEntry;
use pvrdma_abi::cmd::{CreateBind, DestroyBind, NoopResp, QueryPkey, QueryPkeyResp, QueryPort, QueryPortResp};
use pvrdma_abi::verbs::{mtu, port_state, PortAttr};
use pvrdma_abi::PVRDMA_PKEY;
use zerocopy::little_endian::{U16, U32};

/// Physical port state "LinkUp".
const PHYS_STATE_LINK_UP: u8 = 5;

/// QUERY_PORT: port 1 is ACTIVE, LinkUp, MTU 1024 (max and active, as QEMU reports), width and
/// speed 1, one virtual lane (as rxe, QEMU's usual backend, reports). Errors: `EINVAL` for a port
/// other than 1.
pub fn query_port(_core: &Backend, req: &QueryPort) -> CmdResult<QueryPortResp> {
    if req.port_num != 1 {
        return Err(Errno::EINVAL);
    }
    let attrs = PortAttr {
        state: U32::new(port_state::ACTIVE),
        max_mtu: U32::new(mtu::MTU_1024),
        active_mtu: U32::new(mtu::MTU_1024),
        gid_tbl_len: U32::new(limits::GID_TBL_LEN),
        max_msg_sz: U32::new(limits::MAX_MSG_SZ),
        pkey_tbl_len: U16::new(limits::PKEY_TBL_LEN),
        active_width: 1,
        active_speed: 1,
        max_vl_num: 1,
        phys_state: PHYS_STATE_LINK_UP,
        ..Default::default()
    };
    Ok(QueryPortResp { attrs, ..Default::default() })
}

/// QUERY_PKEY: 0xffff at index 0 of port 1, the one entry of the table. Errors: `EINVAL` for
/// another port or index (QEMU 7.2 refuses a port past 1 or an index past 1, and answers 0xffff
/// for the index 1 its one-entry table lacks; the model refuses it).
pub fn query_pkey(_core: &Backend, req: &QueryPkey) -> CmdResult<QueryPkeyResp> {
    if req.port_num != 1 || u32::from(req.index) >= u32::from(limits::PKEY_TBL_LEN) {
        return Err(Errno::EINVAL);
    }
    Ok(QueryPkeyResp { pkey: U16::new(PVRDMA_PKEY), ..Default::default() })
}

/// CREATE_BIND: puts `new_gid` with its `gid_type` at `index` of the GID table (replacing what
/// was there).
/// Errors: `EINVAL` for an index at or past `GID_TBL_LEN`, an all-zero or multicast GID (no port
/// address), a `gid_type` that is not exactly one of the types `caps.gid_types` reports (Linux
/// sends one flag), an `mtu` that is no IB MTU in bytes (Linux sends 1024), or a `vlan` past 12
/// bits (0xfff: none, as Linux sends). QEMU 7.2 ignores `mtu` and `vlan`.
pub fn create_bind(core: &Backend, req: &CreateBind) -> CmdResult<NoopResp> {
    let index = req.index.get() as usize;
    let one_type = req.gid_type.count_ones() == 1 && req.gid_type & limits::GID_TYPES != 0;
    let mtu_bytes = matches!(req.mtu.get(), 256 | 512 | 1024 | 2048 | 4096);
    let unicast = req.new_gid != [0u8; 16] && req.new_gid[0] != 0xff;
    if !unicast || !one_type || !mtu_bytes || req.vlan.get() > 0xfff {
        return Err(Errno::EINVAL);
    }
    let mut gids = core.gids.lock();
    let entry = GidEntry { gid: req.new_gid, gid_type: req.gid_type };
    *gids.get_mut(index).ok_or(Errno::EINVAL)? = Some(entry);
    Ok(NoopResp::default())
}

/// DESTROY_BIND: empties entry `index`. `dest_gid` names the GID the driver believes is there
/// (all-zero: unstated; no bound GID is all-zero). Errors: `EINVAL` for a bad index or a
/// `dest_gid` the entry does not hold (QEMU 7.2 ignores it), `ENOENT` if the entry is already
/// empty.
pub fn destroy_bind(core: &Backend, req: &DestroyBind) -> CmdResult<NoopResp> {
    let mut gids = core.gids.lock();
    let slot = gids.get_mut(req.index.get() as usize).ok_or(Errno::EINVAL)?;
    let held = slot.ok_or(Errno::ENOENT)?;
    if req.dest_gid != [0u8; 16] && req.dest_gid != held.gid {
        return Err(Errno::EINVAL);
    }
    *slot = None;
    Ok(NoopResp::default())
}
