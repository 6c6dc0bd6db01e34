//! tshark over a RoCE v2 capture (Debian's tshark 4.0 decodes RoCE v2 but does not check the
//! ICRC, and takes plain SEND payloads for RPC-over-RDMA unless that dissector is off).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Whether tshark can run; without it the caller skips unless `ROCE_REQUIRE_TSHARK=1`.
pub fn tshark_present() -> bool {
    let ok = Command::new("tshark")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok && std::env::var("ROCE_REQUIRE_TSHARK").as_deref() == Ok("1") {
        panic!("tshark is not installed and ROCE_REQUIRE_TSHARK=1 (Debian: apt-get install tshark)");
    }
    ok
}

/// `tshark -V` over `pcap` (RPC-over-RDMA off: it claims plain SEND payloads; IP and UDP
/// checksum validation on), bounded by 120 s; its standard output.
pub fn tshark_verbose(pcap: &Path) -> String {
    let out_path = pcap.with_extension("txt");
    let out = std::fs::File::create(&out_path).unwrap();
    let mut child = Command::new("tshark")
        .args(["--disable-protocol", "rpcordma", "-o", "ip.check_checksum:TRUE"])
        .args(["-o", "udp.check_checksum:TRUE", "-V", "-r"])
        .arg(pcap)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(Stdio::null())
        .spawn()
        .expect("start tshark");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tshark did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "tshark failed: {status}");
    let text = std::fs::read_to_string(&out_path).unwrap();
    std::fs::remove_file(&out_path).unwrap();
    text
}

/// The value after `key` on the first line of `frame` that has it.
pub fn field<'a>(frame: &'a str, key: &str) -> Option<&'a str> {
    frame.lines().find_map(|l| l.trim().strip_prefix(key)).map(str::trim)
}

/// What tshark says of a frame it could not decode or found wrong.
pub const COMPLAINTS: [&str; 4] = ["Malformed", "Bad]", "Expert Info (Error", "Expert Info (Warning"];
