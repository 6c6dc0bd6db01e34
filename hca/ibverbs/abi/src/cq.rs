//! `struct ibv_cq`, `struct ibv_comp_channel` and `struct ibv_cq_init_attr_ex`.

use super::{ibv_context, pthread_cond_t, pthread_mutex_t};
use memoffset::offset_of;
use std::mem::size_of;

/// `struct ibv_cq`: written by the library; programs read `context`, `channel`, `cq_context`,
/// `cqe`, and the header's inline `ibv_poll_cq`/`ibv_req_notify_cq` call through `context`.
/// `mutex`, `cond` and the event counters are libibverbs's own bookkeeping, unused here (the
/// verbs core counts events and acknowledgements).
#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut libc::c_void,
    pub handle: u32,
    pub cqe: i32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_comp_channel`: `fd` is the channel's real file descriptor (readable while an
/// event waits).
#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: i32,
    pub refcnt: i32,
}

/// `struct ibv_cq_init_attr_ex` (`ibv_create_cq_ex`).
#[repr(C)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut libc::c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut libc::c_void,
}

const _: () = assert!(size_of::<ibv_cq>() == 128 && offset_of!(ibv_cq, mutex) == 32);
const _: () = assert!(offset_of!(ibv_cq, comp_events_completed) == 120);
const _: () = assert!(size_of::<ibv_comp_channel>() == 16);
const _: () = assert!(size_of::<ibv_cq_init_attr_ex>() == 56);
