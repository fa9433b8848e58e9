//! The `runner` binary's allocator: the system's, except that blocks of [`LARGE`] bytes or more
//! are mapped here and, when freed, kept for the next allocation of the same rounded size.
//!
//! Why: kernels return fresh tensors, and above glibc's mmap threshold (fixed at 1 MiB by
//! [`tune_glibc_heap`], so that the heap does not fragment) each was a new mapping, unmapped
//! again when dropped: a long prefill spent a quarter of its time faulting fresh pages in, and
//! every unmap also interrupts the other kernel threads to flush their TLBs. In a layer loop the
//! next allocation of a size is usually the next layer's copy of the same tensor, so kept blocks
//! are reused at once. At most [`KEPT_BYTES`] are kept; the block kept longest is unmapped to
//! make room for a newer one.
//!
//! The cost is memory: kept blocks stay resident, so the peak RSS can be up to [`KEPT_BYTES`]
//! above what mapping afresh reaches. docs/performance.md has the measurements, against glibc's
//! allocator with the same tuning and against mimalloc ("Allocator: ours, glibc's, mimalloc"),
//! and why this one stays.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;

/// The allocator the `runner` binary was built with: this one, unless the feature
/// `system-alloc` (glibc's, with the same tuning) or `mimalloc` swapped it out.
pub const ALLOCATOR: &str = if cfg!(feature = "system-alloc") {
    "system"
} else if cfg!(feature = "mimalloc") {
    "mimalloc"
} else {
    "runner"
};

/// Blocks from this size up are mapped and kept here.
pub const LARGE: usize = 1 << 20;
/// Sizes are rounded up to a multiple of this, so near sizes share blocks.
const GRAIN: usize = 64 << 10;
/// The most bytes kept for reuse at once (resident, though not in use).
pub const KEPT_BYTES: usize = 64 << 20;
/// Slots for kept blocks: enough for [`KEPT_BYTES`] of the smallest blocks.
const SLOTS: usize = KEPT_BYTES / LARGE;
/// Mappings are page-aligned; a larger alignment goes to the system allocator.
const PAGE: usize = 4096;

#[derive(Clone, Copy)]
struct Slot {
    /// Start address; 0 = empty.
    addr: usize,
    len: usize,
    /// When it was kept (a counter), to find the oldest.
    kept_at: u64,
}

const EMPTY: Slot = Slot {
    addr: 0,
    len: 0,
    kept_at: 0,
};

struct Kept {
    slots: [Slot; SLOTS],
    bytes: usize,
    clock: u64,
}

/// The allocator (see the module doc). `const`-constructible for `#[global_allocator]`.
pub struct Allocator {
    kept: Mutex<Kept>,
}

impl Default for Allocator {
    fn default() -> Self {
        Allocator::new()
    }
}

impl Allocator {
    /// An allocator keeping nothing yet.
    pub const fn new() -> Allocator {
        Allocator {
            kept: Mutex::new(Kept {
                slots: [EMPTY; SLOTS],
                bytes: 0,
                clock: 0,
            }),
        }
    }

    /// Bytes kept for reuse now.
    pub fn kept_bytes(&self) -> usize {
        self.lock().bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        // Nothing panics while the lock is held; a poisoned lock still holds consistent slots.
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A kept block of exactly `len` bytes, if there is one.
    fn take(&self, len: usize) -> Option<*mut u8> {
        let mut k = self.lock();
        let slot = k.slots.iter_mut().find(|s| s.addr != 0 && s.len == len)?;
        let addr = std::mem::replace(slot, EMPTY).addr;
        k.bytes -= len;
        Some(addr as *mut u8)
    }

    /// Keep a freed block, unmapping the oldest kept ones if it does not fit otherwise.
    fn keep(&self, ptr: *mut u8, len: usize) {
        if len > KEPT_BYTES {
            unmap(ptr, len);
            return;
        }
        let mut k = self.lock();
        loop {
            let free_slot = k.slots.iter().position(|s| s.addr == 0);
            if let (Some(i), true) = (free_slot, k.bytes + len <= KEPT_BYTES) {
                k.clock += 1;
                k.slots[i] = Slot {
                    addr: ptr as usize,
                    len,
                    kept_at: k.clock,
                };
                k.bytes += len;
                return;
            }
            // Something is kept (otherwise the block would fit): the oldest goes.
            let Some(oldest) = k
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.addr != 0)
                .min_by_key(|(_, s)| s.kept_at)
                .map(|(i, _)| i)
            else {
                drop(k);
                unmap(ptr, len);
                return;
            };
            let old = std::mem::replace(&mut k.slots[oldest], EMPTY);
            k.bytes -= old.len;
            unmap(old.addr as *mut u8, old.len);
        }
    }
}

