//! TCP ports: one held where nothing listens, and whether a child process listens on one.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// A TCP port bound and never listening: a connection to it is refused, and while this is held
/// no one else can bind it, so "refused" cannot turn into someone's listener (as a port found
/// free and closed again can).
pub struct ClosedTcpPort {
    _fd: OwnedFd,
    addr: SocketAddr,
}

impl ClosedTcpPort {
    /// A port of `ip` the kernel picks (a bind to port 0), without `listen`.
    pub fn new(ip: IpAddr) -> io::Result<Self> {
        let family = if ip.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
        // SAFETY: socket(2) with constant arguments; the result is checked before use.
        let raw = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor just returned by socket(2) and owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: an all-zero sockaddr_storage is a valid value of the plain C struct.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let len = match ip {
            IpAddr::V4(a) => {
                // SAFETY: sockaddr_storage is large enough and aligned for sockaddr_in.
                let sin = unsafe { &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
                sin.sin_family = libc::AF_INET as libc::sa_family_t;
                sin.sin_addr.s_addr = u32::from_ne_bytes(a.octets());
                std::mem::size_of::<libc::sockaddr_in>()
            }
            IpAddr::V6(a) => {
                // SAFETY: sockaddr_storage is large enough and aligned for sockaddr_in6.
                let sin6 = unsafe { &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
                sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                sin6.sin6_addr.s6_addr = a.octets();
                std::mem::size_of::<libc::sockaddr_in6>()
            }
        };
        // SAFETY: `ss` holds a sockaddr of `len` bytes for the socket's family.
        let r = unsafe {
            libc::bind(fd.as_raw_fd(), (&ss as *const libc::sockaddr_storage).cast(), len as libc::socklen_t)
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: `ss` has room for `len` bytes, which getsockname(2) fills and updates.
        let r = unsafe { libc::getsockname(fd.as_raw_fd(), (&mut ss as *mut libc::sockaddr_storage).cast(), &mut len) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        let port = match ip {
            // SAFETY: the socket is AF_INET: getsockname wrote a sockaddr_in.
            IpAddr::V4(_) => unsafe { (*(&ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>()).sin_port },
            // SAFETY: the socket is AF_INET6: getsockname wrote a sockaddr_in6.
            IpAddr::V6(_) => unsafe {
                (*(&ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()).sin6_port
            },
        };
        Ok(Self { _fd: fd, addr: SocketAddr::new(ip, u16::from_be(port)) })
    }

    /// The address and port held.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// The inodes of the TCP sockets listening on `port` in this network namespace (Linux's
/// `/proc/net/tcp` and `tcp6`: state `0A` is LISTEN).
fn listening_inodes(port: u16) -> Vec<u64> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || f[3] != "0A" {
                continue;
            }
            let local_port = f[1].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) {
                inodes.extend(f[9].parse::<u64>().ok());
            }
        }
    }
    inodes
}

/// Whether process `pid` holds a socket listening on TCP `port` (its `/proc/PID/fd` links to a
/// listening socket's inode).
pub fn listens(pid: u32, port: u16) -> bool {
    let inodes = listening_inodes(port);
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.flatten().any(|fd| {
        let link = std::fs::read_link(fd.path()).unwrap_or_default();
        let link = link.to_string_lossy();
        inodes.iter().any(|i| link == format!("socket:[{i}]"))
    })
}

/// What [`wait_listening`] saw.
#[derive(Debug)]
pub enum Listening {
    /// The child listens on the port.
    Yes,
    /// The child ended first (it could not bind the port, or failed before), with this status.
    Exited(ExitStatus),
    /// Neither within the limit.
    TimedOut,
}

/// Waits, at most `limit`, until `child` listens on TCP `port` or ends. A test that starts a
/// server child on a port connects only once the child itself listens there: had the child
/// failed to bind it, someone else (another run's server) might be listening on it.
pub fn wait_listening(child: &mut Child, port: u16, limit: Duration) -> Listening {
    let deadline = Instant::now() + limit;
    loop {
        if listens(child.id(), port) {
            return Listening::Yes;
        }
        match child.try_wait() {
            Ok(Some(status)) => return Listening::Exited(status),
            Ok(None) => {}
            Err(e) => panic!("netlease: waiting for the child: {e}"),
        }
        if Instant::now() > deadline {
            return Listening::TimedOut;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener, TcpStream};

    #[test]
    fn a_closed_port_refuses_and_cannot_be_bound_by_another() {
        let held = ClosedTcpPort::new(Ipv4Addr::LOCALHOST.into()).unwrap();
        let a = held.addr();
        assert_ne!(a.port(), 0);
        let e = TcpStream::connect_timeout(&a, Duration::from_secs(5)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
        let e = TcpListener::bind(a).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
        assert!(!listens(std::process::id(), a.port()));
    }

    #[test]
    fn a_listener_of_this_process_is_seen_and_one_of_another_is_not() {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(listens(std::process::id(), port));
        // A child that listens on nothing.
        let mut c = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        assert!(!listens(c.id(), port));
        assert!(matches!(wait_listening(&mut c, port, Duration::from_millis(100)), Listening::TimedOut));
        c.kill().unwrap();
        assert!(matches!(wait_listening(&mut c, port, Duration::from_secs(5)), Listening::Exited(_)));
    }
}
