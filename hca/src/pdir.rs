//! Page directories (`pvrdma_page_dir_*` in Linux's `pvrdma_misc.c`): how every ring and MR is
//! described to the device. A directory page holds little-endian u64 addresses of table pages; a
//! table page holds the addresses of up to 512 data pages; data page `i` is entry
//! `i & 0x1ff` of table `i >> 9` ([`pvrdma_abi::pdir`]).

use crate::dma::{Abandon, DmaBuf};
use crate::platform::{Iova, Platform};
use ib_core::{Error, Result};
use pvrdma_abi::pdir::{PAGE_DIR_MAX_PAGES, PDIR_ENTRIES};
use std::sync::Arc;

/// A page directory over a list of data pages. Owns its directory and table pages, not the data.
pub struct PageDir {
    dir: DmaBuf,
    tables: Vec<DmaBuf>,
    npages: usize,
}

impl PageDir {
    /// Builds a directory listing `pages` (device addresses of 4 KiB pages, in order).
    ///
    /// Errors: [`Error::InvalidArgument`] for no pages or more than
    /// [`PAGE_DIR_MAX_PAGES`]; [`ib_core::Error::Device`] if the directory cannot be allocated or written.
    pub fn new(platform: &Arc<dyn Platform>, pages: &[Iova]) -> Result<Self> {
        if pages.is_empty() || pages.len() > PAGE_DIR_MAX_PAGES {
            return Err(Error::InvalidArgument("page directory size"));
        }
        let dir = DmaBuf::pages(platform, 1)?;
        let tables =
            table_contents(pages).iter().map(|entries| write_page(platform, entries)).collect::<Result<Vec<_>>>()?;
        let dir_entries: Vec<u64> = tables.iter().map(DmaBuf::iova).collect();
        dir.write(0, &encode(&dir_entries))?;
        Ok(Self { dir, tables, npages: pages.len() })
    }

    /// Rewrites the directory in place to list `pages` on new table pages (RESIZE_CQ: the device
    /// re-reads the directory at the address it was given at create, so the directory page stays
    /// and may name more or fewer tables than before). Returns the old tables, which the device may
    /// read until the command that re-reads the directory has returned.
    ///
    /// Errors: as [`PageDir::new`]; on an error the directory still lists the old pages.
    pub fn relist(&mut self, platform: &Arc<dyn Platform>, pages: &[Iova]) -> Result<Vec<DmaBuf>> {
        if pages.is_empty() || pages.len() > PAGE_DIR_MAX_PAGES {
            return Err(Error::InvalidArgument("page directory size"));
        }
        let tables =
            table_contents(pages).iter().map(|entries| write_page(platform, entries)).collect::<Result<Vec<_>>>()?;
        let mut dir_entries: Vec<u64> = tables.iter().map(DmaBuf::iova).collect();
        dir_entries.resize(dir_entries.len().max(self.tables.len()), 0);
        self.dir.write(0, &encode(&dir_entries))?;
        self.npages = pages.len();
        Ok(std::mem::replace(&mut self.tables, tables))
    }

    /// Device address of the directory page (the `pdir_dma` of a command or DSR ring).
    pub fn dma(&self) -> Iova {
        self.dir.iova()
    }

    /// Number of data pages listed.
    pub fn num_pages(&self) -> usize {
        self.npages
    }
}

/// The entries of each table page for `pages`: table `t` holds pages `t*512 ..`.
pub fn table_contents(pages: &[Iova]) -> Vec<Vec<u64>> {
    pages.chunks(PDIR_ENTRIES).map(<[u64]>::to_vec).collect()
}

fn encode(entries: &[u64]) -> Vec<u8> {
    entries.iter().flat_map(|e| e.to_le_bytes()).collect()
}

fn write_page(platform: &Arc<dyn Platform>, entries: &[u64]) -> Result<DmaBuf> {
    let page = DmaBuf::pages(platform, 1)?;
    page.write(0, &encode(entries))?;
    Ok(page)
}

/// A run of DMA pages together with the page directory that lists them: the memory of one ring
/// set (CQ, QP, DSR ring) or one MR.
pub struct PagedBuf {
    data: DmaBuf,
    dir: PageDir,
}

impl Abandon for PageDir {
    fn abandon(&mut self) {
        self.dir.abandon();
        self.tables.iter_mut().for_each(Abandon::abandon);
    }
}

impl Abandon for PagedBuf {
    fn abandon(&mut self) {
        self.data.abandon();
        self.dir.abandon();
    }
}

