//! The connection data two `ibv_rc_pingpong` ends exchange over TCP before their QPs connect
//! (rdma-core `libibverbs/examples/rc_pingpong.c`), byte for byte, so either end can be that
//! program: each end sends `"%04x:%06x:%06x:%s"` of its LID, QPN, PSN and GID (32 hex digits of
//! the GID's bytes in order) with its terminating NUL, 52 bytes; the client connects to the
//! server's TCP port (18515 by default) and sends first; the server moves its QP to RTR and RTS
//! before it replies; the client answers `"done"` (5 bytes with the NUL) and both close.

use ib_core::Gid;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// `ibv_rc_pingpong`'s TCP port.
pub const DEFAULT_PORT: u16 = 18515;

/// Bytes of one message: `sizeof "0000:000000:000000:" + 32 hex digits` (with the NUL).
pub const MSG_LEN: usize = 52;

/// What the client sends last.
const DONE: &[u8; 5] = b"done\0";

/// One end's connection data (`struct pingpong_dest`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dest {
    /// Local identifier (0 on RoCE).
    pub lid: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// The end's send PSN, the peer's receive PSN (24 bits).
    pub psn: u32,
    /// The GID the end sends from (all zeros: none).
    pub gid: Gid,
}

impl Dest {
    /// The 52-byte message.
    pub fn encode(&self) -> [u8; MSG_LEN] {
        let gid: String = self.gid.iter().map(|b| format!("{b:02x}")).collect();
        let text = format!("{:04x}:{:06x}:{:06x}:{gid}", self.lid, self.qpn & 0xff_ffff, self.psn & 0xff_ffff);
        let mut msg = [0u8; MSG_LEN];
        msg[..text.len()].copy_from_slice(text.as_bytes());
        msg
    }

    /// Reads a message (the text up to its NUL). Errors name what is wrong: a field that is not
    /// hex or is wider than its value, a GID of other than 32 hex digits.
    pub fn decode(msg: &[u8]) -> Result<Self, String> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let text = std::str::from_utf8(&msg[..end]).map_err(|_| "the peer's address is not text".to_string())?;
        let fields: Vec<&str> = text.split(':').collect();
        let [lid, qpn, psn, gid] = fields[..] else {
            return Err(format!("the peer's address {text:?} does not have 4 fields"));
        };
        let hex = |s: &str, max: u32, what: &str| match u32::from_str_radix(s, 16) {
            Ok(v) if v <= max && !s.starts_with('+') => Ok(v),
            _ => Err(format!("the peer's {what} {s:?} is not a hex number up to {max:#x}")),
        };
        Ok(Self {
            lid: hex(lid, 0xffff, "LID")? as u16,
            qpn: hex(qpn, 0xff_ffff, "QPN")?,
            psn: hex(psn, 0xff_ffff, "PSN")?,
            gid: parse_gid(gid)?,
        })
    }

    /// `LID 0x0000, QPN 0x..., PSN 0x..., GID ...` as `ibv_rc_pingpong` prints an address.
    pub fn line(&self) -> String {
        let gid = std::net::Ipv6Addr::from(self.gid);
        format!("LID {:#06x}, QPN {:#08x}, PSN {:#08x}, GID {gid}", self.lid, self.qpn, self.psn)
    }
}

fn parse_gid(s: &str) -> Result<Gid, String> {
    let bad = || format!("the peer's GID {s:?} is not 32 hex digits");
    if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let mut gid = [0u8; 16];
    for (i, b) in gid.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(gid)
}

/// The client's side: connects to `host:port` (each address the name resolves to, in order),
/// sends `me`, reads the server's data, answers "done". Every read and write waits at most
/// `timeout`. Errors as `ibv_rc_pingpong` words them.
pub fn client(host: &str, port: u16, me: &Dest, timeout: Duration) -> Result<Dest, String> {
    // An IPv6 literal with its port reads as `[fd00::1]:18515`.
    let shown = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    let addrs = (host, port).to_socket_addrs().map_err(|e| format!("{e} for {shown}"))?;
    let mut last = None;
    let sock = addrs.into_iter().find_map(|a| TcpStream::connect_timeout(&a, timeout).map_err(|e| last = Some(e)).ok());
    let why = last.map_or_else(|| "no address".to_string(), |e| e.to_string());
    let mut sock = sock.ok_or_else(|| format!("Couldn't connect to {shown}: {why}"))?;
    bound(&sock, timeout)?;
    sock.write_all(&me.encode()).map_err(|e| format!("Couldn't send local address: {e}"))?;
    let mut msg = [0u8; MSG_LEN];
    sock.read_exact(&mut msg).map_err(|e| format!("Couldn't read/write remote address: {e}"))?;
    sock.write_all(DONE).map_err(|e| format!("Couldn't read/write remote address: {e}"))?;
    Dest::decode(&msg)
}

