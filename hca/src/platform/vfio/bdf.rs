//! PCI function addresses (bus:device.function) and finding a function in sysfs.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Where sysfs lists PCI functions.
const SYSFS_PCI_DEVICES: &str = "/sys/bus/pci/devices";

/// A PCI function address: domain, bus, device, function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bdf {
    /// PCI segment (domain).
    pub domain: u32,
    /// Bus number.
    pub bus: u8,
    /// Device number, 0..=0x1f.
    pub device: u8,
    /// Function number, 0..=7.
    pub function: u8,
}

/// Why a string is not a PCI function address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BdfError {
    /// The string is empty.
    #[error("empty PCI address")]
    Empty,
    /// Not of the form `[DDDD:]BB:DD.F`.
    #[error("PCI address {0:?} is not of the form [DDDD:]BB:DD.F")]
    Format(String),
    /// A field is not hexadecimal or has too many digits.
    #[error("PCI address field {field} {text:?} is not 1 to {max_digits} hex digits")]
    Field {
        /// Which field: `domain`, `bus`, `device` or `function`.
        field: &'static str,
        /// The text found there.
        text: String,
        /// The most hex digits the field may have.
        max_digits: usize,
    },
    /// Device number above 0x1f.
    #[error("PCI device number {0:#x} is above 0x1f")]
    Device(u8),
    /// Function number above 7.
    #[error("PCI function number {0} is above 7")]
    Function(u8),
}

impl fmt::Display for Bdf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:02x}:{:02x}.{:x}", self.domain, self.bus, self.device, self.function)
    }
}

pub(super) fn hex_field(field: &'static str, text: &str, max_digits: usize) -> Result<u32, BdfError> {
    let bad = || BdfError::Field { field, text: text.to_owned(), max_digits };
    if text.is_empty() || text.len() > max_digits || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    u32::from_str_radix(text, 16).map_err(|_| bad())
}

impl FromStr for Bdf {
    type Err = BdfError;

    /// Parses `DDDD:BB:DD.F` or `BB:DD.F` (domain 0), hexadecimal, surrounding blanks ignored.
    fn from_str(s: &str) -> Result<Self, BdfError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(BdfError::Empty);
        }
        let format = || BdfError::Format(s.to_owned());
        let parts: Vec<&str> = s.split(':').collect();
        let (domain, bus, devfn) = match parts.as_slice() {
            [bus, devfn] => ("0", *bus, *devfn),
            [domain, bus, devfn] => (*domain, *bus, *devfn),
            _ => return Err(format()),
        };
        let (dev, func) = devfn.split_once('.').ok_or_else(format)?;
        let domain = hex_field("domain", domain, 8)?;
        // Two hex digits fit in a u8.
        let bus = hex_field("bus", bus, 2)? as u8;
        let device = hex_field("device", dev, 2)? as u8;
        let function = hex_field("function", func, 1)? as u8;
        if device > 0x1f {
            return Err(BdfError::Device(device));
        }
        if function > 7 {
            return Err(BdfError::Function(function));
        }
        Ok(Bdf { domain, bus, device, function })
    }
}

/// The sysfs directory for `spec` (a BDF, or a path: anything with a `/`) and a name for reports.
pub(super) fn resolve_device(spec: &str) -> Result<(PathBuf, String), BdfError> {
    if spec.contains('/') {
        let path = PathBuf::from(spec.trim());
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse::<Bdf>().ok())
            .map(|b| b.to_string())
            .unwrap_or_else(|| path.display().to_string());
        Ok((path, name))
    } else {
        let bdf: Bdf = spec.parse()?;
        Ok((Path::new(SYSFS_PCI_DEVICES).join(bdf.to_string()), bdf.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdf_parses_with_and_without_domain() {
        let b: Bdf = "0000:00:05.0".parse().unwrap();
        assert_eq!(b, Bdf { domain: 0, bus: 0, device: 5, function: 0 });
        assert_eq!(b.to_string(), "0000:00:05.0");
        let b: Bdf = "af:1f.7".parse().unwrap();
        assert_eq!(b, Bdf { domain: 0, bus: 0xaf, device: 0x1f, function: 7 });
        let b: Bdf = " 10000:3B:00.1\n".parse().unwrap();
        assert_eq!(b, Bdf { domain: 0x10000, bus: 0x3b, device: 0, function: 1 });
        assert_eq!(b.to_string(), "10000:3b:00.1");
    }

    #[test]
    fn bdf_parse_errors() {
        assert_eq!("".parse::<Bdf>(), Err(BdfError::Empty));
        assert_eq!("  ".parse::<Bdf>(), Err(BdfError::Empty));
        assert!(matches!("0000:00:05".parse::<Bdf>(), Err(BdfError::Format(_))));
        assert!(matches!("05.0".parse::<Bdf>(), Err(BdfError::Format(_))));
        assert!(matches!("0:0:0:05.0".parse::<Bdf>(), Err(BdfError::Format(_))));
        assert!(matches!("0000:zz:05.0".parse::<Bdf>(), Err(BdfError::Field { field: "bus", .. })));
        assert!(matches!("0000:000:05.0".parse::<Bdf>(), Err(BdfError::Field { field: "bus", .. })));
        assert!(matches!("123456789:00:05.0".parse::<Bdf>(), Err(BdfError::Field { field: "domain", .. })));
        // from_str_radix would accept a sign; a BDF must not.
        assert!(matches!("+000:00:05.0".parse::<Bdf>(), Err(BdfError::Field { field: "domain", .. })));
        assert!(matches!("0000::05.0".parse::<Bdf>(), Err(BdfError::Field { field: "bus", .. })));
        assert!(matches!("0000:00:.0".parse::<Bdf>(), Err(BdfError::Field { field: "device", .. })));
        assert!(matches!("0000:00:05.".parse::<Bdf>(), Err(BdfError::Field { field: "function", .. })));
        assert!(matches!("0000:00:05.10".parse::<Bdf>(), Err(BdfError::Field { field: "function", .. })));
        assert_eq!("0000:00:20.0".parse::<Bdf>(), Err(BdfError::Device(0x20)));
        assert_eq!("0000:00:05.8".parse::<Bdf>(), Err(BdfError::Function(8)));
    }

    #[test]
    fn device_specs_resolve_to_sysfs() {
        let (p, n) = resolve_device("00:05.0").unwrap();
        assert_eq!(p, PathBuf::from("/sys/bus/pci/devices/0000:00:05.0"));
        assert_eq!(n, "0000:00:05.0");
        let (p, n) = resolve_device("/sys/bus/pci/devices/0000:00:05.0").unwrap();
        assert_eq!(p, PathBuf::from("/sys/bus/pci/devices/0000:00:05.0"));
        assert_eq!(n, "0000:00:05.0");
        let (_, n) = resolve_device("/sys/devices/pci0000:00/weird").unwrap();
        assert_eq!(n, "/sys/devices/pci0000:00/weird");
        assert!(resolve_device("nonsense").is_err());
    }
}
