//! `hca devinfo`: devices and their ports, shaped like `ibv_devinfo` (same options, same lines,
//! same exit statuses as rdma-core's `devinfo.c`).

use crate::args::{number, Failure};
use clap::Args;
use ib_core::{Device, GidType, LinkLayer};
use std::fmt::Write;

/// Options, named as `ibv_devinfo` names them; a repeated option keeps its last value (getopt).
#[derive(Args)]
#[command(args_override_self = true)]
pub struct Opts {
    /// Use this IB device (default: every device found).
    #[arg(short = 'd', long = "ib-dev")]
    ib_dev: Option<String>,
    /// Print only this port (default: every port).
    #[arg(short = 'i', long = "ib-port", value_parser = number::<i64>)]
    ib_port: Option<i64>,
    /// Print only the IB devices' names.
    #[arg(short = 'l', long = "list")]
    list: bool,
    /// Print all the attributes of the IB device(s), the GID table included.
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,
}

/// Prints what `o` asks for. Failures as `ibv_devinfo` words them, with its exit statuses: 1 for
/// a port below 1, 255 for an unknown device or none at all, 4 for a port the device lacks.
pub fn run(o: &Opts) -> Result<(), Failure> {
    let port = match o.ib_port {
        Some(p) if p <= 0 => return Err(Failure { msg: crate::usage("devinfo"), code: 1 }),
        Some(p) => Some(u8::try_from(p).unwrap_or(u8::MAX)),
        None => None,
    };
    let list = ib_core::device_list();
    if o.list {
        let s = if list.len() == 1 { "" } else { "s" };
        println!("{} HCA{s} found:", list.len());
        list.iter().for_each(|d| println!("\t{}", d.name));
        println!();
        return Ok(());
    }
    let names: Vec<String> = match &o.ib_dev {
        Some(n) if list.iter().any(|d| &d.name == n) => vec![n.clone()],
        Some(n) => return Err(Failure { msg: format!("IB device '{n}' wasn't found"), code: 255 }),
        None if list.is_empty() => return Err(Failure { msg: "No IB devices found".into(), code: 255 }),
        None => list.into_iter().map(|d| d.name).collect(),
    };
    for name in names {
        let dev = ib_core::open_device(&name).map_err(|e| e.to_string())?;
        print!("{}", render(&dev, port, o.verbose)?);
    }
    Ok(())
}

fn render(dev: &Device, only: Option<u8>, verbose: bool) -> Result<String, Failure> {
    let a = dev.query_device();
    if only.is_some_and(|p| p > a.phys_port_cnt) {
        return Err(Failure { msg: "Invalid port requested for device".into(), code: 4 });
    }
    let mut s = String::new();
    let _ = writeln!(s, "hca_id:\t{}", dev.name());
    let _ = writeln!(s, "\ttransport:\t\t\tInfiniBand (0)");
    let _ = writeln!(s, "\tfw_ver:\t\t\t\t{}", dev.fw_ver());
    let _ = writeln!(s, "\tnode_guid:\t\t\t{}", guid(a.node_guid));
    let _ = writeln!(s, "\tsys_image_guid:\t\t\t{}", guid(a.sys_image_guid));
    let _ = writeln!(s, "\tvendor_id:\t\t\t0x{:04x}", a.vendor_id);
    let _ = writeln!(s, "\tvendor_part_id:\t\t\t{}", a.vendor_part_id);
    let _ = writeln!(s, "\thw_ver:\t\t\t\t0x{:X}", a.hw_ver);
    if let Some(board) = dev.board_id() {
        let _ = writeln!(s, "\tboard_id:\t\t\t{board}");
    }
    let _ = writeln!(s, "\tphys_port_cnt:\t\t\t{}", a.phys_port_cnt);
    if verbose {
        render_device_verbose(&a, &mut s);
        render_extended(&a, &mut s);
    }
    let wanted = |p: &u8| match only {
        Some(o) => o == *p,
        None => true,
    };
    for port in (1..=a.phys_port_cnt).filter(wanted) {
        render_port(dev, port, verbose, &mut s).map_err(|_| format!("Failed to query port {port} props"))?;
    }
    Ok(s)
}

