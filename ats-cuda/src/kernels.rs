//! The kernel sources (one file per op family under `src/kernels/`), their
//! compilation with NVRTC to a cubin for the device's architecture, and the
//! per-device cache of loaded modules and functions.
//!
//! Each module is compiled at its first use on a device, then kept; the
//! cubin is also saved in a cache folder (`<cache dir>/ats/kernels`, keyed by
//! a hash of the source and options), so later runs, and machines given a
//! filled cache, need no NVRTC. Compiling to a cubin for the exact `sm_XY`
//! (not PTX) means the driver never JIT-compiles: a newer NVRTC than the
//! driver is fine within one CUDA major version.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::{Ptx, sys as nvrtc};

use crate::CudaError;
use crate::driver::{Lib, ensure};

const COMMON: &str = include_str!("kernels/common.cuh");
const QUANT: &str = include_str!("kernels/quant.cuh");

/// A kernel source file: one op family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Module {
    /// SM-driven copies over mapped host memory, f32 -> f16, KV appends.
    Copy,
    /// Add, mul, SwiGLU, GELU, bias, row gathers.
    Elementwise,
    /// Token embedding lookup for every table type.
    Embed,
    /// RMSNorm and LayerNorm.
    Norm,
    /// Rotary embeddings (normal, NeoX, M-RoPE, 2D vision).
    Rope,
    /// Flash attention and the merge of key splits.
    Attention,
    /// Quantised matrix-vector products (decode).
    Matvec,
    /// Tiled matrix products (prefill, routed experts) and tile dequantisation.
    Matmul,
    /// MoE top-k routing, expert grouping and the weighted combine.
    Moe,
}

impl Module {
    /// Every module.
    pub const ALL: [Module; 9] = [
        Module::Copy,
        Module::Elementwise,
        Module::Embed,
        Module::Norm,
        Module::Rope,
        Module::Attention,
        Module::Matvec,
        Module::Matmul,
        Module::Moe,
    ];

    /// The source file's name.
    pub fn file_name(self) -> &'static str {
        match self {
            Module::Copy => "copy.cu",
            Module::Elementwise => "elementwise.cu",
            Module::Embed => "embed.cu",
            Module::Norm => "norm.cu",
            Module::Rope => "rope.cu",
            Module::Attention => "attention.cu",
            Module::Matvec => "matvec.cu",
            Module::Matmul => "matmul.cu",
            Module::Moe => "moe.cu",
        }
    }

    fn body(self) -> &'static str {
        match self {
            Module::Copy => include_str!("kernels/copy.cu"),
            Module::Elementwise => include_str!("kernels/elementwise.cu"),
            Module::Embed => include_str!("kernels/embed.cu"),
            Module::Norm => include_str!("kernels/norm.cu"),
            Module::Rope => include_str!("kernels/rope.cu"),
            Module::Attention => include_str!("kernels/attention.cu"),
            Module::Matvec => include_str!("kernels/matvec.cu"),
            Module::Matmul => include_str!("kernels/matmul.cu"),
            Module::Moe => include_str!("kernels/moe.cu"),
        }
    }

    fn reads_quant_blocks(self) -> bool {
        matches!(self, Module::Embed | Module::Matvec | Module::Matmul)
    }

    /// The full program text NVRTC compiles: the shared header, the
    /// dequantisation header where needed, then the file.
    pub fn source(self) -> String {
        let mut s = String::with_capacity(COMMON.len() + QUANT.len() + self.body().len() + 64);
        s.push_str(COMMON);
        if self.reads_quant_blocks() {
            s.push_str(QUANT);
        }
        s.push_str(self.body());
        s
    }
}

/// NVRTC options of every compilation (besides the architecture).
const OPTIONS: [&str; 1] = ["--std=c++17"];

/// `<cache dir>/ats/kernels` ([`ats_core::files::cache_dir`]).
pub fn default_cache_dir() -> Option<PathBuf> {
    Some(ats_core::files::cache_dir()?.join("kernels"))
}

