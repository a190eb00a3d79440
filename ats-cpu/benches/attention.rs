//! Decode attention benchmarks: one query row over an f16 KV cache of
//! 512 and 2048 keys, at the Llama-3-8B (32 heads, 8 KV heads of 128) and
//! SmolLM2-135M (9 heads, 3 KV heads of 64) shapes, on a team of the
//! machine's threads. Throughput in bytes of the cache read (keys and values). The
//! `paged` group reads the same keys through KV blocks of 16 to 256 rows laid
//! out in reverse order (how a session's sequences hold the cache), against
//! contiguous rows: the measurement behind `ats_sched::session::KV_BLOCK_TOKENS`.

mod common;

use std::hint::black_box;
use std::time::Duration;

use ats_cpu::ops::attention::{KeyRange, KvData, KvRows, RowMap, flash_attention};
use common::{AttnCase, attn_case};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

fn decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("attention_decode");
    g.measurement_time(Duration::from_secs(3));
    for (model, heads) in [("llama-8b", (32, 8, 128)), ("smollm2", (9, 3, 64))] {
        for ctx in [512usize, 2048] {
            let AttnCase {
                q,
                k,
                v,
                mut out,
                shape,
            } = attn_case(heads, 1, ctx);
            g.throughput(Throughput::Bytes((2 * k.len() * 2) as u64));
            g.bench_function(BenchmarkId::new(model, ctx), |b| {
                b.iter(|| {
                    flash_attention(
                        black_box(&q),
                        KvRows::contiguous(KvData::F16 { k: &k, v: &v }),
                        KeyRange::Causal { offset: ctx - 1 },
                        &mut out,
                        shape,
                    )
                })
            });
        }
    }
    g.finish();
}

fn paged(c: &mut Criterion) {
    let mut g = c.benchmark_group("attention_paged");
    g.measurement_time(Duration::from_secs(3));
    let ctx = 2048usize;
    let AttnCase {
        q,
        k,
        v,
        mut out,
        shape,
    } = attn_case((32, 8, 128), 1, ctx);
    g.throughput(Throughput::Bytes((2 * k.len() * 2) as u64));
    for bt in [0usize, 16, 32, 64, 256] {
        let blocks: Vec<u32> = (0..(ctx / bt.max(1)) as u32).rev().collect();
        let map = if bt == 0 {
            RowMap::Contiguous
        } else {
            RowMap::Blocks {
                blocks: &blocks,
                block_tokens: bt,
            }
        };
        let name = if bt == 0 {
            "contiguous".to_string()
        } else {
            format!("blocks of {bt}")
        };
        g.bench_function(BenchmarkId::new("llama-8b-2048", name), |b| {
            b.iter(|| {
                let rows = KvRows {
                    data: KvData::F16 { k: &k, v: &v },
                    map,
                };
                flash_attention(
                    black_box(&q),
                    rows,
                    KeyRange::Causal { offset: ctx - 1 },
                    &mut out,
                    shape,
                )
            })
        });
    }
    g.finish();
}

/// Both groups on a team of the machine's threads.
fn all(c: &mut Criterion) {
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let team = ats_cpu::team::Team::new(threads, "bench").unwrap();
    team.install(|| {
        decode(c);
        paged(c);
    });
}

criterion_group!(benches, all);
criterion_main!(benches);
