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

use ats_cpu::ops::attention::{KeyRange, KvData, KvRows, flash_attention};
use common::{arg_or, attn_case, min_median_us};

fn main() {
    let rounds = arg_or(1, 2000);
    let team = ats_cpu::team::Team::new(1, "attn-decode").unwrap();
    for (name, heads) in [("smollm2", (9, 3, 64)), ("llama-1b", (32, 8, 64))] {
        for keys in [200, 2000] {
            let mut c = attn_case(heads, 1, keys);
            let kv = KvRows::contiguous(KvData::F16 { k: &c.k, v: &c.v });
            let range = KeyRange::Causal { offset: keys - 1 };
            let (min, median) = min_median_us(rounds, || {
                team.install(|| flash_attention(&c.q, kv, range, &mut c.out, c.shape))
            });
            println!("{name}, {keys} keys: min {min:.1} us, median {median:.1} us");
        }
    }
}
