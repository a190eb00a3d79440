//! Finding the CUDA libraries at run time, before cudarc touches them.
//!
//! cudarc loads each library on first use and panics when it is missing, so
//! every entry point of this crate probes first and turns a missing library
//! into a [`CudaError`]. The driver (`libcuda.so.1`) comes with the NVIDIA
//! driver; NVRTC and cuBLAS come with a CUDA toolkit or from PyPI
//! (`nvidia-cuda-nvrtc-cu12`, `nvidia-cublas-cu12`). Besides the loader's own
//! search path (`LD_LIBRARY_PATH`, the system cache) they are looked for in
//! `$CUDA_HOME`/`$CUDA_PATH`, `/usr/local/cuda` and the `nvidia/*/lib`
//! folders of Python site-packages, and preloaded by full path: a later
//! `dlopen` by soname (what cudarc does) then finds the loaded copy.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::CudaError;

/// A CUDA library this crate loads at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lib {
    /// The driver API (`libcuda.so.1`).
    Driver,
    /// The run-time compiler (`libnvrtc.so.12`).
    Nvrtc,
    /// cuBLAS (`libcublas.so.12`, which loads `libcublasLt.so.12` beside it).
    Cublas,
}

impl Lib {
    /// The file name looked for.
    pub fn file_name(self) -> &'static str {
        match self {
            Lib::Driver => "libcuda.so.1",
            Lib::Nvrtc => "libnvrtc.so.12",
            Lib::Cublas => "libcublas.so.12",
        }
    }

    /// The PyPI package that ships it, for error messages.
    pub fn package(self) -> &'static str {
        match self {
            Lib::Driver => "the NVIDIA driver",
            Lib::Nvrtc => "nvidia-cuda-nvrtc-cu12",
            Lib::Cublas => "nvidia-cublas-cu12",
        }
    }

    /// Whether cudarc can load the library now (its own name search).
    fn cudarc_present(self) -> bool {
        // SAFETY: these probes only dlopen candidate names and drop the
        // handles; loading a library runs its initialisers, which have no
        // preconditions.
        unsafe {
            match self {
                Lib::Driver => cudarc::driver::sys::is_culib_present(),
                Lib::Nvrtc => cudarc::nvrtc::sys::is_culib_present(),
                Lib::Cublas => cudarc::cublas::sys::is_culib_present(),
            }
        }
    }
}

/// Whether the CUDA driver library can be loaded.
pub fn driver_present() -> bool {
    ensure(Lib::Driver).is_ok()
}

/// Libraries already preloaded by path (kept loaded for the process).
fn preloaded() -> &'static Mutex<Vec<(Lib, PathBuf)>> {
    static P: OnceLock<Mutex<Vec<(Lib, PathBuf)>>> = OnceLock::new();
    P.get_or_init(|| Mutex::new(Vec::new()))
}

/// Makes `lib` loadable by cudarc, preloading it by path when the loader's
/// own search does not find it. Returns where it was found (`None`: by name).
pub fn ensure(lib: Lib) -> Result<Option<PathBuf>, CudaError> {
    let mut pre = preloaded().lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, p)) = pre.iter().find(|(l, _)| *l == lib) {
        return Ok(Some(p.clone()));
    }
    if lib.cudarc_present() {
        return Ok(None);
    }
    let dirs = search_dirs();
    for d in &dirs {
        let p = d.join(lib.file_name());
        if !p.is_file() {
            continue;
        }
        // SAFETY: as above; the handle is leaked on purpose so the library
        // stays loaded for cudarc's later lookups by soname.
        if let Ok(l) = unsafe { libloading::Library::new(&p) } {
            std::mem::forget(l);
            if lib.cudarc_present() {
                pre.push((lib, p.clone()));
                return Ok(Some(p));
            }
        }
    }
    Err(CudaError::MissingLibrary {
        lib: lib.file_name(),
        package: lib.package(),
        searched: dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// Folders searched after the loader's own path, in order.
pub fn search_dirs() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Some(v) = std::env::var_os(var) {
            let p = PathBuf::from(v);
            out.push(p.join("lib64"));
            out.push(p.join("lib"));
        }
    }
    out.push(PathBuf::from("/usr/local/cuda/lib64"));
    for sp in site_packages() {
        for pkg in ["cuda_nvrtc", "cublas", "cuda_runtime"] {
            out.push(sp.join("nvidia").join(pkg).join("lib"));
        }
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|p| p.is_dir() && seen.insert(p.clone()));
    out
}

/// Python site-packages folders of the usual installs (system, user,
/// virtualenv, conda, pyenv).
fn site_packages() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = vec!["/usr/lib".into(), "/usr/local/lib".into()];
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(v) = std::env::var_os(var) {
            roots.push(PathBuf::from(v).join("lib"));
        }
    }
    if let Some(home) = std::env::var_os("HOME") {
        let home = PathBuf::from(home);
        roots.push(home.join(".local/lib"));
        for v in read_dir_sorted(&home.join(".pyenv/versions")) {
            roots.push(v.join("lib"));
        }
    }
    let mut out = Vec::new();
    for r in roots {
        for py in read_dir_sorted(&r) {
            let name = py.file_name().map(|n| n.to_string_lossy().into_owned());
            if name.is_some_and(|n| n.starts_with("python3")) {
                out.push(py.join("site-packages"));
                out.push(py.join("dist-packages"));
            }
        }
    }
    out.retain(|p| p.is_dir());
    out
}

fn read_dir_sorted(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_dirs_exist_and_are_unique() {
        let d = search_dirs();
        for p in &d {
            assert!(p.is_dir(), "{}", p.display());
        }
        let mut s = d.clone();
        s.sort();
        s.dedup();
        assert_eq!(s.len(), d.len());
    }

    #[test]
    fn a_missing_driver_is_an_error_not_a_panic() {
        // On a machine without the driver this is the error path; with one,
        // the probe succeeds. Either way it returns.
        match ensure(Lib::Driver) {
            Ok(_) => assert!(driver_present()),
            Err(e) => {
                assert!(!driver_present());
                assert!(e.to_string().contains("libcuda.so.1"), "{e}");
            }
        }
    }
}
