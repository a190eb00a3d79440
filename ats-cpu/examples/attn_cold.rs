//! Decode attention with the cache coming from memory, as a batched decode
//! round meets it: COPIES caches of one shape (SmolLM2's by default), each
//! read once a round in turn, one query token each, on THREADS threads
//! sharing the caches; prints the median and minimum microseconds per
//! attention over ROUNDS rounds. A few
//! copies stay in cache; compare with many.
//!
//! With BLOCK > 0 each cache is read through a block table of BLOCK-row
//! blocks in reverse order (none adjacent), as a KV pool's sequences are.
//!
//!     cargo run --release -p ats-cpu --example attn_cold -- [ROUNDS] [KEYS] [COPIES] [THREADS] [BLOCK]

#[path = "../benches/common/mod.rs"]
mod common;

use ats_cpu::ops::attention::{KeyRange, KvData, KvRows, RowMap, flash_attention};
use common::{arg_or, attn_case, min_median_us};

fn main() {
    let (rounds, keys, copies, threads) =
        (arg_or(1, 30), arg_or(2, 160), arg_or(3, 240), arg_or(4, 2));
    let block = arg_or(5, 0);
    let n_blocks = if block > 0 { keys.div_ceil(block) } else { 0 };
    let table: Vec<u32> = (0..n_blocks as u32).rev().collect();
    let map = if block > 0 {
        RowMap::Blocks {
            blocks: &table,
            block_tokens: block,
        }
    } else {
        RowMap::Contiguous
    };
    let team = ats_cpu::team::Team::new(threads, "attn-cold").unwrap();
    for (name, heads) in [("smollm2", (9, 3, 64)), ("llama-1b", (32, 8, 64))] {
        let rows = if block > 0 { n_blocks * block } else { keys };
        let mut cases: Vec<_> = (0..copies).map(|_| attn_case(heads, 1, rows)).collect();
        let range = KeyRange::Causal { offset: keys - 1 };
        let mut run = || {
            team.install(|| {
                ats_cpu::team::for_each_mut(&mut cases, |c| {
                    let kv = KvRows {
                        data: KvData::F16 { k: &c.k, v: &c.v },
                        map,
                    };
                    let mut shape = c.shape;
                    shape.n_keys = keys;
                    flash_attention(&c.q, kv, range, &mut c.out, shape)
                })
            })
        };
        let (min, med) = min_median_us(rounds, &mut run);
        let per = |x: f64| x / copies as f64;
        println!(
            "{name}, {keys} keys, {copies} caches: median {:.2} us, min {:.2} us an attention",
            per(med),
            per(min)
        );
    }
}
