//! Reading the small files a user names (a prompt, an image, a profile):
//! only regular files, and none larger than the limit stated for its kind,
//! so that `/dev/zero`, a FIFO or an enormous file cannot grow memory
//! without bound; and where ATS keeps what it caches on this machine.

use std::io::Read;
use std::path::{Path, PathBuf};

/// Why a file could not be read within its limit.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Opening or reading failed.
    #[error("cannot read {}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why (in the message, so not also a source: printed once).
        error: std::io::Error,
    },
    /// A device, FIFO, socket or directory.
    #[error("{} is not a regular file", path.display())]
    NotRegular {
        /// The path.
        path: PathBuf,
    },
    /// Over the limit (by its size, or by what reading it gave).
    #[error("{} is larger than the {limit}-byte limit for {what}", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit, bytes.
        limit: u64,
        /// What kind of file it was read as.
        what: &'static str,
    },
}

/// The bytes of the regular file `path`, at most `limit` of them; `what`
/// names the kind of file in the error (`"prompt files"`).
pub fn read_bounded(path: &Path, limit: u64, what: &'static str) -> Result<Vec<u8>, FileError> {
    let io = |error| FileError::Io {
        path: path.to_path_buf(),
        error,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(FileError::NotRegular {
            path: path.to_path_buf(),
        });
    }
    let too_large = || FileError::TooLarge {
        path: path.to_path_buf(),
        limit,
        what,
    };
    if meta.len() > limit {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // a file that grows while it is read stops at the limit too
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(bytes)
}

/// `<the user's cache directory>/ats` (on Linux `$XDG_CACHE_HOME/ats`,
/// else `~/.cache/ats`), where machine profiles and compiled kernels are
/// kept; `None` when the system names no cache directory.
pub fn cache_dir() -> Option<std::path::PathBuf> {
    dirs::cache_dir().map(|d| d.join("ats"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_and_large_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("small.txt");
        std::fs::write(&small, b"hello").unwrap();
        assert_eq!(read_bounded(&small, 5, "prompt files").unwrap(), b"hello");
        let e = read_bounded(&small, 4, "prompt files").unwrap_err();
        assert!(matches!(e, FileError::TooLarge { limit: 4, .. }), "{e}");
        assert!(
            e.to_string().contains("4-byte limit for prompt files"),
            "{e}"
        );
        #[cfg(unix)]
        {
            let e = read_bounded(Path::new("/dev/zero"), 1 << 20, "images").unwrap_err();
            assert!(matches!(e, FileError::NotRegular { .. }), "{e}");
        }
        let e = read_bounded(dir.path(), 1 << 20, "images").unwrap_err();
        assert!(
            matches!(e, FileError::NotRegular { .. } | FileError::Io { .. }),
            "{e}"
        );
        let e = read_bounded(&dir.path().join("none"), 1, "images").unwrap_err();
        assert!(matches!(e, FileError::Io { .. }), "{e}");
    }
}
