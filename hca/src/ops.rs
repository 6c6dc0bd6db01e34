//! The pvrdma provider's side of the verbs core's interface (`ib_device_ops` for `vmw_pvrdma`):
//! queries and object creation, each handed to the module of its hardware object.

use crate::cq::Cq;
use crate::device::{fw_ver_string, Pvrdma};
use crate::mr::Mr;
use crate::pd::Pd;
use crate::qp::Qp;
use crate::uctx::{self, Ucontext};
use ib_core::provider::{CqEventHandler, CqOps, DeviceEventHandler, DeviceOps, MrOps, PdOps};
use ib_core::provider::{QpCreate, QpEventHandler, QpOps, UcontextOps, UserMemory};
use ib_core::{port_cap, DeviceAttr, Error, Gid, GidType, LinkLayer, PortAttr, PortState, Result};
use pvrdma_abi::cmd::{QueryPkey, QueryPort};
use pvrdma_abi::verbs::{mtu, port_state, PortAttr as PortAttrAbi};
use std::any::Any;
use std::sync::Arc;

impl DeviceOps for Pvrdma {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn set_event_handler(&self, handler: Arc<dyn DeviceEventHandler>) {
        self.inner.health.set_core(handler);
    }

    fn location(&self) -> String {
        self.inner.platform.name()
    }

    fn query_device(&self) -> DeviceAttr {
        self.inner.attr.clone()
    }

    fn fw_ver_string(&self) -> String {
        fw_ver_string(self.inner.attr.fw_ver)
    }

    /// QUERY_PORT, its answer checked field by field before any of it reaches the consumer.
    ///
    /// Errors: [`Error::BadResponse`] for a value outside its field; command errors.
    fn query_port(&self, port: u8) -> Result<PortAttr> {
        self.inner.check_port(port)?;
        let a = self.inner.cmd.post(QueryPort { port_num: port, ..Default::default() })?.attrs;
        let (max_mtu, active_mtu) = check_port_attr(&a, &self.inner.attr).map_err(|what| {
            tracing::error!(what, attrs = ?a, "QUERY_PORT answer refused");
            Error::BadResponse(what)
        })?;
        Ok(PortAttr {
            state: PortState::from_raw(a.state.get()),
            max_mtu,
            active_mtu,
            gid_tbl_len: a.gid_tbl_len.get(),
            pkey_tbl_len: a.pkey_tbl_len.get(),
            lid: a.lid.get(),
            max_msg_sz: a.max_msg_sz.get(),
            active_width: a.active_width,
            active_speed: a.active_speed,
            phys_state: a.phys_state,
            // Linux's pvrdma_query_port adds IB_PORT_CM_SUP: connection management runs on top.
            port_cap_flags: a.port_cap_flags.get() | port_cap::CM_SUP,
            bad_pkey_cntr: a.bad_pkey_cntr.get(),
            qkey_viol_cntr: a.qkey_viol_cntr.get(),
            sm_lid: a.sm_lid.get(),
            lmc: a.lmc,
            max_vl_num: a.max_vl_num,
            sm_sl: a.sm_sl,
            subnet_timeout: a.subnet_timeout,
            init_type_reply: a.init_type_reply,
            link_layer: LinkLayer::Ethernet,
        })
    }

