//! The backend against a stand-in for QEMU: opening, and failing safe when the socket dies.

use super::wire::parse_hex;
use super::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// A stand-in for QEMU: a pvrdma function at 00:10.1 behind a multi-function device, with
/// BARs, an MSI-X capability and a little RAM; enough to open the platform and fail it.
fn fake_qemu(stream: UnixStream, die_after: usize) {
    let mut r = BufReader::new(stream.try_clone().unwrap());
    let mut w = stream;
    let mut cf8 = 0u32;
    let mut cfg: BTreeMap<(u32, u32), u32> = BTreeMap::new();
    let bar_sizes = [0x1000u32, 0x1000, 0x80_0000];
    let mut mem: BTreeMap<u64, u32> = BTreeMap::new();
    let mut line = String::new();
    for n in 0.. {
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 || n >= die_after {
            return;
        }
        assert!(!line.trim().is_empty(), "empty line sent");
        let p: Vec<&str> = line.split_whitespace().collect();
        let h = |s: &str| parse_hex(s).unwrap();
        let ans = match p[0] {
            "outl" if h(p[1]) == 0xcf8 => {
                cf8 = h(p[2]) as u32;
                "OK".to_string()
            }
            "outl" => {
                let (devfn, reg) = ((cf8 >> 8) & 0xff, cf8 & 0xfc);
                let v = h(p[2]) as u32;
                let v = if (0x10..0x1c).contains(&reg) {
                    let sz = bar_sizes[((reg - 0x10) / 4) as usize];
                    v & !(sz - 1)
                } else {
                    v
                };
                cfg.insert((devfn, reg), v);
                "OK".to_string()
            }
            "inl" => {
                let (devfn, reg) = ((cf8 >> 8) & 0xff, cf8 & 0xfc);
                let v = match (devfn, reg) {
                    (0x80, 0) => 0x07b0_15ad,
                    (0x80, 0x0c) => 0x0080_0000,
                    (0x81, 0) => 0x0820_15ad,
                    (0x81, 0x34) => 0x40,
                    (0x81, 0x40) => 0x0002_0011 | cfg.get(&(0x81, 0x40)).copied().unwrap_or(0) & 0xc000_0000,
                    (0x81, 0x44) => 0x0000_2000,
                    (0x81, 0x04) => 0x0010_0000 | cfg.get(&(devfn, reg)).copied().unwrap_or(0) & 0xffff,
                    (0x81, r) if (0x10..0x1c).contains(&r) => cfg.get(&(devfn, reg)).copied().unwrap_or(0),
                    (0x81, _) => 0,
                    _ => 0xffff_ffff,
                };
                format!("OK {v:#06x}")
            }
            "writel" => {
                mem.insert(h(p[1]), h(p[2]) as u32);
                "OK".into()
            }
            "readl" => format!("OK {:#018x}", mem.get(&h(p[1])).copied().unwrap_or(0x11)),
            "memset" => "OK".into(),
            _ => "FAIL unknown".into(),
        };
        w.write_all(format!("{ans}\n").as_bytes()).unwrap();
    }
}

#[test]
fn opens_a_fake_device_then_fails_safe_when_the_socket_dies() {
    let (a, b) = UnixStream::pair().unwrap();
    let t = std::thread::spawn(move || fake_qemu(b, 400));
    let p = QtestPlatform::open(a, QtestOptions::new(64 << 20)).unwrap();
    assert_eq!(p.name(), "qtest:00:10.1");
    let [b0, b1, b2] = p.bar_addresses();
    assert_eq!(b2 % (8 << 20), 0, "UAR BAR 8 MiB aligned");
    assert!(b0 >= b2 + (8 << 20) && b1 >= b2 + (8 << 20), "{b0:#x} {b1:#x} {b2:#x}");
    assert_eq!(p.uar_pages(), 2048);
    assert_eq!(p.reg_read(0), 0x11);
    let m = p.dma_alloc(100).unwrap();
    assert!(p.dma_read(m + 4096, &mut [0u8; 4]).is_err());
    // The fake answers 400 lines then hangs up: everything degrades, nothing hangs.
    while !p.is_dead() {
        p.reg_read(0);
    }
    t.join().unwrap();
    assert_eq!(p.reg_read(0), u32::MAX);
    p.reg_write(0x10, 0);
    assert!(p.dropped_writes() >= 1);
    assert!(matches!(p.dma_store_u32(m, 1), Err(PlatformError::Io(_))));
    let t0 = Instant::now();
    assert_eq!(p.wait_vector(0, Duration::from_millis(20)), 0);
    assert!(t0.elapsed() >= Duration::from_millis(20));
    assert!(matches!(p.raw_command(""), Err(PlatformError::Io(_))));
}
