//! The `hca` tool as a user runs it: `pingpong` in busy and event mode for several sizes, with every
//! payload checked, event mode sleeping, and `devinfo` shaped like `ibv_devinfo`.

use std::process::Command;
use std::time::Duration;

fn hca(args: &[&str]) -> (bool, String, String) {
    let (code, out, err) = hca_status(args);
    (code == Some(0), out, err)
}

/// The exit status, stdout and stderr of one run.
fn hca_status(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hca")).args(args).output().expect("run hca");
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (out.status.code(), text(out.stdout), text(out.stderr))
}

fn field<'a>(out: &'a str, after: &str) -> &'a str {
    let rest = &out[out.find(after).unwrap_or_else(|| panic!("no {after:?} in:\n{out}")) + after.len()..];
    rest.split_whitespace().next().unwrap_or("")
}

#[test]
fn pingpong_verifies_every_payload_busy_and_event_mode() {
    for size in ["1", "4096", "65536"] {
        for events in [false, true] {
            let mut args = vec!["--link-latency-us", "0", "pingpong", "-s", size, "-n", "50"];
            if events {
                args.push("-e");
            }
            let (ok, out, err) = hca(&args);
            assert!(ok, "{args:?} failed:\n{out}\n{err}");
            assert!(out.contains(&format!("payload verified: 100 messages of {size} bytes")), "{out}");
            assert!(out.contains(" usec/iter") && out.contains(" Mbit/sec"), "{out}");
            assert_eq!(out.contains("completion events waited for"), events, "{out}");
        }
    }
}

/// CPU time over wall time of one run, and the events it waited for.
fn cpu_ratio(args: &[&str]) -> (f64, u64, String) {
    let (ok, out, err) = hca(args);
    assert!(ok, "{args:?} failed:\n{out}\n{err}");
    let secs: f64 = field(&out, "iters in ").parse().unwrap();
    let events =
        if out.contains("events waited for: ") { field(&out, "events waited for: ").parse().unwrap() } else { 0 };
    let cpu: f64 = if args.contains(&"-e") { field(&out, "CPU time ").parse().unwrap() } else { f64::NAN };
    (cpu / secs.max(1e-9), events, out)
}

#[test]
fn event_mode_sleeps_and_waits_for_about_one_event_per_completion() {
    let iters = 300u64;
    let n = iters.to_string();
    let args = ["--link-latency-us", "200", "pingpong", "-e", "-n", n.as_str()];
    let (ratio, events, out) = cpu_ratio(&args);
    // Each end completes one send and one receive per iteration: between 1 and 2 events each.
    assert!((iters..=4 * iters + 4).contains(&events), "{events} events for {iters} iters:\n{out}");
    // Busy polling keeps two threads spinning (CPU ~ 2x wall); event mode sleeps on the wire.
    let limit = if cfg!(debug_assertions) { 1.0 } else { 0.6 };
    assert!(ratio < limit, "event mode used {ratio:.2} of wall time in CPU:\n{out}");
}