    /// The GID the driver bound at `index` (pvrdma has no command to read GIDs back: the driver's
    /// copy, `gid.rs`); zero for an empty entry.
    fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        self.inner.check_port(port)?;
        Ok(self.inner.gids.get(index)?.map(|(g, _)| g).unwrap_or_default())
    }

    /// The type the GID at `index` was bound with. Errors: `InvalidArgument` for an empty entry.
    fn query_gid_type(&self, port: u8, index: u32) -> Result<GidType> {
        self.inner.check_port(port)?;
        self.inner.gids.get(index)?.map(|(_, t)| t).ok_or(Error::InvalidArgument("no GID at this index"))
    }

    /// CREATE_BIND at `index` (`gid.rs`); index 0 stays the probe's.
    fn add_gid(&self, port: u8, index: u32, gid: Gid, ty: GidType) -> Result<()> {
        self.inner.check_port(port)?;
        self.inner.live()?;
        crate::gid::add(&self.inner.gids, &self.inner.cmd, index, gid, ty)
    }

    /// DESTROY_BIND at `index` (`gid.rs`); index 0 stays the probe's.
    fn del_gid(&self, port: u8, index: u32) -> Result<()> {
        self.inner.check_port(port)?;
        self.inner.live()?;
        crate::gid::del(&self.inner.gids, &self.inner.cmd, index)
    }

    /// `PVRDMA_BOARD_ID`, as Linux's driver reports it.
    fn board_id(&self) -> Option<String> {
        Some(pvrdma_abi::dsr::BOARD_ID.to_string())
    }

    /// QUERY_PKEY (QEMU answers 0xffff).
    fn query_pkey(&self, port: u8, index: u16) -> Result<u16> {
        self.inner.check_port(port)?;
        let index = u8::try_from(index).map_err(|_| Error::InvalidArgument("P_Key index"))?;
        let resp = self.inner.cmd.post(QueryPkey { port_num: port, index, ..Default::default() })?;
        Ok(resp.pkey.get())
    }

    fn is_fatal(&self) -> bool {
        self.inner.health.is_fatal()
    }

    fn alloc_ucontext(&self) -> Result<Box<dyn UcontextOps>> {
        Ok(Box::new(Ucontext::create(&self.inner)?))
    }

    fn alloc_pd(&self, uctx: Option<&dyn UcontextOps>) -> Result<Box<dyn PdOps>> {
        Ok(Box::new(Pd::create(&self.inner, uctx::of(uctx)?)?))
    }

    fn create_cq(
        &self,
        uctx: Option<&dyn UcontextOps>,
        cqe: u32,
        events: Arc<dyn CqEventHandler>,
    ) -> Result<Arc<dyn CqOps>> {
        Ok(Arc::new(Cq::create(&self.inner, uctx::of(uctx)?, cqe, events)?))
    }

    fn create_qp(
        &self,
        pd: &dyn PdOps,
        init: &QpCreate<'_>,
        events: Arc<dyn QpEventHandler>,
    ) -> Result<Box<dyn QpOps>> {
        Ok(Box::new(Qp::create(Pd::of(pd)?, init, events)?))
    }

    fn create_srq(
        &self,
        pd: &dyn PdOps,
        attr: &ib_core::SrqAttr,
        events: Arc<dyn ib_core::provider::SrqEventHandler>,
    ) -> Result<Box<dyn ib_core::provider::SrqOps>> {
        Ok(Box::new(crate::srq::Srq::create(Pd::of(pd)?, attr, events)?))
    }

    fn alloc_mr(&self, pd: &dyn PdOps, len: usize, access: u32) -> Result<Box<dyn MrOps>> {
        Ok(Box::new(Mr::alloc(Pd::of(pd)?, len, access)?))
    }

    fn reg_user_mr(&self, pd: &dyn PdOps, mem: UserMemory, access: u32) -> Result<Box<dyn MrOps>> {
        Ok(Box::new(Mr::register_user(Pd::of(pd)?, mem, access)?))
    }

    fn create_ah(&self, pd: &dyn PdOps, attr: &ib_core::AhAttr) -> Result<Box<dyn ib_core::provider::AhOps>> {
        Ok(Box::new(crate::qp::ud::Ah::create(Pd::of(pd)?, attr)?))
    }
}

