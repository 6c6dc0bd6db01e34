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
//!
//! The parts, one file each: `wire` (the stream, round trips, hex), `pci` (configuration cycles,
//! BAR placement, MSI-X), `alloc` (the guest-RAM allocator), `ram` (the mapped RAM file), `tests`
//! (against a stand-in for QEMU); this file opens the function and is the [`Platform`].

use super::{Iova, Platform, PlatformError};
use parking_lot::Mutex;
use pvrdma_abi::regs::bar;
use pvrdma_abi::{PCI_DEVICE_ID_VMWARE_PVRDMA, PCI_VENDOR_ID_VMWARE};
use std::io;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

mod alloc;
mod pci;
// Maps QEMU's guest-RAM file (mmap).
mod ram;
#[cfg(test)]
mod tests;
mod wire;

use alloc::DmaAlloc;
use pci::{CFG_COMMAND, CMD_BUS_MASTER};
use ram::SharedRam;
pub use wire::QtestStream;
use wire::{hex_decode, hex_encode, Conn};

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
}

impl QtestPlatform {
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
