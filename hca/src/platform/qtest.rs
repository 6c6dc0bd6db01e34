//! The qtest backend: a pvrdma function inside a QEMU process, driven over QEMU's qtest text
//! protocol (a unix socket or TCP), with no guest OS. This is how the driver meets QEMU 7.2's real
//! pvrdma device (`tests/qemu/run.sh`).
//!
//! What [`QtestPlatform::open`] does, in order:
//! 1. finds the pvrdma function (15ad:0820) on bus 0 with PCI configuration cycles
//!    (`outl 0xcf8` / `inl 0xcfc`), functions 1..7 included when function 0 is multi-function
//!    (QEMU insists on a vmxnet3 at function 0 and pvrdma at another function of the slot);
//! 2. with decoding off, sizes its memory BARs and places them, largest first, each naturally
//!    aligned, from [`QtestOptions::bar_base`] (0xc000_0000 by default, above q35's MMCONFIG
//!    window and below the IOAPIC): BAR2 (the 8 MiB UAR) is therefore 8 MiB aligned and overlaps
//!    nothing; then enables memory decoding and bus mastering;
//! 3. points every MSI-X table entry (in BAR0) at a mailbox of its own in guest RAM (one 64-byte
//!    slot per vector, in a page taken from the DMA range and never freed), unmasks the entries
//!    and enables MSI-X in configuration space.
//!
//! **Registers and UAR**: `readl`/`writel` at the BAR address. QEMU runs an MMIO access to
//! completion before it answers, so a command has run, and its interrupt has been written to the
//! mailbox, when [`Platform::reg_write`] of `REQUEST` returns.
//!
//! **DMA memory** is guest RAM, addressed by guest-physical address (what pvrdma DMA-maps). A
//! first-fit allocator hands out page-aligned ranges of `[dma_start, ram_size)` (default start
//! 2 MiB: below 1 MiB sit the legacy VGA and BIOS windows), zeroes them, and checks that every
//! access lies inside one allocation ([`PlatformError::BadDma`] otherwise). Access goes through
//! the guest-RAM file when the driver runs where QEMU runs ([`QtestOptions::ram_file`], a
//! `memory-backend-file` in `/dev/shm`, mapped shared; copies are word-wise atomics and the two
//! word accessors acquire loads / release stores, never a Rust reference over bytes QEMU writes),
//! and otherwise through qtest `read`/`write`/`readl`/`writel`/`memset`.
//!
//! **Interrupts**: [`Platform::wait_vector`] polls the vector's mailbox, with a growing nap
//! (50 µs to 2 ms, or 5 ms when every poll is a qtest round trip), bounded by the timeout. A
//! mailbox found non-zero is cleared (an atomic swap when the RAM is mapped, so a write landing at
//! that moment is kept for the next poll) and counts as one interrupt. Two MSI-X writes between
//! two polls therefore count as one: the mailbox is a latch, not a counter, which the driver
//! tolerates (eventfds coalesce too).
//!
//! **Faults**: every round trip is bounded by [`QtestOptions::io_timeout`]. A closed socket, a
//! timeout or a garbled answer marks the connection dead for good (the protocol cannot be
//! re-synchronised): registers then read all-ones — the driver's "device gone" — writes are
//! dropped and counted, DMA accesses fail with [`PlatformError::Io`], and waits return 0 once
//! their timeout has passed. An answer of `FAIL`/`ERR` to one command is an error for that command
//! only. The client never sends an empty line (QEMU 7.2 aborts on one).
//!
//! The backend knows nothing of how the device behaves (QEMU 7.2 arms a CQ only for
//! `ARM|ARM_SOL`): the driver finds that out at probe, from the device itself. Host memory of
//! this process cannot be mapped for the device ([`Platform::map_user`] is unsupported): the
//! device reaches guest RAM only.

use super::{words, Iova, Platform, PlatformError};
use parking_lot::Mutex;
use pvrdma_abi::regs::{bar, REG_MACH};
use pvrdma_abi::{PCI_DEVICE_ID_VMWARE_PVRDMA, PCI_VENDOR_ID_VMWARE};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::OpenOptions;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Where BARs are placed by default: above q35's MMCONFIG window (0xb000_0000..0xc000_0000).
pub const DEFAULT_BAR_BASE: u64 = 0xc000_0000;
/// BARs must end below the IOAPIC / LAPIC window.
const BAR_WINDOW_END: u64 = 0xfec0_0000;
/// First guest-physical address handed out as DMA memory by default.
pub const DEFAULT_DMA_START: u64 = 2 << 20;
/// Default bound on one qtest round trip.
pub const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes between two vectors' mailboxes.
const MAILBOX_STRIDE: u64 = 64;
/// MSI-X message data: a non-zero marker with the vector number in the low byte.
const MSIX_DATA: u32 = 0x5056_0000;
/// DMA granule.
const PAGE: u64 = 4096;
/// Largest payload of one qtest `read`/`write` line.
const QTEST_CHUNK: usize = 32 << 10;
/// Configuration-space offsets and bits.
const CFG_COMMAND: u32 = 0x04;
const CFG_HEADER: u32 = 0x0c;
const CFG_BAR0: u32 = 0x10;
const CFG_CAP_PTR: u32 = 0x34;
const CMD_MEMORY: u32 = 1 << 1;
const CMD_BUS_MASTER: u32 = 1 << 2;
const STATUS_CAP_LIST: u32 = 1 << (16 + 4);
const CAP_ID_MSIX: u32 = 0x11;
const MSIX_ENABLE: u32 = 1 << 31;
const MSIX_FUNCTION_MASK: u32 = 1 << 30;

