//! Host memory read bandwidth, for the decode roofline in docs/benchmarks.md:
//! `threads` threads sum disjoint parts of a buffer much larger than the
//! caches; the best of several passes is reported.
//!
//! `cargo run --release -p ats-cpu --example membw -- [THREADS] [MiB] [huge]`
//!
//! With `huge` the buffer is a resident copy as a loaded model's weights are
//! (anonymous memory advised for huge pages, `ats_core::gguf::Backing`);
//! without, a `Vec` in the allocator's 4 KiB pages.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use ats_core::gguf::Backing;
use ats_cpu::team::{self, Team};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2);
    let mib: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let n = mib * (1 << 20) / 8;
    let huge = args.get(3).is_some_and(|s| s == "huge");
    // touched once so every page is resident before timing
    let words: Vec<u64> = (0..n as u64).collect();
    let resident = huge.then(|| {
        let b = Backing::resident_copy(bytemuck::cast_slice(&words)).expect("memory");
        assert!(b.huge_pages(), "no transparent huge pages on this machine");
        b
    });
    let buf: &[u64] = match &resident {
        // page-aligned: the mapping starts on a page
        Some(b) => bytemuck::cast_slice(b.bytes()),
        None => &words,
    };
    let pool = Team::new(threads, "membw").expect("threads");
    let mut best = f64::MAX;
    let mut sink = 0u64;
    for _ in 0..8 {
        let t = Instant::now();
        sink = sink.wrapping_add(pool.install(|| {
            let total = AtomicU64::new(0);
            let part = n.div_ceil(threads);
            team::for_each(threads, |i| {
                let c = &buf[(i * part).min(n)..((i + 1) * part).min(n)];
                // four accumulators keep several loads in flight
                let mut acc = [0u64; 4];
                for q in c.chunks_exact(4) {
                    for k in 0..4 {
                        acc[k] = acc[k].wrapping_add(q[k]);
                    }
                }
                let sum = acc.iter().fold(0u64, |a, &b| a.wrapping_add(b));
                total.fetch_add(sum, Ordering::Relaxed);
            });
            total.into_inner()
        }));
        best = best.min(t.elapsed().as_secs_f64());
    }
    let gbps = (n * 8) as f64 / best / 1e9;
    let pages = if huge { "huge pages" } else { "4 KiB pages" };
    println!(
        "read bandwidth, {threads} threads, {mib} MiB, {pages}: {gbps:.2} GB/s (checksum {sink:x})"
    );
}