/// The device attributes `ibv_devinfo -v` prints from `ibv_device_attr`, in its order.
fn render_device_verbose(a: &ib_core::DeviceAttr, s: &mut String) {
    let _ = writeln!(s, "\tmax_mr_size:\t\t\t0x{:x}", a.max_mr_size);
    let _ = writeln!(s, "\tpage_size_cap:\t\t\t0x{:x}", a.page_size_cap);
    let _ = writeln!(s, "\tmax_qp:\t\t\t\t{}", a.max_qp);
    let _ = writeln!(s, "\tmax_qp_wr:\t\t\t{}", a.max_qp_wr);
    let _ = writeln!(s, "\tdevice_cap_flags:\t\t0x{:08x}", a.device_cap_flags);
    for name in cap_names(a.device_cap_flags) {
        let _ = writeln!(s, "\t\t\t\t\t{name}");
    }
    render_limits(a, s);
}

/// The names `ibv_devinfo` gives the set bits of `flags`, then any unknown ones.
fn cap_names(flags: u32) -> Vec<String> {
    let known = ib_core::device_cap::NAMES.iter().fold(0, |acc, (bit, _)| acc | bit);
    let mut names: Vec<String> =
        ib_core::device_cap::NAMES.iter().filter(|(bit, _)| flags & bit != 0).map(|(_, n)| n.to_string()).collect();
    if flags & !known != 0 {
        names.push(format!("Unknown flags: 0x{:X}", flags & !known));
    }
    names
}

fn render_limits(a: &ib_core::DeviceAttr, s: &mut String) {
    rows(
        s,
        &[
            ("max_sge", 3, a.max_sge),
            ("max_sge_rd", 3, a.max_sge_rd),
            ("max_cq", 4, a.max_cq),
            ("max_cqe", 3, a.max_cqe),
            ("max_mr", 4, a.max_mr),
            ("max_pd", 4, a.max_pd),
            ("max_qp_rd_atom", 3, a.max_qp_rd_atom),
            ("max_ee_rd_atom", 3, a.max_ee_rd_atom),
            ("max_res_rd_atom", 2, a.max_res_rd_atom),
            ("max_qp_init_rd_atom", 2, a.max_qp_init_rd_atom),
            ("max_ee_init_rd_atom", 2, a.max_ee_init_rd_atom),
        ],
    );
    let _ = writeln!(s, "\tatomic_cap:\t\t\t{} ({})", atomic_str(a.atomic_cap), a.atomic_cap as u32);
    rows(
        s,
        &[
            ("max_ee", 4, a.max_ee),
            ("max_rdd", 3, a.max_rdd),
            ("max_mw", 4, a.max_mw),
            ("max_raw_ipv6_qp", 2, a.max_raw_ipv6_qp),
            ("max_raw_ethy_qp", 2, a.max_raw_ethy_qp),
            ("max_mcast_grp", 3, a.max_mcast_grp),
            ("max_mcast_qp_attach", 2, a.max_mcast_qp_attach),
            ("max_total_mcast_qp_attach", 1, a.max_total_mcast_qp_attach),
            ("max_ah", 4, a.max_ah),
            ("max_fmr", 3, a.max_fmr),
        ],
    );
    if a.max_fmr != 0 {
        rows(s, &[("max_map_per_fmr", 2, a.max_map_per_fmr)]);
    }
    rows(s, &[("max_srq", 3, a.max_srq)]);
    if a.max_srq != 0 {
        rows(s, &[("max_srq_wr", 3, a.max_srq_wr), ("max_srq_sge", 3, a.max_srq_sge)]);
    }
    rows(s, &[("max_pkeys", 3, a.max_pkeys.into()), ("local_ca_ack_delay", 2, a.local_ca_ack_delay.into())]);
}

/// `\t<name>:<tabs><value>` lines, as `ibv_devinfo` aligns them.
fn rows(s: &mut String, rows: &[(&str, usize, u32)]) {
    for (name, tabs, v) in rows {
        let _ = writeln!(s, "\t{name}:{}{v}", "\t".repeat(*tabs));
    }
}

fn atomic_str(c: ib_core::AtomicCap) -> &'static str {
    match c {
        ib_core::AtomicCap::None => "ATOMIC_NONE",
        ib_core::AtomicCap::Hca => "ATOMIC_HCA",
        ib_core::AtomicCap::Glob => "ATOMIC_GLOB",
    }
}

