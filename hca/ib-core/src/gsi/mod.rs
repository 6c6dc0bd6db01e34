//! The GSI agent: a port's GSI QP (QP1, IBTA 13.5) with its buffers, for the consumers of
//! General Services MADs in this process (the communication manager's among them) — what Linux's
//! MAD layer (`drivers/infiniband/core/mad.c`) is to its agents, without its class dispatch: every
//! received MAD goes to whoever calls [`GsiAgent::recv`].
//!
//! - One per device port and process: [`GsiAgent::open`] of a port whose agent lives hands out
//!   another handle to it (refcounted; the last handle dropped destroys the QP and its objects).
//! - It lives in the device's kernel context: a PD, a send CQ, a receive CQ with a completion
//!   channel, QP1 moved to RTS with the GSI Q_Key `0x80010000` (IBTA 13.4.4), [`RECV_BUFFERS`]
//!   receive buffers of the GRH area and one MAD (40 + 256 bytes), re-posted as they are taken.
//! - [`GsiAgent::send`] sends one MAD as a UD datagram through an address handle it keeps per
//!   destination (a bounded cache), posted as two SGEs (the MAD's common header, then the rest:
//!   Linux's `ib_create_send_mad` does so, and QEMU 7.2's QP1 takes nothing else); at most
//!   [`SEND_SLOTS`] sends in flight, beyond which it answers [`crate::Error::QueueFull`] rather
//!   than wait.
//! - [`GsiAgent::recv`] never blocks: the next received MAD with where it came from (source GID
//!   from the GRH, source QP, the local GID index it arrived at), or [`crate::Error::WouldBlock`].
//!   [`GsiAgent::fd`] polls readable while MADs wait.
//! - A completion in error (the QP went to ERR, e.g. a send the device refused) restarts the QP:
//!   RESET to RTS again with every buffer re-posted, so the agent outlives what it was sent.

mod agent;
mod buffers;

use crate::attr::Gid;
use crate::error::Result;
use crate::registry::Device;
use agent::Agent;
use parking_lot::Mutex;
use std::os::fd::RawFd;
use std::sync::{Arc, Weak};

/// The GSI QP's number (IBTA 13.5).
pub const GSI_QPN: u32 = 1;
/// The Q_Key of every MAD to QP1 (IBTA 13.4.4; Linux `IB_QP1_QKEY`).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// Bytes of a MAD (IBTA 13.4.2).
pub const MAD_SIZE: usize = 256;
/// Receive buffers the agent keeps posted: Linux's QP1 receive queue depth
/// (`IB_MAD_QP_RECV_SIZE`, `drivers/infiniband/core/mad_priv.h`). A burst of MADs beyond it
/// (`cmtime -c 100`'s 100 REQs while the consumer holds the CM busy) is dropped by the device,
/// and each dropped REQ costs its sender a whole REQ timeout.
pub const RECV_BUFFERS: u32 = 512;
/// Sends in flight at most.
pub const SEND_SLOTS: u32 = 64;

/// Where a MAD goes to or came from (the C layer's `struct hca_gsi_addr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GsiAddr {
    /// The remote GID: the destination's (send) or the source GID from the GRH (receive).
    pub gid: Gid,
    /// The remote QP: the destination (normally [`GSI_QPN`]) or the source QP from the DETH.
    pub qpn: u32,
    /// The Q_Key to send with (normally [`GSI_QKEY`]; bit 31 set: the GSI QP's own, which is
    /// the GSI Q_Key, IBTA 10.2.5), or the one received (always [`GSI_QKEY`]: the device drops
    /// others at QP1).
    pub qkey: u32,
    /// The GRH's flow label (20 bits).
    pub flow_label: u32,
    /// The P_Key index: 0 (pvrdma's table has one entry); a send with another is refused.
    pub pkey_index: u16,
    /// The local GID index to send from, or the one the MAD's destination GID is at.
    pub sgid_index: u8,
    /// The GRH's hop limit (IP TTL); a send with 0 goes with 64.
    pub hop_limit: u8,
    /// The GRH's traffic class.
    pub traffic_class: u8,
}

/// What identifies an agent: its device (the address of the device's shared state) and port.
type Key = (usize, u8);

/// The longest [`GsiAgent::open`] waits for a port's previous agent to be torn down.
const TEARDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The agents of this process, held weakly; an entry goes once its agent is torn down.
static AGENTS: Mutex<Vec<(Key, Weak<Shared>)>> = Mutex::new(Vec::new());

/// A handle to a port's GSI agent. Clones share it; the agent goes with the last one.
#[derive(Clone)]
pub struct GsiAgent {
    shared: Arc<Shared>,
}

