//! `ibv_read_sysfs_file` and `ibv_get_sysfs_path`, answering for this library's devices.

/// Where `ibv_device::ibdev_path` points (`<IB_CLASS>/vmw_pvrdma0`).
pub(crate) const IB_CLASS: &str = "/sys/class/infiniband";
/// Where `ibv_device::dev_path` points (`<VERBS_CLASS>/uverbs0`).
pub(crate) const VERBS_CLASS: &str = "/sys/class/infiniband_verbs";
