//! `hca devinfo`: the device and its ports, shaped like `ibv_devinfo`.

use hca::Device;
use std::fmt::Write;

/// Prints the device's attributes and every port's.
pub fn run(dev: &Device) -> Result<(), String> {
    print!("{}", render(dev).map_err(|e| e.to_string())?);
    Ok(())
}

fn render(dev: &Device) -> hca::Result<String> {
    let a = dev.query_device();
    let mut s = String::new();
    let _ = writeln!(s, "hca_id:\t{}", dev.name());
    let _ = writeln!(s, "\ttransport:\t\t\tInfiniBand (0)");
    let _ = writeln!(s, "\tfw_ver:\t\t\t\t{}", fw_ver(a.fw_ver));
    let _ = writeln!(s, "\tnode_guid:\t\t\t{}", guid(a.node_guid));
    let _ = writeln!(s, "\tsys_image_guid:\t\t\t{}", guid(a.sys_image_guid));
    let _ = writeln!(s, "\tvendor_id:\t\t\t{:#06x}", a.vendor_id);
    let _ = writeln!(s, "\tvendor_part_id:\t\t\t{}", a.vendor_part_id);
    let _ = writeln!(s, "\thw_ver:\t\t\t\t{:#x}", a.hw_ver);
    let _ = writeln!(s, "\tphys_port_cnt:\t\t\t{}", a.phys_port_cnt);
    for port in 1..=a.phys_port_cnt {
        render_port(dev, port, &mut s)?;
    }
    Ok(s)
}

fn render_port(dev: &Device, port: u8, s: &mut String) -> hca::Result<()> {
    let p = dev.query_port(port)?;
    let gid = dev.query_gid(port, 0)?;
    let _ = writeln!(s, "\t\tport:\t{port}");
    let _ = writeln!(s, "\t\t\tstate:\t\t\t{}", p.state);
    let _ = writeln!(s, "\t\t\tmax_mtu:\t\t{} ({})", p.max_mtu, mtu_code(p.max_mtu));
    let _ = writeln!(s, "\t\t\tactive_mtu:\t\t{} ({})", p.active_mtu, mtu_code(p.active_mtu));
    let _ = writeln!(s, "\t\t\tsm_lid:\t\t\t0");
    let _ = writeln!(s, "\t\t\tport_lid:\t\t{}", p.lid);
    let _ = writeln!(s, "\t\t\tport_lmc:\t\t0x00");
    let _ = writeln!(s, "\t\t\tlink_layer:\t\tEthernet");
    let _ = writeln!(s, "\t\t\tGID[  0]:\t\t{}, RoCE v1", gid_str(&gid));
    Ok(())
}

/// `ibv_devinfo` prints pvrdma's fw_ver as three dotted 16-bit fields.
fn fw_ver(v: u64) -> String {
    format!("{}.{}.{}", (v >> 32) & 0xffff, (v >> 16) & 0xffff, v & 0xffff)
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
    (bytes.max(256) / 256).trailing_zeros() + 1
}

/// A GID as eight colon-separated groups, as `ibv_devinfo -v` prints it.
fn gid_str(g: &[u8; 16]) -> String {
    let groups: Vec<String> =
        g.chunks(2).map(|c| format!("{:02x}{:02x}", c[0], c[1])).collect();
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
        assert_eq!(fw_ver(0x0003_0000_0000), "3.0.0");
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        assert!(gid_str(&g).starts_with("fe80:0000:"));
    }
}
