//! Dynamic transfer (ATSInfer): which CPU-resident items to promote this round.
//!
//! Given a static placement, a promoted item has its weights copied into a GPU
//! temporary slot over the transfer stream and runs on the GPU for this round
//! only. [`plan_transfers`] picks the promotion set `P` that minimises the
//! round time `T(P)` defined here, and [`round_time`] evaluates `T(P)` for
//! any `P`.
//!
//! # Cost model: the round as the executor runs it
//!
//! Items `0..n` run one after another (each consumes the previous one's
//! activation). Item `i` runs on the GPU (`d_i = GPU`) when it is resident
//! (`on_gpu`) or promoted (`i` in `P`, allowed only for non-resident
//! `promotable` items), else on the CPU. `d_{-1} = CPU`: the inputs start on
//! the host. With `t = 0` at the start, for each item in order:
//!
//! 1. if `d_i != d_{i-1}`: `t += switch_cost_i` (activation crossing PCIe plus
//!    the fixed synchronisation overhead);
//! 2. resident: `t += gpu_time_i`; promoted: `t = max(t, copy_end_i) +
//!    gpu_time_i` (the wait is the item's *exposed copy time*); on the CPU:
//!    the item runs at its speed alone (`cpu_time_i`) while the transfer
//!    stream is idle and at its speed beside copies (`cpu_time_beside_i`)
//!    while a copy runs: the copies take their share of the host's memory
//!    bandwidth, and only for as long as they overlap the item.
//!
//! After the last item, `t += output_switch_cost` if `d_{n-1} = GPU` (the
//! output returns to the host). `T(P)` is the final `t`.
//!
//! Copies follow the executor's issue rule (`exec/streams.rs`). Each
//! promoted item takes a temporary slot of its `slot_group` (items of one
//! group hold weights of the same roles), turn about: the `k`-th promoted
//! item of a group uses the group's slot `k mod slots`. When the round
//! begins, the first copy of every slot is issued, in execution order; the
//! next copy into a slot is issued as soon as its last reader (the item
//! `slots` places earlier in the group) is queued, and waits until that
//! item has finished. The transfer stream runs copies one at a time, in
//! issue order:
//!
//! ```text
//! copy_start(c_m) = max(copy_end(c_{m-1}), finish(reader(c_m)))   (no reader: 0)
//! copy_end(c_m)   = copy_start(c_m) + copy_time(c_m)
//! ```
//!
//! So the next segment's copies start as soon as a slot is free, and hide
//! under every CPU item between two GPU segments, slowing the first of them
//! (which is what a decode round shows: the host items right after a GPU
//! segment run beside the copies, the ones before the next segment alone).
//!
//! # The search
//!
//! A copy's start now depends on earlier segments, so segments are not
//! independent and no exact DP over CPU endpoints exists. [`plan_transfers`]
//! starts from the best of: nothing promoted, everything promoted, and the
//! exact optimum of a simpler model in which each segment's copies start
//! with the CPU item before it (`segments.rs`; with CPU items at their speed
//! alone and beside copies), and then flips single items and neighbouring
//! pairs while that shortens the round (a local search under
//! [`round_time`]).

mod segments;
mod simulate;

use serde::{Deserialize, Serialize};

pub use simulate::{item_secs, round_time};

/// One item of the round, in execution order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TransferItem {
    /// Resident on the GPU by the static placement (runs there).
    pub on_gpu: bool,
    /// May be promoted this round (its weights fit a temporary slot).
    pub promotable: bool,
    /// Seconds to run it on the CPU.
    pub cpu_time: f64,
    /// Seconds to run it on the CPU while weight copies stream throughout
    /// (at least `cpu_time`; less is read as `cpu_time`).
    pub cpu_time_beside: f64,
    /// Seconds to run it on the GPU.
    pub gpu_time: f64,
    /// Seconds to copy its weights to the GPU (MoE decode: the routed experts only).
    pub copy_time: f64,
    /// Seconds charged when it runs on a different device from the previous item.
    pub switch_cost: f64,
    /// Items of one group take turns in the same temporary slots.
    pub slot_group: usize,
}

/// Round-wide parameters of the dynamic transfer plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TransferParams {
    /// GPU temporary slots per slot group (2 = double buffering; 0 = none).
    pub slots: usize,
    /// Seconds charged once if the last item runs on the GPU (output back to the host).
    pub output_switch_cost: f64,
}

