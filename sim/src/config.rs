//! The model's configuration: the conformance profile, the limits a hostile driver meets, and
//! the RoCE v2 port's addresses and link faults.

use roce_wire::ROCE_V2_UDP_PORT;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Which observable behaviour the model follows where QEMU 7.2 departs from IBTA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Profile {
    /// IBTA semantics (the default): one-shot NEXT and SOLICITED arms, a notification only when an
    /// arm fires, CQ overflow reported as CQ_ERR.
    #[default]
    Ibta,
    /// QEMU 7.2's quirks where they are safe: `ARM|ARM_SOL` is the only arm (one-shot, any
    /// completion), `ARM` alone disarms, a notification entry for every CQE, overflow drops the
    /// newest CQE silently.
    Qemu72,
}

/// Model configuration.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Conformance profile.
    pub profile: Profile,
    /// Modelled one-way wire latency of the loopback port. Zero: the thread that rings the send
    /// doorbell delivers the packet before the write returns (`port.rs`).
    pub link_latency: Duration,
    /// Bytes of guest memory the driver may allocate.
    pub mem_limit: u64,
    /// Most payload bytes one QP may have on the wire (sent, not yet completed). Past it the
    /// device stops consuming that QP's SQ until a send completes (one message is always
    /// allowed), so a hostile driver cannot make the model buffer unbounded memory. Default
    /// 64 MiB. (A QP also never has more sends outstanding than its SQ depth, whatever their
    /// size: zero-length sends are bounded by count.)
    pub qp_bytes_in_flight: u64,
    /// Most packets the whole device holds on its wire (in flight, parked for a receive WQE, or
    /// being delivered). Past it every QP's SQ drain pauses until a packet leaves the wire (an
    /// empty wire always takes one). Default 16384. On the RoCE port a message counts, as one
    /// packet, from its post until it is acknowledged or failed (its requester keeps a copy).
    pub device_packets_in_flight: usize,
    /// Most payload bytes on the whole device's wire, likewise. Default 256 MiB, a quarter of
    /// the default `mem_limit`: what the model buffers for all QPs together stays well under the
    /// guest memory the driver may allocate.
    pub device_bytes_in_flight: u64,
    /// Most host memory the device's objects may cost (`budget.rs`): page lists, resolved ring
    /// pages, queues and the structures themselves. A create that would pass it fails with
    /// `ENOMEM`. Default 256 MiB, a quarter of the default `mem_limit`.
    pub host_budget: u64,
    /// RoCE v2 on the wire instead of the in-process loopback (`roce/`); `None` (the default):
    /// the loopback.
    pub roce: Option<RoceConfig>,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            profile: Profile::Ibta,
            link_latency: Duration::ZERO,
            mem_limit: 1 << 30,
            qp_bytes_in_flight: 64 << 20,
            device_packets_in_flight: 16 << 10,
            device_bytes_in_flight: 256 << 20,
            host_budget: 256 << 20,
            roce: None,
        }
    }
}

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