/// The mapped length for `layout`, when it is served here.
fn class(layout: Layout) -> Option<usize> {
    // `Layout` keeps sizes below isize::MAX, so rounding up cannot overflow.
    (layout.size() >= LARGE && layout.align() <= PAGE)
        .then(|| layout.size().div_ceil(GRAIN) * GRAIN)
}

fn map(len: usize) -> *mut u8 {
    // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p.cast()
    }
}

fn unmap(ptr: *mut u8, len: usize) {
    // SAFETY: `ptr..ptr + len` is a whole mapping made by `map` and no longer referenced.
    // Failure would only leak the mapping.
    unsafe {
        libc::munmap(ptr.cast(), len);
    }
}

// SAFETY: every block handed out is either the system allocator's (same layout rules) or a
// whole mapping of at least `layout.size()` bytes, page-aligned (>= `layout.align()`), owned by
// the caller until it is given back; a kept block is never handed out twice.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match class(layout) {
            // SAFETY: forwarded unchanged.
            None => unsafe { System.alloc(layout) },
            Some(len) => self.take(len).unwrap_or_else(|| map(len)),
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match class(layout) {
            // SAFETY: forwarded unchanged.
            None => unsafe { System.alloc_zeroed(layout) },
            Some(len) => match self.take(len) {
                Some(p) => {
                    // SAFETY: the kept block is ours and at least `layout.size()` bytes long.
                    unsafe { std::ptr::write_bytes(p, 0, layout.size()) };
                    p
                }
                // A fresh anonymous mapping reads as zeros.
                None => map(len),
            },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match class(layout) {
            // SAFETY: forwarded unchanged.
            None => unsafe { System.dealloc(ptr, layout) },
            Some(len) => self.keep(ptr, len),
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size` with this alignment is a valid layout.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (class(layout), class(new_layout)) {
            // SAFETY: forwarded unchanged.
            (None, None) => unsafe { System.realloc(ptr, layout, new_size) },
            (Some(old), Some(new)) if old == new => ptr,
            // A growing array (a long job's admitted inputs) moves by remapping its pages: no
            // copy, and no old block left resident in the kept set.
            #[cfg(target_os = "linux")]
            (Some(old), Some(new)) => {
                // SAFETY: `ptr..ptr + old` is a whole mapping made by `map` (or remapped here)
                // and owned by the caller; on failure it is left as it was.
                let p = unsafe { libc::mremap(ptr.cast(), old, new, libc::MREMAP_MAYMOVE) };
                if p == libc::MAP_FAILED {
                    std::ptr::null_mut()
                } else {
                    p.cast()
                }
            }
            _ => {
                // SAFETY: a valid layout (above); on success both blocks are live and distinct.
                unsafe {
                    let moved = self.alloc(new_layout);
                    if !moved.is_null() {
                        std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                    moved
                }
            }
        }
    }
}

/// Every allocation of 1 MiB or more that [`Allocator`] does not take (over-aligned ones) gets
/// its own mapping, returned to the system when freed; and glibc keeps up to 16 MiB of free heap
/// top instead of trimming it. Call once, before any thread starts.
///
/// glibc raises its mmap threshold whenever a mapped block is freed (up to 32 MiB), after which
/// activations of a few MiB come from the heap instead, and a run whose sizes vary (a warm-up,
/// prefill chunks, then decode steps) fragments the heap and keeps growing. Reuse of small
/// blocks is cheap only while the heap keeps its free top: glibc gives it back once more than
/// 128 KiB is free, so each decode step's few-hundred-KiB activations would fault their pages
/// in afresh. docs/performance.md has the measurements.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn tune_glibc_heap() {
    const THRESHOLD: libc::c_int = LARGE as libc::c_int;
    const KEEP_TOP: libc::c_int = 16 << 20;
    // SAFETY: `mallopt` only sets an allocator parameter. A failure (0) leaves glibc's
    // default, which is only slower to give memory back.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, KEEP_TOP);
    }
}

/// Nothing to tune outside glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn tune_glibc_heap() {}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize) -> Layout {
        Layout::from_size_align(size, 8).unwrap()
    }

    #[test]
    fn a_freed_large_block_is_reused_and_zeroed_when_asked() {
        let a = Allocator::new();
        let l = layout(3 << 20);
        // SAFETY: every block is used within its layout and freed with it.
        unsafe {
            let p = a.alloc(l);
            std::ptr::write_bytes(p, 0xAB, l.size());
            a.dealloc(p, l);
            assert_eq!(a.kept_bytes(), 3 << 20);
            // Same rounded size: the same block, emptied from the kept list.
            let q = a.alloc_zeroed(layout((3 << 20) - 100));
            assert_eq!(q, p);
            assert_eq!(a.kept_bytes(), 0);
            let bytes = std::slice::from_raw_parts(q, (3 << 20) - 100);
            assert!(bytes.iter().all(|&b| b == 0));
            a.dealloc(q, layout((3 << 20) - 100));
        }
    }

    #[test]
    fn small_and_over_aligned_blocks_go_to_the_system() {
        let a = Allocator::new();
        // SAFETY: as above.
        unsafe {
            for l in [
                layout(LARGE - 1),
                Layout::from_size_align(LARGE, 2 * PAGE).unwrap(),
            ] {
                let p = a.alloc(l);
                assert!(!p.is_null());
                assert_eq!(p as usize % l.align(), 0);
                a.dealloc(p, l);
                assert_eq!(a.kept_bytes(), 0);
            }
        }
    }

    #[test]
    fn keeps_at_most_the_cap_and_drops_the_oldest_first() {
        let a = Allocator::new();
        let big = layout(KEPT_BYTES / 4);
        // SAFETY: as above.
        unsafe {
            let blocks: Vec<*mut u8> = (0..5).map(|_| a.alloc(big)).collect();
            for &p in &blocks {
                a.dealloc(p, big);
            }
            assert_eq!(a.kept_bytes(), KEPT_BYTES);
            // The first one freed was unmapped; the other four are handed out again.
            let again: Vec<*mut u8> = (0..4).map(|_| a.alloc(big)).collect();
            let mut expected = blocks[1..].to_vec();
            let mut got = again.clone();
            expected.sort();
            got.sort();
            assert_eq!(got, expected);
            assert_eq!(a.kept_bytes(), 0);
            // Larger than the cap: never kept.
            let huge = layout(KEPT_BYTES + GRAIN);
            let h = a.alloc(huge);
            a.dealloc(h, huge);
            assert_eq!(a.kept_bytes(), 0);
            for p in again {
                a.dealloc(p, big);
            }
        }
    }

    #[test]
    fn realloc_keeps_the_contents_across_sizes() {
        let a = Allocator::new();
        // SAFETY: as above; each pointer is used only until it is reallocated.
        unsafe {
            let small = layout(1000);
            let p = a.alloc(small);
            for i in 0..1000 {
                *p.add(i) = i as u8;
            }
            // Small to large, within its rounded size, then large to small.
            let q = a.realloc(p, small, 2 << 20);
            let r = a.realloc(q, layout(2 << 20), (2 << 20) - 10);
            assert_eq!(r, q, "same rounded size: the block itself");
            let s = a.realloc(r, layout((2 << 20) - 10), 500);
            let bytes = std::slice::from_raw_parts(s, 500);
            assert!(bytes.iter().enumerate().all(|(i, &b)| b == i as u8));
            a.dealloc(s, layout(500));
            assert_eq!(a.kept_bytes(), 2 << 20);
        }
    }

    #[test]
    fn a_large_block_grows_and_shrinks_in_place_of_a_copy_leaving_nothing_kept() {
        let a = Allocator::new();
        // SAFETY: as above; each pointer is used only until it is reallocated.
        unsafe {
            let p = a.alloc(layout(LARGE));
            for i in 0..LARGE {
                *p.add(i) = (i % 251) as u8;
            }
            let q = a.realloc(p, layout(LARGE), 8 * LARGE);
            assert!(!q.is_null());
            *q.add(8 * LARGE - 1) = 7;
            let r = a.realloc(q, layout(8 * LARGE), 2 * LARGE);
            let bytes = std::slice::from_raw_parts(r, LARGE);
            assert!(bytes.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
            assert_eq!(a.kept_bytes(), 0, "no old block is left behind");
            a.dealloc(r, layout(2 * LARGE));
            assert_eq!(a.kept_bytes(), 2 * LARGE);
        }
    }
}
