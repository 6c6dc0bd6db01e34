//! libibverbs's names for its enums (`ibv_wc_status_str`, `ibv_node_type_str`,
//! `ibv_port_state_str`, `ibv_event_type_str`): static C strings, the same text libibverbs 44
//! prints, "unknown" for a value outside its table.

use libc::c_char;
use std::ffi::{CStr, CString};
use std::sync::OnceLock;

const UNKNOWN: &CStr = c"unknown";

/// The last `ibv_wc_status` libibverbs names (`IBV_WC_TM_RNDV_INCOMPLETE`).
const LAST_WC_STATUS: u32 = 23;

/// `IBV_NODE_CA` (1) up to `IBV_NODE_UNSPECIFIED` (7); 0 has no name.
const NODE_TYPES: [&CStr; 8] = [
    UNKNOWN,
    c"InfiniBand channel adapter",
    c"InfiniBand switch",
    c"InfiniBand router",
    c"iWARP NIC",
    c"usNIC",
    c"usNIC UDP",
    c"unspecified",
];

/// `IBV_PORT_NOP` (0) up to `IBV_PORT_ACTIVE_DEFER` (5).
const PORT_STATES: [&CStr; 6] = [c"no state change (NOP)", c"down", c"init", c"armed", c"active", c"active defer"];

/// `IBV_EVENT_CQ_ERR` (0) up to `IBV_EVENT_WQ_FATAL` (19), libibverbs 44's table (later versions
/// add `IBV_EVENT_DEVICE_SPEED_CHANGE`, which Debian's library still calls "unknown").
const EVENT_TYPES: [&CStr; 20] = [
    c"CQ error",
    c"local work queue catastrophic error",
    c"invalid request local work queue error",
    c"local access violation work queue error",
    c"communication established",
    c"send queue drained",
    c"path migrated",
    c"path migration request error",
    c"local catastrophic error",
    c"port active",
    c"port error",
    c"LID change",
    c"P_Key change",
    c"SM change",
    c"SRQ catastrophic error",
    c"SRQ limit reached",
    c"last WQE reached",
    c"client reregistration",
    c"GID table change",
    c"WQ fatal",
];

/// The entry `v` of `table`, "unknown" outside it (a negative C enum value included).
fn name(table: &[&'static CStr], v: i32) -> *const c_char {
    usize::try_from(v).ok().and_then(|i| table.get(i)).unwrap_or(&UNKNOWN).as_ptr()
}

/// The core's status texts (`ib_core::WcStatus::as_str`, libibverbs's table) as C strings.
fn wc_status_names() -> &'static [CString] {
    static NAMES: OnceLock<Vec<CString>> = OnceLock::new();
    NAMES.get_or_init(|| {
        (0..=LAST_WC_STATUS)
            .map(|v| CString::new(ib_core::WcStatus::from_raw(v).as_str()).unwrap_or_default())
            .collect()
    })
}

/// `ibv_wc_status_str(status)`: the text of a work completion status ("success", "Work Request
/// Flushed Error", ...), "unknown" past `IBV_WC_TM_RNDV_INCOMPLETE` or below 0.
#[no_mangle]
pub extern "C" fn ibv_wc_status_str(status: i32) -> *const c_char {
    crate::ffi::guard_pure(UNKNOWN.as_ptr(), || {
        let names = wc_status_names();
        usize::try_from(status).ok().and_then(|i| names.get(i)).map_or(UNKNOWN.as_ptr(), |s| s.as_ptr())
    })
}

/// `ibv_node_type_str(node_type)`: "InfiniBand channel adapter" for `IBV_NODE_CA`, ...;
/// "unknown" outside `IBV_NODE_CA..=IBV_NODE_UNSPECIFIED`.
#[no_mangle]
pub extern "C" fn ibv_node_type_str(node_type: i32) -> *const c_char {
    name(&NODE_TYPES, node_type)
}

/// `ibv_port_state_str(port_state)`: "active" for `IBV_PORT_ACTIVE`, ...; "unknown" outside
/// `IBV_PORT_NOP..=IBV_PORT_ACTIVE_DEFER`.
#[no_mangle]
pub extern "C" fn ibv_port_state_str(port_state: i32) -> *const c_char {
    name(&PORT_STATES, port_state)
}

/// `ibv_event_type_str(event)`: "port active" for `IBV_EVENT_PORT_ACTIVE`, ...; "unknown"
/// outside `IBV_EVENT_CQ_ERR..=IBV_EVENT_WQ_FATAL`.
#[no_mangle]
pub extern "C" fn ibv_event_type_str(event: i32) -> *const c_char {
    name(&EVENT_TYPES, event)
}
