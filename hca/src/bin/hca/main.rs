//! `hca`: the project's verbs tools on pvrdma devices — by default one built-in device model
//! (`vmw_pvrdma0`), so no hardware, root or set-up is needed.
//!
//! - `hca devinfo` prints devices and ports the way `ibv_devinfo` does (`-d`, `-i`, `-l`, `-v`).
//! - `hca pingpong` runs an RC SEND/RECV ping-pong between two QPs of a device, the way
//!   `ibv_rc_pingpong` does between two hosts (`-d`, `-i`, `-g`, `-s`, `-n`, `-r`, `-m`, `-l`, `-e`),
//!   checking every payload; with `--roce` this process is one end, server or client (`HOST`),
//!   and the other end another process: this tool again, or `ibv_rc_pingpong` (`-p`).
//! - `hca run -- PROGRAM ARGS...` runs an unmodified rdma-core program (`ibv_devinfo`,
//!   `ibv_rc_pingpong`, perftest...) over this project's `libibverbs.so.1` and the model the
//!   options describe (no model is opened in this process).
//!
//! `--roce ADDR` gives the model a RoCE v2 port on ADDR instead of its in-process loopback, with
//! link faults (`--link-loss`, `--link-reorder`, `--link-duplicate`, `--link-seed`) and a packet
//! capture (`--pcap`).
// `unsafe` only in `sys`, the libc calls.
#![deny(unsafe_code)]

mod args;
mod devinfo;
mod exchange;
mod payload;
mod pingpong;
mod run;
// libc calls (getrusage, sysconf, signal).
#[allow(unsafe_code)]
mod sys;

use args::number;
use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};
use ib_core::Device;
use pvrdma_sim::roce::{LinkFaults, RoceConfig};
use pvrdma_sim::{Profile, SimConfig};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(name = "hca", version, about = "Verbs tools on pvrdma HCAs (default: the built-in model)")]
#[command(args_override_self = true)]
struct Cli {
    #[command(flatten)]
    model: ModelOpts,
    #[command(subcommand)]
    cmd: Cmd,
}

/// The built-in model the tools open (as `vmw_pvrdma0`).
#[derive(Args)]
#[command(next_help_heading = "Model options")]
struct ModelOpts {
    /// Behaviour of the built-in model: `ibta` (IBTA semantics) or `qemu72` (QEMU 7.2's quirks).
    #[arg(long, global = true, default_value = "ibta", value_parser = parse_profile)]
    profile: Profile,
    /// One-way latency of the model's loopback port, in microseconds. 0: the sender's doorbell
    /// delivers at once. Otherwise the port thread sleeps until a packet is due, and a sleep
    /// oversleeps by the host's timer slack (50-100 µs in a VM).
    #[arg(long, global = true, default_value_t = 50, value_parser = number::<u64>)]
    link_latency_us: u64,
    /// Give the model a RoCE v2 port on this IP address (IPv4 or IPv6) instead of the
    /// in-process loopback: it binds UDP 4791 there, and the address becomes a RoCE v2 GID.
    /// Repeat for more (all before or all after the subcommand: those after it replace those
    /// before): GIDs 1, 2, ... in order, and the first at index 0 too. Two processes
    /// on one host use two loopback addresses (127.0.0.1 and 127.0.0.2).
    #[arg(long = "roce", value_name = "ADDR", global = true)]
    roce: Vec<IpAddr>,
    /// Drop each packet the RoCE port sends or receives with probability P (0 to 1).
    #[arg(long, value_name = "P", global = true, value_parser = probability)]
    link_loss: Option<f64>,
    /// Hold back each packet with probability P and send it after the next one (0 to 1).
    #[arg(long, value_name = "P", global = true, value_parser = probability)]
    link_reorder: Option<f64>,
    /// Send each packet twice with probability P (0 to 1).
    #[arg(long, value_name = "P", global = true, value_parser = probability)]
    link_duplicate: Option<f64>,
    /// Seed of the link faults' generator (the same seed repeats the same faults).
    #[arg(long, value_name = "N", global = true, value_parser = number::<u64>)]
    link_seed: Option<u64>,
    /// Write every packet the RoCE port sends and receives to FILE (pcap, raw IP).
    #[arg(long, value_name = "FILE", global = true)]
    pcap: Option<PathBuf>,
}

