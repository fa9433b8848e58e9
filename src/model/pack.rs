//! The decoder layers' projection weights, copied at load into one anonymous region that asks
//! for huge pages.
//!
//! At small batches a step streams every layer weight from memory once, and through the 4 KiB
//! pages of a file mapping that stream is markedly slower than through 2 MiB pages (figures in
//! docs/performance.md, "What changed the numbers"). File-backed huge pages are not generally
//! available, so the bytes are copied, unchanged, in their stored dtype, and each tensor's file pages are handed back as soon as it is copied: the
//! resident set is the same as with the mapping, and no more than one tensor larger at any time.
//!
//! The embedding table stays mapped: a step reads only the rows of its tokens, and the tied
//! output head is read through its 8-bit screen where the head is stored in 8 bits or more (a
//! head stored in fewer is read whole each step, through the mapping); the few full rows
//! either needs are copied out of the file (`Weight::copy_rows`) rather than mapped. Norm
//! vectors are too small to matter. Where the region cannot be made, the weights stay mapped;
//! only speed differs.

use std::sync::Arc;

use crate::kernels::tensor::WeightBytes;
use crate::kernels::Weight;

/// Each tensor starts on a cache line.
const ALIGN: usize = 64;

/// The packed bytes, read-only once filled.
struct Packed(memmap2::Mmap);

impl WeightBytes for Packed {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
    // `release` keeps the default (nothing): these pages have no file to be read back from.
}

/// Move `weights` into one huge-page region, in the order given (see the module doc). Leaves
/// them as they are if the region cannot be made.
pub fn pack(mut weights: Vec<&mut Weight>) {
    let total: usize = weights
        .iter()
        .map(|w| w.bytes().len().next_multiple_of(ALIGN))
        .sum();
    if total == 0 {
        return;
    }
    let Ok(mut region) = memmap2::MmapMut::map_anon(total) else {
        return;
    };
    // Only a hint: without huge pages the copy is merely no faster than the mapping.
    let _ = region.advise(memmap2::Advice::HugePage);
    let mut spans = Vec::with_capacity(weights.len());
    let mut at = 0;
    for w in &weights {
        let len = w.bytes().len();
        region[at..at + len].copy_from_slice(w.bytes());
        w.release(0..w.numel());
        spans.push(at..at + len);
        at += len.next_multiple_of(ALIGN);
    }
    let Ok(region) = region.make_read_only() else {
        return;
    };
    let backing: Arc<dyn WeightBytes> = Arc::new(Packed(region));
    for (w, span) in weights.iter_mut().zip(spans) {
        // Same dtype, shape and length as the view it replaces, so this cannot fail.
        if let Ok(packed) = Weight::new(w.dtype(), w.shape().to_vec(), Arc::clone(&backing), span) {
            **w = packed;
        }
    }
}