/// How to reach the device's QEMU.
#[derive(Clone, Debug)]
pub struct QtestOptions {
    /// Bytes of guest RAM (QEMU's `-m`); DMA memory is taken from `[dma_start, ram_size)`.
    pub ram_size: u64,
    /// The guest-RAM file (`memory-backend-file,mem-path=…,share=on`), when this process can map
    /// it; `None`: guest RAM is reached through qtest.
    pub ram_file: Option<PathBuf>,
    /// First guest-physical address of the DMA range (page-aligned, at least 1 MiB).
    pub dma_start: u64,
    /// Where BAR placement starts (a free window of the machine's PCI hole).
    pub bar_base: u64,
    /// Bound on one qtest round trip.
    pub io_timeout: Duration,
}

impl QtestOptions {
    /// Options for a guest of `ram_size` bytes reached through qtest only.
    pub fn new(ram_size: u64) -> Self {
        Self {
            ram_size,
            ram_file: None,
            dma_start: DEFAULT_DMA_START,
            bar_base: DEFAULT_BAR_BASE,
            io_timeout: DEFAULT_IO_TIMEOUT,
        }
    }

    /// The same with guest RAM mapped from `path`.
    pub fn with_ram_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ram_file = Some(path.into());
        self
    }
}

// ---------------------------------------------------------------------------------------------
// The connection

/// The byte stream qtest runs over.
#[derive(Debug)]
pub enum QtestStream {
    /// A unix-domain socket (`-qtest unix:PATH`).
    Unix(UnixStream),
    /// A TCP connection (`-qtest tcp:HOST:PORT,server=on`).
    Tcp(TcpStream),
}

impl From<UnixStream> for QtestStream {
    fn from(s: UnixStream) -> Self {
        QtestStream::Unix(s)
    }
}

impl From<TcpStream> for QtestStream {
    fn from(s: TcpStream) -> Self {
        QtestStream::Tcp(s)
    }
}

impl QtestStream {
    fn try_clone(&self) -> io::Result<Self> {
        Ok(match self {
            QtestStream::Unix(s) => QtestStream::Unix(s.try_clone()?),
            QtestStream::Tcp(s) => QtestStream::Tcp(s.try_clone()?),
        })
    }

    fn set_timeouts(&self, t: Duration) -> io::Result<()> {
        match self {
            QtestStream::Unix(s) => {
                s.set_read_timeout(Some(t))?;
                s.set_write_timeout(Some(t))
            }
            QtestStream::Tcp(s) => {
                s.set_nodelay(true)?;
                s.set_read_timeout(Some(t))?;
                s.set_write_timeout(Some(t))
            }
        }
    }
}

impl Read for QtestStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            QtestStream::Unix(s) => s.read(buf),
            QtestStream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for QtestStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            QtestStream::Unix(s) => s.write(buf),
            QtestStream::Tcp(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            QtestStream::Unix(s) => s.flush(),
            QtestStream::Tcp(s) => s.flush(),
        }
    }
}

/// One qtest conversation: a command line out, answer lines in.
struct Conn {
    writer: QtestStream,
    reader: BufReader<QtestStream>,
    line: String,
    out: Vec<u8>,
}

/// Why a command failed: the connection is gone, or QEMU refused this one command.
enum CmdFault {
    Dead(String),
    Refused(String),
}

impl Conn {
    fn new(stream: QtestStream, timeout: Duration) -> io::Result<Self> {
        stream.set_timeouts(timeout)?;
        let reader = BufReader::with_capacity(64 << 10, stream.try_clone()?);
        Ok(Self { writer: stream, reader, line: String::new(), out: Vec::new() })
    }

