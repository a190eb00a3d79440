//! Prompt (prefill) attention timed alone: a causal prompt of P tokens over
//! an f16 cache, at SmolLM2-135M's shape (9 heads, 3 KV heads of 64) and a
//! 1B llama's (32 heads, 8 KV heads of 64), on one thread; prints each
//! shape's minimum and median microseconds over ROUNDS runs. Run two builds
//! one after the other, alternating, to compare them.
//!
//!     cargo run --release -p ats-cpu --example attn_prefill [ROUNDS [P]]

#[path = "../benches/common/mod.rs"]
mod common;

use ats_cpu::ops::attention::{KeyRange, KvData, KvRows, flash_attention};
use common::{arg_or, attn_case, min_median_us};

fn main() {
    let (rounds, p) = (arg_or(1, 20), arg_or(2, 512));
    let team = ats_cpu::team::Team::new(1, "attn-prefill").unwrap();
    for (name, heads) in [("smollm2", (9, 3, 64)), ("llama-1b", (32, 8, 64))] {
        let mut c = attn_case(heads, p, p);
        let kv = KvRows::contiguous(KvData::F16 { k: &c.k, v: &c.v });
        let range = KeyRange::Causal { offset: 0 };
        let (min, median) = min_median_us(rounds, || {
            team.install(|| flash_attention(&c.q, kv, range, &mut c.out, c.shape))
        });
        println!("{name}, {p} tokens: min {min:.0} us, median {median:.0} us");
    }
}
