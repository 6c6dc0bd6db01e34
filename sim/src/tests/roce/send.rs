//! SEND and SEND with immediate over the RoCE v2 port: IPv4 between two devices, IPv6 within one
//! (in the test's own network namespace).

use super::*;
use pvrdma_abi::wqe::{wc_flags, wc_opcode, wc_status};

#[test]
fn sends_of_1_4096_and_65536_bytes_arrive_whole_between_two_devices() {
    let (a, ea, b, eb) = pair(&Opts::steady(), LinkFaults::default());
    for (i, len) in [1usize, 4096, 65536].into_iter().enumerate() {
        let msg = pattern(i as u64, len);
        recv(&b, &eb, 100 + i as u64, 0, 70_000);
        send(&a, &ea, i as u64, &msg, 0, None);
        let rx = wait(&b, &eb, 1, LONG);
        let tx = wait(&a, &ea, 1, LONG);
        assert_eq!((rx.len(), tx.len()), (1, 1), "message of {len} bytes");
        assert_eq!(rx[0].status.get(), wc_status::SUCCESS);
        assert_eq!(rx[0].opcode.get(), wc_opcode::RECV);
        assert_eq!(rx[0].wr_id.get(), 100 + i as u64);
        assert_eq!(rx[0].byte_len.get() as usize, len);
        assert_eq!(rx[0].src_qp.get(), 0, "RC: no source QP, as rxe (issue 21 §5)");
        assert_eq!(tx[0].status.get(), wc_status::SUCCESS);
        assert_eq!(tx[0].wr_id.get(), i as u64);
        assert_eq!(received(&b, &eb, 0, len), msg);
    }
    let (sa, sb) = (a.dev.stats(), b.dev.stats());
    // 1 + 4 + 64 packets at MTU 1024; an ACK for each message's last packet, and for the 32nd
    // packet of the long one (AckReq every 32 packets).
    assert_eq!(sa.roce_tx_packets, 69);
    assert_eq!(sb.roce_acks_sent, 4);
    assert_eq!((sa.roce_retransmits, sb.roce_rx_duplicates), (0, 0));
}

#[test]
fn send_with_immediate_carries_it_and_the_solicited_flag() {
    let (a, ea, b, eb) = pair(&Opts { mtu: 1, ..Opts::default() }, LinkFaults::default());
    recv(&b, &eb, 1, 0, 4096);
    send(&a, &ea, 7, &pattern(3, 1000), 0, Some(0xdead_beef));
    let rx = wait(&b, &eb, 1, LONG);
    assert_eq!(rx.len(), 1);
    assert_eq!(rx[0].imm_data.get(), 0xdead_beef);
    assert_eq!(rx[0].wc_flags.get() & wc_flags::WITH_IMM, wc_flags::WITH_IMM);
    assert_eq!(rx[0].byte_len.get(), 1000);
    assert_eq!(received(&b, &eb, 0, 1000), pattern(3, 1000));
    assert_eq!(wait(&a, &ea, 1, LONG)[0].status.get(), wc_status::SUCCESS);
}

/// On `::1` in the test's own network namespace (over IPv4 where none can be made).
#[test]
fn one_device_talks_to_itself_over_ipv6_loopback() {
    netlease::netns::own(|net| {
        let mut d = device_for(net, RoceConfig::new(vec![]), SimConfig::default());
        let ip = ip(&d);
        let (x, y) = (end(&mut d, 64), end(&mut d, 64));
        let o = Opts::default();
        connect_both(&mut d, x.qp.qpn, y.qp.qpn, ip, &o);
        for i in 0..20u64 {
            recv(&d, &y, i, i * 3000, 3000);
            send(&d, &x, i, &pattern(i, 2500), i * 3000, None);
        }
        let rx = wait(&d, &y, 20, LONG);
        assert_eq!(rx.len(), 20);
        for (i, c) in rx.iter().enumerate() {
            assert_eq!((c.wr_id.get(), c.status.get()), (i as u64, wc_status::SUCCESS));
            assert_eq!(received(&d, &y, i as u64 * 3000, 2500), pattern(i as u64, 2500));
        }
        let tx = wait(&d, &x, 20, LONG);
        assert!(tx.iter().all(|c| c.status.get() == wc_status::SUCCESS) && tx.len() == 20);
        let s = d.dev.stats();
        // Every IPv6 packet's ICRC was checked, and none failed.
        assert_eq!((s.roce_rx_dropped_icrc, s.roce_rx_dropped_malformed), (0, 0));
        assert_eq!(s.roce_rx_packets, s.roce_tx_packets);
    });
}