impl ModelOpts {
    /// The link options need `--roce`, wherever on the command line each is (a global option's
    /// `requires` is checked before the subcommand's part is read, so it is checked here).
    fn check(&self) -> Result<(), clap::Error> {
        let given = [
            ("--link-loss", self.link_loss.is_some()),
            ("--link-reorder", self.link_reorder.is_some()),
            ("--link-duplicate", self.link_duplicate.is_some()),
            ("--link-seed", self.link_seed.is_some()),
            ("--pcap", self.pcap.is_some()),
        ];
        match given.iter().find(|(_, g)| *g) {
            Some((name, _)) if self.roce.is_empty() => {
                use clap::CommandFactory;
                Err(Cli::command().error(ErrorKind::MissingRequiredArgument, format!("{name} needs --roce ADDR")))
            }
            _ => Ok(()),
        }
    }

    /// The RoCE v2 port `--roce` and the link options describe; `None` without `--roce`.
    fn roce(&self) -> Option<RoceConfig> {
        if self.roce.is_empty() {
            return None;
        }
        let mut cfg = RoceConfig::new(self.roce.clone());
        cfg.faults = LinkFaults {
            loss: self.link_loss.unwrap_or(0.0),
            reorder: self.link_reorder.unwrap_or(0.0),
            duplicate: self.link_duplicate.unwrap_or(0.0),
            seed: self.link_seed.unwrap_or(0),
        };
        cfg.pcap = self.pcap.clone();
        Some(cfg)
    }
}

/// A probability: a number from 0 to 1.
fn probability(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("{s} is not a probability (a number from 0 to 1)")),
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Print device and port attributes (like ibv_devinfo).
    Devinfo(devinfo::Opts),
    /// RC ping-pong between two QPs of a device (like ibv_rc_pingpong).
    Pingpong(pingpong::Opts),
    /// Run an rdma-core program over this project's libibverbs.so.1 and the model these options
    /// describe (as HCA_DEVICES, unless already set): `hca run --roce 127.0.0.1 -- ibv_devinfo`.
    Run(run::Opts),
}

fn parse_profile(s: &str) -> Result<Profile, String> {
    match s {
        "ibta" => Ok(Profile::Ibta),
        "qemu72" => Ok(Profile::Qemu72),
        other => Err(format!("unknown profile {other:?} (ibta, qemu72)")),
    }
}

/// Adds the built-in model to the verbs core's device list; the returned handle keeps it there.
fn add_model(opts: &ModelOpts) -> ib_core::Result<(Device, hca::platform::sim::SimPlatform)> {
    let cfg = SimConfig {
        profile: opts.profile,
        link_latency: Duration::from_micros(opts.link_latency_us),
        roce: opts.roce(),
        ..SimConfig::default()
    };
    hca::open_sim(cfg)
}

fn main() -> ExitCode {
    sys::default_sigpipe();
    let cli = match Cli::try_parse().and_then(|c| c.model.check().map(|()| c)) {
        Ok(cli) => cli,
        Err(e) => return parse_failure(&e),
    };
    if let Cmd::Run(o) = &cli.cmd {
        let f = run::run(o, &cli.model);
        eprintln!("{}", f.msg);
        return ExitCode::from(f.code);
    }
    let (_model, sim) = match add_model(&cli.model) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("cannot open the built-in device: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The peer's last ACK may have been lost: its resend is answered (by the QP, which the
    // ping-pong keeps until this returns) before the QP and the model go.
    let linger = || sim.linger_roce(Duration::from_millis(300), Duration::from_secs(3));
    let result = match &cli.cmd {
        Cmd::Devinfo(o) => devinfo::run(o),
        Cmd::Pingpong(o) => pingpong::run(o, !cli.model.roce.is_empty(), &linger),
        Cmd::Run(_) => unreachable!("run execs before the model opens"),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("{}", f.msg);
            ExitCode::from(f.code)
        }
    }
}

/// A command line that does not parse: clap's message (with the usage line), and the exit
/// status the rdma-core tool gives for a bad option — `ibv_devinfo` 255, `ibv_rc_pingpong` 1.
/// Help and version requests print and succeed.
fn parse_failure(e: &clap::Error) -> ExitCode {
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        e.exit();
    }
    let _ = e.print();
    let devinfo = std::env::args().skip(1).find(|a| a == "devinfo" || a == "pingpong");
    ExitCode::from(if devinfo.as_deref() == Some("devinfo") { 255 } else { 1 })
}

/// The usage line of subcommand `name`, as clap renders it.
pub fn usage(name: &str) -> String {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    cmd.build();
    cmd.find_subcommand_mut(name).map(|c| c.render_usage().to_string()).unwrap_or_default()
}
