//! A QP's attributes between the verbs core's form and the device's (`struct pvrdma_qp_attr`),
//! for MODIFY_QP and QUERY_QP; the device's answer is checked before the core sees it.

use ib_core::{AhAttr, DeviceAttr, Error, GlobalRoute, Mtu, QpAttr, QpAttrMask, QpState, Result};
use pvrdma_abi::verbs as abi;
use pvrdma_abi::verbs::AH_GRH;

/// The device's QP attributes for the core's.
pub(super) fn to_device(a: &QpAttr) -> abi::QpAttr {
    let mut d = abi::QpAttr::default();
    d.qp_state.set(a.qp_state.raw());
    d.cur_qp_state.set(a.cur_qp_state.raw());
    d.path_mtu.set(a.path_mtu.0);
    d.path_mig_state.set(a.path_mig_state);
    d.qkey.set(a.qkey);
    d.rq_psn.set(a.rq_psn);
    d.sq_psn.set(a.sq_psn);
    d.dest_qp_num.set(a.dest_qp_num);
    d.qp_access_flags.set(a.qp_access_flags);
    d.pkey_index.set(a.pkey_index);
    d.alt_pkey_index.set(a.alt_pkey_index);
    d.en_sqd_async_notify = a.en_sqd_async_notify;
    d.max_rd_atomic = a.max_rd_atomic;
    d.max_dest_rd_atomic = a.max_dest_rd_atomic;
    d.min_rnr_timer = a.min_rnr_timer;
    d.port_num = a.port_num;
    d.timeout = a.timeout;
    d.retry_cnt = a.retry_cnt;
    d.rnr_retry = a.rnr_retry;
    d.alt_port_num = a.alt_port_num;
    d.alt_timeout = a.alt_timeout;
    d.ah_attr = ah_to_device(&a.ah_attr);
    d.alt_ah_attr = ah_to_device(&a.alt_ah_attr);
    d
}

fn ah_to_device(a: &AhAttr) -> abi::AhAttr {
    let mut d = abi::AhAttr::default();
    d.grh.dgid = a.grh.dgid;
    d.grh.flow_label.set(a.grh.flow_label);
    d.grh.sgid_index = a.grh.sgid_index;
    d.grh.hop_limit = a.grh.hop_limit;
    d.grh.traffic_class = a.grh.traffic_class;
    d.dlid.set(a.dlid);
    d.sl = a.sl;
    d.src_path_bits = a.src_path_bits;
    d.static_rate = a.static_rate;
    d.ah_flags = if a.is_global { AH_GRH } else { 0 };
    d.port_num = a.port_num;
    d
}

/// The largest PSN and QPN (24 bits, IBTA 9.7.1, 9.2).
const MAX_24BIT: u32 = (1 << 24) - 1;

/// Checks the fields of a QUERY_QP answer that every device answers at their offsets (QEMU 7.2
/// lays its backend's `ibv_qp_attr` over the rest, `QueryQpLayout` in docs/qemu.md, so those carry
/// no rule; [`from_device`] refuses an unknown state as it maps it): `path_mtu` is 0 (not set yet) or an MTU
/// code, `path_mig_state` one of MIGRATED/REARM/ARMED, and the PSNs and destination QPN fit
/// their 24 bits.
///
/// Errors: [`Error::BadResponse`] naming the field.
fn check_query(d: &abi::QpAttr) -> Result<()> {
    let checks = [
        (d.path_mtu.get() > Mtu::MTU_4096.0, "QUERY_QP: path_mtu not an MTU code"),
        (d.path_mig_state.get() > 2, "QUERY_QP: unknown path_mig_state"),
        (d.rq_psn.get() > MAX_24BIT || d.sq_psn.get() > MAX_24BIT, "QUERY_QP: PSN beyond 24 bits"),
        (d.dest_qp_num.get() > MAX_24BIT, "QUERY_QP: dest_qp_num beyond 24 bits"),
    ];
    match checks.iter().find(|(bad, _)| *bad) {
        Some((_, what)) => Err(Error::BadResponse(what)),
        None => Ok(()),
    }
}

