//! Completion notification on the whole stack: a CQ's arm, completion events and channels,
//! notify requests, the upcall dispatcher, arm races, a CQ's destroy against its events, and all
//! of it under hostile timing. One test binary; each module is a subject.

mod arm_race;
mod completion_events;
mod cq_arm;
mod cq_destroy;
mod notify_requests;
mod shared_cq;
mod timing;
mod upcall;