struct Shared {
    key: Key,
    fd: RawFd,
    /// `None` once torn down.
    agent: Mutex<Option<Agent>>,
}

impl GsiAgent {
    /// The GSI agent of `port` of `device`: the one this process has, or a new one.
    ///
    /// Errors: [`crate::Error::InvalidArgument`] for a port the device lacks; the device's
    /// refusal of a second GSI QP (one made outside this agent) or of any object;
    /// [`crate::Error::Busy`] if the port's previous agent is not torn down within 5 s; provider
    /// errors.
    pub fn open(device: &Device, port: u8) -> Result<GsiAgent> {
        device.query_port(port)?;
        let key = (device.identity(), port);
        let deadline = crate::time::deadline_after(TEARDOWN_WAIT);
        loop {
            let mut agents = AGENTS.lock();
            match agents.iter().find(|(k, _)| *k == key) {
                Some((_, w)) => {
                    if let Some(shared) = w.upgrade() {
                        return Ok(GsiAgent { shared });
                    }
                    // Its last handle is going: its QP1 is being destroyed; wait for it.
                    drop(agents);
                    if std::time::Instant::now() >= deadline {
                        return Err(crate::Error::Busy("the port's GSI agent is still being torn down"));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                None => {
                    let agent = Agent::open(device, port)?;
                    let fd = agent.fd();
                    let shared = Arc::new(Shared { key, fd, agent: Mutex::new(Some(agent)) });
                    agents.push((key, Arc::downgrade(&shared)));
                    tracing::debug!(port, "GSI agent opened");
                    return Ok(GsiAgent { shared });
                }
            }
        }
    }

    /// A fd that polls readable (`POLLIN`) while received MADs wait for [`GsiAgent::recv`] (an
    /// epoll instance: wait on it, never read it). It lives as long as the agent.
    pub fn fd(&self) -> RawFd {
        self.shared.fd
    }

    /// The port the agent serves.
    pub fn port(&self) -> u8 {
        self.shared.key.1
    }

    /// Sends `mad` (1 to [`MAD_SIZE`] bytes) as one UD datagram to `to.qpn` at `to.gid` with
    /// `to.qkey`, from local GID `to.sgid_index`, with the GRH fields of `to`.
    ///
    /// Errors: [`crate::Error::InvalidArgument`] for an empty or longer MAD, a P_Key index other
    /// than 0, an `sgid_index` naming no GID of the port, or a destination an address handle
    /// refuses; [`crate::Error::QueueFull`] while [`SEND_SLOTS`] sends are in flight;
    /// [`crate::Error::InvalidState`] once the agent is torn down; provider errors.
    pub fn send(&self, to: &GsiAddr, mad: &[u8]) -> Result<()> {
        self.with(|a| a.send(to, mad))
    }

    /// Takes the next received MAD into `buf` (at most `buf.len()` bytes copied): where it came
    /// from and its length. Never blocks.
    ///
    /// Errors: [`crate::Error::WouldBlock`] when none waits; [`crate::Error::InvalidState`] once
    /// the agent is torn down; provider errors.
    pub fn recv(&self, buf: &mut [u8]) -> Result<(GsiAddr, usize)> {
        self.with(|a| a.recv(buf))
    }

    /// MADs received and dropped by the agent so far (a GRH it could not read, a destination GID
    /// not in the port's table, a completion in error): counted, never delivered.
    pub fn dropped(&self) -> u64 {
        self.with(|a| Ok(a.dropped())).unwrap_or(0)
    }

    /// Sends posted and not yet completed (the device has not put them on the wire yet, or their
    /// completions are still queued): a process about to exit waits for 0 so its last MADs go.
    ///
    /// Errors: [`crate::Error::InvalidState`] once the agent is torn down; provider errors.
    pub fn sends_in_flight(&self) -> Result<usize> {
        self.with(|a| a.sends_in_flight())
    }

    /// Whether `self` and `other` are handles to one agent.
    pub fn same(&self, other: &GsiAgent) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    fn with<R>(&self, f: impl FnOnce(&mut Agent) -> Result<R>) -> Result<R> {
        let mut agent = self.shared.agent.lock();
        f(agent.as_mut().ok_or(crate::Error::InvalidState)?)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Torn down before its entry goes: an open of the same port meanwhile finds the entry
        // dead and waits, rather than meeting QP1 still alive.
        drop(self.agent.lock().take());
        AGENTS.lock().retain(|(k, w)| !(*k == self.key && w.strong_count() == 0));
    }
}

impl std::fmt::Debug for GsiAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GsiAgent(port {})", self.port())
    }
}
