//! The real-QEMU differential body for RESIZE_CQ (run by `tests/tests/device/qemu_model.rs` on both model
//! profiles and by `tests/tests/qemu_real.rs` on QEMU 7.2): what the probe found, what a resize
//! with CQEs queued answers, and that the CQEs and the device survive either way.

use crate::differential::{Difference, Target};
use crate::fixture::{pair, pv};
use ib_core::{WcStatus, WrOpcode};

/// RESIZE_CQ on a receive CQ holding three queued CQEs: on the IBTA model they stay, in order, in
/// a ring of 64; on QEMU 7.2 (and its model profile) the probe found no RESIZE_CQ
/// ([`Difference::NoResizeCq`]) — its unanswered probe left the device healthy — so the resize is
/// EOPNOTSUPP and the CQ keeps its size and its CQEs. A message afterwards still completes.
pub fn cq_resize(t: &Target) {
    let dev = &t.dev;
    let unsupported = t.side.differs(Difference::NoResizeCq);
    assert_eq!(pv(dev).has_resize_cq(), !unsupported, "{:?}: RESIZE_CQ as the probe found it", t.side);
    let pd = dev.alloc_pd().unwrap();
    let (scq, rcq) = (dev.create_cq(8, None).unwrap(), dev.create_cq(8, None).unwrap());
    let p = pair(dev, &pd, (&scq, &rcq), (&scq, &rcq));
    for i in 0..3u64 {
        p.recv_b(10 + i, 64 * i, 64);
        p.send_a(20 + i, 0, b"resize", WrOpcode::Send, false);
    }
    t.poll_n(&scq, 3);
    // The receive CQEs are queued once the sends completed (RC); give a slow device its time.
    std::thread::sleep(t.settle);
    match rcq.resize(64) {
        Ok(n) => {
            assert!(!unsupported, "{:?}: resized on a device without RESIZE_CQ", t.side);
            assert_eq!(n, 64);
        }
        Err(e) => {
            assert!(unsupported, "{:?}: resize failed: {e}", t.side);
            assert!(matches!(e, ib_core::Error::Unsupported(_)), "{:?}: {e:?} (EOPNOTSUPP expected)", t.side);
        }
    }
    assert_eq!(rcq.cqe(), if unsupported { 8 } else { 64 }, "{:?}", t.side);
    let got: Vec<(u64, WcStatus)> = t.poll_n(&rcq, 3).iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(got, [(10, WcStatus::Success), (11, WcStatus::Success), (12, WcStatus::Success)], "{:?}", t.side);
    p.recv_b(13, 0, 64);
    p.send_a(23, 0, b"after", WrOpcode::Send, false);
    assert_eq!(t.poll_n(&scq, 1)[0].wr_id, 23, "{:?}", t.side);
    assert_eq!(t.poll_n(&rcq, 1)[0].wr_id, 13, "{:?}: the device works after the resize", t.side);
}
