//! `hca`: the project's verbs tools on pvrdma devices — by default one built-in device model
//! (`vmw_pvrdma0`), so no hardware, root or set-up is needed.
//!
//! - `hca devinfo` prints devices and ports the way `ibv_devinfo` does (`-d`, `-i`, `-l`, `-v`).
//! - `hca pingpong` runs an RC SEND/RECV ping-pong between two QPs of a device, the way
//!   `ibv_rc_pingpong` does between two hosts (`-d`, `-i`, `-g`, `-s`, `-n`, `-r`, `-m`, `-l`, `-e`),
//!   checking every payload.

mod args;
mod devinfo;
mod pingpong;
mod sys;

use args::number;
use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};
use ib_core::Device;
use pvrdma_sim::{Profile, SimConfig};
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
struct ModelOpts {
    /// Behaviour of the built-in model: `ibta` (IBTA semantics) or `qemu72` (QEMU 7.2's quirks).
    #[arg(long, global = true, default_value = "ibta", value_parser = parse_profile)]
    profile: Profile,
    /// One-way latency of the model's loopback port, in microseconds. 0: the sender's doorbell
    /// delivers at once. Otherwise the port thread sleeps until a packet is due, and a sleep
    /// oversleeps by the host's timer slack (50-100 µs in a VM).
    #[arg(long, global = true, default_value_t = 50, value_parser = number::<u64>)]
    link_latency_us: u64,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print device and port attributes (like ibv_devinfo).
    Devinfo(devinfo::Opts),
    /// RC ping-pong between two QPs of a device (like ibv_rc_pingpong).
    Pingpong(pingpong::Opts),
}

fn parse_profile(s: &str) -> Result<Profile, String> {
    match s {
        "ibta" => Ok(Profile::Ibta),
        "qemu72" => Ok(Profile::Qemu72),
        other => Err(format!("unknown profile {other:?} (ibta, qemu72)")),
    }
}

/// Adds the built-in model to the verbs core's device list; the returned handle keeps it there.
fn add_model(opts: &ModelOpts) -> ib_core::Result<Device> {
    let cfg = SimConfig {
        profile: opts.profile,
        link_latency: Duration::from_micros(opts.link_latency_us),
        ..SimConfig::default()
    };
    hca::open_sim(cfg).map(|(dev, _)| dev)
}

fn main() -> ExitCode {
    sys::default_sigpipe();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return parse_failure(&e),
    };
    let _model = match add_model(&cli.model) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("cannot open the built-in device: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match &cli.cmd {
        Cmd::Devinfo(o) => devinfo::run(o),
        Cmd::Pingpong(o) => pingpong::run(o),
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