/// The cache file of `module`'s cubin for `arch` in `dir`: the name holds a
/// hash (FNV-1a) of the program text and options, so an edited kernel never
/// loads a stale cubin.
pub fn cache_file(dir: &Path, module: Module, arch: (i32, i32)) -> PathBuf {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in module.source().bytes().chain(OPTIONS.concat().bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let stem = module.file_name().trim_end_matches(".cu");
    dir.join(format!("{stem}-{h:016x}-sm_{}{}.cubin", arch.0, arch.1))
}

/// Writes a cubin into the cache (best effort: a cache that cannot be
/// written only costs a compilation next time).
pub fn save_cubin(dir: &Path, module: Module, arch: (i32, i32), cubin: &[u8]) {
    let path = cache_file(dir, module, arch);
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::create_dir_all(dir).is_ok() && std::fs::write(&tmp, cubin).is_ok() {
        let _ = std::fs::rename(&tmp, &path);
    }
}

/// Whether the cache holds every module for `arch`.
pub fn cache_complete(dir: &Path, arch: (i32, i32)) -> bool {
    Module::ALL
        .iter()
        .all(|&m| cache_file(dir, m, arch).is_file())
}

/// NVRTC's version `(major, minor)`.
pub fn nvrtc_version() -> Result<(i32, i32), CudaError> {
    ensure(Lib::Nvrtc)?;
    let (mut a, mut b) = (0, 0);
    // SAFETY: the library is loaded (checked above); both pointers are valid
    // for writes of one int.
    unsafe { nvrtc::nvrtcVersion(&mut a, &mut b) }
        .result()
        .map_err(|e| CudaError::Nvrtc(format!("nvrtcVersion: {e:?}")))?;
    Ok((a, b))
}

/// Compiles `module` for `sm_{major}{minor}` and returns the cubin.
pub fn compile_cubin(module: Module, arch: (i32, i32)) -> Result<Vec<u8>, CudaError> {
    compile_source(module.file_name(), &module.source(), arch)
}

/// Compiles a program text named `file` for `sm_{major}{minor}`.
pub fn compile_source(
    file: &'static str,
    source: &str,
    arch: (i32, i32),
) -> Result<Vec<u8>, CudaError> {
    ensure(Lib::Nvrtc)?;
    let fail = |what: &str, log: String| CudaError::Compile {
        file,
        arch: format!("sm_{}{}", arch.0, arch.1),
        message: format!("{what}{}{log}", if log.is_empty() { "" } else { ":\n" }),
    };
    let src = CString::new(source).map_err(|_| fail("a NUL byte in the source", String::new()))?;
    let name = CString::new(file).map_err(|_| fail("bad name", String::new()))?;
    let opts: Vec<CString> = std::iter::once(format!("--gpu-architecture=sm_{}{}", arch.0, arch.1))
        .chain(OPTIONS.iter().map(|o| o.to_string()))
        .map(|o| CString::new(o).expect("options hold no NUL"))
        .collect();
    let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    let mut prog: nvrtc::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: NVRTC is loaded; `src` and `name` are NUL-terminated and outlive
    // the program; no headers are passed (count 0, null arrays).
    unsafe {
        nvrtc::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    }
    .result()
    .map_err(|e| fail(&format!("nvrtcCreateProgram: {e:?}"), String::new()))?;
    let prog = Program(prog);
    // SAFETY: `prog` is a live program; the option pointers are valid C
    // strings for the duration of the call.
    let compiled =
        unsafe { nvrtc::nvrtcCompileProgram(prog.0, opt_ptrs.len() as i32, opt_ptrs.as_ptr()) };
    if compiled.result().is_err() {
        return Err(fail(&format!("{compiled:?}"), prog.log()));
    }
    let mut size = 0usize;
    // SAFETY: live, compiled program; `size` is valid for writes.
    unsafe { nvrtc::nvrtcGetCUBINSize(prog.0, &mut size) }
        .result()
        .map_err(|e| fail(&format!("nvrtcGetCUBINSize: {e:?}"), String::new()))?;
    let mut cubin = vec![0u8; size];
    // SAFETY: `cubin` holds exactly the size NVRTC reported.
    unsafe { nvrtc::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr() as *mut c_char) }
        .result()
        .map_err(|e| fail(&format!("nvrtcGetCUBIN: {e:?}"), String::new()))?;
    Ok(cubin)
}

/// An NVRTC program, destroyed on drop.
struct Program(nvrtc::nvrtcProgram);

