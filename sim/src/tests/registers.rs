//! What the registers and interrupts report: ERR, ICR and the vectors never read success or a
//! cause for what did not happen; REQUEST, CTL and the DSR registers outside the device's states
//! do nothing visibly, and are counted.

use crate::testutil::minidrv::*;
use crate::{DeviceState, SimConfig, SimDevice, UAR_BASE_PFN};
use pvrdma_abi::cmd::*;
use pvrdma_abi::errno::EINVAL;
use pvrdma_abi::regs::*;
use pvrdma_abi::uar::UAR_QP_SEND;
use pvrdma_abi::verbs::send_flags;
use pvrdma_abi::wqe::{wc_status, wr_opcode};
use zerocopy::little_endian::U32;
use zerocopy::IntoBytes;

fn ack_in_slot(d: &Drv) -> u32 {
    d.dev.mem().load_u32(d.resp_slot + 8).unwrap()
}

fn raw_request(d: &Drv, value: u32) {
    d.dev.mem().zero(d.resp_slot, 64).unwrap();
    let q = QueryPort { hdr: CmdHdr { cmd: U32::new(0), ..Default::default() }, port_num: 1, ..Default::default() };
    d.dev.mem().write(d.cmd_slot, q.as_bytes()).unwrap();
    d.dev.reg_write(REG_REQUEST, value);
}

/// From issue 10's second round of attacks on the model.
#[test]
fn activate_and_request_before_any_dsr_do_nothing_visibly() {
    let dev = SimDevice::new(SimConfig::default());
    dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    assert_eq!((dev.state(), dev.reg_read(REG_ERR)), (DeviceState::Inactive, 0xffff));
    dev.reg_write(REG_REQUEST, 0);
    assert_eq!(dev.stats().ignored_requests, 1);
    assert_eq!(dev.vectors().raised(0), 0);
    // DSRLOW alone loads nothing.
    let dsr = dev.mem().alloc(PAGE).unwrap();
    dev.reg_write(REG_DSRLOW, dsr as u32);
    dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    dev.reg_write(REG_REQUEST, 0);
    assert_eq!((dev.state(), dev.reg_read(REG_ERR)), (DeviceState::Inactive, 0xffff));
    assert_eq!(dev.stats().ignored_requests, 2);
    // An all-zero DSR (no slots, no rings) breaks it.
    dev.reg_write(REG_DSRHIGH, (dsr >> 32) as u32);
    dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    assert_eq!((dev.state(), dev.reg_read(REG_ERR)), (DeviceState::Broken, 0xffff));
}

/// From issue 10's second round of attacks on the model.
#[test]
fn reset_then_request_or_activate_is_refused_and_counted() {
    let mut d = Drv::new(SimConfig::default());
    d.create_pd(0);
    d.dev.reg_write(REG_CTL, DeviceCtl::Reset as u32);
    let (ignored, raised) = (d.dev.stats().ignored_requests, d.dev.vectors().raised(0));
    raw_request(&d, 0);
    assert_eq!(ack_in_slot(&d), 0, "no response after RESET");
    assert_eq!(d.dev.stats().ignored_requests, ignored + 1);
    assert_eq!(d.dev.vectors().raised(0), raised);
    d.dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    assert_eq!((d.dev.state(), d.dev.reg_read(REG_ERR)), (DeviceState::Inactive, 0xffff));
    // Rewriting DSRHIGH reloads the DSR DSRLOW still names; then it works again.
    d.dev.reg_write(REG_DSRHIGH, (d.dsr >> 32) as u32);
    d.dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    assert_eq!((d.dev.state(), d.dev.reg_read(REG_ERR)), (DeviceState::Active, 0));
    assert_eq!(d.ok(CreatePd::default()).pd_handle.get(), 1, "RESET emptied the PD table");
}

/// From issue 10's second round of attacks on the model.
#[test]
fn a_good_dsr_does_not_unbreak_a_broken_device_without_reset() {
    let d = Drv::load(SimDevice::new(SimConfig::default()), 4);
    assert_eq!(d.dev.state(), DeviceState::Broken);
    // A good DSR after the bad one, without RESET.
    let d = Drv::load(d.dev.clone(), 2);
    d.dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    assert_eq!((d.dev.state(), d.dev.reg_read(REG_ERR)), (DeviceState::Broken, 0xffff));
    let ignored = d.dev.stats().ignored_requests;
    raw_request(&d, 0);
    assert_eq!(ack_in_slot(&d), 0);
    assert_eq!(d.dev.stats().ignored_requests, ignored + 1);
    // Also after inject_fatal: ACTIVATE keeps ERR at 0xffff.
    let d2 = Drv::new(SimConfig::default());
    d2.dev.inject_fatal();
    d2.dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    assert_eq!(d2.dev.reg_read(REG_ERR), 0xffff);
    let d2 = Drv::load(d2.dev.clone(), 2);
    d2.dev.reg_write(REG_CTL, DeviceCtl::Activate as u32);
    assert_eq!((d2.dev.state(), d2.dev.reg_read(REG_ERR)), (DeviceState::Broken, 0xffff));
}

/// From issue 10's second round of attacks on the model.
#[test]
fn reloading_a_good_dsr_while_active_keeps_the_device_and_its_objects() {
    let mut d = Drv::new(SimConfig::default());
    let pd = d.create_pd(0);
    for _ in 0..3 {
        d.dev.reg_write(REG_DSRHIGH, (d.dsr >> 32) as u32);
        assert_eq!((d.dev.state(), d.dev.reg_read(REG_ERR)), (DeviceState::Active, 0));
    }
    assert_eq!(d.err(DestroyPd { pd_handle: U32::new(pd), ..Default::default() }), 0);
}