/// What `ibv_devinfo -v` prints from `ibv_device_attr_ex` for a device with none of the extended
/// capabilities (pvrdma has none: no ODP, timestamps, TSO, RSS, pacing or tag matching), then
/// the completion vectors.
fn render_extended(a: &ib_core::DeviceAttr, s: &mut String) {
    s.push_str("\tgeneral_odp_caps:\n");
    for t in ["rc", "uc", "ud", "xrc"] {
        let _ = write!(s, "\t{t}_odp_caps:\n\t\t\t\t\tNO SUPPORT\n");
    }
    s.push_str("\tcompletion_timestamp_mask not supported\n\tcore clock not supported\n");
    let _ = writeln!(s, "\tdevice_cap_flags_ex:\t\t0x{:X}", a.device_cap_flags);
    s.push_str("\ttso_caps:\n\t\tmax_tso:\t\t\t0\n\trss_caps:\n");
    s.push_str("\t\tmax_rwq_indirection_tables:\t\t\t0\n\t\tmax_rwq_indirection_table_size:\t\t\t0\n");
    s.push_str("\t\trx_hash_function:\t\t\t\t0x0\n\t\trx_hash_fields_mask:\t\t\t\t0x0\n");
    s.push_str("\tmax_wq_type_rq:\t\t\t0\n\tpacket_pacing_caps:\n");
    s.push_str("\t\tqp_rate_limit_min:\t0kbps\n\t\tqp_rate_limit_max:\t0kbps\n\ttag matching not supported\n");
    let _ = writeln!(s, "\tnum_comp_vectors:\t\t{}", a.num_comp_vectors);
}

fn render_port(dev: &Device, port: u8, verbose: bool, s: &mut String) -> ib_core::Result<()> {
    let p = dev.query_port(port)?;
    let _ = writeln!(s, "\t\tport:\t{port}");
    let _ = writeln!(s, "\t\t\tstate:\t\t\t{}", p.state);
    let _ = writeln!(s, "\t\t\tmax_mtu:\t\t{} ({})", p.max_mtu, mtu_code(p.max_mtu));
    let _ = writeln!(s, "\t\t\tactive_mtu:\t\t{} ({})", p.active_mtu, mtu_code(p.active_mtu));
    let _ = writeln!(s, "\t\t\tsm_lid:\t\t\t{}", p.sm_lid);
    let _ = writeln!(s, "\t\t\tport_lid:\t\t{}", p.lid);
    let _ = writeln!(s, "\t\t\tport_lmc:\t\t0x{:02x}", p.lmc);
    let _ = writeln!(s, "\t\t\tlink_layer:\t\t{}", link_str(p.link_layer));
    if verbose {
        render_port_verbose(dev, port, &p, s)?;
    }
    let _ = writeln!(s);
    Ok(())
}

/// The port attributes `ibv_devinfo -v` prints, in its order, then the GID table.
fn render_port_verbose(dev: &Device, port: u8, p: &ib_core::PortAttr, s: &mut String) -> ib_core::Result<()> {
    let _ = writeln!(s, "\t\t\tmax_msg_sz:\t\t0x{:x}", p.max_msg_sz);
    let _ = writeln!(s, "\t\t\tport_cap_flags:\t\t0x{:08x}", p.port_cap_flags);
    let _ = writeln!(s, "\t\t\tport_cap_flags2:\t0x0000");
    let _ = writeln!(s, "\t\t\tmax_vl_num:\t\t{} ({})", vl_str(p.max_vl_num), p.max_vl_num);
    let _ = writeln!(s, "\t\t\tbad_pkey_cntr:\t\t0x{:x}", p.bad_pkey_cntr);
    let _ = writeln!(s, "\t\t\tqkey_viol_cntr:\t\t0x{:x}", p.qkey_viol_cntr);
    let _ = writeln!(s, "\t\t\tsm_sl:\t\t\t{}", p.sm_sl);
    let _ = writeln!(s, "\t\t\tpkey_tbl_len:\t\t{}", p.pkey_tbl_len);
    let _ = writeln!(s, "\t\t\tgid_tbl_len:\t\t{}", p.gid_tbl_len);
    let _ = writeln!(s, "\t\t\tsubnet_timeout:\t\t{}", p.subnet_timeout);
    let _ = writeln!(s, "\t\t\tinit_type_reply:\t{}", p.init_type_reply);
    let _ = writeln!(s, "\t\t\tactive_width:\t\t{}X ({})", width_str(p.active_width), p.active_width);
    let _ = writeln!(s, "\t\t\tactive_speed:\t\t{} ({})", speed_str(p.active_speed), p.active_speed);
    // pvrdma's transport is InfiniBand (RoCE), for which ibv_devinfo prints the physical state.
    let _ = writeln!(s, "\t\t\tphys_state:\t\t{} ({})", phys_state_str(p.phys_state), p.phys_state);
    for i in 0..p.gid_tbl_len {
        let gid = dev.query_gid(port, i)?;
        // As ibv_devinfo's null_gid: an entry whose interface ID (bytes 8-15) is zero is unused.
        if gid[8..] != [0; 8] {
            if let Ok(kind) = dev.query_gid_type(port, i) {
                let _ = writeln!(s, "\t\t\tGID[{i:3}]:\t\t{}", gid_line(&gid, kind, p.link_layer));
            }
        }
    }
    Ok(())
}

