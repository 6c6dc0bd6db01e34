//! `hca devinfo`: devices and their ports, shaped like `ibv_devinfo` (same options, same lines,
//! same exit statuses as rdma-core's `devinfo.c`).

use crate::args::{number, Failure};
use clap::Args;
use ib_core::Device;
use std::fmt::Write;

/// Options, named as `ibv_devinfo` names them.
#[derive(Args)]
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
        Some(p) if p <= 0 => return Err(Failure { msg: "usage: hca devinfo [-d dev] [-i port] [-l] [-v]".into(), code: 1 }),
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
    let _ = writeln!(s, "\tphys_port_cnt:\t\t\t{}", a.phys_port_cnt);
    if verbose {
        render_device_verbose(&a, &mut s);
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

/// The device attributes `ibv_devinfo -v` prints that this stack has.
fn render_device_verbose(a: &ib_core::DeviceAttr, s: &mut String) {
    let _ = writeln!(s, "\tmax_mr_size:\t\t\t0x{:x}", a.max_mr_size);
    let _ = writeln!(s, "\tpage_size_cap:\t\t\t0x{:x}", a.page_size_cap);
    let _ = writeln!(s, "\tmax_qp:\t\t\t\t{}", a.max_qp);
    let _ = writeln!(s, "\tmax_qp_wr:\t\t\t{}", a.max_qp_wr);
    let _ = writeln!(s, "\tmax_sge:\t\t\t{}", a.max_sge);
    let _ = writeln!(s, "\tmax_cq:\t\t\t\t{}", a.max_cq);
    let _ = writeln!(s, "\tmax_cqe:\t\t\t{}", a.max_cqe);
    let _ = writeln!(s, "\tmax_mr:\t\t\t\t{}", a.max_mr);
    let _ = writeln!(s, "\tmax_pd:\t\t\t\t{}", a.max_pd);
    let _ = writeln!(s, "\tmax_pkeys:\t\t\t{}", a.max_pkeys);
}

fn render_port(dev: &Device, port: u8, verbose: bool, s: &mut String) -> ib_core::Result<()> {
    let p = dev.query_port(port)?;
    let _ = writeln!(s, "\t\tport:\t{port}");
    let _ = writeln!(s, "\t\t\tstate:\t\t\t{}", p.state);
    let _ = writeln!(s, "\t\t\tmax_mtu:\t\t{} ({})", p.max_mtu, mtu_code(p.max_mtu));
    let _ = writeln!(s, "\t\t\tactive_mtu:\t\t{} ({})", p.active_mtu, mtu_code(p.active_mtu));
    let _ = writeln!(s, "\t\t\tsm_lid:\t\t\t0");
    let _ = writeln!(s, "\t\t\tport_lid:\t\t{}", p.lid);
    let _ = writeln!(s, "\t\t\tport_lmc:\t\t0x00");
    let _ = writeln!(s, "\t\t\tlink_layer:\t\tEthernet");
    if verbose {
        let _ = writeln!(s, "\t\t\tmax_msg_sz:\t\t0x{:x}", p.max_msg_sz);
        let _ = writeln!(s, "\t\t\tpkey_tbl_len:\t\t{}", p.pkey_tbl_len);
        let _ = writeln!(s, "\t\t\tgid_tbl_len:\t\t{}", p.gid_tbl_len);
        let _ = writeln!(s, "\t\t\tactive_width:\t\t({})", p.active_width);
        let _ = writeln!(s, "\t\t\tactive_speed:\t\t({})", p.active_speed);
        // As ibv_devinfo: every entry of the table that holds a GID.
        for i in 0..p.gid_tbl_len {
            let gid = dev.query_gid(port, i)?;
            if gid != [0; 16] {
                let _ = writeln!(s, "\t\t\tGID[{i:3}]:\t\t{}, RoCE v1", gid_str(&gid));
            }
        }
    }
    let _ = writeln!(s);
    Ok(())
}

/// A GUID as `ibv_devinfo` prints it: four groups of four hex digits.
fn guid(g: u64) -> String {
    let b = g.to_be_bytes();
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
    )
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
    }
}
