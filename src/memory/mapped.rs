//! Read-only file mappings, behind one small safe type.
//!
//! Mapping a file is `unsafe` in Rust because another process could write the file while it is
//! mapped, and then bytes the program holds as `&[u8]` would change underneath it. The runner
//! maps only checkpoint files inside the operator's enclave, and `exec` proves they did not
//! change: the model digest is computed through the very handle that is mapped, and before a
//! receipt is signed each file's inode stamp is compared again (`model::files::Seal`), so a
//! change fails the job instead of reaching a signed result.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::ops::Range;

/// Pages are released in whole units of this.
const PAGE: usize = 4096;

/// A read-only, private mapping of a whole file.
pub struct MappedFile(memmap2::Mmap);

impl MappedFile {
    /// Map `file` read-only. An empty file cannot be mapped on every system, so it is an error
    /// here too; callers that accept empty files check the length first.
    pub fn map(file: &File) -> io::Result<MappedFile> {
        // SAFETY: the mapping is read-only and private to this process. It would break Rust's
        // aliasing rules only if the file were written while mapped; see the module doc for why
        // that cannot reach a result the runner signs.
        let map = unsafe { memmap2::Mmap::map(file) }?;
        Ok(MappedFile(map))
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// Hand the whole pages inside `range` back to the system: they stay mapped, and a later
    /// read faults the same file bytes back in. A neighbour's partial page is kept.
    pub fn release(&self, range: Range<usize>) {
        let start = range.start.div_ceil(PAGE) * PAGE;
        let end = (range.end.min(self.0.len()) / PAGE) * PAGE;
        if start < end {
            // SAFETY: the mapping is private, read-only and file-backed, so dropping pages only
            // unmaps them from this process: no byte anyone reads changes. A failure is harmless
            // (the pages stay resident) and ignored.
            let _ = unsafe {
                self.0.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    start,
                    end - start,
                )
            };
        }
    }
}

impl std::fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MappedFile({} bytes)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn maps_the_file_bytes_and_survives_a_release() {
        let mut f = tempfile::tempfile().unwrap();
        let bytes: Vec<u8> = (0..3 * PAGE + 100).map(|i| (i % 251) as u8).collect();
        f.write_all(&bytes).unwrap();
        let map = MappedFile::map(&f).unwrap();
        assert_eq!(map.bytes(), &bytes[..]);
        map.release(10..2 * PAGE + 7);
        map.release(0..usize::MAX);
        assert_eq!(
            map.bytes(),
            &bytes[..],
            "released pages read back the same bytes"
        );
    }
}