/// Checks a QUERY_PORT answer before any of it reaches the consumer; returns (max, active) MTU in
/// bytes. Refused, naming the field: a state outside DOWN..=ACTIVE_DEFER (NOP is a Set value,
/// never a state); an MTU code outside 256..=4096 or an active MTU above the port's maximum; a
/// GID table empty, beyond the device's `gid_tbl_len` cap or beyond what an 8-bit `sgid_index`
/// reaches; an empty P_Key table; a largest message of 0 bytes; a physical state outside
/// IBTA's 1..=7; a link width or speed that is not one IBTA encoding (one bit); an LMC above 7,
/// a VL count code above 5 (0 is allowed: QEMU 7.2 leaves it unset), an SM SL above 15 or a
/// subnet timeout above 31 (IBTA 14.2.5.6 PortInfo). QEMU 7.2's answers pass: state DOWN,
/// rxe's MTUs, 255 GIDs (its cap), one P_Key, `max_msg_sz` 1024, width and speed 1.
pub(crate) fn check_port_attr(a: &PortAttrAbi, dev: &DeviceAttr) -> std::result::Result<(u32, u32), &'static str> {
    let state = a.state.get();
    if !(port_state::DOWN..=port_state::ACTIVE_DEFER).contains(&state) {
        return Err("QUERY_PORT: unknown port state");
    }
    let max_mtu = mtu::bytes(a.max_mtu.get()).ok_or("QUERY_PORT: max_mtu not an MTU code")?;
    let active_mtu = mtu::bytes(a.active_mtu.get()).ok_or("QUERY_PORT: active_mtu not an MTU code")?;
    if active_mtu > max_mtu {
        return Err("QUERY_PORT: active_mtu above max_mtu");
    }
    let gids = a.gid_tbl_len.get();
    if gids == 0 || gids > dev.gid_tbl_len || gids > crate::probe::cap_limits::GID_TBL_LEN {
        return Err("QUERY_PORT: gid_tbl_len out of range");
    }
    let checks = [
        (a.pkey_tbl_len.get() == 0, "QUERY_PORT: empty P_Key table"),
        (a.max_msg_sz.get() == 0, "QUERY_PORT: max_msg_sz 0"),
        (!(1..=7).contains(&a.phys_state), "QUERY_PORT: unknown phys_state"),
        (!a.active_width.is_power_of_two(), "QUERY_PORT: active_width not one encoding"),
        (!a.active_speed.is_power_of_two(), "QUERY_PORT: active_speed not one encoding"),
        (a.lmc > 7 || a.max_vl_num > 5 || a.sm_sl > 15, "QUERY_PORT: lmc, max_vl_num or sm_sl out of range"),
        (a.subnet_timeout > 31, "QUERY_PORT: subnet_timeout out of range"),
    ];
    match checks.iter().find(|(bad, _)| *bad) {
        Some((_, what)) => Err(what),
        None => Ok((max_mtu, active_mtu)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// QEMU 7.2's QUERY_PORT answer (its `query_port` over rxe, no guest driver on function 0).
    fn qemu72() -> PortAttrAbi {
        let mut a = PortAttrAbi::default();
        a.state.set(port_state::DOWN);
        a.max_mtu.set(mtu::MTU_4096);
        a.active_mtu.set(mtu::MTU_1024);
        a.gid_tbl_len.set(255);
        a.max_msg_sz.set(1024);
        a.pkey_tbl_len.set(1);
        (a.active_width, a.active_speed, a.phys_state) = (1, 1, 5);
        a
    }

    #[test]
    fn qemu_72s_answer_passes_and_garbage_does_not() {
        let caps = DeviceAttr { gid_tbl_len: 255, ..Default::default() };
        assert_eq!(check_port_attr(&qemu72(), &caps), Ok((4096, 1024)));
        let bad: [fn(&mut PortAttrAbi); 10] = [
            |a| a.state.set(0),
            |a| a.state.set(6),
            |a| a.max_mtu.set(6),
            |a| a.active_mtu.set(mtu::MTU_4096 + 1),
            |a| a.gid_tbl_len.set(256),
            |a| a.pkey_tbl_len.set(0),
            |a| a.phys_state = 0,
            |a| a.active_width = 3,
            |a| a.active_speed = 0,
            |a| a.max_vl_num = 6,
        ];
        for (k, f) in bad.iter().enumerate() {
            let mut a = qemu72();
            f(&mut a);
            assert!(check_port_attr(&a, &caps).is_err(), "case {k}");
        }
        let mut above = qemu72();
        (above.max_mtu, above.active_mtu) = (mtu::MTU_1024.into(), mtu::MTU_2048.into());
        assert!(check_port_attr(&above, &caps).is_err(), "active above max");
    }
}
