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
    /// Zeroed storage for `bytes` bytes (rounded up to whole words).
    pub fn zeroed(bytes: usize) -> Self {
        CpuStorage {
            data: RwLock::new(vec![0.0; bytes.div_ceil(4)]),
        }
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

impl BufferStorage for CpuStorage {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The CPU storage of a buffer, if it is one.
pub fn cpu_storage(b: &Buffer) -> Option<&CpuStorage> {
    b.storage::<CpuStorage>()
}
