//! A streaming layout's residency, judged by its run in virtual time:
//! qwen3-8b shapes on the `pcie-gen5-desktop` model at 4 GB, 4 threads,
//! 4K deep. The static DP priced every non-resident item at its CPU time
//! and kept whole runs of layers resident, leaving the output head on the
//! CPU and the other layers' copies waiting on the link: the planner's
//! decode plan ran 42.5 ms (32.4 ms once the GPU profile was timed as runs
//! time it). Pricing non-resident items as the CPU and the link share them,
//! and spreading alike items over the layers, it runs 29.1 ms.

use ats_tests::{frozen_decode_session, median_decode_secs, sim_machine, zeros_model};

const DEPTH: usize = 4096;
const VRAM: u64 = 4_000_000_000;

#[test]
fn the_planners_decode_plan_keeps_the_link_and_the_cpu_busy() {
    let dir = tempfile::tempdir().unwrap();
    let spec = zeros_model(dir.path(), "qwen3-8b");
    let vm = sim_machine("pcie-gen5-desktop,compute=off", 4, Some(VRAM));
    let mut e = frozen_decode_session(&spec, &vm, 4, VRAM, DEPTH);
    let prompt: Vec<u32> = (0..DEPTH as u32).map(|i| (i * 7 + 3) % 1000).collect();
    e.prefill(&prompt, false).unwrap();
    let ms = median_decode_secs(&mut e) * 1e3;
    eprintln!("decode: {ms:.2} ms");
    assert!(ms < 31.0, "decode ran {ms:.2} ms (before: 42.5, then 32.4)");
}
