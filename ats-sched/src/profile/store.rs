//! Where profiles live: one small JSON file per machine in the user's cache
//! directory, keyed by a hardware fingerprint.

use std::path::{Path, PathBuf};

use super::{PROFILE_VERSION, Profile};

/// A short fingerprint of the CPU model, core count and device names: a
/// profile measured on other hardware is not used.
pub fn hardware_fingerprint(device_names: &[String]) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let text = format!("{cpu}|{cores}|{}", device_names.join("|"));
    // FNV-1a: stable across Rust versions, unlike DefaultHasher
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// `<cache dir>/ats/profile-<fingerprint>.json`.
pub fn default_profile_path(fingerprint: &str) -> Option<PathBuf> {
    Some(ats_core::files::cache_dir()?.join(format!("profile-{fingerprint}.json")))
}

/// Largest profile file read: a real one is tens of kilobytes.
pub const MAX_PROFILE_BYTES: u64 = 16 << 20;

/// Reads a profile; a missing file is `Ok(None)`, a corrupt or foreign one an error.
/// Devices, FIFOs and files over [`MAX_PROFILE_BYTES`] are errors too.
pub fn load_profile(path: &Path, fingerprint: Option<&str>) -> Result<Option<Profile>, String> {
    let bytes = match ats_core::files::read_bounded(path, MAX_PROFILE_BYTES, "profiles") {
        Ok(b) => b,
        Err(ats_core::files::FileError::Io { error, .. })
            if error.kind() == std::io::ErrorKind::NotFound =>
        {
            return Ok(None);
        }
        Err(e) => return Err(e.to_string()),
    };
    let text = String::from_utf8(bytes)
        .map_err(|e| format!("{}: not a profile: not UTF-8 text: {e}", path.display()))?;
    let p: Profile = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a profile: {e}", path.display()))?;
    if p.version != PROFILE_VERSION {
        return Err(format!(
            "{}: profile version {} (this build reads {PROFILE_VERSION}); run `ats-cli profile` again",
            path.display(),
            p.version
        ));
    }
    if let Some(fp) = fingerprint
        && p.fingerprint != fp
    {
        return Err(format!(
            "{}: profile of other hardware (fingerprint {}, this machine {fp})",
            path.display(),
            p.fingerprint
        ));
    }
    Ok(Some(p))
}

/// Writes a profile, creating its directory.
pub fn save_profile(p: &Profile, path: &Path) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(p).map_err(|e| e.to_string())?;
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}
