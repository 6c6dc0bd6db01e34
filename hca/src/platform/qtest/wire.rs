//! The qtest wire protocol: the byte stream, one command line and its answer per round trip,
//! hex encoding, and the register accesses it carries (`readl`/`writel`).

use super::QtestPlatform;
use crate::platform::PlatformError;
use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::time::Duration;

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
    pub(super) fn try_clone(&self) -> io::Result<Self> {
        Ok(match self {
            QtestStream::Unix(s) => QtestStream::Unix(s.try_clone()?),
            QtestStream::Tcp(s) => QtestStream::Tcp(s.try_clone()?),
        })
    }

    pub(super) fn set_timeouts(&self, t: Duration) -> io::Result<()> {
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
pub(super) struct Conn {
    pub(super) writer: QtestStream,
    pub(super) reader: BufReader<QtestStream>,
    pub(super) line: String,
    pub(super) out: Vec<u8>,
}

/// Why a command failed: the connection is gone, or QEMU refused this one command.
pub(super) enum CmdFault {
    Dead(String),
    Refused(String),
}

impl Conn {
    pub(super) fn new(stream: QtestStream, timeout: Duration) -> io::Result<Self> {
        stream.set_timeouts(timeout)?;
        let reader = BufReader::with_capacity(64 << 10, stream.try_clone()?);
        Ok(Self { writer: stream, reader, line: String::new(), out: Vec::new() })
    }

    /// Sends `cmd` (one non-empty line without a newline) and returns what follows `OK`.
    pub(super) fn cmd(&mut self, cmd: &str) -> Result<String, CmdFault> {
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

pub(super) fn parse_hex(s: &str) -> Option<u64> {
    let s = s.trim();
    u64::from_str_radix(s.strip_prefix("0x").unwrap_or(s), 16).ok()
}

pub(super) fn hex_encode(data: &[u8], out: &mut String) {
    for b in data {
        let _ = write!(out, "{b:02x}");
    }
}

pub(super) fn hex_decode(s: &str, buf: &mut [u8]) -> bool {
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

impl QtestPlatform {
    pub(super) fn cmd(&self, line: &str) -> Result<String, PlatformError> {
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

    pub(super) fn cmd_value(&self, line: &str) -> Result<u64, PlatformError> {
        let s = self.cmd(line)?;
        parse_hex(&s).ok_or_else(|| PlatformError::Io(format!("`{line}`: bad value {s:?}")))
    }

    pub(super) fn readl(&self, addr: u64) -> Result<u32, PlatformError> {
        Ok(self.cmd_value(&format!("readl {addr:#x}"))? as u32)
    }

    pub(super) fn writel(&self, addr: u64, value: u32) -> Result<(), PlatformError> {
        self.cmd(&format!("writel {addr:#x} {value:#x}")).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
