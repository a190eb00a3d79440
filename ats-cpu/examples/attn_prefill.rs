//! Prompt (prefill) attention timed alone: a causal prompt of P tokens over
//! an f16 cache, at SmolLM2-135M's shape (9 heads, 3 KV heads of 64) and a
//! 1B llama's (32 heads, 8 KV heads of 64), on one thread; prints each
//! shape's minimum and median microseconds over ROUNDS runs. Run two builds
//! one after the other, alternating, to compare them.
//!
//!     cargo run --release -p ats-cpu --example attn_prefill [ROUNDS [P]]

#[path = "../benches/common/mod.rs"]
mod common;

use std::time::Instant;

use ats_cpu::ops::attention::{AttnShape, KeyRange, KvData, KvRows, flash_attention};
use common::values;
use half::f16;

fn main() {
    let arg = |i: usize, d: usize| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(d)
    };
    let (rounds, p) = (arg(1, 20), arg(2, 512));
    let team = ats_cpu::team::Team::new(1, "attn-prefill").unwrap();
    for (name, heads, kv_heads, hd) in [("smollm2", 9, 3, 64), ("llama-1b", 32, 8, 64)] {
        let q = values(p * heads * hd, 1);
        let f16s = |seed| -> Vec<f16> {
            values(p * kv_heads * hd, seed)
                .into_iter()
                .map(f16::from_f32)
                .collect()
        };
        let (k, v) = (f16s(2), f16s(3));
        let mut out = vec![0f32; p * heads * hd];
        let shape = AttnShape {
            n_heads: heads,
            n_kv_heads: kv_heads,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            n_queries: p,
            n_keys: p,
            q_block: 0,
        };
        let mut times: Vec<f64> = (0..rounds)
            .map(|_| {
                let t = Instant::now();
                team.install(|| {
                    flash_attention(
                        &q,
                        KvRows::contiguous(KvData::F16 { k: &k, v: &v }),
                        KeyRange::Causal { offset: 0 },
                        &mut out,
                        shape,
                    )
                });
                t.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        times.sort_by(f64::total_cmp);
        println!(
            "{name}, {p} tokens: min {:.0} us, median {:.0} us",
            times[0],
            times[rounds / 2]
        );
    }
}