impl Default for TransferParams {
    fn default() -> Self {
        Self {
            slots: 2,
            output_switch_cost: 0.0,
        }
    }
}

/// Where the time of a round goes, by the cost model in the module docs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoundTiming {
    /// The round time `T(P)` in seconds.
    pub total: f64,
    /// Seconds of compute on either device, CPU items at their speed alone.
    pub compute: f64,
    /// Seconds CPU items lost to weight copies running beside them.
    pub contention: f64,
    /// Seconds of device switches, including the output's return.
    pub switch: f64,
    /// Seconds the GPU waited for weight copies (exposed copy time).
    pub stall: f64,
    /// Number of device switches, including the output's return.
    pub switches: usize,
}

/// The promotion set chosen for a round and its timing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TransferPlan {
    /// Per item: promoted (copied to a temporary slot and run on the GPU) this round.
    pub promote: Vec<bool>,
    /// The round's timing under this plan.
    pub timing: RoundTiming,
}

/// Why a transfer plan cannot be computed or evaluated.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TransferError {
    /// A time is negative, NaN or infinite.
    #[error("transfer item {index}: {field} {value} is not a finite non-negative time")]
    InvalidTime {
        index: usize,
        field: &'static str,
        value: f64,
    },
    /// The output switch cost is negative, NaN or infinite.
    #[error("output switch cost {0} is not a finite non-negative time")]
    InvalidOutputSwitchCost(f64),
    /// A promotion set does not have one entry per item.
    #[error("promotion set has {got} entries for {items} items")]
    LengthMismatch { items: usize, got: usize },
    /// A promoted item is resident already or not promotable.
    #[error("transfer item {index} cannot be promoted (resident or not promotable)")]
    NotPromotable { index: usize },
    /// A promoted item with no temporary slot to copy into.
    #[error("transfer item {index} is promoted but there are no temporary slots")]
    NoSlots { index: usize },
}

/// Rounds of single flips the local search makes at most (each is a pass
/// over every promotable item; a pass that finds nothing ends it).
const MAX_PASSES: usize = 8;

/// Chooses the promotion set for a round: the best start (module docs),
/// improved by single flips under [`round_time`].
pub fn plan_transfers(
    items: &[TransferItem],
    params: &TransferParams,
) -> Result<TransferPlan, TransferError> {
    validate(items, params)?;
    let free: Vec<usize> = (0..items.len())
        .filter(|&i| can_promote(&items[i], params))
        .collect();
    let none = vec![false; items.len()];
    let mut all = none.clone();
    for &i in &free {
        all[i] = true;
    }
    // the segment model at both CPU speeds: copies beside every CPU item or none
    let beside: Vec<TransferItem> = items
        .iter()
        .map(|it| TransferItem {
            cpu_time: it.cpu_time_beside.max(it.cpu_time),
            ..it.clone()
        })
        .collect();
    let mut best = TransferPlan {
        timing: round_time(items, &none, params)?,
        promote: none,
    };
    for promote in [
        all,
        segments::plan(items, params),
        segments::plan(&beside, params),
    ] {
        let timing = round_time(items, &promote, params)?;
        if timing.total < best.timing.total {
            best = TransferPlan { promote, timing };
        }
    }
    for _ in 0..MAX_PASSES {
        if !improve_once(items, params, &free, &mut best)? {
            break;
        }
    }
    Ok(best)
}

fn can_promote(it: &TransferItem, params: &TransferParams) -> bool {
    !it.on_gpu && it.promotable && params.slots > 0
}

/// One pass of flips over `free` (each item, then each two neighbours),
/// keeping each that shortens the round; whether any did.
fn improve_once(
    items: &[TransferItem],
    params: &TransferParams,
    free: &[usize],
    best: &mut TransferPlan,
) -> Result<bool, TransferError> {
    // a flip must gain more than rounding noise, or passes never end
    let mut improved = false;
    for k in 0..free.len() {
        improved |= try_flip(items, params, &free[k..k + 1], best)?;
    }
    // neighbours together: moving a segment's edge by one item
    for pair in free.windows(2) {
        improved |= try_flip(items, params, pair, best)?;
    }
    Ok(improved)
}