/// The server's side: listens on TCP `port` of every address ([`listen`]), then [`serve`]s.
pub fn server(
    port: u16,
    me: &Dest,
    timeout: Duration,
    connect: impl FnOnce(&Dest) -> Result<(), String>,
) -> Result<Dest, String> {
    serve(listen(port)?, me, timeout, connect)
}

/// The server's listener on TCP `port` of every address: `[::]`, which takes IPv4 clients too
/// (IPv4-mapped) unless IPv6 is off; then `0.0.0.0`.
pub fn listen(port: u16) -> Result<TcpListener, String> {
    TcpListener::bind(("::", port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .map_err(|e| format!("Couldn't listen to port {port}: {e}"))
}

/// Takes one client of `listener` (waiting for it as long as it takes, as `ibv_rc_pingpong`
/// does), reads its data, runs `connect` (the QP to RTR and RTS) and only then replies with
/// `me` and waits for "done". Reads and writes wait at most `timeout`.
pub fn serve(
    listener: TcpListener,
    me: &Dest,
    timeout: Duration,
    connect: impl FnOnce(&Dest) -> Result<(), String>,
) -> Result<Dest, String> {
    let (mut sock, _) = listener.accept().map_err(|e| format!("accept() failed: {e}"))?;
    drop(listener);
    bound(&sock, timeout)?;
    let mut msg = [0u8; MSG_LEN];
    sock.read_exact(&mut msg).map_err(|e| format!("Couldn't read remote address: {e}"))?;
    let peer = Dest::decode(&msg)?;
    connect(&peer).map_err(|e| format!("Couldn't connect to remote QP: {e}"))?;
    sock.write_all(&me.encode()).map_err(|e| format!("Couldn't send/recv local address: {e}"))?;
    let mut done = [0u8; DONE.len()];
    sock.read_exact(&mut done).map_err(|e| format!("Couldn't send/recv local address: {e}"))?;
    if &done != DONE {
        return Err(format!("Couldn't send/recv local address: the client answered {done:?}, not \"done\""));
    }
    Ok(peer)
}

fn bound(sock: &TcpStream, timeout: Duration) -> Result<(), String> {
    sock.set_read_timeout(Some(timeout))
        .and_then(|()| sock.set_write_timeout(Some(timeout)))
        .map_err(|e| format!("TCP socket: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_ibv_rc_pingpongs() {
        let mut gid = [0u8; 16];
        gid[10..].copy_from_slice(&[0xff, 0xff, 127, 0, 0, 2]);
        let d = Dest { lid: 0, qpn: 0x12, psn: 0xabcdef, gid };
        let msg = d.encode();
        assert_eq!(&msg[..51], b"0000:000012:abcdef:00000000000000000000ffff7f000002");
        assert_eq!(msg[51], 0);
        assert_eq!(Dest::decode(&msg), Ok(d));
        assert_eq!(d.line(), "LID 0x0000, QPN 0x000012, PSN 0xabcdef, GID ::ffff:127.0.0.2");
    }

    #[test]
    fn hostile_messages_are_refused_with_a_reason() {
        for bad in [
            &b"0000:000012:abcdef"[..],
            b"0000:1000000:000000:00000000000000000000ffff7f000002",
            b"10000:000012:000000:00000000000000000000ffff7f000002",
            b"0000:000012:000000:00000000000000000000ffff7f00000",
            b"0000:000012:000000:00000000000000000000ffff7f00000g",
            b"0000:+00012:000000:00000000000000000000ffff7f000002",
            b"0000:000012:000000:00000000000000000000ffff7f000002:",
            b"\xff\xfe",
            b"",
        ] {
            assert!(Dest::decode(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    /// A listener of the server's on a port the kernel picks (the test holds it from then on).
    fn listener() -> (TcpListener, u16) {
        let l = listen(0).unwrap();
        let port = l.local_addr().unwrap().port();
        (l, port)
    }

    #[test]
    fn hostile_servers_give_the_client_a_clear_error_within_its_timeout() {
        let me = Dest { lid: 0, qpn: 3, psn: 4, gid: [2; 16] };
        let t = Duration::from_millis(300);
        let answers: [&[u8]; 4] = [b"", b"0000:0000", &[b'z'; MSG_LEN], &[0xff; 4096]];
        for answer in answers {
            let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
            let port = l.local_addr().unwrap().port();
            let bytes = answer.to_vec();
            let peer = std::thread::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                let mut msg = [0u8; MSG_LEN];
                let _ = s.read_exact(&mut msg);
                let _ = s.write_all(&bytes);
                // Silent, and open, until the client gives up.
                let _ = s.read(&mut msg);
            });
            let got = client("127.0.0.1", port, &me, t);
            assert!(got.is_err(), "{answer:?}: {got:?}");
            peer.join().unwrap();
        }
        // A port held bound where nothing listens: refused, and no one can listen there meanwhile.
        let closed = netlease::ClosedTcpPort::new([127, 0, 0, 1].into()).unwrap();
        let refused = client("127.0.0.1", closed.addr().port(), &me, t).unwrap_err();
        assert!(refused.starts_with("Couldn't connect to 127.0.0.1:") && refused.contains("refused"), "{refused}");
        // An IPv6 literal is shown in brackets: on `::1` held the same way, or, where the host
        // has no `::1`, any port (the connection fails either way).
        let closed6 = netlease::ClosedTcpPort::new(std::net::Ipv6Addr::LOCALHOST.into()).ok();
        let port6 = closed6.as_ref().map_or(9, |c| c.addr().port());
        let refused = client("::1", port6, &me, t).unwrap_err();
        assert!(refused.starts_with(&format!("Couldn't connect to [::1]:{port6}: ")), "{refused}");
    }

    #[test]
    fn hostile_clients_give_the_server_a_clear_error_within_its_timeout() {
        let me = Dest { lid: 0, qpn: 1, psn: 2, gid: [1; 16] };
        let t = Duration::from_millis(300);
        let good = Dest { lid: 0, qpn: 3, psn: 4, gid: [2; 16] }.encode();
        // What the client sends, and whether it then answers "done" with something else.
        let cases: [(&[u8], &[u8]); 5] =
            [(b"", b""), (b"0000:00", b""), (&[b'q'; MSG_LEN], b""), (&good, b"nope!"), (&good, b"")];
        for (first, last) in cases {
            let (l, port) = listener();
            let (first, last) = (first.to_vec(), last.to_vec());
            let srv = std::thread::spawn(move || serve(l, &me, t, |_| Ok(())));
            let mut s = TcpStream::connect(("127.0.0.1", port)).expect("the server listens");
            s.write_all(&first).unwrap();
            if !first.is_empty() {
                let mut reply = [0u8; MSG_LEN];
                let _ = s.read_exact(&mut reply);
                s.write_all(&last).unwrap();
            }
            // Open and silent: only the server's timeout ends the wait.
            let got = srv.join().unwrap();
            assert!(got.is_err(), "{first:?} then {last:?}: {got:?}");
            drop(s);
        }
    }

    /// A port someone holds is reported in the words a test that chose the port looks for
    /// (`netlease::says_taken`), so it can try another.
    #[test]
    fn a_port_taken_is_reported_as_taken() {
        let (_held, port) = listener();
        let e = listen(port).unwrap_err();
        assert!(e.starts_with(&format!("Couldn't listen to port {port}: ")) && netlease::says_taken(&e), "{e}");
    }

    #[test]
    fn client_and_server_exchange_over_tcp() {
        let (l, port) = listener();
        let srv = Dest { lid: 0, qpn: 1, psn: 2, gid: [1; 16] };
        let cli = Dest { lid: 0, qpn: 3, psn: 4, gid: [2; 16] };
        let t = Duration::from_secs(5);
        let server = std::thread::spawn(move || {
            serve(l, &srv, t, |peer| {
                assert_eq!(peer.qpn, 3);
                Ok(())
            })
        });
        let got = client("127.0.0.1", port, &cli, t).expect("the server listens");
        assert_eq!(got, srv);
        assert_eq!(server.join().unwrap(), Ok(cli));
    }
}