/// The core's QP attributes from the device's answer, every field checked before the consumer
/// sees it. The prefix every device answers at its offsets ([`check_query`]: states, MTU,
/// migration state, PSNs, destination QPN; the Q_Key and access flags take any value) is
/// refused if a field is out of range. The rest is checked against the device's caps and the fields' IBTA widths, and a
/// field out of range is replaced by `set` — what the driver itself set (the QP's queue sizes
/// for `cap`, always: the device confirmed them at CREATE_QP and pvrdma cannot resize a QP):
/// QEMU 7.2 answers those fields from other offsets (its backend's `ibv_qp_attr` laid over the
/// answer; `QueryQpLayout` in docs), so their values carry no meaning there, and a consumer never
/// sees one past the caps.
///
/// Errors: [`Error::BadResponse`] for a state the driver does not know or a prefix field
/// [`check_query`] refuses.
pub(super) fn from_device(d: &abi::QpAttr, caps: &DeviceAttr, set: &QpAttr) -> Result<QpAttr> {
    let state = |v: u32| QpState::from_raw(v).ok_or(Error::BadResponse("QUERY_QP: unknown QP state"));
    let qp_state = state(d.qp_state.get())?;
    check_query(d)?;
    let mut replaced = 0u32;
    let mut pick = |ok: bool, device: u8, driver: u8| {
        replaced += u32::from(!ok);
        if ok {
            device
        } else {
            driver
        }
    };
    let in_range = |v: u8, max: u32| u32::from(v) <= max;
    let ports = u32::from(caps.phys_port_cnt);
    let a = QpAttr {
        qp_state,
        cur_qp_state: state(d.cur_qp_state.get())?,
        path_mtu: Mtu(d.path_mtu.get()),
        path_mig_state: d.path_mig_state.get(),
        qkey: d.qkey.get(),
        rq_psn: d.rq_psn.get(),
        sq_psn: d.sq_psn.get(),
        dest_qp_num: d.dest_qp_num.get(),
        qp_access_flags: d.qp_access_flags.get(),
        cap: set.cap,
        ah_attr: ah_from_device(&d.ah_attr, caps).unwrap_or(set.ah_attr),
        alt_ah_attr: ah_from_device(&d.alt_ah_attr, caps).unwrap_or(set.alt_ah_attr),
        pkey_index: pkey_index(d.pkey_index.get(), caps).unwrap_or(set.pkey_index),
        alt_pkey_index: pkey_index(d.alt_pkey_index.get(), caps).unwrap_or(set.alt_pkey_index),
        en_sqd_async_notify: pick(d.en_sqd_async_notify <= 1, d.en_sqd_async_notify, set.en_sqd_async_notify),
        sq_draining: pick(d.sq_draining <= 1, d.sq_draining, 0),
        max_rd_atomic: pick(in_range(d.max_rd_atomic, caps.max_qp_init_rd_atom), d.max_rd_atomic, set.max_rd_atomic),
        max_dest_rd_atomic: pick(
            in_range(d.max_dest_rd_atomic, caps.max_qp_rd_atom),
            d.max_dest_rd_atomic,
            set.max_dest_rd_atomic,
        ),
        min_rnr_timer: pick(in_range(d.min_rnr_timer, 31), d.min_rnr_timer, set.min_rnr_timer),
        port_num: pick(in_range(d.port_num, ports), d.port_num, set.port_num),
        timeout: pick(in_range(d.timeout, 31), d.timeout, set.timeout),
        retry_cnt: pick(in_range(d.retry_cnt, 7), d.retry_cnt, set.retry_cnt),
        rnr_retry: pick(in_range(d.rnr_retry, 7), d.rnr_retry, set.rnr_retry),
        alt_port_num: pick(in_range(d.alt_port_num, ports), d.alt_port_num, set.alt_port_num),
        alt_timeout: pick(in_range(d.alt_timeout, 31), d.alt_timeout, set.alt_timeout),
    };
    if replaced > 0 {
        tracing::debug!(replaced, "QUERY_QP: fields out of range replaced by the driver's own");
    }
    Ok(a)
}

