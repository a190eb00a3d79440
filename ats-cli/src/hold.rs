//! How the model file is held: read into memory (huge pages where the system
//! has them; decode streams the weights faster) unless it would not fit or
//! `--mmap` asks for the file's mapping.

use std::path::Path;

use ats_core::gguf::Hold;
use ats_sched::size::fmt_bytes;

/// Share of the available memory a resident model may take: the rest is
/// left for the KV cache, activations and everything else on the machine.
const RESIDENT_SHARE: f64 = 0.8;

/// How to hold `model`: mapped when `mmap` asks for it, when the file is
/// larger than [`RESIDENT_SHARE`] of the available memory, or when that
/// cannot be told (each of the last two says so on stderr); else resident.
pub fn choose(model: &Path, mmap: bool) -> Hold {
    if mmap {
        return Hold::Mapped;
    }
    // a missing file fails in the open that follows, with its own message
    let Ok(len) = std::fs::metadata(model).map(|m| m.len()) else {
        return Hold::Mapped;
    };
    match available_memory() {
        Some(avail) if len as f64 <= avail as f64 * RESIDENT_SHARE => Hold::Resident,
        Some(avail) => {
            eprintln!(
                "ats: the model ({}) is larger than {:.0}% of the memory available ({}): mapping the file (slower decode)",
                fmt_bytes(len),
                RESIDENT_SHARE * 100.0,
                fmt_bytes(avail)
            );
            Hold::Mapped
        }
        None => {
            eprintln!(
                "ats: cannot tell the memory available: mapping the model file (slower decode)"
            );
            Hold::Mapped
        }
    }
}

/// Says on stderr when a resident model did not get huge pages.
pub fn report(hold: Hold, huge_pages: bool) {
    if hold == Hold::Resident && !huge_pages {
        eprintln!(
            "ats: no transparent huge pages here: the model is held in 4 KiB pages (slower decode)"
        );
    }
}

/// Bytes of memory the system can give without swapping (`MemAvailable`).
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    mem_available(&info)
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
fn mem_available(info: &str) -> Option<u64> {
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut words = line.split_whitespace().skip(1);
    let kib: u64 = words.next()?.parse().ok()?;
    (words.next() == Some("kB")).then_some(kib.checked_mul(1024)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_available_reads_the_kib_line() {
        let info =
            "MemTotal:       24563632 kB\nMemFree:         1000 kB\nMemAvailable:   20480 kB\n";
        assert_eq!(mem_available(info), Some(20480 * 1024));
        assert_eq!(mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(mem_available("MemAvailable: x kB\n"), None);
        assert_eq!(mem_available("MemAvailable: 5 MB\n"), None);
    }

    #[test]
    fn mmap_is_kept_and_a_small_model_is_resident() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        std::fs::write(&path, [0u8; 4096]).unwrap();
        assert_eq!(choose(&path, true), Hold::Mapped);
        if available_memory().is_some() {
            assert_eq!(choose(&path, false), Hold::Resident);
        }
    }
}
