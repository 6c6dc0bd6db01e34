//! Why the RoCE v2 port could not open.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use thiserror::Error;

/// Why the RoCE v2 port could not be opened (the device then has no working port, and
/// [`crate::SimDevice::try_new`] fails with it).
#[derive(Clone, Debug, Error)]
pub enum RoceError {
    /// [`super::RoceConfig::addrs`] is empty.
    #[error("the RoCE port has no address")]
    NoAddress,
    /// A UDP socket could not be bound to `addr` (or its socket options set).
    #[error("cannot bind UDP {addr}: {source}")]
    Bind {
        /// The address and UDP port.
        addr: SocketAddr,
        /// The OS error (`EADDRINUSE`, `EADDRNOTAVAIL`, ...).
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The pcap file could not be created.
    #[error("cannot create the capture {path:?}: {source}")]
    Pcap {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: Arc<std::io::Error>,
    },
}