/// A P_Key index within the device's table.
fn pkey_index(index: u16, caps: &DeviceAttr) -> Option<u16> {
    (index < caps.max_pkeys).then_some(index)
}

/// Records in `into` the attributes of `attr` that `mask` names (what a successful MODIFY_QP
/// set), for [`from_device`].
pub(super) fn record(into: &mut QpAttr, attr: &QpAttr, mask: QpAttrMask) {
    use QpAttrMask as M;
    macro_rules! take {
        ($bit:expr, $($field:ident),+) => {
            if mask.contains($bit) {
                $(into.$field = attr.$field;)+
            }
        };
    }
    take!(M::EN_SQD_ASYNC_NOTIFY, en_sqd_async_notify);
    take!(M::ACCESS_FLAGS, qp_access_flags);
    take!(M::PKEY_INDEX, pkey_index);
    take!(M::PORT, port_num);
    take!(M::QKEY, qkey);
    take!(M::AV, ah_attr);
    take!(M::PATH_MTU, path_mtu);
    take!(M::TIMEOUT, timeout);
    take!(M::RETRY_CNT, retry_cnt);
    take!(M::RNR_RETRY, rnr_retry);
    take!(M::RQ_PSN, rq_psn);
    take!(M::MAX_QP_RD_ATOMIC, max_rd_atomic);
    take!(M::ALT_PATH, alt_ah_attr, alt_pkey_index, alt_port_num, alt_timeout);
    take!(M::MIN_RNR_TIMER, min_rnr_timer);
    take!(M::SQ_PSN, sq_psn);
    take!(M::MAX_DEST_RD_ATOMIC, max_dest_rd_atomic);
    take!(M::PATH_MIG_STATE, path_mig_state);
    take!(M::DEST_QPN, dest_qp_num);
}

/// An address vector of a QUERY_QP answer, if every field is in range: the source GID index
/// within the GID table, the port within the device's, the SL within 4 bits, the flow label
/// within 20, no flag but `AH_GRH`.
fn ah_from_device(d: &abi::AhAttr, caps: &DeviceAttr) -> Option<AhAttr> {
    let ok = u32::from(d.grh.sgid_index) < caps.gid_tbl_len
        && d.port_num <= caps.phys_port_cnt
        && d.sl <= 15
        && d.grh.flow_label.get() < 1 << 20
        && d.ah_flags & !AH_GRH == 0;
    ok.then(|| ah_from_device_unchecked(d))
}