/// Flips the items `flip` together and keeps it if it shortens the round.
fn try_flip(
    items: &[TransferItem],
    params: &TransferParams,
    flip: &[usize],
    best: &mut TransferPlan,
) -> Result<bool, TransferError> {
    // a flip must gain more than rounding noise, or passes never end
    let min_gain = 1e-12 * (1.0 + best.timing.total);
    for &i in flip {
        best.promote[i] = !best.promote[i];
    }
    let t = round_time(items, &best.promote, params)?;
    if t.total < best.timing.total - min_gain {
        best.timing = t;
        return Ok(true);
    }
    for &i in flip {
        best.promote[i] = !best.promote[i];
    }
    Ok(false)
}

fn validate(items: &[TransferItem], params: &TransferParams) -> Result<(), TransferError> {
    let ok = |v: f64| v.is_finite() && v >= 0.0;
    if !ok(params.output_switch_cost) {
        return Err(TransferError::InvalidOutputSwitchCost(
            params.output_switch_cost,
        ));
    }
    for (index, it) in items.iter().enumerate() {
        for (field, value) in [
            ("cpu_time", it.cpu_time),
            ("cpu_time_beside", it.cpu_time_beside),
            ("gpu_time", it.gpu_time),
            ("copy_time", it.copy_time),
            ("switch_cost", it.switch_cost),
        ] {
            if !ok(value) {
                return Err(TransferError::InvalidTime {
                    index,
                    field,
                    value,
                });
            }
        }
    }
    Ok(())
}

