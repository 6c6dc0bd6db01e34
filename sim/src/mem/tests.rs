//! Tests of the guest-memory map: bounds, every alignment, absurd sizes, the consumer's pages and
//! the 8-byte atomics.

use super::*;

#[test]
fn copies_bounds_and_atomics() {
    let m = GuestMemory::new(1 << 20);
    let a = m.alloc(10).unwrap();
    assert_eq!(a % 4096, 0);
    m.write(a + 3, b"hello pvrdma").unwrap();
    let mut b = [0u8; 12];
    m.read(a + 3, &mut b).unwrap();
    assert_eq!(&b, b"hello pvrdma");
    m.store_u32(a + 4096 - 4, 7).unwrap();
    assert_eq!(m.load_u32(a + 4096 - 4).unwrap(), 7);
    assert_eq!(m.load_u32(a + 4096), Err(MemError::OutOfRange { iova: a + 4096, len: 4 }));
    assert!(m.read(a + 4000, &mut [0u8; 200]).is_err());
    assert!(m.read(0, &mut [0u8; 1]).is_err());
    assert!(m.read(u64::MAX - 1, &mut [0u8; 4]).is_err());
    assert_eq!(m.load_u32(a + 2), Err(MemError::Misaligned(a + 2)));
    assert!(m.free(a));
    assert!(m.read(a, &mut [0u8; 1]).is_err());
    assert!(matches!(m.alloc(2 << 20), Err(MemError::Exhausted { .. })));
}

#[test]
fn every_alignment_and_length_round_trips() {
    let m = GuestMemory::new(1 << 20);
    let a = m.alloc(64).unwrap();
    let pattern: Vec<u8> = (1..=40u8).collect();
    for start in 0..8u64 {
        for len in 0..=24usize {
            m.write(a, &[0xee; 64]).unwrap();
            m.write(a + start, &pattern[..len]).unwrap();
            let mut all = [0u8; 64];
            m.read(a, &mut all).unwrap();
            let s = start as usize;
            assert!(all[..s].iter().all(|&b| b == 0xee), "before {start}+{len}");
            assert_eq!(&all[s..s + len], &pattern[..len], "{start}+{len}");
            assert!(all[s + len..].iter().all(|&b| b == 0xee), "after {start}+{len}");
            let mut part = vec![0u8; len];
            m.read(a + start, &mut part).unwrap();
            assert_eq!(part, &pattern[..len]);
        }
    }
    // Empty accesses at the very end of a region are in bounds and touch nothing.
    m.write(a + 4096, &[]).unwrap();
    m.read(a + 4096, &mut []).unwrap();
    let w = m.window(a).unwrap();
    w.write(4096, &[]);
    w.read(4093, &mut [0u8; 3]);
}

#[test]
fn absurd_sizes_are_refused_without_panicking() {
    // Page rounding that would wrap is refused even without a limit.
    let unlimited = GuestMemory::new(u64::MAX);
    for len in [u64::MAX, u64::MAX - 4094] {
        assert!(matches!(unlimited.alloc(len), Err(MemError::Exhausted { .. })), "{len:#x}");
    }
    let m = GuestMemory::new(1 << 20);
    for len in [u64::MAX, u64::MAX - 4094, 1 << 63, (1 << 20) + 1] {
        assert!(matches!(m.alloc(len), Err(MemError::Exhausted { .. })), "{len:#x}");
    }
    assert_eq!((unlimited.used(), m.used()), (0, 0));
    let a = m.alloc(3 * PAGE).unwrap();
    m.write(a, &[0xa5; 3 * PAGE as usize]).unwrap();
    m.zero(a + 3, 2 * PAGE).unwrap();
    let mut b = vec![0u8; 3 * PAGE as usize];
    m.read(a, &mut b).unwrap();
    assert!(b[..3].iter().all(|&x| x == 0xa5));
    assert!(b[3..3 + 2 * PAGE as usize].iter().all(|&x| x == 0));
    assert!(b[3 + 2 * PAGE as usize..].iter().all(|&x| x == 0xa5));
    for (at, len) in [(a, u64::MAX), (a + 1, u64::MAX), (a, 1 << 40), (u64::MAX, 1)] {
        assert!(m.zero(at, len).is_err());
    }
}

