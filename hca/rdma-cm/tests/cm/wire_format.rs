//! The MAD codec: every message survives encode then decode unchanged, and its fields sit
//! where IBTA puts them.

use proptest::prelude::*;
use rdma_cm::mad::bits::HDR_LEN;
use rdma_cm::mad::header::attr;
use rdma_cm::mad::{decode, encode, Decoded};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Any body behind any CM attribute decodes to a message (every bit pattern is one), and
    /// that message encodes and decodes back to itself with its TID.
    #[test]
    fn round_trip(body in proptest::array::uniform32(any::<u8>()), fill in any::<u8>(), a in 0u16..9, tid in any::<u64>()) {
        let mut m = [fill; 256];
        m[..HDR_LEN].copy_from_slice(&[1, 7, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        m[16..18].copy_from_slice(&(attr::REQ + a).to_be_bytes());
        for (i, b) in body.iter().enumerate() {
            m[HDR_LEN + i * 7] = *b;
        }
        let Decoded { msg, .. } = decode(&m).unwrap();
        let again = decode(&encode(tid, &msg)).unwrap();
        prop_assert_eq!(again.header.tid.get(), tid);
        prop_assert_eq!(&again.msg, &msg);
        prop_assert_eq!(again.msg.attr_id(), attr::REQ + a);
    }
}
