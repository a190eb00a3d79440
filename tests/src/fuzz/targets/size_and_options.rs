//! The fuzz target `size_and_options`: size strings (`--vram 2G`), policies
//! and `--sim-gpu` specs.

use ats_sched::config::Policy;
use ats_sched::size::parse_size;

use super::{Target, words};
use crate::fuzz::class_of;

/// Size strings (`--vram`, `--sim-gpu mem=`), policies and `--sim-gpu` specs.
/// A parsed size is at least one byte, and plain byte counts parse exactly.
pub struct SizeAndOptions;

impl Target for SizeAndOptions {
    const NAME: &'static str = "size_and_options";
    const MAX_LEN: usize = 256;

    fn new() -> Self {
        SizeAndOptions
    }

    fn seeds() -> Vec<Vec<u8>> {
        words(&[
            "2G",
            "1500M",
            "2GiB",
            "4096",
            "1.5 TB",
            "0.0000001K",
            "18446744073709551615",
            "1e309",
            "ats",
            "mem=2G,copy=4,speed=0.5,slow=0:1;10:3,launch=0",
        ])
    }

    fn dict() -> Vec<Vec<u8>> {
        words(&[
            "K", "KiB", "M", "MiB", "G", "GiB", "T", "TiB", "B", ".", "e", "-", "+", " ", "\u{a0}",
            "٣", "NaN", "inf", "mem=", ",", ";", ":", "=",
        ])
    }

    fn run(&self, b: &[u8]) -> Result<String, String> {
        let s = String::from_utf8_lossy(b);
        let _ = Policy::parse(&s);
        let _ = ats_sched::sim::SimGpuConfig::parse(&s);
        let v = parse_size(&s).map_err(|e| class_of(&e))?;
        assert!(v >= 1, "{s:?} -> {v}");
        if let Ok(n) = s.trim().parse::<u64>()
            && n < 1 << 53
            && s.trim().bytes().all(|c| c.is_ascii_digit())
        {
            assert_eq!(v, n, "{s:?}");
        }
        Ok(String::new())
    }
}
