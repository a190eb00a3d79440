//! The bytes behind a GGUF file, and how they are held: mapped from the file,
//! or read into anonymous memory that the system may back with huge pages.
//!
//! A mapped file sits in 4 KiB pages of the page cache. A decode step streams
//! every CPU-placed weight once, and with 4 KiB pages the hardware prefetcher
//! stops at each page's end and each page costs a TLB entry: on a Zen 4 VM
//! one thread read 26-29 GB/s from 4 KiB pages and 32-34 GB/s from huge ones,
//! and the 1B Q4_K_M decoded 22% faster from a resident copy
//! (`docs/benchmarks.md`).

use std::fs::File;
use std::io::Read;

/// How [`super::GgufFile::open_with`] holds a file's bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Hold {
    /// Mapped from the file: pages come in on first use and the system may
    /// drop them again (models larger than memory), in 4 KiB pages.
    #[default]
    Mapped,
    /// Read whole into anonymous memory, advised for huge pages (where the
    /// system has them): faster to stream, but the whole file stays in memory.
    Resident,
}

/// The bytes behind a GGUF file.
pub enum Backing {
    /// A memory-mapped file.
    Mmap(memmap2::Mmap),
    /// A copy of the file in anonymous memory ([`Hold::Resident`]).
    Resident {
        /// The copy, read-only once filled.
        map: memmap2::Mmap,
        /// Whether the system accepted the advice to use huge pages.
        huge_pages: bool,
    },
    /// Bytes in memory (tests, fuzzing, downloaded buffers).
    Owned(Vec<u8>),
}

impl Backing {
    /// All bytes of the file.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) | Backing::Resident { map: m, .. } => m,
            Backing::Owned(v) => v,
        }
    }

    /// Whether the bytes are advised for huge pages (only a resident copy is).
    pub fn huge_pages(&self) -> bool {
        matches!(
            self,
            Backing::Resident {
                huge_pages: true,
                ..
            }
        )
    }

    /// Maps `file` read-only.
    pub(super) fn map(file: &File) -> std::io::Result<Backing> {
        // SAFETY: the mapping is read-only and private to this process; the
        // usual caveat of mmap (another process truncating the file) is the
        // same one every GGUF reader, llama.cpp included, accepts.
        let map = unsafe { memmap2::Mmap::map(file) }?;
        Ok(Backing::Mmap(map))
    }

    /// Reads `file` whole into anonymous memory advised for huge pages.
    pub(super) fn read_resident(mut file: &File) -> std::io::Result<Backing> {
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| std::io::Error::other("file larger than the address space"))?;
        Self::resident(len, |buf| file.read_exact(buf))
    }

    /// A resident copy of `bytes`, held as [`Hold::Resident`] holds a file
    /// (weights made in memory that should stream like a loaded model's).
    pub fn resident_copy(bytes: &[u8]) -> std::io::Result<Backing> {
        Self::resident(bytes.len(), |buf| {
            buf.copy_from_slice(bytes);
            Ok(())
        })
    }

    /// `len` bytes of anonymous memory filled by `fill`. The advice goes in
    /// before the first write, so the pages are huge from their first fault
    /// rather than collapsed later.
    fn resident(
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> std::io::Result<()>,
    ) -> std::io::Result<Backing> {
        if len == 0 {
            return Ok(Backing::Owned(Vec::new()));
        }
        let mut map = memmap2::MmapMut::map_anon(len)?;
        let huge_pages = advise_huge_pages(&map);
        fill(&mut map)?;
        Ok(Backing::Resident {
            map: map.make_read_only()?,
            huge_pages,
        })
    }
}

/// Advises `map` for huge pages; false where the system refuses or has none.
fn advise_huge_pages(map: &memmap2::MmapMut) -> bool {
    #[cfg(target_os = "linux")]
    {
        map.advise(memmap2::Advice::HugePage).is_ok() && thp_enabled()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = map;
        false
    }
}

/// Whether transparent huge pages are on for advised memory (`always` or
/// `madvise`; with `never` the advice is accepted and does nothing).
#[cfg(target_os = "linux")]
fn thp_enabled() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|s| !s.contains("[never]"))
}
