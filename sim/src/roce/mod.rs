//! The RoCE v2 port: the model's port speaking IBTA RC transport over UDP 4791 (IBTA Annex A17),
//! chosen with [`crate::SimConfig::roce`]; the in-process loopback (`port.rs`) stays the default.

use std::net::IpAddr;
use std::path::PathBuf;

/// The UDP destination port of RoCE v2 (IBTA A17.4.3).
pub const ROCE_V2_UDP_PORT: u16 = 4791;

/// How the port speaks RoCE v2.
#[derive(Clone, Debug)]
pub struct RoceConfig {
    /// The port's addresses (a netdev's, as Linux's RoCE GID management sees them): the port binds
    /// UDP `udp_port` on each, and each becomes a RoCE v2 GID (an IPv4 address IPv4-mapped,
    /// `::ffff:a.b.c.d`). At least one.
    pub addrs: Vec<IpAddr>,
    /// The UDP port bound and sent to: [`ROCE_V2_UDP_PORT`] (another only for tests that cannot
    /// bind it).
    pub udp_port: u16,
    /// Faults injected on the link (both directions).
    pub faults: LinkFaults,
    /// Write every packet sent and received to this pcap file.
    pub pcap: Option<PathBuf>,
}

impl RoceConfig {
    /// RoCE v2 on `addrs`, UDP 4791, no faults, no capture.
    pub fn new(addrs: Vec<IpAddr>) -> Self {
        Self { addrs, udp_port: ROCE_V2_UDP_PORT, faults: LinkFaults::default(), pcap: None }
    }
}

/// Faults the port injects, each a probability in `[0, 1]` per packet, drawn from a generator
/// seeded with `seed` (so a run can be repeated).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LinkFaults {
    /// A packet is dropped.
    pub loss: f64,
    /// A packet is held back and sent after the next one.
    pub reorder: f64,
    /// A packet is sent twice.
    pub duplicate: f64,
    /// Seed of the fault generator.
    pub seed: u64,
}
