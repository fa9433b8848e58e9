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
use std::os::unix::fs::FileExt;

/// Pages are released in whole units of this.
const PAGE: usize = 4096;

/// A read-only, private mapping of a whole file, and the file, for reads that should not map.
pub struct MappedFile {
    map: memmap2::Mmap,
    /// The same open file (a duplicated descriptor), for [`MappedFile::copy_to`].
    file: File,
}

impl MappedFile {
    /// Map `file` read-only. An empty file cannot be mapped on every system, so it is an error
    /// here too; callers that accept empty files check the length first.
    pub fn map(file: &File) -> io::Result<MappedFile> {
        // SAFETY: the mapping is read-only and private to this process. It would break Rust's
        // aliasing rules only if the file were written while mapped; see the module doc for why
        // that cannot reach a result the runner signs.
        let map = unsafe { memmap2::Mmap::map(file) }?;
        Ok(MappedFile {
            map,
            file: file.try_clone()?,
        })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Bytes `at..at + out.len()` copied into `out` through the page cache, without mapping
    /// them into this process. Reading a few scattered rows through the mapping would map far
    /// more: a fault maps the whole page-cache folio around it, up to 2 MiB on filesystems with
    /// large folios (ext4 from Linux 6.16), so a few hundred rows could map most of a table.
    /// The bytes are those of [`MappedFile::bytes`] either way: should the read fail, they are
    /// copied from the mapping.
    ///
    /// Panics if the range is outside the file.
    pub fn copy_to(&self, at: usize, out: &mut [u8]) {
        let end = at.checked_add(out.len()).filter(|&e| e <= self.map.len());
        assert!(end.is_some(), "copy_to past the end of a mapped file");
        if self.file.read_exact_at(out, at as u64).is_err() {
            out.copy_from_slice(&self.map[at..at + out.len()]);
        }
    }

    /// Hand the whole pages inside `range` back to the system: they stay mapped, and a later
    /// read faults the same file bytes back in. A neighbour's partial page is kept.
    pub fn release(&self, range: Range<usize>) {
        let start = range.start.div_ceil(PAGE) * PAGE;
        let end = (range.end.min(self.map.len()) / PAGE) * PAGE;
        if start < end {
            // SAFETY: the mapping is private, read-only and file-backed, so dropping pages only
            // unmaps them from this process: no byte anyone reads changes. A failure is harmless
            // (the pages stay resident) and ignored.
            let _ = unsafe {
                self.map.unchecked_advise_range(
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
        write!(f, "MappedFile({} bytes)", self.map.len())
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
        let mut copied = vec![0u8; 2 * PAGE + 5];
        map.copy_to(PAGE - 3, &mut copied);
        assert_eq!(
            copied,
            bytes[PAGE - 3..3 * PAGE + 2],
            "copy_to reads the file's bytes"
        );
        assert_eq!(
            map.bytes(),
            &bytes[..],
            "released pages read back the same bytes"
        );
    }
}
