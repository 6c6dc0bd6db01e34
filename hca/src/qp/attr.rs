//! A QP's attributes between the verbs core's form and the device's (`struct pvrdma_qp_attr`),
//! for MODIFY_QP and QUERY_QP; the device's answer is checked before the core sees it.

use ib_core::{AhAttr, Error, GlobalRoute, Mtu, QpAttr, QpCap, QpState, Result};
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
/// lays its backend's `ibv_qp_attr` over the rest, `QueryQpLayout` in the README, so those carry
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

/// The core's QP attributes from the device's answer.
///
/// Errors: [`Error::BadResponse`] for a state the driver does not know or a field
/// [`check_query`] refuses.
pub(super) fn from_device(d: &abi::QpAttr) -> Result<QpAttr> {
    let state = |v: u32| QpState::from_raw(v).ok_or(Error::BadResponse("QUERY_QP: unknown QP state"));
    let qp_state = state(d.qp_state.get())?;
    check_query(d)?;
    Ok(QpAttr {
        qp_state,
        cur_qp_state: state(d.cur_qp_state.get())?,
        path_mtu: Mtu(d.path_mtu.get()),
        path_mig_state: d.path_mig_state.get(),
        qkey: d.qkey.get(),
        rq_psn: d.rq_psn.get(),
        sq_psn: d.sq_psn.get(),
        dest_qp_num: d.dest_qp_num.get(),
        qp_access_flags: d.qp_access_flags.get(),
        cap: QpCap {
            max_send_wr: d.cap.max_send_wr.get(),
            max_recv_wr: d.cap.max_recv_wr.get(),
            max_send_sge: d.cap.max_send_sge.get(),
            max_recv_sge: d.cap.max_recv_sge.get(),
            max_inline_data: d.cap.max_inline_data.get(),
        },
        ah_attr: ah_from_device(&d.ah_attr),
        alt_ah_attr: ah_from_device(&d.alt_ah_attr),
        pkey_index: d.pkey_index.get(),
        alt_pkey_index: d.alt_pkey_index.get(),
        en_sqd_async_notify: d.en_sqd_async_notify,
        sq_draining: d.sq_draining,
        max_rd_atomic: d.max_rd_atomic,
        max_dest_rd_atomic: d.max_dest_rd_atomic,
        min_rnr_timer: d.min_rnr_timer,
        port_num: d.port_num,
        timeout: d.timeout,
        retry_cnt: d.retry_cnt,
        rnr_retry: d.rnr_retry,
        alt_port_num: d.alt_port_num,
        alt_timeout: d.alt_timeout,
    })
}

fn ah_from_device(d: &abi::AhAttr) -> AhAttr {
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

    #[test]
    fn query_answers_are_checked_where_every_device_answers() {
        let mut d = abi::QpAttr::default();
        d.qp_state.set(3);
        d.cur_qp_state.set(3);
        d.path_mtu.set(3);
        d.rq_psn.set(0x111);
        // QEMU 7.2's backend layout puts other values here: no rule for them.
        (d.timeout, d.retry_cnt, d.port_num) = (0xff, 0xff, 0xff);
        assert!(from_device(&d).is_ok());
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
            assert!(matches!(from_device(&e), Err(Error::BadResponse(_))), "case {k}");
        }
        d.path_mtu.set(0);
        assert!(from_device(&d).is_ok(), "path_mtu 0: not set yet (RESET, INIT)");
    }
}
