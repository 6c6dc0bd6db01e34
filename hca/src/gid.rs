//! The port's GID table as the driver keeps it (Linux's `pvrdma_dev.sgid_tbl` with
//! `pvrdma_add_gid_at_index` / `pvrdma_del_gid_at_index`): pvrdma has no command that reads a GID
//! back, so the driver remembers what it bound with CREATE_BIND and what it emptied with
//! DESTROY_BIND, and answers `query_gid` / `query_gid_type` from that copy.

use crate::cmd::Commands;
use ib_core::{Error, Gid, GidType, Result};
use parking_lot::Mutex;
use pvrdma_abi::cmd::{CreateBind, DestroyBind};
use pvrdma_abi::dsr::{GID_TYPE_FLAG_ROCE_V1, GID_TYPE_FLAG_ROCE_V2};
use pvrdma_abi::verbs::mtu;

/// `PVRDMA_GID_TYPE_FLAG_*` of a GID type.
pub(crate) fn type_flag(t: GidType) -> u8 {
    match t {
        GidType::RoceV1 => GID_TYPE_FLAG_ROCE_V1,
        GidType::RoceV2 => GID_TYPE_FLAG_ROCE_V2,
    }
}

/// The entries bound, by index (`None`: empty), and the GID types the device reports.
pub(crate) struct GidTable {
    entries: Mutex<Vec<Option<(Gid, GidType)>>>,
    types: u8,
}

impl GidTable {
    /// A table of `len` entries (the device's `gid_tbl_len` cap) whose entry 0 holds what the
    /// probe binds; `types` is the device's `caps.gid_types`.
    pub(crate) fn new(len: u32, types: u8, gid0: Gid, type0: GidType) -> Self {
        let mut entries = vec![None; len as usize];
        if let Some(e) = entries.first_mut() {
            *e = Some((gid0, type0));
        }
        Self { entries: Mutex::new(entries), types }
    }

    /// The first entry of type `ty`: its index and GID.
    pub(crate) fn first(&self, ty: GidType) -> Option<(u32, Gid)> {
        let entries = self.entries.lock();
        let (i, (gid, _)) =
            entries.iter().enumerate().find_map(|(i, e)| e.filter(|(_, t)| *t == ty).map(|e| (i, e)))?;
        Some((i as u32, gid))
    }

    /// The entry at `index`. Errors: [`Error::InvalidArgument`] beyond the table.
    pub(crate) fn get(&self, index: u32) -> Result<Option<(Gid, GidType)>> {
        let entries = self.entries.lock();
        entries.get(index as usize).copied().ok_or(Error::InvalidArgument("GID index beyond the table"))
    }
}

/// The flag of `ty` if the device reports it in `types` (`caps.gid_types`). Errors:
/// [`Error::Unsupported`].
fn reported_flag(types: u8, ty: GidType) -> Result<u8> {
    match type_flag(ty) {
        f if types & f != 0 => Ok(f),
        _ => Err(Error::Unsupported("a GID type the device does not report")),
    }
}

/// Entry 0 is the probe's GID, which the arm self-test and every default `-g 0` rely on.
fn changeable(table: &[Option<(Gid, GidType)>], index: u32) -> Result<usize> {
    match index {
        0 => Err(Error::InvalidArgument("GID index 0 holds the port's default GID")),
        i if (i as usize) < table.len() => Ok(i as usize),
        _ => Err(Error::InvalidArgument("GID index beyond the table")),
    }
}

/// CREATE_BIND of `gid` at `index` with Linux's fields (MTU 1024, no VLAN), then the copy.
///
/// Errors: [`Error::InvalidArgument`] for index 0 or one beyond the table;
/// [`Error::Unsupported`] for a type `caps.gid_types` lacks; the command's errors (nothing is
/// recorded then).
pub(crate) fn add(gids: &GidTable, cmd: &Commands, index: u32, gid: Gid, ty: GidType) -> Result<()> {
    let flag = reported_flag(gids.types, ty)?;
    let mut table = gids.entries.lock();
    let slot = changeable(&table, index)?;
    create_bind(cmd, index, gid, flag)?;
    table[slot] = Some((gid, ty));
    Ok(())
}

/// CREATE_BIND of `gid` at `index` with GID type `flag` and Linux's other fields (`mtu` 1024 in
/// bytes, `vlan` 0xfff: none), as `pvrdma_add_gid_at_index` sends it. Errors: the command's.
pub(crate) fn create_bind(cmd: &Commands, index: u32, gid: Gid, flag: u8) -> Result<()> {
    cmd.post(CreateBind {
        mtu: mtu::bytes(mtu::MTU_1024).unwrap_or(1024).into(),
        vlan: 0xfff.into(),
        index: index.into(),
        new_gid: gid,
        gid_type: flag,
        ..Default::default()
    })?;
    Ok(())
}

/// DESTROY_BIND of `index`, naming the GID the driver bound there (`dest_gid`, as Linux's
/// driver sends it), then the copy. An entry the driver holds as empty is still sent, so the
/// device's own answer (ENOENT) is what the caller gets.
///
/// Errors: as [`add`]; the command's errors (the copy is kept then).
pub(crate) fn del(gids: &GidTable, cmd: &Commands, index: u32) -> Result<()> {
    let mut table = gids.entries.lock();
    let slot = changeable(&table, index)?;
    let dest_gid = table[slot].map(|(g, _)| g).unwrap_or_default();
    cmd.post(DestroyBind { index: index.into(), dest_gid, ..Default::default() })?;
    table[slot] = None;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_types_the_device_reports_are_bound() {
        assert_eq!(reported_flag(GID_TYPE_FLAG_ROCE_V1, GidType::RoceV1), Ok(GID_TYPE_FLAG_ROCE_V1));
        assert!(matches!(reported_flag(GID_TYPE_FLAG_ROCE_V1, GidType::RoceV2), Err(Error::Unsupported(_))));
        let both = GID_TYPE_FLAG_ROCE_V1 | GID_TYPE_FLAG_ROCE_V2;
        assert_eq!(reported_flag(both, GidType::RoceV2), Ok(GID_TYPE_FLAG_ROCE_V2));
        assert!(reported_flag(0, GidType::RoceV1).is_err());
    }

    #[test]
    fn the_table_starts_with_the_probes_gid_and_index_0_is_not_changed() {
        let t = GidTable::new(4, 3, [0xfe; 16], GidType::RoceV1);
        assert_eq!(t.get(0), Ok(Some(([0xfe; 16], GidType::RoceV1))));
        assert_eq!(t.get(3), Ok(None));
        assert!(t.get(4).is_err());
        let e = t.entries.lock();
        assert!(changeable(&e, 0).is_err() && changeable(&e, 4).is_err());
        assert_eq!(changeable(&e, 3), Ok(3));
    }
}
