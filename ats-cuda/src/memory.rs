//! Device memory, pinned and mapped host memory, and host registrations.
//!
//! Device buffers are plain `cuMemAlloc` allocations (no stream-ordered pool:
//! the ledger and `cuMemGetInfo` must agree on what is held). Freeing waits
//! for the context first, so a buffer whose last handle is dropped while a
//! kernel still reads it is never freed under that kernel.

use std::sync::Arc;

use ats_core::device::{Buffer, BufferStorage, HostMemory};
use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaContext, result, sys};

use crate::CudaError;

/// Turns a driver result into a [`CudaError`] naming the call.
pub(crate) fn drv<T>(call: &str, r: Result<T, result::DriverError>) -> Result<T, CudaError> {
    r.map_err(|e| CudaError::Driver {
        call: call.to_string(),
        message: e.to_string(),
    })
}

/// A device allocation, freed on drop.
#[derive(Debug)]
pub struct DeviceMem {
    ptr: CUdeviceptr,
    len: usize,
    ctx: Arc<CudaContext>,
}

impl DeviceMem {
    /// Allocates `len` bytes (none for 0).
    pub fn alloc(ctx: &Arc<CudaContext>, len: usize) -> Result<DeviceMem, CudaError> {
        drv("binding the context", ctx.bind_to_thread())?;
        let ptr = if len == 0 {
            0
        } else {
            // SAFETY: the context is current; the memory is uninitialised,
            // which callers handle (the device zeroes what it hands out).
            drv(&format!("cuMemAlloc of {len} bytes"), unsafe {
                result::malloc_sync(len)
            })?
        };
        Ok(DeviceMem {
            ptr,
            len,
            ctx: ctx.clone(),
        })
    }

    /// The device address.
    pub fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for DeviceMem {
    fn drop(&mut self) {
        if self.ptr == 0 {
            return;
        }
        self.ctx.record_err(self.ctx.bind_to_thread());
        // queued kernels may still use the memory: let them finish first
        self.ctx.record_err(self.ctx.synchronize());
        // SAFETY: `ptr` came from cuMemAlloc in this context and is freed once.
        self.ctx.record_err(unsafe { result::free_sync(self.ptr) });
    }
}

/// The storage behind a CUDA [`Buffer`].
#[derive(Debug)]
pub struct CudaStorage {
    /// The allocation.
    pub mem: DeviceMem,
}

impl BufferStorage for CudaStorage {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The device address of a buffer's storage, if it is CUDA memory.
pub fn device_ptr(b: &Buffer) -> Option<CUdeviceptr> {
    b.storage::<CudaStorage>().map(|s| s.mem.ptr())
}

/// Pinned host memory mapped into the device's address space: the host
/// writes it, kernels read it over PCIe (and the other way round).
#[derive(Debug)]
pub struct MappedHost {
    host: *mut u8,
    dev: CUdeviceptr,
    len: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: the pointer is owned memory that lives until drop; access is
// serialised by the device's state lock.
unsafe impl Send for MappedHost {}
// SAFETY: as above; shared references only read the addresses.
unsafe impl Sync for MappedHost {}

impl MappedHost {
    /// Allocates `len` bytes of pinned, device-mapped host memory.
    pub fn alloc(ctx: &Arc<CudaContext>, len: usize) -> Result<MappedHost, CudaError> {
        drv("binding the context", ctx.bind_to_thread())?;
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: the context is current; the memory is uninitialised bytes,
        // which any u8 pattern is.
        let host = drv(&format!("cuMemHostAlloc of {len} bytes"), unsafe {
            result::malloc_host(len, flags)
        })? as *mut u8;
        let mut dev: CUdeviceptr = 0;
        // SAFETY: `host` was just allocated with DEVICEMAP in this context.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, host as *mut _, 0) }.result();
        if let Err(e) = r {
            // SAFETY: allocated above, freed once on this error path.
            let _ = unsafe { result::free_host(host as *mut _) };
            return Err(CudaError::Driver {
                call: "cuMemHostGetDevicePointer".into(),
                message: e.to_string(),
            });
        }
        Ok(MappedHost {
            host,
            dev,
            len,
            ctx: ctx.clone(),
        })
    }