/// A GID table entry as `ibv_devinfo -v` prints it: RoCE v1 (and IB) entries as eight groups of
/// four hex digits, RoCE v2 entries as an IPv6 address (`inet_ntop`), with the type after a comma
/// on an Ethernet port. (An entry whose type cannot be read, `ibv_devinfo` does not print.)
fn gid_line(g: &[u8; 16], kind: GidType, link: LinkLayer) -> String {
    let (text, name) = match kind {
        GidType::RoceV1 => (gid_str(g), "RoCE v1"),
        GidType::RoceV2 => (std::net::Ipv6Addr::from(*g).to_string(), "RoCE v2"),
    };
    if link == LinkLayer::Ethernet {
        format!("{text}, {name}")
    } else {
        text
    }
}

fn link_str(l: LinkLayer) -> &'static str {
    match l {
        LinkLayer::Unspecified => "Unspecified",
        LinkLayer::InfiniBand => "InfiniBand",
        LinkLayer::Ethernet => "Ethernet",
    }
}

fn width_str(w: u8) -> &'static str {
    match w {
        1 => "1",
        2 => "4",
        4 => "8",
        8 => "12",
        16 => "2",
        _ => "invalid width",
    }
}

fn speed_str(v: u8) -> &'static str {
    match v {
        1 => "2.5 Gbps",
        2 => "5.0 Gbps",
        4 | 8 => "10.0 Gbps",
        16 => "14.0 Gbps",
        32 => "25.0 Gbps",
        64 => "50.0 Gbps",
        128 => "100.0 Gbps",
        _ => "invalid speed",
    }
}

fn vl_str(v: u8) -> &'static str {
    match v {
        1 => "1",
        2 => "2",
        3 => "4",
        4 => "8",
        5 => "15",
        _ => "invalid value",
    }
}

fn phys_state_str(v: u8) -> &'static str {
    match v {
        1 => "SLEEP",
        2 => "POLLING",
        3 => "DISABLED",
        4 => "PORT_CONFIGURATION TRAINNING",
        5 => "LINK_UP",
        6 => "LINK_ERROR_RECOVERY",
        7 => "PHY TEST",
        _ => "invalid physical state",
    }
}

/// A GUID as `ibv_devinfo` prints it: four groups of four hex digits.
fn guid(g: u64) -> String {
    let b = g.to_be_bytes();
    format!("{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7])
}

fn mtu_code(bytes: u32) -> u32 {
    ib_core::Mtu::from_bytes(bytes).map_or(0, |m| m.0)
}

/// A GID as eight colon-separated groups, as `ibv_devinfo -v` prints it.
fn gid_str(g: &[u8; 16]) -> String {
    let groups: Vec<String> = g.chunks(2).map(|c| format!("{:02x}{:02x}", c[0], c[1])).collect();
    groups.join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_match_ibv_devinfo() {
        assert_eq!(guid(0x5054_00ff_fe12_3456), "5054:00ff:fe12:3456");
        assert_eq!(mtu_code(1024), 3);
        assert_eq!(mtu_code(4096), 5);
        assert_eq!(hca::fw_ver_string(0x0001_0000_000e), "1.0.014");
        assert_eq!(hca::fw_ver_string(0x0003_0002_0001), "3.2.001");
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        assert!(gid_str(&g).starts_with("fe80:0000:"));
        let mut v4 = [0u8; 16];
        v4[10..].copy_from_slice(&[0xff, 0xff, 192, 168, 1, 7]);
        assert_eq!(gid_line(&v4, GidType::RoceV2, LinkLayer::Ethernet), "::ffff:192.168.1.7, RoCE v2");
        assert_eq!(gid_line(&v4, GidType::RoceV1, LinkLayer::InfiniBand), "0000:0000:0000:0000:0000:ffff:c0a8:0107");
        assert_eq!(
            cap_names(1 << 10 | 1 << 12 | 1 << 30),
            ["PORT_ACTIVE_EVENT", "RC_RNR_NAK_GEN", "Unknown flags: 0x40000000"]
        );
        assert_eq!((width_str(1), speed_str(1), phys_state_str(5)), ("1", "2.5 Gbps", "LINK_UP"));
    }
}