impl Program {
    fn log(&self) -> String {
        let mut size = 0usize;
        // SAFETY: live program; `size` is valid for writes.
        if unsafe { nvrtc::nvrtcGetProgramLogSize(self.0, &mut size) }
            .result()
            .is_err()
            || size == 0
        {
            return String::new();
        }
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` holds the reported size, which includes the NUL.
        if unsafe { nvrtc::nvrtcGetProgramLog(self.0, buf.as_mut_ptr() as *mut c_char) }
            .result()
            .is_err()
        {
            return String::new();
        }
        CStr::from_bytes_until_nul(&buf)
            .map(|c| c.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by nvrtcCreateProgram and is
        // destroyed once, here.
        let _ = unsafe { nvrtc::nvrtcDestroyProgram(&mut self.0) };
    }
}

/// The modules and functions loaded on one device, compiled at first use.
pub struct KernelCache {
    ctx: Arc<CudaContext>,
    arch: (i32, i32),
    dir: Option<PathBuf>,
    modules: Mutex<HashMap<Module, Arc<CudaModule>>>,
    functions: Mutex<HashMap<String, CudaFunction>>,
}

impl std::fmt::Debug for KernelCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KernelCache(sm_{}{})", self.arch.0, self.arch.1)
    }
}

impl KernelCache {
    /// An empty cache for the device of `ctx`, compiling for `arch`, with
    /// cubins kept in `dir`.
    pub fn new(ctx: Arc<CudaContext>, arch: (i32, i32), dir: Option<PathBuf>) -> KernelCache {
        KernelCache {
            ctx,
            arch,
            dir,
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
        }
    }

    /// The kernel `name` of `module`, compiling and loading the module first
    /// if this device has not used it yet.
    pub fn function(&self, module: Module, name: &str) -> Result<CudaFunction, CudaError> {
        let mut fns = self.functions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = fns.get(name) {
            return Ok(f.clone());
        }
        let m = self.module(module)?;
        let f = m.load_function(name).map_err(|e| CudaError::Driver {
            call: format!("loading kernel {name} of {}", module.file_name()),
            message: e.to_string(),
        })?;
        fns.insert(name.to_string(), f.clone());
        Ok(f)
    }

    /// Compiles and loads every module now (the first round then pays no
    /// compilation).
    pub fn load_all(&self) -> Result<(), CudaError> {
        for m in Module::ALL {
            self.module(m)?;
        }
        Ok(())
    }

    fn module(&self, module: Module) -> Result<Arc<CudaModule>, CudaError> {
        let mut mods = self.modules.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = mods.get(&module) {
            return Ok(m.clone());
        }
        let cached = self
            .dir
            .as_ref()
            .and_then(|d| std::fs::read(cache_file(d, module, self.arch)).ok())
            .filter(|c| c.starts_with(b"\x7fELF"));
        let cubin = match cached {
            Some(c) => c,
            None => {
                let c = compile_cubin(module, self.arch)?;
                if let Some(d) = &self.dir {
                    save_cubin(d, module, self.arch, &c);
                }
                c
            }
        };
        let m = self
            .ctx
            .load_module(Ptx::from_binary(cubin))
            .map_err(|e| CudaError::Driver {
                call: format!("loading module {}", module.file_name()),
                message: e.to_string(),
            })?;
        mods.insert(module, m.clone());
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_kernel_is_a_compile_error_with_the_log() {
        if nvrtc_version().is_err() {
            eprintln!("skipping: no NVRTC");
            return;
        }
        let src = format!(
            "{COMMON}extern \"C\" __global__ void k(float* x) {{ x[0] = undefined_name; }}"
        );
        let e = compile_source("broken.cu", &src, (8, 6))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("broken.cu") && e.contains("undefined_name"),
            "{e}"
        );
        let ok = format!(
            "{COMMON}extern \"C\" __global__ void k(float* x) {{ x[0] = h2f(f2h(1.5f)); }}"
        );
        assert!(
            compile_source("ok.cu", &ok, (8, 6))
                .unwrap()
                .starts_with(b"\x7fELF")
        );
    }

    #[test]
    fn cache_files_are_keyed_by_source_and_arch() {
        let d = Path::new("/tmp/x");
        let a = cache_file(d, Module::Norm, (9, 0));
        assert_ne!(a, cache_file(d, Module::Norm, (8, 9)));
        assert_ne!(a, cache_file(d, Module::Rope, (9, 0)));
        assert_eq!(a, cache_file(d, Module::Norm, (9, 0)));
        let name = a.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("norm-") && name.ends_with("-sm_90.cubin"),
            "{name}"
        );
    }

    #[test]
    fn every_module_has_a_source_with_kernels() {
        for m in Module::ALL {
            let s = m.source();
            assert!(s.starts_with(COMMON), "{}", m.file_name());
            assert!(s.contains("__global__"), "{}", m.file_name());
            assert_eq!(
                s.contains("deq32"),
                m.reads_quant_blocks(),
                "{}",
                m.file_name()
            );
        }
    }
}