impl PagedBuf {
    /// Allocates `pages` zeroed pages and their directory.
    pub fn new(platform: &Arc<dyn Platform>, pages: usize) -> Result<Self> {
        if pages == 0 || pages > PAGE_DIR_MAX_PAGES {
            return Err(Error::InvalidArgument("page directory size"));
        }
        let data = DmaBuf::pages(platform, pages)?;
        let list: Vec<Iova> = (0..pages).filter_map(|i| data.page_iova(i)).collect();
        let dir = PageDir::new(platform, &list)?;
        Ok(Self { data, dir })
    }

    /// The pages, addressed by byte offset from the start of page 0.
    pub fn data(&self) -> &DmaBuf {
        &self.data
    }

    /// The directory describing them.
    pub fn dir(&self) -> &PageDir {
        &self.dir
    }

    /// The directory, to relist (RESIZE_CQ).
    pub fn dir_mut(&mut self) -> &mut PageDir {
        &mut self.dir
    }

    /// Number of pages (the `nchunks` of a command).
    pub fn num_pages(&self) -> usize {
        self.dir.num_pages()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::sim::SimPlatform;
    use pvrdma_abi::pdir::{dir_index, table_index};
    use pvrdma_sim::SimConfig;

    /// Where data page `i` is listed: (directory index, table index).
    fn locate(i: usize) -> (usize, usize) {
        (dir_index(i), table_index(i))
    }

    fn read_u64(p: &dyn Platform, at: Iova) -> u64 {
        let mut b = [0u8; 8];
        p.dma_read(at, &mut b).unwrap();
        u64::from_le_bytes(b)
    }

    /// Resolves data page `i` through the directory as the device does.
    fn resolve(p: &dyn Platform, dir: Iova, i: usize) -> u64 {
        let (d, t) = locate(i);
        let table = read_u64(p, dir + 8 * d as u64);
        read_u64(p, table + 8 * t as u64)
    }

    #[test]
    fn every_page_resolves_through_dir_and_table() {
        let p: Arc<dyn Platform> = Arc::new(SimPlatform::new(SimConfig::default()));
        let pages: Vec<Iova> = (0..1030u64).map(|i| 0x1_0000_0000 + i * 0x3000).collect();
        let dir = PageDir::new(&p, &pages).unwrap();
        assert_eq!(dir.num_pages(), 1030);
        for i in [0, 1, 511, 512, 513, 1023, 1024, 1029] {
            assert_eq!(resolve(&*p, dir.dma(), i), pages[i], "page {i}");
        }
        // Three tables are listed, the fourth directory entry is empty.
        assert_eq!(read_u64(&*p, dir.dma() + 24), 0);
    }

    #[test]
    fn table_layout_and_limits() {
        let pages: Vec<u64> = (0..513).collect();
        let t = table_contents(&pages);
        assert_eq!((t.len(), t[0].len(), t[1].len(), t[1][0]), (2, 512, 1, 512));
        assert_eq!(locate(513), (1, 1));
        let p: Arc<dyn Platform> = Arc::new(SimPlatform::new(SimConfig::default()));
        assert!(matches!(PageDir::new(&p, &[]), Err(Error::InvalidArgument(_))));
        assert!(PagedBuf::new(&p, 0).is_err());
    }

    #[test]
    fn relist_rewrites_the_same_directory_page_growing_and_shrinking_its_tables() {
        let p: Arc<dyn Platform> = Arc::new(SimPlatform::new(SimConfig::default()));
        let one: Vec<Iova> = (0..3u64).map(|i| 0x1_0000_0000 + i * 0x1000).collect();
        let mut dir = PageDir::new(&p, &one).unwrap();
        let at = dir.dma();
        let many: Vec<Iova> = (0..600u64).map(|i| 0x2_0000_0000 + i * 0x1000).collect();
        let old = dir.relist(&p, &many).unwrap();
        assert_eq!((old.len(), dir.dma(), dir.num_pages()), (1, at, 600), "same directory page, two tables now");
        for i in [0, 511, 512, 599] {
            assert_eq!(resolve(&*p, at, i), many[i], "page {i}");
        }
        let old = dir.relist(&p, &one).unwrap();
        assert_eq!(old.len(), 2);
        assert_eq!(resolve(&*p, at, 2), one[2]);
        assert_eq!(read_u64(&*p, at + 8), 0, "the second table is no longer listed");
        assert!(matches!(dir.relist(&p, &[]), Err(Error::InvalidArgument(_))));
        assert_eq!(resolve(&*p, at, 1), one[1], "a refused relist leaves the list");
    }

    #[test]
    fn paged_buf_lists_its_own_pages() {
        let p: Arc<dyn Platform> = Arc::new(SimPlatform::new(SimConfig::default()));
        let b = PagedBuf::new(&p, 3).unwrap();
        for i in 0..3 {
            assert_eq!(resolve(&*p, b.dir().dma(), i), b.data().page_iova(i).unwrap());
        }
        assert!(b.data().write(3 * 4096 - 2, &[1, 2, 3]).is_err());
    }
}
