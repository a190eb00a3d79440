//! CPU buffers: 4-byte-aligned host memory behind a lock, so a buffer handle
//! can be shared with worker threads while each access stays safe.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use ats_core::device::{Buffer, BufferStorage};

/// Host memory of a CPU [`Buffer`], stored as f32 words (f16 KV caches view it as u16).
#[derive(Debug)]
pub struct CpuStorage {
    data: RwLock<Vec<f32>>,
}

impl CpuStorage {
    /// Zeroed storage for `bytes` bytes (rounded up to whole words), or
    /// `None` when the allocator refuses: a KV cache sized from a user's
    /// context length must fail as an error, not abort the process.
    pub fn try_zeroed(bytes: usize) -> Option<Self> {
        Some(CpuStorage {
            data: RwLock::new(zeroed_words(bytes.div_ceil(4))?),
        })
    }

    /// Shared access to the words.
    pub fn read(&self) -> RwLockReadGuard<'_, Vec<f32>> {
        // a kernel that panicked cannot leave a buffer half-freed: its data is
        // plain numbers, so a poisoned lock still holds usable memory
        self.data.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Exclusive access to the words.
    pub fn write(&self) -> RwLockWriteGuard<'_, Vec<f32>> {
        self.data.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// `n` zero words from the allocator's zeroed path (pages stay untouched until
/// written, as with `vec![0.0; n]`), or `None` where it has no memory.
fn zeroed_words(n: usize) -> Option<Vec<f32>> {
    if n == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<f32>(n).ok()?;
    // SAFETY: `layout` has a non-zero size (n > 0). A non-null result is a
    // fresh allocation of the global allocator with exactly this layout, all
    // bytes zero, which is a valid `[f32; n]` (0.0); `Vec::from_raw_parts`
    // takes ownership with length and capacity `n`, matching that layout.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout).cast::<f32>();
        if p.is_null() {
            return None;
        }
        Some(Vec::from_raw_parts(p, n, n))
    }
}

impl BufferStorage for CpuStorage {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The CPU storage of a buffer, if it is one.
pub fn cpu_storage(b: &Buffer) -> Option<&CpuStorage> {
    b.storage::<CpuStorage>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_storage_is_zero_and_rounds_up_to_words() {
        for bytes in [0usize, 1, 4, 7, 1 << 20] {
            let s = CpuStorage::try_zeroed(bytes).unwrap();
            let w = s.read();
            assert_eq!(w.len(), bytes.div_ceil(4));
            assert!(w.iter().all(|&x| x.to_bits() == 0));
        }
        // the words are an ordinary Vec: writing and growing go through it
        let s = CpuStorage::try_zeroed(8).unwrap();
        s.write().push(1.5);
        assert_eq!(&s.read()[..], &[0.0, 0.0, 1.5]);
    }

    #[test]
    fn impossible_storage_is_refused_not_aborted() {
        // larger than any address space: the layout itself cannot be formed
        assert!(CpuStorage::try_zeroed(usize::MAX).is_none());
        // formable but far beyond memory: the allocator refuses
        assert!(CpuStorage::try_zeroed(1 << 60).is_none());
    }
}