/// From issue 10's second round of attacks on the model.
#[test]
fn a_nonzero_request_write_is_counted_when_dropped() {
    let d = Drv::new(SimConfig::default());
    let before = d.dev.stats();
    for v in [1u32, 0x8000_0000, u32::MAX] {
        raw_request(&d, v);
        assert_eq!(ack_in_slot(&d), 0, "REQUEST = {v:#x} ran nothing");
    }
    let after = d.dev.stats();
    assert_eq!(after.commands, before.commands);
    assert_eq!(after.ignored_requests, before.ignored_requests + 3, "three dropped REQUEST writes");
}

/// From issue 10's second round of attacks on the model.
#[test]
fn a_response_that_cannot_be_written_does_not_read_success() {
    let d = Drv::new(SimConfig::default());
    assert!(d.dev.mem().free(d.resp_slot));
    let commands = d.dev.stats().commands;
    d.dev.mem().write(d.cmd_slot, CreatePd::default().as_bytes()).unwrap();
    d.dev.mem().write(d.cmd_slot + 8, &opcode::CREATE_PD.to_le_bytes()).unwrap();
    d.dev.reg_write(REG_REQUEST, 0);
    assert_eq!(d.dev.stats().commands, commands + 1);
    assert_ne!(d.dev.reg_read(REG_ERR), 0, "ERR reads success, but the response was lost");
}

/// From issue 10's second round of attacks on the model.
#[test]
fn a_command_slot_freed_after_load_fails_visibly() {
    let d = Drv::new(SimConfig::default());
    assert!(d.dev.mem().free(d.cmd_slot));
    let raised = d.dev.vectors().raised(0);
    d.dev.reg_write(REG_REQUEST, 0);
    assert_eq!(d.dev.reg_read(REG_ERR), (-14i32) as u32, "EFAULT");
    assert_eq!(d.dev.vectors().raised(0), raised + 1);
    assert_eq!(d.dev.stats().failed_commands, 1);
}

/// From issue 10's second round of attacks on the model.
#[test]
fn a_masked_command_vector_still_sets_err_and_counts_the_masked_interrupt() {
    let mut d = Drv::new(SimConfig::default());
    d.dev.reg_write(REG_IMR, 1);
    raw_request(&d, 0);
    assert_eq!(ack_in_slot(&d), ack_for(opcode::QUERY_PORT));
    assert_eq!(d.dev.reg_read(REG_ERR), 0);
    assert_eq!(d.dev.stats().interrupts_masked, 1);
    d.dev.reg_write(REG_IMR, 0);
    d.irqs(0);
    d.create_pd(0);
}

/// From issue 10's third round of attacks on the model.
#[test]
fn a_dsr_uar_pfn_other_than_bar2s_is_refused() {
    let mut d = Drv::new(SimConfig::default());
    let off = core::mem::offset_of!(pvrdma_abi::dsr::Dsr, uar_pfn) as u64;
    d.dev.mem().write(d.dsr + off, &(UAR_BASE_PFN - 1).to_le_bytes()).unwrap();
    d.dev.reg_write(REG_DSRHIGH, (d.dsr >> 32) as u32);
    if d.dev.state() == crate::DeviceState::Active && d.dev.reg_read(REG_ERR) == 0 {
        // The driver maps BAR2's page 0 (the kernel's) for this context.
        let (_, err) = d.post(CreateUc { pfn: U32::new(UAR_BASE_PFN as u32), ..Default::default() });
        assert_eq!(err, EINVAL, "a user context was given the kernel's UAR page");
    }
}

/// From issue 10's third round of attacks on the model.
#[test]
fn icr_never_reads_causes_that_did_not_happen() {
    let d = Drv::new(SimConfig::default());
    let raised: u64 = (0..3).map(|v| d.dev.vectors().raised(v)).sum();
    d.dev.reg_write(REG_ICR, u32::MAX);
    let icr = d.dev.reg_read(REG_ICR);
    let after: u64 = (0..3).map(|v| d.dev.vectors().raised(v)).sum();
    assert_eq!(after, raised);
    assert_eq!(icr & !0x7, 0, "ICR reads causes past the three vectors: {icr:#x}");
    assert_eq!(icr, 0, "ICR reads {icr:#x} with no interrupt pending");
}

/// From issue 10's third round of attacks on the model.
#[test]
fn an_error_cqe_satisfies_a_solicited_arm_with_one_interrupt() {
    let p = Pair::new(SimConfig::default(), 16);
    p.d.notifications();
    p.d.irqs(2);
    p.d.cq_doorbell(0, p.cq_a.handle, pvrdma_abi::uar::UAR_CQ_ARM_SOL);
    p.d.post_send_wqe(&p.a, 2, wr_opcode::MASKED_ATOMIC_CMP_AND_SWP, send_flags::SIGNALED, 0, &[]);
    p.d.qp_doorbell(&p.a, UAR_QP_SEND);
    let c = p.d.wait_cqes(&p.cq_a, 1);
    assert_eq!(c.first().map(|c| c.status.get()), Some(wc_status::LOC_QP_OP_ERR));
    assert_eq!(p.d.notifications(), vec![p.cq_a.handle]);
    assert_eq!(p.d.dev.vectors().wait(2, WAIT), 1, "one CQ interrupt for the error CQE");
}