#[test]
fn a_connection_reset_and_reconnected_with_new_psns_starts_afresh() {
    let (mut a, ea, mut b, eb) = pair(&Opts::steady(), LinkFaults::default());
    let round = |a: &Drv, b: &Drv, first: u64| {
        for i in first..first + 3 {
            recv(b, &eb, i, 0, 2048);
            recv(a, &ea, i, 0, 2048);
            send(a, &ea, i, &pattern(i, 1500), 0, None);
            send(b, &eb, i, &pattern(i + 100, 1500), 2048, None);
            for (d, e) in [(a, &ea), (b, &eb)] {
                let got = wait(d, e, 2, LONG);
                assert_eq!(got.len(), 2, "message {i}");
                assert!(got.iter().all(|c| c.status.get() == wc_status::SUCCESS));
            }
            assert_eq!(received(b, &eb, 0, 1500), pattern(i, 1500));
            assert_eq!(received(a, &ea, 0, 1500), pattern(i + 100, 1500));
        }
    };
    round(&a, &b, 0);
    let mut reset = QpAttr::new_zeroed();
    reset.qp_state = U32::new(qp_state::RESET);
    assert_eq!(a.modify(ea.qp.qpn, m::STATE, reset), 0);
    assert_eq!(b.modify(eb.qp.qpn, m::STATE, reset), 0);
    let o = Opts { sq_psn: 0x12_3456, rq_psn: 0x65_4321, ..Opts::steady() };
    let (ia, ib) = (ip(&a), ip(&b));
    connect(&mut a, ea.qp.qpn, eb.qp.qpn, ib, &o);
    let ob = Opts { sq_psn: o.rq_psn, rq_psn: o.sq_psn, ..o };
    connect(&mut b, eb.qp.qpn, ea.qp.qpn, ia, &ob);
    round(&a, &b, 3);
    let (sa, sb) = (a.dev.stats(), b.dev.stats());
    assert_eq!((sa.roce_rx_dropped_psn, sb.roce_rx_dropped_psn), (0, 0));
    assert_eq!((sa.roce_retransmits, sb.roce_retransmits), (0, 0));
}

#[test]
fn a_one_mebibyte_send_flows_through_the_window() {
    let (mut a, ea, mut b, eb) = pair(&Opts::steady(), LinkFaults::default());
    const LEN: u64 = 1 << 20;
    let rw = access::LOCAL_WRITE;
    let src = a.create_mr(ea.pd, 0x7200_0000_0000, LEN, rw);
    let dst = b.create_mr(eb.pd, 0x7300_0000_0000, LEN, rw);
    let msg = pattern(77, LEN as usize);
    a.dev.mem().write(src.iova, &msg).unwrap();
    b.recv(&eb.qp, 1, &[sge(dst.va, LEN as u32, dst.lkey)]);
    a.post_send_wqe(&ea.qp, 2, wr_opcode::SEND, send_flags::SIGNALED, 0, &[sge(src.va, LEN as u32, src.lkey)]);
    a.qp_doorbell(&ea.qp, UAR_QP_SEND);
    let rx = wait(&b, &eb, 1, LONG);
    assert_eq!(rx.len(), 1);
    assert_eq!((rx[0].status.get(), rx[0].byte_len.get()), (wc_status::SUCCESS, LEN as u32));
    assert_eq!(wait(&a, &ea, 1, LONG)[0].status.get(), wc_status::SUCCESS);
    let mut got = vec![0u8; LEN as usize];
    b.dev.mem().read(dst.iova, &mut got).unwrap();
    assert!(got == msg, "the megabyte arrived intact");
    // 1024 packets, an ACK every 32: the window moved as they came.
    assert_eq!(b.dev.stats().roce_acks_sent, 32);
}
