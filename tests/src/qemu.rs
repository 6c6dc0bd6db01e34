//! A QEMU 7.2 with a pvrdma function, started for one test and driven over qtest by the driver
//! (`hca::platform::qtest`). Used by `tests/tests/qemu_real.rs`, which `tests/qemu/run.sh` runs
//! inside a VM that has soft-RoCE (`rxe0`).
//!
//! [`QemuPeer::start`] starts, in a folder of its own under `/tmp`: a MAD-multiplexer stand-in
//! (QEMU's pvrdma refuses to start without one; it answers every message with success), a qtest
//! listener, and QEMU itself — no vCPU running (`-S`), guest RAM in a `/dev/shm` file (mapped by
//! the platform for DMA), a vmxnet3 at function 0 of slot 0x10 and pvrdma at function 1 over the
//! host RDMA device. Every step is bounded; dropping the peer kills QEMU and removes its files.
//!
//! Environment: `PVRDMA_QEMU` (binary, default `qemu-system-x86_64`), `PVRDMA_IBDEV` (`rxe0`),
//! `PVRDMA_NETDEV` (`eth0`), `PVRDMA_GID_IPV4` (the backend's IPv4 address, `10.0.2.15`: QEMU 7.2
//! refuses GID index 0 of the backend's table, so the driver binds the IPv4-mapped GID),
//! `PVRDMA_QEMU_OUT` (where QEMU logs go; default the peer's folder, removed afterwards).

use hca::platform::qtest::{QtestOptions, QtestPlatform, DEFAULT_IO_TIMEOUT};
use hca::ProbeOptions;
use ib_core::Device;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Guest RAM of each QEMU, in MiB.
pub const RAM_MB: u64 = 128;
/// Bound on QEMU's start: connect to the MAD stub and to qtest, and answer a first qtest
/// command.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Size of QEMU 7.2's `RdmaCmMuxMsg` on x86_64.
const MAD_MSG_SIZE: usize = 360;

static SEQ: AtomicU32 = AtomicU32::new(0);

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| default.to_owned())
}

/// The IPv4-mapped GID of the backend's address (`::ffff:a.b.c.d`).
pub fn backend_gid() -> [u8; 16] {
    let ip: std::net::Ipv4Addr =
        env_or("PVRDMA_GID_IPV4", "10.0.2.15").parse().expect("PVRDMA_GID_IPV4 is an IPv4 address");
    ip.to_ipv6_mapped().octets()
}

/// The QEMU process and its files; dropping it kills QEMU and removes them.
struct Proc {
    child: Mutex<Child>,
    dir: PathBuf,
    ram_file: PathBuf,
    log_dir: PathBuf,
    keep_logs: bool,
    tag: String,
}

impl Proc {
    /// QEMU's stderr and log, for failure messages.
    fn output(&self) -> String {
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
        format!(
            "--- QEMU stderr ---\n{}--- QEMU log ---\n{}",
            read(self.log_dir.join(format!("{}.stderr", self.tag))),
            read(self.log_dir.join(format!("{}.log", self.tag)))
        )
    }

    /// How QEMU ended, if it has.
    fn exited(&self) -> Option<std::process::ExitStatus> {
        self.child.lock().ok()?.try_wait().ok().flatten()
    }