fn ah_from_device_unchecked(d: &abi::AhAttr) -> AhAttr {
    let grh = GlobalRoute {
        dgid: d.grh.dgid,
        flow_label: d.grh.flow_label.get(),
        sgid_index: d.grh.sgid_index,
        hop_limit: d.grh.hop_limit,
        traffic_class: d.grh.traffic_class,
    };
    AhAttr {
        grh,
        dlid: d.dlid.get(),
        sl: d.sl,
        src_path_bits: d.src_path_bits,
        static_rate: d.static_rate,
        is_global: d.ah_flags & AH_GRH != 0,
        port_num: d.port_num,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ib_core::QpCap;

    fn caps() -> DeviceAttr {
        DeviceAttr {
            phys_port_cnt: 1,
            max_pkeys: 1,
            gid_tbl_len: 6,
            max_qp_rd_atom: 16,
            max_qp_init_rd_atom: 16,
            ..Default::default()
        }
    }

    #[test]
    fn query_answers_are_checked_where_every_device_answers() {
        let (caps, set) = (caps(), QpAttr::default());
        let mut d = abi::QpAttr::default();
        d.qp_state.set(3);
        d.cur_qp_state.set(3);
        d.path_mtu.set(3);
        d.rq_psn.set(0x111);
        assert!(from_device(&d, &caps, &set).is_ok());
        let bad: [fn(&mut abi::QpAttr); 6] = [
            |d| d.qp_state.set(7),
            |d| d.cur_qp_state.set(99),
            |d| d.path_mtu.set(6),
            |d| d.path_mig_state.set(3),
            |d| d.sq_psn.set(1 << 24),
            |d| d.dest_qp_num.set(u32::MAX),
        ];
        for (k, f) in bad.iter().enumerate() {
            let mut e = d;
            f(&mut e);
            assert!(matches!(from_device(&e, &caps, &set), Err(Error::BadResponse(_))), "case {k}");
        }
        d.path_mtu.set(0);
        assert!(from_device(&d, &caps, &set).is_ok(), "path_mtu 0: not set yet (RESET, INIT)");
    }

    /// Issue 21 §4: past the prefix, a field beyond the device's caps or its IBTA width (what
    /// QEMU 7.2's backend layout puts there, or a hostile device) never reaches the consumer:
    /// the driver's own value stands in; a field in range is the device's; `cap` is always the
    /// QP's own sizes.
    #[test]
    fn fields_past_the_prefix_beyond_the_caps_are_the_drivers_own() {
        let caps = caps();
        let cap = QpCap { max_send_wr: 8, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 2, max_inline_data: 0 };
        let grh = GlobalRoute { sgid_index: 1, hop_limit: 64, ..Default::default() };
        let ah = AhAttr { grh, is_global: true, port_num: 1, ..Default::default() };
        let set = QpAttr {
            cap,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 6,
            min_rnr_timer: 12,
            port_num: 1,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 2,
            ah_attr: ah,
            ..Default::default()
        };
        let mut d = abi::QpAttr::default();
        (d.timeout, d.retry_cnt, d.rnr_retry, d.min_rnr_timer, d.port_num) = (0xff, 8, 0x80, 32, 2);
        (d.max_rd_atomic, d.max_dest_rd_atomic, d.sq_draining, d.en_sqd_async_notify) = (17, 200, 2, 9);
        d.pkey_index.set(4);
        d.cap.max_send_sge.set(0xffff_0000);
        d.ah_attr.grh.sgid_index = 6;
        d.alt_ah_attr.grh.flow_label.set(1 << 20);
        let a = from_device(&d, &caps, &set).unwrap();
        assert_eq!((a.timeout, a.retry_cnt, a.rnr_retry, a.min_rnr_timer, a.port_num), (14, 7, 6, 12, 1));
        assert_eq!((a.max_rd_atomic, a.max_dest_rd_atomic, a.sq_draining, a.en_sqd_async_notify), (4, 2, 0, 0));
        assert_eq!((a.pkey_index, a.cap, a.ah_attr, a.alt_ah_attr), (0, cap, ah, AhAttr::default()));
        // In range: the device's answer.
        let mut d = abi::QpAttr::default();
        (d.timeout, d.retry_cnt, d.port_num, d.max_rd_atomic, d.sq_draining) = (31, 3, 1, 16, 1);
        d.ah_attr.grh.sgid_index = 5;
        let a = from_device(&d, &caps, &set).unwrap();
        assert_eq!((a.timeout, a.retry_cnt, a.port_num, a.max_rd_atomic, a.sq_draining), (31, 3, 1, 16, 1));
        assert_eq!((a.ah_attr.grh.sgid_index, a.cap), (5, cap));
    }

    #[test]
    fn a_modify_records_what_its_mask_names() {
        let mut into = QpAttr::default();
        let attr =
            QpAttr { timeout: 9, retry_cnt: 3, rnr_retry: 2, alt_timeout: 4, alt_port_num: 1, ..Default::default() };
        record(&mut into, &attr, QpAttrMask::TIMEOUT | QpAttrMask::ALT_PATH);
        assert_eq!((into.timeout, into.retry_cnt, into.rnr_retry), (9, 0, 0));
        assert_eq!((into.alt_timeout, into.alt_port_num), (4, 1));
    }
}
