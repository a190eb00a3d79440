//! Giving freed request memory back to the system. glibc's malloc serves a
//! large block from `mmap` and returns it on free, until the first such
//! free: then it raises its threshold to that block's size (up to 32 MiB),
//! so later bodies and prompts of that size come from arenas that keep the
//! memory after the request is gone (150 MB after the load test, 1 to 2 GB
//! in the issue's). A fixed threshold keeps large blocks mapped, and
//! unmapped when freed.

/// Blocks at least this large are mapped, and unmapped when freed.
const MMAP_THRESHOLD: usize = 1 << 20;

/// Fixes glibc's mmap threshold at [`MMAP_THRESHOLD`]; false where it
/// cannot be set (glibc refused; no glibc: other allocators decide alone).
pub fn return_large_frees() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes allocator parameters; M_MMAP_THRESHOLD
        // takes a byte count (1 MiB is within its 0..=32 MiB range), and the
        // call is safe at any time, allocations in flight included.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_threshold_is_set_where_glibc_runs() {
        let set = super::return_large_frees();
        assert_eq!(set, cfg!(all(target_os = "linux", target_env = "gnu")));
        // and large blocks still allocate and free
        let v = vec![7u8; 16 << 20];
        assert_eq!(v[(16 << 20) - 1], 7);
    }
}
