//! A CM exchange (REQ, REP, RTU, DREQ, DREP) written as RoCE v2 packets (UDP port 4791, UD
//! SEND Only to QP1 with the GSI Q_Key, ICRC) into a pcap, and Wireshark's InfiniBand dissector
//! (`epan/dissectors/packet-infiniband.c`) reading it: every CM attribute by its name, no
//! malformed-packet or error marks. Without tshark the test says SKIPPED and checks only our
//! own reading of the capture.

use crate::harness::*;
use rdma_cm::mad::decode;
use rdma_cm::transport::{GSI_QKEY, GSI_QPN};
use roce_wire::pcap::{read, PcapWriter};
use roce_wire::ud::{decode_ud, encode_ud, UdPacket, UD_SEND_ONLY};
use roce_wire::{Bth, IpContext, ROCE_V2_UDP_PORT};
use std::net::SocketAddr;

/// The CM attribute names `packet-infiniband.c` gives (its `CM_Attributes` table), in the
/// order of the exchange.
const NAMES: [(&str, u16); 5] = [
    ("ConnectRequest", 0x0010),
    ("ConnectReply", 0x0013),
    ("ReadyToUse", 0x0014),
    ("DisconnectRequest", 0x0015),
    ("DisconnectReply", 0x0016),
];

fn ip_of(side: Side) -> SocketAddr {
    let last = if side == Side::A { 1 } else { 2 };
    SocketAddr::from(([10, 0, 0, last], ROCE_V2_UDP_PORT))
}

#[test]
fn tshark_names_each_cm_attribute() {
    let (net, a, _, b) = connected();
    net.a.send_dreq(a, &[], net.t0).unwrap();
    net.pump(net.t0);
    net.b.send_drep(b, &[], net.t0).unwrap();
    net.pump(net.t0);
    let log = net.log();
    assert_eq!(log.len(), 5);

    let dir = std::env::temp_dir().join(format!("rdma-cm-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("cm.pcap");
    let mut w = PcapWriter::create(&pcap).unwrap();
    let mut pkt = Vec::new();
    for (i, (side, mad, _)) in log.iter().enumerate() {
        let peer = if *side == Side::A { Side::B } else { Side::A };
        let ip = IpContext::new(ip_of(*side), ip_of(peer));
        let bth = Bth { opcode: UD_SEND_ONLY, pkey: 0xFFFF, dest_qp: GSI_QPN, psn: i as u32, ..Default::default() };
        let ud = UdPacket { bth, qkey: GSI_QKEY, src_qp: GSI_QPN, imm: None, payload: mad };
        encode_ud(&ud, &ip, &mut pkt).unwrap();
        w.write(&ip, &pkt).unwrap();
    }
    drop(w);

    // Our own reading: each record a UD packet to QP1 carrying the MAD that was sent.
    let got = read(&pcap).unwrap();
    assert_eq!(got.len(), NAMES.len());
    for (c, ((_, mad, _), (_, attr_id))) in got.iter().zip(log.iter().zip(NAMES)) {
        let p = decode_ud(&c.udp_payload, None).unwrap();
        assert_eq!((p.bth.dest_qp, p.qkey, p.payload), (GSI_QPN, GSI_QKEY, mad.as_slice()));
        assert_eq!(decode(p.payload).unwrap().msg.attr_id(), attr_id);
    }

    if !tests::tshark::tshark_present() {
        println!("SKIPPED: tshark not installed; only our own reading of the capture was checked");
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    }
    let text = tests::tshark::tshark_verbose(&pcap);
    for bad in tests::tshark::COMPLAINTS {
        assert!(!text.contains(bad), "tshark reports {bad:?}:\n{text}");
    }
    let frames: Vec<&str> = text.split("\nFrame ").collect();
    assert_eq!(frames.len(), NAMES.len(), "frames in tshark's output:\n{text}");
    for ((f, (name, _)), (side, _, _)) in frames.iter().zip(NAMES).zip(&log) {
        assert!(f.contains("MAD Header - Common Management Datagram"), "no MAD header:\n{f}");
        assert!(f.contains(&format!("\n    CM {name}\n")), "tshark does not name the frame {name}:\n{f}");
        let sender = if *side == Side::A { a } else { b };
        let local = format!("{:#010x}", sender.0);
        assert_eq!(tests::tshark::field(f, "Local Communication ID:"), Some(local.as_str()), "{name}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