#[test]
fn devinfo_is_shaped_like_ibv_devinfo() {
    let (ok, out, err) = hca(&["devinfo", "-v"]);
    assert!(ok, "{err}");
    for want in [
        "hca_id:\tvmw_pvrdma0",
        "transport:\t\t\tInfiniBand (0)",
        "vendor_id:\t\t\t0x15ad",
        "vendor_part_id:\t\t\t2080",
        "phys_port_cnt:\t\t\t1",
        "port:\t1",
        "state:\t\t\tPORT_ACTIVE (4)",
        "active_mtu:\t\t1024 (3)",
        "link_layer:\t\tEthernet",
        "GID[  0]:\t\tfe80:",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    for f in ["fw_ver:", "node_guid:", "sys_image_guid:", "hw_ver:", "max_mtu:", "max_qp_wr:", "gid_tbl_len:"] {
        assert!(out.contains(f), "missing {f}");
    }
    // Without -v, as ibv_devinfo: no GIDs, no limits.
    let (_, out, _) = hca(&["devinfo"]);
    assert!(!out.contains("GID[") && !out.contains("max_qp_wr:"), "{out}");
}

#[test]
fn bad_options_fail_with_a_message() {
    let (ok, _, err) = hca(&["pingpong", "-m", "300"]);
    assert!(!ok && err.contains("MTU"), "{err}");
    let (ok, _, err) = hca(&["--profile", "nope", "devinfo"]);
    assert!(!ok && err.contains("profile"), "{err}");
}

#[test]
fn devinfo_takes_ibv_devinfos_options_and_formats_fw_ver_as_pvrdma_does() {
    let (ok, out, err) = hca(&["devinfo", "-d", "vmw_pvrdma0", "-i", "1"]);
    assert!(ok, "{err}");
    // rdma-core's pvrdma provider: "%d.%d.%03d" of bits 32-47, 16-31, 0-15.
    assert!(out.contains("fw_ver:\t\t\t\t1.0.014\n"), "{out}");
    assert!(out.contains("port:\t1"), "{out}");
    // As ibv_devinfo, with its exit statuses: a port the device lacks is refused (4), port 0 is a
    // usage error (1), an unknown device 255; numbers read as strtol reads them.
    let (code, out, err) = hca_status(&["devinfo", "-i", "2"]);
    assert_eq!(code, Some(4), "{out}{err}");
    assert!(err.contains("Invalid port requested for device") && out.is_empty(), "{out}{err}");
    assert_eq!(hca_status(&["devinfo", "-i", "0"]).0, Some(1));
    assert!(hca(&["devinfo", "-i", "0x1"]).1.contains("\t\tport:\t1"));
    let (code, _, err) = hca_status(&["devinfo", "--ib-dev", "mlx5_9"]);
    assert!(code == Some(255) && err.contains("IB device 'mlx5_9' wasn't found"), "{err}");
    let (ok, out, _) = hca(&["devinfo", "-l"]);
    assert!(ok && out == "1 HCA found:\n\tvmw_pvrdma0\n\n", "{out:?}");
}

#[test]
fn pingpong_takes_ibv_rc_pingpongs_device_port_gid_and_rx_depth_options() {
    let args = [
        "--link-latency-us",
        "0",
        "pingpong",
        "-d",
        "vmw_pvrdma0",
        "-i",
        "1",
        "-g",
        "0",
        "-l",
        "3",
        "-r",
        "1",
        "-n",
        "20",
        "-s",
        "0x40",
    ];
    let (ok, out, err) = hca(&args);
    assert!(ok, "{args:?}:\n{out}\n{err}");
    assert!(out.contains("payload verified: 40 messages of 64 bytes"), "{out}");
    let (ok, _, err) = hca(&["pingpong", "-d", "vmw_pvrdma7"]);
    assert!(!ok && err.contains("IB device vmw_pvrdma7 not found"), "{err}");
    let (ok, _, err) = hca(&["pingpong", "-i", "2"]);
    assert!(!ok && err.contains("Couldn't get port info"), "{err}");
    let (ok, _, err) = hca(&["pingpong", "-g", "4096"]);
    assert!(!ok && err.contains("can't read sgid of index 4096"), "{err}");
    let (ok, _, err) = hca(&["pingpong", "-g", "1"]);
    assert!(!ok && err.contains("GID index 1 of port 1 holds no GID"), "{err}");
}

#[test]
fn devinfo_verbose_prints_every_field_ibv_devinfo_prints_for_pvrdma() {
    let (ok, out, err) = hca(&["devinfo", "-v"]);
    assert!(ok, "{err}");
    let order = [
        "\thw_ver:\t\t\t\t0x1\n\tboard_id:\t\t\t1\n\tphys_port_cnt:\t\t\t1\n",
        "\tdevice_cap_flags:\t\t0x00001400\n\t\t\t\t\tPORT_ACTIVE_EVENT\n\t\t\t\t\tRC_RNR_NAK_GEN\n\tmax_sge:",
        "\tatomic_cap:\t\t\tATOMIC_HCA (1)\n\tmax_ee:\t\t\t\t0\n",
        "\tmax_total_mcast_qp_attach:\t0\n\tmax_ah:",
        "\tmax_srq:\t\t\t1024\n\tmax_srq_wr:\t\t\t1024\n\tmax_srq_sge:\t\t\t4\n\tmax_pkeys:\t\t\t1\n\tlocal_ca_ack_delay:\t\t0\n\tgeneral_odp_caps:\n\trc_odp_caps:\n\t\t\t\t\tNO SUPPORT\n",
        "\tcompletion_timestamp_mask not supported\n\tcore clock not supported\n\tdevice_cap_flags_ex:\t\t0x1400\n",
        "\ttag matching not supported\n\tnum_comp_vectors:\t\t1\n\t\tport:\t1\n",
        "\t\t\tmax_msg_sz:\t\t0x1000000\n\t\t\tport_cap_flags:\t\t0x00010000\n\t\t\tport_cap_flags2:\t0x0000\n\t\t\tmax_vl_num:\t\t1 (1)\n",
        "\t\t\tactive_width:\t\t1X (1)\n\t\t\tactive_speed:\t\t2.5 Gbps (1)\n\t\t\tphys_state:\t\tLINK_UP (5)\n",
        "\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:5054:00ff:fe12:3456, RoCE v1\n\n",
    ];
    let mut at = 0;
    for want in order {
        let found = out[at..].find(want).unwrap_or_else(|| panic!("missing (or out of order) {want:?} in:\n{out}"));
        at += found + want.len();
    }
    assert!(out.ends_with("RoCE v1\n\n"), "{out}");
}

/// Options as getopt and strtol read them, and the exit statuses of rdma-core's tools for bad
/// ones: ibv_devinfo 255, ibv_rc_pingpong 1.
#[test]
fn options_parse_as_getopt_and_strtol_do() {
    assert_eq!(hca_status(&["devinfo", "-x"]).0, Some(255));
    assert_eq!(hca_status(&["devinfo", "-i", "abc"]).0, Some(1), "strtol reads 0: a usage error");
    assert_eq!(hca_status(&["pingpong", "-x"]).0, Some(1));
    assert_eq!(hca_status(&["pingpong", "-i", "0"]).0, Some(1));
    let (code, _, err) = hca_status(&["pingpong", "-g", "-1"]);
    assert!(code == Some(1) && err.contains("Failed to modify QP to RTR"), "{err}");
    let args = ["--link-latency-us", "0", "pingpong", "-n", "9", "-en", "3x", "-s", "64", "-s", "32"];
    let (ok, out, err) = hca(&args);
    assert!(ok, "{err}");
    assert!(out.contains("completion events waited for"), "-e bundled with -n: {out}");
    assert!(out.ends_with(" usec/iter\n") && out.contains("\n3 iters in "), "last -n wins, 3x reads 3: {out}");
    assert!(out.contains("192 bytes in "), "last -s wins: {out}");
    let (code, _, _) = hca_status(&["devinfo", "-v", "-v", "-i", "1", "-i", "1"]);
    assert_eq!(code, Some(0), "repeated options keep the last value");
}

/// GID index 0, the default of most programs, speaks on a RoCE port: it is the first `--roce`
/// address as RoCE v2 (it was the link-local RoCE v1 GID, which the port cannot send from, so
/// `-g 0` was refused). Two processes, both ends `-g 0`, payloads checked.
#[test]
fn pingpong_over_roce_connects_from_gid_index_0() {
    let (server, port) = crate::tool::serve_held(LIMIT, |f| {
        let port = f.port();
        (args(&["--roce", &f.v4().to_string(), "pingpong", "-g", "0", "-p", &port.to_string(), "-n", "5"]), port)
    });
    let mut client_ip = None;
    let client = crate::tool::run_held(LIMIT, |f| {
        let ip = client_ip.insert(f.v4()).to_string();
        args(&["--roce", &ip, "pingpong", "-g", "0", "-p", &port.to_string(), "-n", "5", "127.0.0.1"])
    });
    let server = server.finish(LIMIT).expect("the server ends within 60 s");
    for (who, (code, out, err)) in [("client", &client), ("server", &server)] {
        assert_eq!(*code, 0, "{who}:\n{out}\n{err}");
        assert!(out.contains("payload verified: 5 messages"), "{who}: {out}");
    }
    let gid = format!("GID ::ffff:{}", client_ip.unwrap());
    assert!(client.1.lines().any(|l| l.contains("local address:") && l.ends_with(&gid)), "{}", client.1);
}

/// A closed pipe ends the tool quietly (SIGPIPE), as a C tool ends.
#[test]
fn a_closed_pipe_ends_the_tool_quietly() {
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_hca"))
        .args(["--link-latency-us", "0", "pingpong", "-n", "2000", "-s", "8"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    use std::os::unix::process::ExitStatusExt;
    assert!(out.status.success() || out.status.signal() == Some(libc::SIGPIPE), "{:?} {err}", out.status);
}

/// With `--roce`, each address is a RoCE v2 GID at 1, 2, ... and the first at index 0 too,
/// printed as `ibv_devinfo -v` prints a RoCE v2 entry (`inet_ntop`, then its type). Addresses of this test's
/// own: the RoCE port binds UDP 4791 on them (tried until the tool binds both).
#[test]
fn devinfo_shows_the_roce_addresses_as_roce_v2_gids() {
    let mut addrs = (std::net::Ipv4Addr::UNSPECIFIED, std::net::Ipv4Addr::UNSPECIFIED);
    let (code, out, err) = crate::tool::run_held(LIMIT, |f| {
        addrs = (f.v4(), f.v4());
        args(&["--roce", &addrs.0.to_string(), "--roce", &addrs.1.to_string(), "devinfo", "-v"])
    });
    assert_eq!(code, 0, "{err}");
    let table = format!(
        "\t\t\tGID[  0]:\t\t::ffff:{0}, RoCE v2\n\
         \t\t\tGID[  1]:\t\t::ffff:{0}, RoCE v2\n\
         \t\t\tGID[  2]:\t\t::ffff:{1}, RoCE v2\n\n",
        addrs.0, addrs.1
    );
    assert!(out.ends_with(&table), "{out}");
}

#[test]
fn model_options_are_checked_when_read() {
    for args in [
        &["--link-loss", "0.1", "devinfo"][..],
        &["--pcap", "/nonexistent/x.pcap", "devinfo"],
        &["--link-seed", "7", "devinfo"],
    ] {
        let (code, _, err) = hca_status(args);
        assert!(code == Some(255) && err.contains("--roce"), "{args:?}: {err}");
    }
    // (Refused as it is read: nothing binds the address, a documentation one, TEST-NET-1.)
    let (code, _, err) = hca_status(&["--roce", "192.0.2.13", "--link-loss", "1.5", "pingpong"]);
    assert!(code == Some(1) && err.contains("not a probability"), "{err}");
    let (code, _, err) = hca_status(&["--roce", "not-an-address", "devinfo"]);
    assert!(code == Some(255) && err.contains("not-an-address"), "{err}");
    let (code, _, err) = hca_status(&["pingpong", "127.0.0.1"]);
    assert!(code == Some(1) && err.contains("a HOST needs --roce"), "{err}");
    // Model options may come before or after the subcommand, --roce after the link options.
    let mut addr = None;
    let (code, out, err) = crate::tool::run_held(LIMIT, |f| {
        let a = addr.insert(f.v4()).to_string();
        args(&["--link-seed", "3", "--link-loss", "0", "devinfo", "--roce", &a, "-v"])
    });
    let want = format!("::ffff:{}, RoCE v2", addr.unwrap());
    assert!(code == 0 && out.contains(&want), "{out}{err}");
}

/// The longest one run of the tool may take.
const LIMIT: Duration = Duration::from_secs(60);

/// Owned arguments.
fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// Server and client as two processes of the tool, each with its own model and a RoCE v2 port
/// on its own loopback address, as docs/roce.md shows them: the connection data goes over TCP as
/// `ibv_rc_pingpong` sends it, the messages over UDP 4791, and each end checks every payload.
/// Busy and event mode; one-packet, one-page and 64-packet messages (MTU 1024). Addresses and the
/// server's port are the test's own: tried until the tool binds them, and the client starts only
/// once the server listens.
#[test]
fn pingpong_runs_as_two_processes_over_roce() {
    for (size, events) in [("1", false), ("4096", true), ("65536", false), ("65536", true)] {
        let common = |port: u16| {
            let mut c = args(&["pingpong", "-p", &port.to_string(), "-s", size, "-n", "20", "--timeout-s", "20"]);
            if events {
                c.push("-e".into());
            }
            c
        };
        let (server, port) = crate::tool::serve_held(LIMIT, |f| {
            let port = f.port();
            ([args(&["--roce", &f.v4().to_string()]), common(port)].concat(), port)
        });
        let mut client_ip = None;
        let client = crate::tool::run_held(LIMIT, |f| {
            let ip = client_ip.insert(f.v4()).to_string();
            [args(&["--roce", &ip]), common(port), args(&["127.0.0.1"])].concat()
        });
        let server = server.finish(LIMIT).expect("the server ends within 60 s");
        for (who, (code, out, err)) in [("client", &client), ("server", &server)] {
            assert_eq!(*code, 0, "{who} {size} -e {events}:\n{out}\n{err}");
            assert!(out.contains(&format!("payload verified: 20 messages of {size} bytes")), "{who}: {out}");
            assert!(out.ends_with(" usec/iter\n") && out.contains(" Mbit/sec\n"), "{who}: {out}");
            assert_eq!(out.contains("completion events waited for: "), events, "{who}: {out}");
        }
        // Each end prints the other's QPN, PSN and GID as its remote address.
        let (c, s) = (&client.1, &server.1);
        let line = |out: &str, tag: &str| {
            out.lines().find(|l| l.contains(tag)).unwrap_or("").split(tag).nth(1).unwrap_or("").to_string()
        };
        assert_eq!(line(c, "local address:  "), line(s, "remote address: "), "{c}\n{s}");
        assert_eq!(line(s, "local address:  "), line(c, "remote address: "), "{c}\n{s}");
        let gid = format!("GID ::ffff:{}", client_ip.unwrap());
        assert!(line(c, "local address:  ").ends_with(&gid), "{c}");
        // The figures time the ping-pong, not the linger after it (at least 300 ms of a quiet
        // wire): found by the fresh-user trial, every result line was 300 ms longer.
        if size == "1" {
            for (who, out) in [("client", c), ("server", s)] {
                let secs: f64 = field(out, "20 iters in ").parse().unwrap_or(f64::MAX);
                assert!(secs < 0.3, "{who}: 20 one-byte round trips took {secs} s: the linger was timed?\n{out}");
            }
        }
    }
}