/// A random item for the search's tests (arbitrary units): resident or
/// not, promotable or not, its CPU time beside copies up to `slowdown`
/// times its time alone, in one of `groups` slot groups.
#[cfg(test)]
fn random_item(rng: &mut rand::rngs::StdRng, slowdown: f64, groups: usize) -> TransferItem {
    use rand::Rng;
    let on_gpu = rng.random_bool(0.35);
    let cpu_time = rng.random_range(0.0..10.0);
    TransferItem {
        on_gpu,
        promotable: !on_gpu && rng.random_bool(0.85),
        cpu_time,
        cpu_time_beside: cpu_time * rng.random_range(1.0..=slowdown),
        gpu_time: rng.random_range(0.0..3.0),
        copy_time: if rng.random_bool(0.1) {
            0.0
        } else {
            rng.random_range(0.0..12.0)
        },
        switch_cost: rng.random_range(0.0..2.0),
        slot_group: rng.random_range(0..groups.max(1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::brute;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn cpu_item(cpu: f64, gpu: f64, copy: f64, switch: f64) -> TransferItem {
        TransferItem {
            on_gpu: false,
            promotable: true,
            cpu_time: cpu,
            cpu_time_beside: cpu,
            gpu_time: gpu,
            copy_time: copy,
            switch_cost: switch,
            slot_group: 0,
        }
    }

    fn resident(gpu: f64, switch: f64) -> TransferItem {
        TransferItem {
            on_gpu: true,
            promotable: false,
            cpu_time: 0.0,
            cpu_time_beside: 0.0,
            gpu_time: gpu,
            copy_time: 0.0,
            switch_cost: switch,
            slot_group: 0,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * (1.0 + a.abs().max(b.abs()))
    }

    fn sums_up(t: &RoundTiming) -> bool {
        close(t.total, t.compute + t.contention + t.switch + t.stall)
    }

    #[test]
    fn a_copy_hidden_under_resident_work_is_free() {
        // Resident 5 s, then an item that takes 10 s on the CPU, 1 s on the
        // GPU and 3 s to copy: the copy hides under the resident work.
        let items = [resident(5.0, 0.5), cpu_item(10.0, 1.0, 3.0, 0.5)];
        let params = TransferParams {
            slots: 2,
            output_switch_cost: 0.25,
        };
        let plan = plan_transfers(&items, &params).unwrap();
        assert_eq!(plan.promote, vec![false, true]);
        assert!(close(plan.timing.total, 0.5 + 5.0 + 1.0 + 0.25));
        assert_eq!(plan.timing.stall, 0.0);
        assert_eq!(plan.timing.switches, 2);
        let stay = round_time(&items, &[false, false], &params).unwrap();
        assert!(close(stay.total, 0.5 + 5.0 + 0.5 + 10.0));
    }

    #[test]
    fn copies_queue_on_one_stream() {
        // Two promoted items after 5 s of resident work, copies of 4 s each:
        // the second copy ends at 8 s, so it is exposed by 8 - 6 = 2 s.
        let items = [
            resident(5.0, 0.0),
            cpu_item(100.0, 1.0, 4.0, 0.0),
            cpu_item(100.0, 1.0, 4.0, 0.0),
        ];
        let params = TransferParams::default();
        let t = round_time(&items, &[false, true, true], &params).unwrap();
        assert!(close(t.stall, 2.0), "{t:?}");
        assert!(close(t.total, 9.0));
        // With one slot the second copy waits for the first item to finish (6 s).
        let one = TransferParams {
            slots: 1,
            ..params.clone()
        };
        let t = round_time(&items, &[false, true, true], &one).unwrap();
        assert!(close(t.total, 6.0 + 4.0 + 1.0), "{t:?}");
        assert_eq!(
            plan_transfers(&items, &one).unwrap().promote,
            vec![false, true, true]
        );
        // Slots are per group: an item of another group has its own.
        let mut other = items.clone();
        other[2].slot_group = 1;
        let t = round_time(&other, &[false, true, true], &one).unwrap();
        assert!(close(t.total, 9.0), "{t:?}");
    }

    #[test]
    fn copies_start_when_the_round_begins_or_their_slot_frees() {
        // The first copy of each slot is issued when the round begins, so
        // it hides under every CPU item before its segment: two CPU items of
        // 2 s each hide 4 s of an 8 s copy (4 s exposed).
        let params = TransferParams::default();
        let items = [
            cpu_item(2.0, 50.0, 100.0, 0.0),
            cpu_item(2.0, 50.0, 100.0, 0.0),
            cpu_item(20.0, 1.0, 8.0, 0.0),
        ];
        let t = round_time(&items, &[false, false, true], &params).unwrap();
        assert!(close(t.stall, 4.0) && close(t.total, 9.0), "{t:?}");
        // A slot's next copy waits for its last reader (one slot: the first
        // promoted item, done at 2 s), then hides under the CPU items after it.
        let one = TransferParams { slots: 1, ..params };
        let items = [
            cpu_item(9.0, 1.0, 1.0, 0.0),
            cpu_item(3.0, 9.0, 9.0, 0.0),
            cpu_item(3.0, 9.0, 9.0, 0.0),
            cpu_item(9.0, 1.0, 4.0, 0.0),
        ];
        let t = round_time(&items, &[true, false, false, true], &one).unwrap();
        // copy 0..1, item 0 to 2; copy of item 3 from 2 to 6; CPU 2..8; item 3 to 9
        assert!(close(t.total, 9.0) && close(t.stall, 1.0), "{t:?}");
    }

    #[test]
    fn copies_slow_only_the_cpu_items_they_overlap() {
        // One slot. A's copy runs 0..4 and A 4..5; D's copy then runs 5..7,
        // beside B (2 s alone, 4 s beside copies): B does half its work in
        // those 2 s and the rest alone, 7..8. C runs alone, 8..10; D 10..11.
        let mut b = cpu_item(2.0, 9.0, 9.0, 0.0);
        b.cpu_time_beside = 4.0;
        let c = b.clone();
        let items = [
            cpu_item(9.0, 1.0, 4.0, 0.0),
            b,
            c,
            cpu_item(9.0, 1.0, 2.0, 0.0),
        ];
        let params = TransferParams {
            slots: 1,
            output_switch_cost: 0.0,
        };
        let promote = [true, false, false, true];
        let t = round_time(&items, &promote, &params).unwrap();
        assert!(close(t.total, 11.0) && close(t.contention, 1.0), "{t:?}");
        assert!(sums_up(&t), "{t:?}");
        let secs = item_secs(&items, &promote, &params).unwrap();
        let want = [1.0, 3.0, 2.0, 1.0];
        assert!(secs.iter().zip(want).all(|(&a, b)| close(a, b)), "{secs:?}");
        // with two slots D's copy runs 4..6, under A and B's first second
        let two = TransferParams { slots: 2, ..params };
        let secs = item_secs(&items, &promote, &two).unwrap();
        let want = [1.0, 2.5, 2.0, 1.0];
        assert!(secs.iter().zip(want).all(|(&a, b)| close(a, b)), "{secs:?}");
    }

    #[test]
    fn decode_interleaves_cpu_items_and_streamed_ones() {
        // Decode-like round: items alternate between 1 s on the CPU and 1 s
        // to copy, tiny GPU time, small switches. Streaming every other item
        // hides each copy under the CPU item before it: about half the round.
        let n = 8;
        let items: Vec<TransferItem> = (0..n).map(|_| cpu_item(1.0, 0.01, 0.9, 0.02)).collect();
        let params = TransferParams::default();
        let plan = plan_transfers(&items, &params).unwrap();
        let streamed = plan.promote.iter().filter(|&&p| p).count();
        assert_eq!(streamed, n / 2, "{:?}", plan.promote);
        let all_cpu = round_time(&items, &vec![false; n], &params).unwrap().total;
        assert!(close(all_cpu, n as f64));
        assert!(plan.timing.total < 0.6 * all_cpu, "{:?}", plan.timing);
        assert_eq!(plan.timing.stall, 0.0);
    }

    #[test]
    fn no_slots_means_no_promotion() {
        let items = [resident(5.0, 0.0), cpu_item(10.0, 1.0, 0.0, 0.0)];
        let params = TransferParams {
            slots: 0,
            output_switch_cost: 0.0,
        };
        let plan = plan_transfers(&items, &params).unwrap();
        assert_eq!(plan.promote, vec![false, false]);
        assert_eq!(
            round_time(&items, &[false, true], &params),
            Err(TransferError::NoSlots { index: 1 })
        );
    }

    #[test]
    fn rejects_bad_input() {
        let params = TransferParams::default();
        let items = [cpu_item(f64::NAN, 1.0, 1.0, 0.0)];
        assert!(matches!(
            plan_transfers(&items, &params),
            Err(TransferError::InvalidTime {
                index: 0,
                field: "cpu_time",
                ..
            })
        ));
        let mut beside = cpu_item(1.0, 1.0, 1.0, 0.0);
        beside.cpu_time_beside = -1.0;
        assert!(matches!(
            round_time(&[beside], &[false], &params),
            Err(TransferError::InvalidTime {
                field: "cpu_time_beside",
                ..
            })
        ));
        let items = [resident(1.0, 0.0)];
        assert_eq!(
            round_time(&items, &[true], &params),
            Err(TransferError::NotPromotable { index: 0 })
        );
        assert_eq!(
            round_time(&items, &[], &params),
            Err(TransferError::LengthMismatch { items: 1, got: 0 })
        );
        let bad = TransferParams {
            slots: 2,
            output_switch_cost: -1.0,
        };
        assert_eq!(
            plan_transfers(&items, &bad),
            Err(TransferError::InvalidOutputSwitchCost(-1.0))
        );
        assert_eq!(plan_transfers(&[], &params).unwrap().timing.total, 0.0);
    }

    #[test]
    fn the_search_is_near_brute_force_on_random_instances() {
        let mut rng = StdRng::seed_from_u64(0xd1a_0001);
        let (mut exact, mut worst, cases) = (0, 1.0f64, 800);
        for case in 0..cases {
            let n = rng.random_range(0..=12);
            let items: Vec<TransferItem> = (0..n).map(|_| random_item(&mut rng, 3.0, 2)).collect();
            let params = TransferParams {
                slots: [0, 1, 2, 3, usize::MAX][case % 5],
                output_switch_cost: if rng.random_bool(0.5) {
                    0.0
                } else {
                    rng.random_range(0.0..2.0)
                },
            };
            let found = plan_transfers(&items, &params).unwrap();
            let bf = brute::transfer_plan(&items, &params).unwrap();
            let t = &found.timing;
            assert!(sums_up(t), "case {case}: {t:?}");
            assert_eq!(round_time(&items, &found.promote, &params).unwrap(), *t);
            assert!(t.total >= bf.timing.total - 1e-9, "case {case}");
            if close(t.total, bf.timing.total) {
                exact += 1;
            }
            worst = worst.max(t.total / bf.timing.total.max(1e-12));
        }
        eprintln!("search exact in {exact} of {cases}, worst {worst:.4}x brute force");
        assert!(exact * 100 >= cases * 97, "exact in {exact} of {cases}");
        assert!(worst < 1.15, "worst {worst}");
    }
}