    /// Sends `cmd` (one non-empty line without a newline) and returns what follows `OK`.
    fn cmd(&mut self, cmd: &str) -> Result<String, CmdFault> {
        if cmd.trim().is_empty() || cmd.contains('\n') {
            // An empty line aborts QEMU 7.2; never send one.
            return Err(CmdFault::Refused("empty or multi-line qtest command".into()));
        }
        self.out.clear();
        self.out.extend_from_slice(cmd.as_bytes());
        self.out.push(b'\n');
        let head: String = cmd.chars().take(40).collect();
        self.writer.write_all(&self.out).map_err(|e| CmdFault::Dead(format!("`{head}`: {e}")))?;
        loop {
            self.line.clear();
            match self.reader.read_line(&mut self.line) {
                Ok(0) => return Err(CmdFault::Dead(format!("`{head}`: qtest connection closed"))),
                Ok(_) => {}
                Err(e) => return Err(CmdFault::Dead(format!("`{head}`: {e}"))),
            }
            let l = self.line.trim_end();
            if l.starts_with("IRQ") {
                continue; // only with irq_intercept, which this client never asks for
            }
            if l == "OK" {
                return Ok(String::new());
            }
            if let Some(rest) = l.strip_prefix("OK ") {
                return Ok(rest.to_owned());
            }
            if l.starts_with("FAIL") || l.starts_with("ERR") {
                return Err(CmdFault::Refused(format!("`{head}` -> {l}")));
            }
            return Err(CmdFault::Dead(format!("`{head}`: unexpected answer {l:?}")));
        }
    }
}

fn parse_hex(s: &str) -> Option<u64> {
    let s = s.trim();
    u64::from_str_radix(s.strip_prefix("0x").unwrap_or(s), 16).ok()
}

fn hex_encode(data: &[u8], out: &mut String) {
    for b in data {
        let _ = write!(out, "{b:02x}");
    }
}

fn hex_decode(s: &str, buf: &mut [u8]) -> bool {
    let s = s.trim();
    let s = s.strip_prefix("0x").unwrap_or(s);
    if s.len() != buf.len() * 2 {
        return false;
    }
    for (i, b) in buf.iter_mut().enumerate() {
        match u8::from_str_radix(&s[2 * i..2 * i + 2], 16) {
            Ok(v) => *b = v,
            Err(_) => return false,
        }
    }
    true
}

// ---------------------------------------------------------------------------------------------
// DMA memory: the allocator (pure logic)

/// First-fit allocation of page-aligned ranges of guest RAM, with coalescing on free.
#[derive(Debug)]
struct DmaAlloc {
    /// Free ranges: start -> length.
    free: BTreeMap<u64, u64>,
    /// Allocations: start -> length.
    used: BTreeMap<u64, u64>,
}

impl DmaAlloc {
    fn new(start: u64, end: u64) -> Self {
        let start = start.div_ceil(PAGE) * PAGE;
        let end = end / PAGE * PAGE;
        let mut free = BTreeMap::new();
        if end > start {
            free.insert(start, end - start);
        }
        Self { free, used: BTreeMap::new() }
    }

    fn alloc(&mut self, len: u64) -> Option<(u64, u64)> {
        let size = len.max(1).checked_add(PAGE - 1)? / PAGE * PAGE;
        let (&start, &flen) = self.free.iter().find(|(_, l)| **l >= size)?;
        self.free.remove(&start);
        if flen > size {
            self.free.insert(start + size, flen - size);
        }
        self.used.insert(start, size);
        Some((start, size))
    }

    fn free(&mut self, start: u64) -> bool {
        let Some(mut size) = self.used.remove(&start) else {
            return false;
        };
        let mut start = start;
        if let Some((&ps, &pl)) = self.free.range(..start).next_back() {
            if ps + pl == start {
                self.free.remove(&ps);
                start = ps;
                size += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(start + size)) {
            self.free.remove(&(start + size));
            size += nl;
        }
        self.free.insert(start, size);
        true
    }

    /// Whether `[iova, iova + len)` lies inside one allocation.
    fn contains(&self, iova: u64, len: u64) -> bool {
        let Some(end) = iova.checked_add(len) else {
            return false;
        };
        self.used.range(..=iova).next_back().is_some_and(|(s, l)| end <= s + l)
    }
}

// ---------------------------------------------------------------------------------------------
// Guest RAM mapped from QEMU's memory-backend-file

/// QEMU's guest RAM, mapped shared from its backing file; accessed only as `AtomicU32` words.
struct SharedRam {
    ptr: NonNull<AtomicU32>,
    len: usize,
}

// SAFETY: SharedRam owns its mapping (nothing else in this process aliases it) and every access
// goes through `AtomicU32`, which is safe to share and send between threads.
unsafe impl Send for SharedRam {}
// SAFETY: as above: `&SharedRam` only permits atomic word accesses.
unsafe impl Sync for SharedRam {}

impl SharedRam {
    fn open(path: &std::path::Path, len: u64) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let flen = file.metadata()?.len();
        if flen < len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is {flen} bytes, guest RAM is {len}", path.display()),
            ));
        }
        let len = usize::try_from(len).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "RAM too large"))?;
        if len == 0 || len % 4 != 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad RAM size"));
        }
        // SAFETY: a new shared mapping of an open file with no address hint: it creates a mapping
        // and cannot affect any existing object. The file stays mapped after `file` is closed.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(base.cast::<AtomicU32>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Self { ptr, len })
    }

    fn words(&self) -> &[AtomicU32] {
        // Invariants: `ptr` is page-aligned and [ptr, ptr + len) is a live read/write mapping
        // owned by `self`; `len` is a multiple of 4; this process touches it only as atomics.
        // SAFETY: AtomicU32 has u32's size and alignment, any bits are valid, and the borrow
        // cannot outlive `self` (QEMU writes from another process, outside the abstract machine).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len / 4) }
    }

    fn read(&self, off: u64, buf: &mut [u8]) -> bool {
        usize::try_from(off).is_ok_and(|off| words::copy_out(self.words(), off, buf))
    }

    fn write(&self, off: u64, data: &[u8]) -> bool {
        usize::try_from(off).is_ok_and(|off| words::copy_in(self.words(), off, data))
    }

    fn word(&self, off: u64) -> Option<&AtomicU32> {
        words::word(self.words(), usize::try_from(off).ok()?)
    }
}