#[test]
fn external_pages_are_the_consumers_memory_until_unmapped() {
    let m = GuestMemory::new(1 << 20);
    let layout = std::alloc::Layout::from_size_align(2 * PAGE as usize, PAGE as usize).unwrap();
    // SAFETY: a fresh allocation of the layout's size, freed below after the unmap.
    let buf = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!buf.is_null());
    // SAFETY: `buf` is two live, writable, page-aligned pages until `dealloc` below.
    let iova = unsafe { m.map_external(buf as usize, 2 * PAGE as usize, true) }.unwrap();
    m.write(iova + 4090, b"across").unwrap();
    // SAFETY: reading bytes of the live allocation; nothing writes it concurrently here.
    let seen = unsafe { std::slice::from_raw_parts(buf.add(4090), 6) }.to_vec();
    assert_eq!(seen, b"across");
    assert_eq!(m.used(), 0, "the consumer's pages are not the model's to count");
    assert!(m.read(iova + 2 * PAGE, &mut [0u8; 1]).is_err());
    assert!(m.free(iova));
    assert!(m.read(iova, &mut [0u8; 1]).is_err());
    // SAFETY: unmapped above: nothing reaches `buf` any more.
    unsafe { std::alloc::dealloc(buf, layout) };
    // SAFETY: never dereferenced: the arguments are refused first.
    assert!(unsafe { m.map_external(4097, 4096, true) }.is_err());
}

/// FETCH ADD and COMPARE SWAP on one 8-byte word from `threads` threads per target at once, each
/// target the word as one map (one device) addresses it: no update lost, each FETCH ADD saw a
/// value of its own, every COMPARE SWAP that matched is one increment.
fn hammer(targets: &[(&GuestMemory, u64)], threads: u64, n: u64) {
    let total = targets.len() as u64 * threads;
    let start = std::sync::Barrier::new(total as usize);
    let seen: Vec<Vec<u64>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .flat_map(|_| targets.iter())
            .map(|&(mem, iova)| {
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    (0..n).map(|_| mem.atomic_u64(iova, Atomic64::FetchAdd(1)).unwrap()).collect()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let (mem, iova) = targets[0];
    assert_eq!(mem.read_u64(iova).unwrap(), total * n, "no update lost");
    let mut all: Vec<u64> = seen.into_iter().flatten().collect();
    all.sort_unstable();
    assert!(all.iter().enumerate().all(|(i, &v)| v == i as u64), "each saw its own value");
    std::thread::scope(|s| {
        for &(mem, iova) in targets.iter().flat_map(|t| std::iter::repeat_n(t, threads as usize)) {
            s.spawn(move || {
                let mut done = 0;
                while done < n / 10 {
                    let v = mem.read_u64(iova).unwrap();
                    let op = Atomic64::CmpSwap { compare: v, swap: v + 1 };
                    done += u64::from(mem.atomic_u64(iova, op).unwrap() == v);
                }
            });
        }
    });
    assert_eq!(mem.read_u64(iova).unwrap(), total * n + total * (n / 10));
}

/// What the device's `ATOMIC_HCA` promises (`ibv_query_device(3)`; IBTA's HCA-level atomicity;
/// Linux rxe reports the same): its 8-byte atomics are atomic against each other — from many
/// threads, and from two devices (two maps) over the same pages of the consumer's — not against
/// the CPU's own atomics, which this test does not race (on the consumer's memory they would
/// not be: the device's read-modify-write there is a fault-safe read and write under a lock of
/// the process, issue 21 §2). On memory the map owns they are one atomic instruction.
#[test]
fn eight_byte_atomics_hold_across_threads_and_devices_as_atomic_hca_promises() {
    let mem = GuestMemory::new(1 << 20);
    let owned = mem.alloc(4096).unwrap();
    hammer(&[(&mem, owned + 8)], 4, 50_000);
    assert_eq!(mem.read_u64(owned).unwrap(), 0, "the neighbour is untouched");
    assert_eq!(mem.atomic_u64(owned + 4, Atomic64::FetchAdd(1)), Err(MemError::Misaligned(owned + 4)));
    assert!(mem.atomic_u64(owned + 4096, Atomic64::FetchAdd(1)).is_err());
    // A page of the test's own, mapped by two devices as two programs' MRs over one buffer are.
    let backing: Box<[AtomicU64]> = (0..1024).map(|_| AtomicU64::new(0)).collect();
    let page = (backing.as_ptr() as usize).next_multiple_of(4096);
    let other = GuestMemory::new(1 << 20);
    // SAFETY: `backing` (8 KiB) holds the page from `page` on and outlives both mappings, which
    // are unmapped below; nothing else touches it meanwhile.
    let (ext, ext2) =
        unsafe { (mem.map_external(page, 4096, true).unwrap(), other.map_external(page, 4096, true).unwrap()) };
    hammer(&[(&mem, ext + 16), (&other, ext2 + 16)], 2, 20_000);
    let word = &backing[(page - backing.as_ptr() as usize) / 8 + 2];
    assert_eq!(word.load(Ordering::Acquire), 4 * 20_000 + 4 * 2_000, "in the consumer's memory");
    assert_eq!(backing[(page - backing.as_ptr() as usize) / 8 + 3].load(Ordering::Acquire), 0, "the neighbour");
    assert!(mem.free(ext) && other.free(ext2));
}
