//! Static placement DP at model scale: 1,000 items, a 24,000 MiB budget at 1 MiB units.

use std::hint::black_box;

use ats_sched::placement::{ItemGroup, PlacementItem, PlacementParams, place};
use criterion::{Criterion, criterion_group, criterion_main};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const MIB: u64 = 1 << 20;

/// 1,000 items of 1-100 MiB (about 50 GB in all, so the budget binds).
fn instance(experts: bool) -> Vec<PlacementItem> {
    let mut rng = StdRng::seed_from_u64(7);
    (0..1000)
        .map(|i| PlacementItem {
            size_bytes: rng.random_range(MIB..100 * MIB),
            benefit: rng.random_range(-0.001..0.02),
            switch_cost: rng.random_range(0.0001..0.002),
            group: if experts && i % 3 == 2 {
                ItemGroup::Expert
            } else {
                ItemGroup::Dense
            },
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let params = PlacementParams::new(24_000 * MIB);
    let mut group = c.benchmark_group("static_placement");
    group.sample_size(20);
    let dense = instance(false);
    group.bench_function("1000_items_24000_mib", |b| {
        b.iter(|| place(black_box(&dense), black_box(&params)).unwrap())
    });
    let moe = instance(true);
    group.bench_function("1000_items_24000_mib_moe", |b| {
        b.iter(|| place(black_box(&moe), black_box(&params)).unwrap())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
