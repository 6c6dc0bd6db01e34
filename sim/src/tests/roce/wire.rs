//! What the kernel puts on the wire for the port: IPv4 with Identification 0 and DF set (the
//! `IP_PMTUDISC_DO` socket of rxe-peer fact 4), so the ICRC the model computed over ID 0 is the
//! one a peer that sees the real header (rxe) checks. Seen through a raw socket (CAP_NET_RAW), in
//! the test's own network namespace where one can be made: a raw socket sees every UDP packet
//! of its namespace, and on the host's those of every other test too.

use super::*;
use netlease::netns::Netns;
use pvrdma_abi::wqe::wc_status;
use roce_wire::IpContext;
use socket2::{Domain, Protocol, Socket, Type};
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr};

/// An IPv4 UDP datagram to port 4791 from `src`: its context as the header says and its UDP
/// payload.
fn parse(b: &[u8], src: Ipv4Addr) -> Option<(IpContext, Vec<u8>)> {
    let ihl = usize::from(b.first()? & 0x0f) * 4;
    if b.get(9) != Some(&17) || b.get(12..16)? != src.octets() {
        return None;
    }
    let ip = |at: usize| -> Option<Ipv4Addr> {
        let o: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
        Some(Ipv4Addr::from(o))
    };
    let udp = b.get(ihl..)?;
    let port = |at: usize| -> Option<u16> { Some(u16::from_be_bytes([*udp.get(at)?, *udp.get(at + 1)?])) };
    let (sport, dport, len) = (port(0)?, port(2)?, usize::from(port(4)?));
    if dport != crate::roce::ROCE_V2_UDP_PORT {
        return None;
    }
    let ctx = IpContext {
        src: SocketAddr::new(ip(12)?.into(), sport),
        dst: SocketAddr::new(ip(16)?.into(), dport),
        ipv4_id: u16::from_be_bytes([b[4], b[5]]),
        ipv4_df: b[6] & 0x40 != 0,
    };
    Some((ctx, udp.get(8..len)?.to_vec()))
}

#[test]
fn ipv4_packets_leave_with_identification_0_and_df_so_the_icrc_holds_on_the_wire() {
    netlease::netns::own(|_| {
        let raw = match Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::UDP)) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                // Only root (CAP_NET_RAW) sees IP headers; the ICRC tests above still ran.
                eprintln!("SKIPPED: a raw socket needs CAP_NET_RAW: {e}");
                return;
            }
            Err(e) => panic!("raw socket: {e}"),
        };
        raw.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let (a, ea, b, eb) = pair(&Opts::default(), LinkFaults::default());
        for i in 0..3u64 {
            recv(&b, &eb, i, i * 8192, 8192);
            send(&a, &ea, i, &pattern(i, [1, 1024, 5000][i as usize]), i * 8192, None);
        }
        assert_eq!(wait(&a, &ea, 3, LONG).iter().filter(|c| c.status.get() == wc_status::SUCCESS).count(), 3);
        let sent = a.dev.stats().roce_tx_packets;
        let IpAddr::V4(src) = ip(&a) else { unreachable!("an IPv4 port") };
        let mut seen = 0;
        let mut buf = vec![0u8; 1 << 16];
        let deadline = Instant::now() + LONG;
        while seen < sent && Instant::now() < deadline {
            let Ok(n) = (&raw).read(&mut buf) else {
                continue;
            };
            let Some((ip, payload)) = parse(&buf[..n], src) else {
                continue;
            };
            assert_eq!((ip.ipv4_id, ip.ipv4_df), (0, true), "Identification 0 and DF");
            roce_wire::decode(&payload, Some(&ip)).expect("the ICRC holds over the real IPv4 header");
            seen += 1;
        }
        assert_eq!(seen, sent, "every packet the port sent was seen");
    });
}

/// On `::1` in the test's own network namespace (where a user namespace grants the raw socket's
/// CAP_NET_RAW too); where none can be made, the same datagram over IPv4 on 127/8.
#[test]
fn ipv6_datagrams_with_a_zero_udp_checksum_are_received_as_rxe_sends_them() {
    netlease::netns::own(|net| {
        let domain = match net {
            Netns::Own => Domain::IPV6,
            Netns::Host => Domain::IPV4,
        };
        let raw = match Socket::new(domain, Type::RAW, Some(Protocol::UDP)) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                eprintln!("SKIPPED: a raw socket needs CAP_NET_RAW: {e}");
                return;
            }
            Err(e) => panic!("raw socket: {e}"),
        };
        let raw = if domain == Domain::IPV4 {
            // Identification 0 and DF, as the ICRC of `IpContext::new` assumes (the port's own
            // socket option, set through a std socket of the same descriptor).
            let udp = std::net::UdpSocket::from(std::os::fd::OwnedFd::from(raw));
            crate::roce::sys::set_pmtudisc_do(&udp).expect("IP_MTU_DISCOVER");
            Socket::from(std::os::fd::OwnedFd::from(udp))
        } else {
            raw
        };
        let mut d = device_for(net, RoceConfig::new(vec![]), SimConfig::default());
        let ip = ip(&d);
        let port = crate::roce::ROCE_V2_UDP_PORT;
        // From the port's address (else the kernel picks lo's first one as the source).
        raw.bind(&SocketAddr::new(ip, 0).into()).expect("bind the raw socket");
        let (x, y) = (end(&mut d, 16), end(&mut d, 16));
        let o = Opts::default();
        connect_both(&mut d, x.qp.qpn, y.qp.qpn, ip, &o);
        recv(&d, &y, 1, 0, 4096);
        // A SEND as x would send it, from UDP port 50000, with its UDP checksum left 0 (raw IPv6
        // sockets do not fill it in for UDP).
        let (from, to) = (SocketAddr::new(ip, 50_000), SocketAddr::new(ip, port));
        let bth = roce_wire::Bth {
            opcode: roce_wire::opcode::RC_SEND_ONLY,
            pkey: 0xffff,
            dest_qp: y.qp.qpn,
            ack_req: true,
            psn: o.rq_psn,
            ..Default::default()
        };
        let mut rc = Vec::new();
        let hdr = roce_wire::Headers { bth, ..Default::default() };
        roce_wire::encode(&hdr, b"checksum zero", &IpContext::new(from, to), &mut rc).unwrap();
        let mut datagram = Vec::new();
        datagram.extend_from_slice(&50_000u16.to_be_bytes());
        datagram.extend_from_slice(&port.to_be_bytes());
        datagram.extend_from_slice(&((8 + rc.len()) as u16).to_be_bytes());
        datagram.extend_from_slice(&[0, 0]);
        datagram.extend_from_slice(&rc);
        raw.send_to(&datagram, &SocketAddr::new(ip, 0).into()).unwrap();
        let rx = wait(&d, &y, 1, LONG);
        assert_eq!(rx.len(), 1, "the zero-checksum datagram arrived: {:?}", d.dev.stats());
        assert_eq!((rx[0].status.get(), rx[0].byte_len.get()), (wc_status::SUCCESS, 13));
        assert_eq!(received(&d, &y, 0, 13), b"checksum zero");
    });
}
