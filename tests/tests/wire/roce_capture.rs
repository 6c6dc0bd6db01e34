//! What the model's RoCE v2 port really sends and receives, captured with `--pcap`'s writer
//! (`RoceConfig::pcap`) through a lossy link: SENDs, WRITEs (with immediate) and READs of several
//! packets each at MTU 1024, their ACKs, NAKs and retransmissions. Every captured packet must
//! carry a good ICRC (`roce_wire`, over the IP header as captured: IPv4 with Identification 0 and
//! DF, as the port sends it), and tshark must decode every frame as InfiniBand without a
//! complaint (skipped without tshark unless `ROCE_REQUIRE_TSHARK=1`).

use ib_core::{access, Cq, Mr, Qp, RecvWr, SendWr, Sge, WcOpcode, WcStatus, WrOpcode};
use pvrdma_sim::roce::{LinkFaults, RoceConfig};
use pvrdma_sim::SimConfig;
use roce_wire::opcode::*;
use std::collections::BTreeSet;
use tests::fixture::{connect_roce, open_roce, poll_n, rc_qp};
use tests::tshark::{tshark_present, tshark_verbose, COMPLAINTS};

const ACCESS: u32 = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;
const MSG: usize = 5000;
const ROUNDS: u64 = 12;

fn post(q: &Qp, wr_id: u64, opcode: WrOpcode, mr: &Mr, off: u64) {
    let sge = [Sge { addr: mr.addr() + off, length: MSG as u32, lkey: mr.lkey() }];
    q.post_send(&SendWr { wr_id, sg_list: &sge, opcode, signaled: true, solicited: false }).expect("post_send");
}

fn one(cq: &Cq, want: WcOpcode) -> ib_core::Wc {
    let wc = poll_n(cq, 1);
    assert_eq!(wc.len(), 1, "no completion for {want:?} within the bound");
    assert_eq!((wc[0].status, wc[0].opcode), (WcStatus::Success, want));
    wc[0]
}

fn pattern(seed: u64) -> Vec<u8> {
    (0..MSG).map(|i| (i as u64).wrapping_mul(31).wrapping_add(seed * 7) as u8).collect()
}

/// Runs SEND, WRITE with immediate and READ rounds between two QPs of one device through its
/// own address with 5% loss each way, checking every byte; the capture lands in `pcap`.
fn traffic(pcap: &std::path::Path) {
    let faults = LinkFaults { loss: 0.05, seed: 11, ..Default::default() };
    // The port's one address, its own (GID index 1).
    let roce = RoceConfig { faults, pcap: Some(pcap.to_path_buf()), ..RoceConfig::new(vec![]) };
    let (dev, _sim) = open_roce(roce, SimConfig::default());
    let dgid = dev.query_gid(1, 1).expect("the RoCE v2 GID");
    let pd = dev.alloc_pd().unwrap();
    let (cq_a, cq_b) = (dev.create_cq(64, None).unwrap(), dev.create_cq(64, None).unwrap());
    let (a, b) = (rc_qp(&pd, &cq_a, &cq_a), rc_qp(&pd, &cq_b, &cq_b));
    connect_roce(&a, b.qpn(), dgid, 1);
    connect_roce(&b, a.qpn(), dgid, 1);
    let (la, rb) = (pd.alloc_mr(2 * MSG, ACCESS).unwrap(), pd.alloc_mr(2 * MSG, ACCESS).unwrap());
    for r in 0..ROUNDS {
        let recv = [Sge { addr: rb.addr(), length: MSG as u32, lkey: rb.lkey() }];
        b.post_recv(&RecvWr { wr_id: r, sg_list: &recv }).unwrap();
        la.write(0, &pattern(r)).unwrap();
        let op = match r % 3 {
            0 => WrOpcode::Send,
            1 => WrOpcode::RdmaWriteWithImm { remote_addr: rb.addr(), rkey: rb.rkey(), imm: r as u32 },
            _ => WrOpcode::RdmaWrite { remote_addr: rb.addr(), rkey: rb.rkey() },
        };
        post(&a, r, op, &la, 0);
        let sent = one(&cq_a, if r % 3 == 0 { WcOpcode::Send } else { WcOpcode::RdmaWrite });
        assert_eq!(sent.wr_id, r);
        if r % 3 != 2 {
            let got = one(&cq_b, if r % 3 == 0 { WcOpcode::Recv } else { WcOpcode::RecvRdmaWithImm });
            assert_eq!((got.wr_id, got.byte_len as usize), (r, MSG));
        }
        let mut placed = vec![0u8; MSG];
        rb.read(0, &mut placed).unwrap();
        assert!(placed == pattern(r), "round {r}: the bytes placed differ");
        // READ them back into the second half of the local MR.
        post(&a, 100 + r, WrOpcode::RdmaRead { remote_addr: rb.addr(), rkey: rb.rkey() }, &la, MSG as u64);
        assert_eq!(one(&cq_a, WcOpcode::RdmaRead).byte_len as usize, MSG);
        let mut back = vec![0u8; MSG];
        la.read(MSG, &mut back).unwrap();
        assert!(back == pattern(r), "round {r}: the bytes read back differ");
        if r % 3 == 2 {
            // The plain WRITE left a receive posted: a SEND consumes it before the next round.
            post(&a, 200 + r, WrOpcode::Send, &la, 0);
            one(&cq_a, WcOpcode::Send);
            one(&cq_b, WcOpcode::Recv);
        }
    }
}

#[test]
fn the_ports_own_capture_decodes_with_good_icrcs_and_in_tshark() {
    let dir = std::env::temp_dir().join(format!("roce-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("port.pcap");
    traffic(&pcap);

    let records = roce_wire::pcap::read(&pcap).expect("read the capture");
    let mut seen = BTreeSet::new();
    for (i, c) in records.iter().enumerate() {
        assert!(c.ip.is_ipv4() && c.ip.ipv4_id == 0 && c.ip.ipv4_df, "record {i}: {:?}", c.ip);
        let p = roce_wire::decode(&c.udp_payload, Some(&c.ip)).unwrap_or_else(|e| panic!("record {i}: {e}"));
        seen.insert(p.hdr.bth.opcode);
    }
    println!("{} packets captured, opcodes {seen:x?}", records.len());
    let want = [
        RC_SEND_FIRST,
        RC_SEND_MIDDLE,
        RC_SEND_LAST,
        RC_RDMA_WRITE_FIRST,
        RC_RDMA_WRITE_MIDDLE,
        RC_RDMA_WRITE_LAST,
        RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        RC_RDMA_READ_REQUEST,
        RC_RDMA_READ_RESPONSE_FIRST,
        RC_RDMA_READ_RESPONSE_MIDDLE,
        RC_RDMA_READ_RESPONSE_LAST,
        RC_ACKNOWLEDGE,
    ];
    for op in want {
        assert!(seen.contains(&op), "opcode {op:#04x} never captured (saw {seen:x?})");
    }

    if !tshark_present() {
        println!("SKIPPED: tshark not installed");
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    }
    let text = tshark_verbose(&pcap);
    for b in COMPLAINTS {
        assert!(!text.contains(b), "tshark reports {b:?} in the port's capture");
    }
    let frames = text.matches("\nInfiniBand\n").count() + usize::from(text.starts_with("InfiniBand\n"));
    assert_eq!(frames, records.len(), "frames tshark decoded as InfiniBand");
    std::fs::remove_dir_all(&dir).unwrap();
}
