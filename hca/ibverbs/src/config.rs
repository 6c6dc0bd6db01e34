//! Which devices the library shows: a list of device specs, read once per process from
//! `HCA_DEVICES` (specs separated by `;`), else from the file `HCA_CONFIG` names (one spec per
//! line, `#` starts a comment), else the default: one built-in model, `model`.
//!
//! A spec is `model[,KEY=VALUE...]` or `vfio:BDF`:
//! - `model`: the built-in device model in this process, with its in-process loopback port.
//!   Keys: `roce=ADDR` (repeatable: a RoCE v2 port on that IPv4/IPv6 address, UDP 4791, whose
//!   address becomes GID 1, 2, ...; two processes on one host use two loopback addresses),
//!   `profile=ibta|qemu72`, `link-latency-us=N` (loopback port, default 0), `link-loss=P`,
//!   `link-reorder=P`, `link-duplicate=P`, `link-seed=N`, `pcap=FILE` (RoCE port; as the `hca`
//!   tool's options of the same names).
//! - `vfio:BDF`: a real pvrdma function bound to `vfio-pci` (`0000:00:05.0`).
//!
//! Devices are named `vmw_pvrdma0`, `vmw_pvrdma1`, ... in the order given.

use pvrdma_sim::roce::{LinkFaults, RoceConfig};
use pvrdma_sim::{Profile, SimConfig};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The environment variable holding the device specs.
pub const ENV_DEVICES: &str = "HCA_DEVICES";
/// The environment variable naming a file of device specs.
pub const ENV_CONFIG: &str = "HCA_CONFIG";

/// One device to show.
#[derive(Clone, Debug)]
pub enum DeviceSpec {
    /// The built-in model with this configuration.
    Model(Box<SimConfig>),
    /// A pvrdma function through VFIO (its BDF or sysfs path).
    Vfio(String),
}

impl std::fmt::Display for DeviceSpec {
    /// `model` or `vfio:BDF`: the kind, for messages (a model's faults say where they arise).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceSpec::Model(_) => f.write_str("model"),
            DeviceSpec::Vfio(bdf) => write!(f, "vfio:{bdf}"),
        }
    }
}

/// A spec that does not parse: the spec and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The specs this process uses (`HCA_DEVICES`, else `HCA_CONFIG`'s file, else `model`).
///
/// Errors: a spec that does not parse; a config file that cannot be read; a variable or file
/// that names no device (empty, only `;` or comments), which would otherwise leave the list
/// empty without a word.
pub fn from_env() -> Result<Vec<DeviceSpec>, ConfigError> {
    if let Ok(list) = std::env::var(ENV_DEVICES) {
        return non_empty(parse_list(list.split(';'))?, || format!("{ENV_DEVICES}={list:?}"));
    }
    if let Some(path) = std::env::var_os(ENV_CONFIG) {
        let shown = PathBuf::from(&path).display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|e| ConfigError(format!("{ENV_CONFIG}={shown}: {e}")))?;
        return non_empty(parse_list(text.lines().map(|l| l.split('#').next().unwrap_or("")))?, || {
            format!("{ENV_CONFIG}={shown}")
        });
    }
    parse_list(["model"])
}

fn non_empty(specs: Vec<DeviceSpec>, source: impl FnOnce() -> String) -> Result<Vec<DeviceSpec>, ConfigError> {
    if specs.is_empty() {
        return Err(ConfigError(format!("{} names no device", source())));
    }
    Ok(specs)
}

/// Parses specs, skipping blank ones.
pub fn parse_list<'a>(specs: impl IntoIterator<Item = &'a str>) -> Result<Vec<DeviceSpec>, ConfigError> {
    specs.into_iter().map(str::trim).filter(|s| !s.is_empty()).map(parse).collect()
}

/// Parses one spec (see the module's docs).
pub fn parse(spec: &str) -> Result<DeviceSpec, ConfigError> {
    if let Some(bdf) = spec.strip_prefix("vfio:") {
        return Ok(DeviceSpec::Vfio(bdf.to_string()));
    }
    let mut parts = spec.split(',').map(str::trim);
    if parts.next() != Some("model") {
        return Err(ConfigError(format!("device spec {spec:?}: expected `model[,KEY=VALUE...]` or `vfio:BDF`")));
    }
    let mut cfg = SimConfig { link_latency: Duration::ZERO, ..SimConfig::default() };
    let (mut addrs, mut faults, mut pcap) = (Vec::new(), LinkFaults::default(), None);
    for kv in parts {
        let (k, v) = kv.split_once('=').ok_or_else(|| bad(spec, kv, "expected KEY=VALUE"))?;
        match k {
            "roce" => addrs.push(v.parse::<IpAddr>().map_err(|_| bad(spec, kv, "not an IP address"))?),
            "profile" => cfg.profile = profile(v).ok_or_else(|| bad(spec, kv, "ibta or qemu72"))?,
            "link-latency-us" => cfg.link_latency = Duration::from_micros(num(spec, kv, v)?),
            "link-loss" => faults.loss = prob(spec, kv, v)?,
            "link-reorder" => faults.reorder = prob(spec, kv, v)?,
            "link-duplicate" => faults.duplicate = prob(spec, kv, v)?,
            "link-seed" => faults.seed = num(spec, kv, v)?,
            "pcap" => pcap = Some(PathBuf::from(v)),
            _ => return Err(bad(spec, kv, "unknown key")),
        }
    }
    if !addrs.is_empty() {
        let mut roce = RoceConfig::new(addrs);
        roce.faults = faults;
        roce.pcap = pcap;
        cfg.roce = Some(roce);
    } else if pcap.is_some() || faults != LinkFaults::default() {
        return Err(ConfigError(format!("device spec {spec:?}: link faults and pcap need roce=ADDR")));
    }
    Ok(DeviceSpec::Model(Box::new(cfg)))
}

fn bad(spec: &str, kv: &str, why: &str) -> ConfigError {
    ConfigError(format!("device spec {spec:?}: {kv:?}: {why}"))
}

fn profile(v: &str) -> Option<Profile> {
    match v {
        "ibta" => Some(Profile::Ibta),
        "qemu72" => Some(Profile::Qemu72),
        _ => None,
    }
}

fn num(spec: &str, kv: &str, v: &str) -> Result<u64, ConfigError> {
    v.parse().map_err(|_| bad(spec, kv, "not a number"))
}

fn prob(spec: &str, kv: &str, v: &str) -> Result<f64, ConfigError> {
    match v.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(bad(spec, kv, "not a probability (0 to 1)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_ones_say_why() {
        let l = parse_list("model; model,roce=127.0.0.2,link-loss=0.1 ;vfio:0000:00:05.0".split(';')).unwrap();
        assert_eq!(l.len(), 3);
        match &l[1] {
            DeviceSpec::Model(c) => assert_eq!(c.roce.as_ref().unwrap().faults.loss, 0.1),
            other => panic!("{other:?}"),
        }
        assert!(matches!(&l[2], DeviceSpec::Vfio(b) if b == "0000:00:05.0"));
        for bad in ["mode", "model,roce=x", "model,link-loss=2,roce=::1", "model,pcap=/tmp/x", "model,what=1"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_list_of_no_device_is_an_error_that_names_its_source() {
        for text in ["", ";;", " ; "] {
            let e = non_empty(parse_list(text.split(';')).unwrap(), || "HCA_DEVICES=x".into()).unwrap_err();
            assert_eq!(e.0, "HCA_DEVICES=x names no device");
        }
        assert!(non_empty(parse_list(["model"]).unwrap(), String::new).is_ok());
    }
}
