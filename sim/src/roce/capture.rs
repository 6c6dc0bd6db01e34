//! The port's capture ([`super::RoceConfig::pcap`]): every packet sent (after the link's fault
//! decisions) and received, as raw IP with synthesized headers (`roce_wire::pcap`).

use super::RoceError;
use parking_lot::Mutex;
use roce_wire::pcap::PcapWriter;
use roce_wire::IpContext;
use std::path::Path;

/// An open capture file. Its lock is a leaf.
pub struct Capture(Mutex<PcapWriter>);

impl Capture {
    /// Creates (truncates) the file at `path`. Errors: the file cannot be created.
    pub fn create(path: &Path) -> Result<Self, RoceError> {
        let w = PcapWriter::create(path).map_err(|e| RoceError::Pcap { path: path.to_owned(), source: e.into() })?;
        Ok(Self(Mutex::new(w)))
    }

    /// Writes one packet; whether it was written (a full disk must not stop the port).
    pub fn write(&self, ip: &IpContext, udp_payload: &[u8]) -> bool {
        self.0.lock().write(ip, udp_payload).is_ok()
    }
}
