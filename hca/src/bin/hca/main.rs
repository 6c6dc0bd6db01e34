//! `hca`: the project's verbs tools on a pvrdma device — by default the built-in device model, so
//! no hardware, root or set-up is needed.
//!
//! - `hca devinfo` prints the device and its ports the way `ibv_devinfo` does.
//! - `hca pingpong` runs an RC SEND/RECV ping-pong between two QPs of the device, the way
//!   `ibv_rc_pingpong` does between two hosts, checking every payload.

mod devinfo;
mod pingpong;
mod usage;

use clap::{Args, Parser, Subcommand};
use hca::Device;
use pvrdma_sim::{Profile, SimConfig};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(name = "hca", version, about = "Verbs tools on a pvrdma HCA (default: the built-in model)")]
struct Cli {
    #[command(flatten)]
    device: DeviceOpts,
    #[command(subcommand)]
    cmd: Cmd,
}

/// Which device to open.
#[derive(Args)]
struct DeviceOpts {
    /// Behaviour of the built-in model: `ibta` (IBTA semantics) or `qemu72` (QEMU 7.2's quirks).
    #[arg(long, global = true, default_value = "ibta", value_parser = parse_profile)]
    profile: Profile,
    /// One-way latency of the model's loopback port, in microseconds.
    #[arg(long, global = true, default_value_t = 50)]
    link_latency_us: u64,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print device and port attributes (like ibv_devinfo).
    Devinfo,
    /// RC ping-pong between two QPs of the device (like ibv_rc_pingpong).
    Pingpong(pingpong::Opts),
}

fn parse_profile(s: &str) -> Result<Profile, String> {
    match s {
        "ibta" => Ok(Profile::Ibta),
        "qemu72" => Ok(Profile::Qemu72),
        other => Err(format!("unknown profile {other:?} (ibta, qemu72)")),
    }
}

fn open(opts: &DeviceOpts) -> hca::Result<Device> {
    let cfg = SimConfig {
        profile: opts.profile,
        link_latency: Duration::from_micros(opts.link_latency_us),
        ..SimConfig::default()
    };
    Device::open_sim(cfg).map(|(dev, _)| dev)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let dev = match open(&cli.device) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("hca: cannot open the device: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match &cli.cmd {
        Cmd::Devinfo => devinfo::run(&dev),
        Cmd::Pingpong(o) => pingpong::run(&dev, o),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hca: {e}");
            ExitCode::FAILURE
        }
    }
}