    fn accept(&mut self, l: &UnixListener) -> Result<UnixStream, String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match l.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).map_err(|e| e.to_string())?;
                    self.wait_machine(&mut s, deadline)?;
                    return Ok(s);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(format!("qtest accept: {e}")),
            }
            if let Some(st) = self.exited() {
                return Err(format!("QEMU exited ({st}) before qtest connected:\n{}", self.output()));
            }
            if Instant::now() > deadline {
                return Err(format!("QEMU did not connect to qtest within {START_TIMEOUT:?}"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Proc {
    /// Waits, until `deadline`, for QEMU to answer a first qtest command (`endianness`): it
    /// answers only once its machine is built, which under load takes longer than the bound the
    /// platform then puts on every round trip.
    fn wait_machine(&self, s: &mut UnixStream, deadline: Instant) -> Result<(), String> {
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        let io = |e: std::io::Error| format!("qtest first answer: {e}\n{}", self.output());
        s.set_read_timeout(Some(left)).map_err(io)?;
        s.write_all(b"endianness\n").map_err(io)?;
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while b[0] != b'\n' {
            s.read_exact(&mut b).map_err(io)?;
            line.push(b[0]);
        }
        s.set_read_timeout(None).map_err(io)?;
        if line.starts_with(b"OK") {
            Ok(())
        } else {
            Err(format!("qtest first answer: {:?}", String::from_utf8_lossy(&line)))
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // QEMU does not exit when the qtest client leaves, and pvrdma's unrealize waits for its
        // completion thread: kill it.
        if let Ok(child) = self.child.get_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.ram_file);
        if self.keep_logs {
            let _ = std::fs::remove_file(self.dir.join("mad.sock"));
            let _ = std::fs::remove_file(self.dir.join("qtest.sock"));
            let _ = std::fs::remove_dir(&self.dir);
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// One QEMU process with a pvrdma function, and the platform that drives it.
pub struct QemuPeer {
    // Dropped in this order: the platform (while QEMU still answers), then QEMU.
    platform: Arc<QtestPlatform>,
    proc: Proc,
    /// How long QEMU took from spawn to an open platform.
    pub start_time: Duration,
}

impl QemuPeer {
    /// Starts QEMU for the test `tag` and opens its pvrdma function over qtest.
    ///
    /// Errors: a message with QEMU's own output when it does not start or its device does not
    /// open.
    pub fn start(tag: &str) -> Result<Self, String> {
        Self::start_with(tag, true)
    }

    /// [`QemuPeer::start`], with DMA memory reached through the mapped guest-RAM file
    /// (`shared_ram`) or through qtest reads and writes only (as a driver on another machine
    /// would).
    pub fn start_with(tag: &str, shared_ram: bool) -> Result<Self, String> {
        Self::start_opts(tag, shared_ram, DEFAULT_IO_TIMEOUT)
    }

    /// [`QemuPeer::start`] with every qtest round trip bounded by `io_timeout` (a QEMU that
    /// stops answering is then found dead that soon) and guest RAM mapped.
    pub fn start_bounded(tag: &str, io_timeout: Duration) -> Result<Self, String> {
        Self::start_opts(tag, true, io_timeout)
    }

    fn start_opts(tag: &str, shared_ram: bool, io_timeout: Duration) -> Result<Self, String> {
        let t0 = Instant::now();
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let id = format!("pvrdma-{}-{n}-{tag}", std::process::id());
        let dir = std::env::temp_dir().join(&id);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let (log_dir, keep_logs) = match std::env::var_os("PVRDMA_QEMU_OUT") {
            Some(d) if !d.is_empty() => (PathBuf::from(d), true),
            _ => (dir.clone(), false),
        };
        let _ = std::fs::create_dir_all(&log_dir);
        let ram_file = PathBuf::from("/dev/shm").join(&id);
        let mad = dir.join("mad.sock");
        let qtest = dir.join("qtest.sock");
        spawn_mad_stub(&mad)?;
        let qtest_listener = UnixListener::bind(&qtest).map_err(|e| format!("{}: {e}", qtest.display()))?;
        qtest_listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let stderr = std::fs::File::create(log_dir.join(format!("{tag}.stderr"))).map_err(|e| e.to_string())?;
        let args = qemu_args(&ram_file, &mad, &qtest, &log_dir.join(format!("{tag}.log")));
        let child = Command::new(env_or("PVRDMA_QEMU", "qemu-system-x86_64"))
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("cannot start QEMU: {e}"))?;
        let mut proc = Proc { child: Mutex::new(child), dir, ram_file, log_dir, keep_logs, tag: tag.to_owned() };
        let stream = proc.accept(&qtest_listener)?;
        let mut opts = QtestOptions::new(RAM_MB << 20);
        opts.io_timeout = io_timeout;
        if shared_ram {
            opts = opts.with_ram_file(&proc.ram_file);
        }
        let platform = QtestPlatform::open(stream, opts)
            .map_err(|e| format!("opening pvrdma over qtest: {e}\n{}", proc.output()))?;
        Ok(QemuPeer { platform: Arc::new(platform), proc, start_time: t0.elapsed() })
    }

    /// QEMU's stderr and log, for failure messages.
    pub fn qemu_output(&self) -> String {
        self.proc.output()
    }

    /// How QEMU ended (`Some` once it has exited: crashed, or killed), with its output.
    pub fn exit_status(&self) -> Option<String> {
        self.proc.exited().map(|st| format!("{st}"))
    }

    /// The platform (for its counters and raw qtest access).
    pub fn platform(&self) -> &Arc<QtestPlatform> {
        &self.platform
    }

    /// Probes the device with the driver: the backend's IPv4-mapped GID, interrupt-driven
    /// commands, and the arm encoding found by the driver's own self-test (nothing declared).
    ///
    /// Errors: the driver's, with QEMU's output.
    pub fn probe(&self) -> Result<Device, String> {
        let opts = ProbeOptions { gid: Some(backend_gid()), ..Default::default() };
        let p: Arc<dyn hca::Platform> = self.platform.clone();
        hca::probe(p, opts).map_err(|e| format!("probe: {e}\n{}", self.qemu_output()))
    }
}

fn qemu_args(ram: &Path, mad: &Path, qtest: &Path, log: &Path) -> Vec<String> {
    let ibdev = env_or("PVRDMA_IBDEV", "rxe0");
    let netdev = env_or("PVRDMA_NETDEV", "eth0");
    let s = |p: &Path| p.display().to_string();
    [
        "-machine".into(),
        "q35,memory-backend=mem".into(),
        "-m".into(),
        format!("{RAM_MB}M"),
        "-object".into(),
        format!("memory-backend-file,id=mem,size={RAM_MB}M,mem-path={},share=on", s(ram)),
        // pvrdma insists on shared RAM and looks for a shared memory-backend-ram object.
        "-object".into(),
        "memory-backend-ram,id=shmflag,size=2M,share=on".into(),
        "-S".into(),
        "-no-reboot".into(),
        "-display".into(),
        "none".into(),
        "-nodefaults".into(),
        // pvrdma must sit at a function > 0 of a slot whose function 0 is a vmxnet3.
        "-device".into(),
        "vmxnet3,addr=0x10.0,multifunction=on".into(),
        "-chardev".into(),
        format!("socket,path={},id=mads", s(mad)),
        "-device".into(),
        format!("pvrdma,addr=0x10.1,ibdev={ibdev},netdev={netdev},mad-chardev=mads"),
        "-qtest-log".into(),
        "/dev/null".into(),
        "-D".into(),
        s(log),
        "-qtest".into(),
        format!("unix:{}", s(qtest)),
    ]
    .into()
}

/// Listens on `path` and answers every `RdmaCmMuxMsg` QEMU sends with `msg_type = RESP`,
/// `err_code = OK`, on a thread that ends when QEMU hangs up (or never connects).
fn spawn_mad_stub(path: &Path) -> Result<(), String> {
    let l = UnixListener::bind(path).map_err(|e| format!("{}: {e}", path.display()))?;
    l.set_nonblocking(true).map_err(|e| e.to_string())?;
    std::thread::Builder::new()
        .name("mad-stub".into())
        .spawn(move || {
            let deadline = Instant::now() + START_TIMEOUT;
            let mut c = loop {
                match l.accept() {
                    Ok((c, _)) => break c,
                    Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                    Err(_) => return,
                }
            };
            let _ = c.set_nonblocking(false);
            let mut m = [0u8; MAD_MSG_SIZE];
            while c.read_exact(&mut m).is_ok() {
                m[0..4].copy_from_slice(&1u32.to_le_bytes()); // RDMACM_MUX_MSG_TYPE_RESP
                m[24..28].copy_from_slice(&0u32.to_le_bytes()); // RDMACM_MUX_ERR_CODE_OK
                if c.write_all(&m).is_err() {
                    return;
                }
            }
        })
        .map(drop)
        .map_err(|e| e.to_string())
}
