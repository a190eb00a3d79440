//! Decode attention timed alone: one query token over K cached keys in
//! f16, at SmolLM2-135M's shape (9 heads, 3 KV heads of 64) and a 1B
//! llama's (32 heads, 8 KV heads of 64), on one thread, for a short (200
//! keys: the per-head path) and a long context (2000: the key splits);
//! prints each case's minimum and median microseconds over ROUNDS runs. Run
//! two builds one after the other, alternating, to compare them.
//!
//!     cargo run --release -p ats-cpu --example attn_decode [ROUNDS]

#[path = "../benches/common/mod.rs"]
mod common;

use std::time::Instant;

use ats_cpu::ops::attention::{AttnShape, KeyRange, KvData, KvRows, flash_attention};
use common::values;
use half::f16;

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let team = ats_cpu::team::Team::new(1, "attn-decode").unwrap();
    for (name, heads, kv_heads, hd) in [("smollm2", 9, 3, 64), ("llama-1b", 32, 8, 64)] {
        for keys in [200, 2000] {
            let q = values(heads * hd, 1);
            let f16s = |seed| -> Vec<f16> {
                values(keys * kv_heads * hd, seed)
                    .into_iter()
                    .map(f16::from_f32)
                    .collect()
            };
            let (k, v) = (f16s(2), f16s(3));
            let mut out = vec![0f32; heads * hd];
            let shape = AttnShape {
                n_heads: heads,
                n_kv_heads: kv_heads,
                head_dim: hd,
                scale: 1.0 / (hd as f32).sqrt(),
                n_queries: 1,
                n_keys: keys,
                q_block: 0,
            };
            let mut times: Vec<f64> = (0..rounds)
                .map(|_| {
                    let t = Instant::now();
                    team.install(|| {
                        flash_attention(
                            &q,
                            KvRows::contiguous(KvData::F16 { k: &k, v: &v }),
                            KeyRange::Causal { offset: keys - 1 },
                            &mut out,
                            shape,
                        )
                    });
                    t.elapsed().as_secs_f64() * 1e6
                })
                .collect();
            times.sort_by(f64::total_cmp);
            println!(
                "{name}, {keys} keys: min {:.1} us, median {:.1} us",
                times[0],
                times[rounds / 2]
            );
        }
    }
}
