//! `hca pingpong`: RC SEND/RECV ping-pong shaped like `ibv_rc_pingpong` (same options, same
//! result lines), checking every payload. Without `--roce` both ends are QPs of the built-in
//! model in this process: the client end sends first, each end sends its next message only when
//! its previous send has completed and the peer's message has arrived. With `--roce` this process
//! is one end (`remote.rs`): the server without a HOST argument, the client with one, the
//! connection data exchanged over TCP as `ibv_rc_pingpong` does. As `ibv_rc_pingpong`, each end
//! registers a buffer of its own memory (`ibv_reg_mr`) and connects through the GID at `-g` of
//! port `-i`.

//!
//! The parts: `end` (one end: its verbs objects, its loop, what it measured, and the steps both
//! modes share), `local` (both ends in this process), `remote` (one end of two processes).

mod end;
mod local;
mod remote;

use crate::args::{number, Failure as ToolFailure};
use clap::Args;

/// Options, named as `ibv_rc_pingpong` names them; a repeated option keeps its last value
/// (getopt).
#[derive(Args, Clone)]
#[command(args_override_self = true)]
pub struct Opts {
    /// Use this IB device (default: the first device found).
    #[arg(short = 'd', long = "ib-dev")]
    pub(crate) ib_dev: Option<String>,
    /// Use this port of the device (at least 1).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1, value_parser = port)]
    pub(crate) ib_port: u8,
    /// Local port GID index (ibv_rc_pingpong needs it on RoCE). Default: 0; with --roce, the
    /// index of the port's first RoCE v2 GID (the first --roce address). A negative one,
    /// ibv_rc_pingpong's "none", cannot connect on RoCE.
    #[arg(short = 'g', long = "gid-idx", value_parser = gid_index, allow_negative_numbers = true)]
    pub(crate) gid_idx: Option<u32>,
    /// With --roce: listen on (server) or connect to (client) this TCP port for the connection
    /// data, as ibv_rc_pingpong.
    #[arg(short = 'p', long = "port", default_value_t = crate::exchange::DEFAULT_PORT, value_parser = number::<u16>)]
    pub(crate) port: u16,
    /// With --roce: the server to connect to (this process is then the client); without it,
    /// this process is the server and waits for a client.
    #[arg(value_name = "HOST")]
    pub(crate) host: Option<String>,
    /// Service level of the address vector.
    #[arg(short = 'l', long = "sl", default_value_t = 0, value_parser = number::<u8>)]
    pub(crate) sl: u8,
    /// Size of each message, in bytes (at most the port's max_msg_sz).
    #[arg(short = 's', long = "size", default_value_t = 4096, value_parser = number::<usize>)]
    pub(crate) size: usize,
    /// Number of exchanges (each end sends and receives this many messages).
    #[arg(short = 'n', long = "iters", default_value_t = 1000, value_parser = number::<u32>)]
    pub(crate) iters: u32,
    /// Number of receives to keep posted (at most the device's max_qp_wr).
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500, value_parser = number::<u32>)]
    pub(crate) rx_depth: u32,
    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096, at most the port's active MTU.
    #[arg(short = 'm', long = "mtu", default_value_t = 1024, value_parser = number::<u32>)]
    pub(crate) mtu: u32,
    /// Sleep on CQ events instead of busy polling.
    #[arg(short = 'e', long = "events")]
    pub(crate) events: bool,
    /// Give up when no completion arrives for this many seconds (1 .. 3600).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) timeout_s: u64,
    /// Run both ends' threads on this CPU (as `taskset -c CPU`): a hand-off between them is
    /// then a context switch on one CPU rather than a wake-up of an idle second one (slow in a
    /// VM), so the figure counts the hand-offs themselves.
    #[arg(long = "pin", value_name = "CPU", value_parser = number::<usize>)]
    pub(crate) pin: Option<usize>,
}

/// `-i`: a port number, at least 1 (`ibv_rc_pingpong` prints its usage below that).
fn port(s: &str) -> Result<u8, String> {
    match number::<i64>(s)? {
        p if p < 1 => Err("the port is at least 1".into()),
        p => u8::try_from(p).map_err(|_| "Couldn't get port info".into()),
    }
}

/// `-g`: a GID index. A negative one is `ibv_rc_pingpong`'s "no GID", with which a RoCE QP
/// cannot reach RTR.
fn gid_index(s: &str) -> Result<u32, String> {
    u32::try_from(number::<i64>(s)?).map_err(|_| "Failed to modify QP to RTR: RoCE needs a GID index".into())
}

/// Opens the device `-d` names (or the first one) and runs the ping-pong on it: both ends here,
/// or with `roce` (the model has a RoCE port) one end of two processes. Failures as
/// `ibv_rc_pingpong` words them, with exit status 1.
/// With `roce`, `linger` runs after the ping-pong while its QP still exists.
pub fn run(o: &Opts, roce: bool, linger: &dyn Fn()) -> Result<(), ToolFailure> {
    if o.host.is_some() && !roce {
        return Err("a HOST needs --roce: the model's loopback port runs both ends in this process".into());
    }
    let dev = match &o.ib_dev {
        Some(name) => ib_core::open_device(name).map_err(|_| format!("IB device {name} not found"))?,
        None => {
            let first = ib_core::device_list().into_iter().next().ok_or("No IB devices found")?;
            ib_core::open_device(&first.name).map_err(|e| e.to_string())?
        }
    };
    if roce {
        return remote::run(&dev, o, linger).map_err(ToolFailure::from);
    }
    local::run(&dev, o).map_err(ToolFailure::from)
}