    /// The device address of byte `offset`.
    pub fn dev_ptr(&self, offset: usize) -> CUdeviceptr {
        self.dev + offset as u64
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `src` in at `offset`.
    ///
    /// The caller must make sure no kernel still reads that range.
    pub fn write(&mut self, offset: usize, src: &[u8]) {
        assert!(offset + src.len() <= self.len, "staging write out of range");
        // SAFETY: the range lies inside the allocation (checked above) and
        // `&mut self` excludes other host access.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.host.add(offset), src.len()) }
    }

    /// Copies out of `offset` into `dst`.
    ///
    /// The caller must have waited for the kernel that wrote the range.
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        assert!(offset + dst.len() <= self.len, "staging read out of range");
        // SAFETY: the range lies inside the allocation (checked above).
        unsafe { std::ptr::copy_nonoverlapping(self.host.add(offset), dst.as_mut_ptr(), dst.len()) }
    }
}

impl Drop for MappedHost {
    fn drop(&mut self) {
        self.ctx.record_err(self.ctx.bind_to_thread());
        self.ctx.record_err(self.ctx.synchronize());
        // SAFETY: allocated by cuMemHostAlloc, freed once.
        self.ctx
            .record_err(unsafe { result::free_host(self.host as *mut _) });
    }
}

/// Host memory page-locked with `cuMemHostRegister` (read-only, mapped), kept
/// alive by this registration until it is unregistered.
pub struct Registered {
    owner: Arc<dyn HostMemory>,
    dev: CUdeviceptr,
    ctx: Arc<CudaContext>,
}

impl std::fmt::Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Registered({} bytes)", self.owner.bytes().len())
    }
}

impl Registered {
    /// Registers `mem` read-only and mapped.
    pub fn new(ctx: &Arc<CudaContext>, mem: &Arc<dyn HostMemory>) -> Result<Registered, CudaError> {
        drv("binding the context", ctx.bind_to_thread())?;
        let b = mem.bytes();
        let flags = sys::CU_MEMHOSTREGISTER_READ_ONLY
            | sys::CU_MEMHOSTREGISTER_DEVICEMAP
            | sys::CU_MEMHOSTREGISTER_PORTABLE;
        // SAFETY: the range is the owner's live memory, which this
        // registration keeps alive (`owner`) until it is unregistered; the
        // read-only flag matches how the memory is used (the mapping may be
        // read-only).
        unsafe { sys::cuMemHostRegister_v2(b.as_ptr() as *mut _, b.len(), flags) }
            .result()
            .map_err(|e| CudaError::Driver {
                call: format!("cuMemHostRegister of {} bytes", b.len()),
                message: e.to_string(),
            })?;
        let mut dev: CUdeviceptr = 0;
        // SAFETY: the range was registered with DEVICEMAP just above.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, b.as_ptr() as *mut _, 0) };
        if let Err(e) = r.result() {
            // SAFETY: registered above; unregistered once on this error path.
            let _ = unsafe { sys::cuMemHostUnregister(b.as_ptr() as *mut _) };
            return Err(CudaError::Driver {
                call: "cuMemHostGetDevicePointer of a registration".into(),
                message: e.to_string(),
            });
        }
        Ok(Registered {
            owner: mem.clone(),
            dev,
            ctx: ctx.clone(),
        })
    }

    /// Whether this registration covers `mem`.
    pub fn is(&self, mem: &Arc<dyn HostMemory>) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.owner), Arc::as_ptr(mem))
    }

    /// Whether nothing but this registration keeps the memory alive.
    pub fn orphaned(&self) -> bool {
        Arc::strong_count(&self.owner) == 1
    }

    /// The device address of the memory's byte `offset` (mapped access).
    pub fn dev_ptr(&self, offset: usize) -> CUdeviceptr {
        self.dev + offset as u64
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.ctx.record_err(self.ctx.bind_to_thread());
        // copies from the memory may still be in flight
        self.ctx.record_err(self.ctx.synchronize());
        let b = self.owner.bytes();
        // SAFETY: registered in `new`, unregistered once, while `owner` still
        // keeps the memory alive.
        let _ = unsafe { sys::cuMemHostUnregister(b.as_ptr() as *mut _) };
    }
}