impl Drop for SharedRam {
    fn drop(&mut self) {
        // SAFETY: [ptr, ptr + len) is the mapping `open` created and this value owns; borrows of
        // it (`words`) cannot outlive `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

// ---------------------------------------------------------------------------------------------
// The platform

/// A pvrdma function inside QEMU, driven over qtest, as a [`Platform`].
pub struct QtestPlatform {
    name: String,
    conn: Mutex<Conn>,
    dead: AtomicBool,
    dead_reason: Mutex<Option<String>>,
    round_trips: AtomicU64,
    dropped_writes: AtomicU64,
    bdf: (u8, u8),
    bars: [u64; 3],
    regs_len: u64,
    uar_len: u64,
    ram: Option<SharedRam>,
    dma: Mutex<DmaAlloc>,
    mailbox: u64,
    vectors: u16,
    max_nap: Duration,
}

/// A memory BAR found by sizing.
#[derive(Clone, Copy, Debug)]
struct BarInfo {
    index: u32,
    size: u64,
    is64: bool,
}

impl QtestPlatform {
    /// Connects to a QEMU that listens for qtest at `addr` — `unix:PATH` or `tcp:HOST:PORT`
    /// (`-qtest unix:PATH,server=on,wait=off` or `-qtest tcp:…,server=on`) — and opens its
    /// pvrdma function.
    pub fn connect(addr: &str, opts: QtestOptions) -> Result<Self, PlatformError> {
        let io = |e: io::Error| PlatformError::Io(format!("qtest connect {addr}: {e}"));
        let stream = match addr.split_once(':') {
            Some(("unix", path)) => QtestStream::Unix(UnixStream::connect(path).map_err(io)?),
            Some(("tcp", hostport)) => QtestStream::Tcp(TcpStream::connect(hostport).map_err(io)?),
            _ => return Err(PlatformError::Io(format!("qtest address {addr:?}: unix:… or tcp:…"))),
        };
        Self::open(stream, opts)
    }

    /// Opens the pvrdma function of the QEMU at the other end of `stream` (see the module docs).
    ///
    /// Errors: [`PlatformError::Io`] when the connection fails, there is no pvrdma function, its
    /// BARs do not fit, it has no MSI-X, or the guest-RAM file cannot be mapped;
    /// [`PlatformError::NoMemory`] when the DMA range has no page for the mailboxes.
    pub fn open(stream: impl Into<QtestStream>, opts: QtestOptions) -> Result<Self, PlatformError> {
        let conn =
            Conn::new(stream.into(), opts.io_timeout).map_err(|e| PlatformError::Io(format!("qtest stream: {e}")))?;
        let mut p = Self {
            name: String::new(),
            conn: Mutex::new(conn),
            dead: AtomicBool::new(false),
            dead_reason: Mutex::new(None),
            round_trips: AtomicU64::new(0),
            dropped_writes: AtomicU64::new(0),
            bdf: (0, 0),
            bars: [0; 3],
            regs_len: 0,
            uar_len: 0,
            max_nap: Duration::from_millis(5),
            ram: None,
            dma: Mutex::new(DmaAlloc::new(opts.dma_start.max(1 << 20), opts.ram_size)),
            mailbox: 0,
            vectors: 0,
        };
        // QEMU answers its first qtest command only once the machine is built, guest RAM and its
        // file included (the qtest socket connects earlier): map the file after that answer.
        let (dev, func) = p.find_function()?;
        if let Some(path) = &opts.ram_file {
            p.ram = Some(
                SharedRam::open(path, opts.ram_size)
                    .map_err(|e| PlatformError::Io(format!("mapping guest RAM {}: {e}", path.display())))?,
            );
            p.max_nap = Duration::from_millis(2);
        }
        p.bdf = (dev, func);
        p.name = format!("qtest:00:{dev:02x}.{func:x}");
        p.place_bars(&opts)?;
        p.mailbox = p.dma_alloc(PAGE)?;
        p.enable_msix()?;
        tracing::info!(name = %p.name, bars = ?p.bars, vectors = p.vectors, mailbox = p.mailbox,
            shared_ram = p.ram.is_some(), "pvrdma opened over qtest");
        Ok(p)
    }

    /// qtest round trips so far (for reports).
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    /// Register and UAR writes dropped because the connection was dead or refused them.
    pub fn dropped_writes(&self) -> u64 {
        self.dropped_writes.load(Ordering::Relaxed)
    }

    /// Whether the connection is gone (all registers read all-ones from then on).
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Why the connection died, if it did.
    pub fn dead_reason(&self) -> Option<String> {
        self.dead_reason.lock().clone()
    }

    /// Where BAR0 (MSI-X), BAR1 (registers) and BAR2 (UAR) were placed.
    pub fn bar_addresses(&self) -> [u64; 3] {
        self.bars
    }

    /// Whether guest RAM is mapped from its file (else every DMA access is a qtest round trip).
    pub fn uses_shared_ram(&self) -> bool {
        self.ram.is_some()
    }

    /// Sends one raw qtest command (diagnostics and conformance tests) and returns what follows
    /// `OK`. Errors: [`PlatformError::Io`] on a refused command or a dead connection.
    pub fn raw_command(&self, line: &str) -> Result<String, PlatformError> {
        self.cmd(line)
    }

    // --- the protocol ---

    fn cmd(&self, line: &str) -> Result<String, PlatformError> {
        if self.is_dead() {
            return Err(PlatformError::Io(format!(
                "qtest connection is dead: {}",
                self.dead_reason().unwrap_or_default()
            )));
        }
        let r = self.conn.lock().cmd(line);
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        match r {
            Ok(s) => Ok(s),
            Err(CmdFault::Refused(m)) => Err(PlatformError::Io(m)),
            Err(CmdFault::Dead(m)) => {
                if !self.dead.swap(true, Ordering::AcqRel) {
                    tracing::error!(reason = %m, "qtest connection lost");
                    *self.dead_reason.lock() = Some(m.clone());
                }
                Err(PlatformError::Io(m))
            }
        }
    }

    fn cmd_value(&self, line: &str) -> Result<u64, PlatformError> {
        let s = self.cmd(line)?;
        parse_hex(&s).ok_or_else(|| PlatformError::Io(format!("`{line}`: bad value {s:?}")))
    }

    fn readl(&self, addr: u64) -> Result<u32, PlatformError> {
        Ok(self.cmd_value(&format!("readl {addr:#x}"))? as u32)
    }

    fn writel(&self, addr: u64, value: u32) -> Result<(), PlatformError> {
        self.cmd(&format!("writel {addr:#x} {value:#x}")).map(drop)
    }

    // --- PCI configuration cycles ---

    fn cfg_addr(dev: u8, func: u8, reg: u32) -> u32 {
        0x8000_0000 | (u32::from(dev) << 11) | (u32::from(func) << 8) | (reg & 0xfc)
    }

    fn cfg_read(&self, dev: u8, func: u8, reg: u32) -> Result<u32, PlatformError> {
        // Address and data cycles under one lock hold, so no other thread's cycle slips between.
        let mut c = self.conn.lock();
        let mut go = |line: String| {
            self.round_trips.fetch_add(1, Ordering::Relaxed);
            c.cmd(&line).map_err(|e| match e {
                CmdFault::Dead(m) | CmdFault::Refused(m) => PlatformError::Io(m),
            })
        };
        go(format!("outl 0xcf8 {:#x}", Self::cfg_addr(dev, func, reg)))?;
        let v = go("inl 0xcfc".into())?;
        parse_hex(&v).map(|v| v as u32).ok_or_else(|| PlatformError::Io(format!("inl: {v:?}")))
    }

    fn cfg_write(&self, dev: u8, func: u8, reg: u32, value: u32) -> Result<(), PlatformError> {
        let mut c = self.conn.lock();
        let mut go = |line: String| {
            self.round_trips.fetch_add(1, Ordering::Relaxed);
            c.cmd(&line).map(drop).map_err(|e| match e {
                CmdFault::Dead(m) | CmdFault::Refused(m) => PlatformError::Io(m),
            })
        };
        go(format!("outl 0xcf8 {:#x}", Self::cfg_addr(dev, func, reg)))?;
        go(format!("outl 0xcfc {value:#x}"))
    }

    fn find_function(&self) -> Result<(u8, u8), PlatformError> {
        let want = u32::from(PCI_VENDOR_ID_VMWARE) | u32::from(PCI_DEVICE_ID_VMWARE_PVRDMA) << 16;
        for dev in 0..32u8 {
            let id = self.cfg_read(dev, 0, 0)?;
            if id & 0xffff == 0xffff {
                continue;
            }
            let multi = self.cfg_read(dev, 0, CFG_HEADER)? & (0x80 << 16) != 0;
            for func in 0..if multi { 8u8 } else { 1 } {
                let id = if func == 0 { id } else { self.cfg_read(dev, func, 0)? };
                if id == want {
                    return Ok((dev, func));
                }
            }
        }
        Err(PlatformError::Io(format!(
            "no pvrdma function ({PCI_VENDOR_ID_VMWARE:04x}:{PCI_DEVICE_ID_VMWARE_PVRDMA:04x}) on bus 0"
        )))
    }

    fn place_bars(&mut self, opts: &QtestOptions) -> Result<(), PlatformError> {
        let (d, f) = self.bdf;
        let cmd = self.cfg_read(d, f, CFG_COMMAND)?;
        self.cfg_write(d, f, CFG_COMMAND, cmd & 0xffff_0000 & !(CMD_MEMORY | CMD_BUS_MASTER))?;
        let mut found = Vec::new();
        let mut i = 0u32;
        while i < 6 {
            let reg = CFG_BAR0 + 4 * i;
            let orig = self.cfg_read(d, f, reg)?;
            if orig & 1 != 0 {
                i += 1; // an I/O BAR: pvrdma has none; leave it alone
                continue;
            }
            let is64 = (orig >> 1) & 3 == 2;
            self.cfg_write(d, f, reg, u32::MAX)?;
            let lo = self.cfg_read(d, f, reg)? & !0xf;
            let hi = if is64 {
                self.cfg_write(d, f, reg + 4, u32::MAX)?;
                self.cfg_read(d, f, reg + 4)?
            } else {
                u32::MAX
            };
            let mask = u64::from(hi) << 32 | u64::from(lo);
            if lo != 0 {
                found.push(BarInfo { index: i, size: (!mask).wrapping_add(1), is64 });
            }
            i += if is64 { 2 } else { 1 };
        }
        let mut order = found.clone();
        order.sort_by_key(|b| std::cmp::Reverse(b.size));
        let mut cursor = opts.bar_base;
        for b in &order {
            if !b.size.is_power_of_two() {
                return Err(PlatformError::Io(format!("BAR{} size {:#x}", b.index, b.size)));
            }
            let addr = cursor.div_ceil(b.size) * b.size;
            let end = addr
                .checked_add(b.size)
                .filter(|e| *e <= BAR_WINDOW_END)
                .ok_or_else(|| PlatformError::Io(format!("BAR{} ({:#x} bytes) does not fit", b.index, b.size)))?;
            let reg = CFG_BAR0 + 4 * b.index;
            self.cfg_write(d, f, reg, addr as u32)?;
            if b.is64 {
                self.cfg_write(d, f, reg + 4, (addr >> 32) as u32)?;
            }
            if b.index < 3 {
                self.bars[b.index as usize] = addr;
            }
            match u8::try_from(b.index) {
                Ok(bar::REG) => self.regs_len = b.size,
                Ok(bar::UAR) => self.uar_len = b.size,
                _ => {}
            }
            cursor = end;
        }
        if self.regs_len < u64::from(REG_MACH) + 4 || self.uar_len < PAGE {
            return Err(PlatformError::Io(format!(
                "pvrdma BARs: registers {:#x} bytes, UAR {:#x} bytes",
                self.regs_len, self.uar_len
            )));
        }
        self.cfg_write(d, f, CFG_COMMAND, (cmd & 0xffff_0000) | (cmd & 0xffff) | CMD_MEMORY | CMD_BUS_MASTER)
    }

    fn enable_msix(&mut self) -> Result<(), PlatformError> {
        let (d, f) = self.bdf;
        if self.cfg_read(d, f, CFG_COMMAND)? & STATUS_CAP_LIST == 0 {
            return Err(PlatformError::Io("pvrdma has no capability list".into()));
        }
        let mut cap = self.cfg_read(d, f, CFG_CAP_PTR)? & 0xfc;
        for _ in 0..48 {
            if cap == 0 {
                break;
            }
            let w = self.cfg_read(d, f, cap)?;
            if w & 0xff == CAP_ID_MSIX {
                let n = ((w >> 16) & 0x7ff) + 1;
                let table = self.cfg_read(d, f, cap + 4)?;
                let bir = (table & 7) as usize;
                let base = *self
                    .bars
                    .get(bir)
                    .filter(|a| **a != 0)
                    .ok_or_else(|| PlatformError::Io(format!("MSI-X table in unassigned BAR{bir}")))?;
                let tbase = base + u64::from(table & !7);
                for v in 0..n {
                    let e = tbase + 16 * u64::from(v);
                    let target = self.mailbox + MAILBOX_STRIDE * u64::from(v);
                    self.writel(e, target as u32)?;
                    self.writel(e + 4, (target >> 32) as u32)?;
                    self.writel(e + 8, MSIX_DATA | (v & 0xff))?;
                    self.writel(e + 12, 0)?; // vector control: unmasked
                }
                self.cfg_write(d, f, cap, (w | MSIX_ENABLE) & !MSIX_FUNCTION_MASK)?;
                self.vectors = u16::try_from(n).unwrap_or(u16::MAX).min((PAGE / MAILBOX_STRIDE) as u16);
                return Ok(());
            }
            cap = (w >> 8) & 0xfc;
        }
        Err(PlatformError::Io("pvrdma has no MSI-X capability".into()))
    }

    // --- DMA ---

    fn check_dma(&self, iova: u64, len: u64) -> Result<(), PlatformError> {
        if self.dma.lock().contains(iova, len) {
            Ok(())
        } else {
            Err(PlatformError::BadDma { iova, len })
        }
    }

    /// Takes vector `v`'s mailbox: `Ok(true)` if an MSI-X write had landed there.
    fn take_mailbox(&self, v: u16) -> Result<bool, PlatformError> {
        let at = self.mailbox + MAILBOX_STRIDE * u64::from(v);
        match &self.ram {
            Some(ram) => {
                let w = ram.word(at).ok_or(PlatformError::BadDma { iova: at, len: 4 })?;
                Ok(w.swap(0, Ordering::AcqRel) != 0)
            }
            None => {
                if self.readl(at)? == 0 {
                    return Ok(false);
                }
                self.writel(at, 0)?;
                Ok(true)
            }
        }
    }
}

impl Drop for QtestPlatform {
    fn drop(&mut self) {
        // Stop the function's DMA and interrupts if QEMU is still there.
        if !self.is_dead() {
            let (d, f) = self.bdf;
            if let Ok(cmd) = self.cfg_read(d, f, CFG_COMMAND) {
                let _ = self.cfg_write(d, f, CFG_COMMAND, cmd & 0xffff & !CMD_BUS_MASTER);
            }
        }
    }
}

impl Platform for QtestPlatform {
    fn shares_cpus(&self) -> bool {
        true
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn pci_id(&self) -> (u16, u16) {
        // `open` found the function by exactly this ID.
        (PCI_VENDOR_ID_VMWARE, PCI_DEVICE_ID_VMWARE_PVRDMA)
    }

    fn reg_read(&self, offset: u32) -> u32 {
        if u64::from(offset) + 4 > self.regs_len {
            return u32::MAX;
        }
        self.readl(self.bars[bar::REG as usize] + u64::from(offset)).unwrap_or(u32::MAX)
    }

    fn reg_write(&self, offset: u32, value: u32) {
        let ok = u64::from(offset) + 4 <= self.regs_len
            && self.writel(self.bars[bar::REG as usize] + u64::from(offset), value).is_ok();
        if !ok {
            self.dropped_writes.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn uar_write(&self, offset: u64, value: u32) {
        let ok = offset.checked_add(4).is_some_and(|e| e <= self.uar_len)
            && self.writel(self.bars[bar::UAR as usize] + offset, value).is_ok();
        if !ok {
            self.dropped_writes.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn uar_base_pfn(&self) -> u64 {
        self.bars[bar::UAR as usize] >> 12
    }

    fn uar_pages(&self) -> u32 {
        u32::try_from(self.uar_len / PAGE).unwrap_or(u32::MAX)
    }

    fn dma_alloc(&self, len: u64) -> Result<Iova, PlatformError> {
        let (iova, size) = self.dma.lock().alloc(len).ok_or(PlatformError::NoMemory(len))?;
        let zeroed = match &self.ram {
            Some(ram) => {
                let zeros = vec![0u8; PAGE as usize];
                (0..size / PAGE).all(|i| ram.write(iova + i * PAGE, &zeros))
            }
            None => self.cmd(&format!("memset {iova:#x} {size:#x} 0")).is_ok(),
        };
        if !zeroed {
            self.dma.lock().free(iova);
            return Err(PlatformError::Io(format!("cannot zero guest RAM at {iova:#x}+{size:#x}")));
        }
        Ok(iova)
    }

    fn dma_free(&self, iova: Iova) {
        if !self.dma.lock().free(iova) {
            tracing::warn!(iova, "dma_free of memory this platform did not allocate");
        }
    }

    fn dma_read(&self, iova: Iova, buf: &mut [u8]) -> Result<(), PlatformError> {
        self.check_dma(iova, buf.len() as u64)?;
        match &self.ram {
            Some(ram) if ram.read(iova, buf) => Ok(()),
            Some(_) => Err(PlatformError::BadDma { iova, len: buf.len() as u64 }),
            None => {
                for (k, chunk) in buf.chunks_mut(QTEST_CHUNK).enumerate() {
                    let at = iova + (k * QTEST_CHUNK) as u64;
                    let s = self.cmd(&format!("read {at:#x} {:#x}", chunk.len()))?;
                    if !hex_decode(&s, chunk) {
                        return Err(PlatformError::Io(format!("qtest read {at:#x}: bad answer")));
                    }
                }
                Ok(())
            }
        }
    }

    fn dma_write(&self, iova: Iova, data: &[u8]) -> Result<(), PlatformError> {
        self.check_dma(iova, data.len() as u64)?;
        match &self.ram {
            Some(ram) if ram.write(iova, data) => Ok(()),
            Some(_) => Err(PlatformError::BadDma { iova, len: data.len() as u64 }),
            None => {
                for (k, chunk) in data.chunks(QTEST_CHUNK).enumerate() {
                    let at = iova + (k * QTEST_CHUNK) as u64;
                    let mut line = format!("write {at:#x} {:#x} 0x", chunk.len());
                    hex_encode(chunk, &mut line);
                    self.cmd(&line)?;
                }
                Ok(())
            }
        }
    }

    fn dma_load_u32(&self, iova: Iova) -> Result<u32, PlatformError> {
        if iova & 3 != 0 {
            return Err(PlatformError::Misaligned(iova));
        }
        self.check_dma(iova, 4)?;
        match &self.ram {
            Some(ram) => ram
                .word(iova)
                .map(|w| u32::from_le(w.load(Ordering::Acquire)))
                .ok_or(PlatformError::BadDma { iova, len: 4 }),
            None => self.readl(iova),
        }
    }

    fn dma_store_u32(&self, iova: Iova, value: u32) -> Result<(), PlatformError> {
        if iova & 3 != 0 {
            return Err(PlatformError::Misaligned(iova));
        }
        self.check_dma(iova, 4)?;
        match &self.ram {
            Some(ram) => {
                let w = ram.word(iova).ok_or(PlatformError::BadDma { iova, len: 4 })?;
                w.store(value.to_le(), Ordering::Release);
                Ok(())
            }
            None => self.writel(iova, value),
        }
    }

    fn wait_vector(&self, vector: u16, timeout: Duration) -> u32 {
        let deadline = Instant::now() + timeout;
        let mut nap = Duration::from_micros(50);
        loop {
            if vector < self.vectors && !self.is_dead() {
                if let Ok(true) = self.take_mailbox(vector) {
                    return 1;
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return 0;
            }
            std::thread::sleep(nap.min(deadline - now));
            nap = (nap * 2).min(self.max_nap);
        }
    }

    unsafe fn map_user(&self, _addr: usize, _len: usize, _writable: bool) -> Result<Iova, PlatformError> {
        Err(PlatformError::Unsupported("qtest reaches guest RAM only, not this process's memory"))
    }

    fn unmap_user(&self, _iova: Iova) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::os::unix::net::UnixStream;

    #[test]
    fn allocator_first_fit_coalesces_and_bounds() {
        let mut a = DmaAlloc::new(0x1000, 0x6000);
        let (x, sx) = a.alloc(1).unwrap();
        let (y, _) = a.alloc(0x1001).unwrap();
        let (z, _) = a.alloc(0x1000).unwrap();
        assert_eq!((x, sx, y, z), (0x1000, 0x1000, 0x2000, 0x4000));
        assert!(a.alloc(0x2000).is_none());
        assert!(a.contains(0x2000, 0x2000));
        assert!(!a.contains(0x2000, 0x2001));
        assert!(!a.contains(0x5000, 4));
        assert!(a.free(y));
        assert!(!a.free(y));
        assert!(a.free(x));
        assert_eq!(a.alloc(0x3000).unwrap().0, 0x1000);
        assert!(!a.contains(u64::MAX - 1, 4));
    }

    #[test]
    fn hex_round_trip() {
        let mut s = String::new();
        hex_encode(&[0, 0xab, 0x10], &mut s);
        assert_eq!(s, "00ab10");
        let mut b = [0u8; 3];
        assert!(hex_decode("0x00ab10", &mut b));
        assert_eq!(b, [0, 0xab, 0x10]);
        assert!(!hex_decode("0x00ab1", &mut b));
        assert_eq!(parse_hex("0x0000000000000011"), Some(17));
    }

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
}
