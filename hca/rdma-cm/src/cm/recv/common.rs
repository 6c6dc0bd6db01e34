//! What every handler of a received MAD shares: where an answer goes, and how a MAD naming no
//! ID of ours is counted.

use crate::cm::table::Inner;
use crate::cm::types::CmId;
use crate::transport::{MadAddr, ReceivedMad, GSI_QKEY, GSI_QPN};

/// The received MAD's facts a handler needs.
pub struct Rx<'a> {
    pub from: &'a MadAddr,
    pub tid: u64,
    /// The whole MAD, for a REQ held until its listener comes.
    pub mad: &'a ReceivedMad,
}

/// The address an answer to `from` goes to (`cm_init_av_for_response`): the sender's GID and
/// QP1 with the GSI Q_Key, from the local GID the MAD reached, with its flow label and traffic
/// class; hop limit 0xFF, as Linux builds a RoCE v2 response's GRH.
pub fn response_addr(from: &MadAddr) -> MadAddr {
    MadAddr { qpn: GSI_QPN, qkey: GSI_QKEY, hop_limit: 0xFF, ..*from }
}

/// Counts a MAD whose communication IDs match no live ID: a live ID under that local ID (the
/// remote ID did not match, or the state moved on) is a state drop, none at all an unknown ID.
pub fn unmatched(g: &mut Inner, local: u32) {
    match g.ids.get(&CmId(local)) {
        Some(c) if !c.destroyed => g.stats.dropped_state += 1,
        _ => g.stats.dropped_unknown_id += 1,
    }
}
