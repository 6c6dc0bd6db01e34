//! A `no_std` host for the three `no_std` crates: it supplies what a kernel would (a panic
//! handler, an allocator, a clock, BAR2 and the command slots) and exercises each crate's
//! generic code, so it is compiled and linked here rather than only type-checked.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]

extern crate alloc;

use alloc::sync::Arc;
use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use core::time::Duration;
use doorbell::{ArmEncoding, CqArmDoorbell, CqHandle, Owner, QpHandle, UarMmio, UarTable};
use firmware_cmd::{CmdChannel, CmdTransport, Clock, WaitMode};
use pvrdma_abi::cmd::CreatePd;

/// A bump allocator over a static arena: enough for a kernel-less test, never frees.
struct Bump {
    arena: UnsafeCell<[u8; 1 << 16]>,
    next: AtomicUsize,
}

// SAFETY: every byte range of the arena is handed out once (the `next` counter is atomic), so no
// two threads ever touch the same bytes through it.
unsafe impl Sync for Bump {}

// SAFETY: returns either null or a range of the arena no other allocation overlaps, aligned as
// `layout` asks; `dealloc` frees nothing, which is always sound.
unsafe impl GlobalAlloc for Bump {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let base = self.arena.get() as usize;
        let mut start = 0;
        let claimed = self.next.fetch_update(Ordering::AcqRel, Ordering::Acquire, |next| {
            start = (base + next).next_multiple_of(layout.align()) - base;
            let end = start.checked_add(layout.size())?;
            (end <= 1 << 16).then_some(end)
        });
        match claimed {
            // SAFETY: `start + size` is within the arena, so the offset stays inside it.
            Ok(_) => unsafe { self.arena.get().cast::<u8>().add(start) },
            Err(_) => core::ptr::null_mut(),
        }
    }

    unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {}
}

#[global_allocator]
static ALLOC: Bump = Bump { arena: UnsafeCell::new([0; 1 << 16]), next: AtomicUsize::new(0) };

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    loop {
        core::hint::spin_loop();
    }
}

/// The precompiled `alloc` refers to the unwinding personality routine though nothing here can
/// unwind (`panic = "abort"`); a kernel supplies the same empty symbol.
#[no_mangle]
pub extern "C" fn rust_eh_personality() {}

/// BAR2 as a counter of writes.
struct CountingUar(AtomicU32);

impl UarMmio for CountingUar {
    fn uar_write32(&self, _offset: u64, _value: u32) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// A clock that advances one millisecond per pause.
struct TickClock(AtomicU32);

impl Clock for TickClock {
    fn now(&self) -> Duration {
        Duration::from_millis(self.0.load(Ordering::Relaxed).into())
    }
    fn relax(&self, _round: u32) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// A device that never answers.
struct Silent;

impl CmdTransport for Silent {
    fn write_cmd_slot(&self, _bytes: &[u8]) -> Result<(), &'static str> {
        Ok(())
    }
    fn write_resp_slot(&self, _offset: u64, _bytes: &[u8]) -> Result<(), &'static str> {
        Ok(())
    }
    fn read_resp_slot(&self, _buf: &mut [u8]) -> Result<(), &'static str> {
        Ok(())
    }
    fn load_resp_u32(&self, _offset: u64) -> Result<u32, &'static str> {
        Ok(0)
    }
    fn ring_request(&self) {}
    fn wait_response_irq(&self, _timeout: Duration) -> bool {
        false
    }
}

/// Rings a kernel QP, a user CQ's arm from the kernel page and a user QP through the context's
/// mapping, then times a command out on the injected clock. Returns the doorbells written (3)
/// plus 100 if the command timed out as it should.
#[no_mangle]
pub extern "C" fn pvrdma_no_std_check() -> u32 {
    let uar = Arc::new(CountingUar(AtomicU32::new(0)));
    let table = UarTable::new(uar.clone(), 0, 4);
    let kernel = table.kernel_doorbells();
    let Ok(ctx) = table.alloc() else { return 0 };
    let (Ok(kqp), Ok(ucq), Ok(uqp)) =
        (QpHandle::new(1, Owner::Kernel), CqHandle::new(2, ctx.owner()), QpHandle::new(3, ctx.owner()))
    else {
        return 0;
    };
    let _ = kernel.qp_send(&kqp);
    CqArmDoorbell::new(&table, ucq, ArmEncoding::Ibta).arm_next();
    if let Ok(user) = ctx.map(0, 4096) {
        let _ = user.qp_recv(&uqp);
    }
    let chan = CmdChannel::with_timeout(Silent, TickClock(AtomicU32::new(0)), WaitMode::Polling, Duration::from_millis(5));
    let timed_out = chan.post(CreatePd::default()).is_err();
    uar.0.load(Ordering::Relaxed) + if timed_out { 100 } else { 0 }
}
