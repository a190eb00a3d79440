//! The dynamic transfer search for one round of 500 items.

use std::hint::black_box;

use ats_sched::dynamic::{TransferItem, TransferParams, plan_transfers};
use criterion::{Criterion, criterion_group, criterion_main};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// 500 items, a third resident, times in milliseconds like a decode round.
fn instance() -> Vec<TransferItem> {
    let mut rng = StdRng::seed_from_u64(11);
    (0..500)
        .map(|_| {
            let on_gpu = rng.random_bool(0.33);
            let cpu_time = rng.random_range(0.5e-3..5e-3);
            TransferItem {
                on_gpu,
                promotable: !on_gpu,
                cpu_time,
                cpu_time_beside: 1.8 * cpu_time,
                slot_group: rng.random_range(0..3),
                gpu_time: rng.random_range(0.05e-3..0.5e-3),
                copy_time: rng.random_range(0.2e-3..4e-3),
                switch_cost: rng.random_range(0.02e-3..0.1e-3),
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let items = instance();
    for slots in [2, usize::MAX] {
        let params = TransferParams {
            slots,
            output_switch_cost: 0.05e-3,
        };
        let name = if slots == 2 {
            "500_items_2_slots"
        } else {
            "500_items_unlimited_slots"
        };
        c.bench_function(&format!("dynamic_transfer/{name}"), |b| {
            b.iter(|| plan_transfers(black_box(&items), black_box(&params)).unwrap())
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
