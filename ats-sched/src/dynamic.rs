//! Dynamic transfer (ATSInfer): which CPU-resident items to promote this round.
//!
//! Given a static placement, a promoted item has its weights copied into a GPU
//! temporary slot over the transfer stream and runs on the GPU for this round
//! only. [`plan_transfers`] picks the promotion set `P` minimising the round
//! time `T(P)` defined here, and [`round_time`] evaluates `T(P)` for any `P`.
//!
//! # Cost model
//!
//! Items `0..n` run one after another (each consumes the previous one's
//! activation). Item `i` runs on the GPU (`d_i = GPU`) when it is resident
//! (`on_gpu`) or promoted (`i` in `P`, allowed only for non-resident
//! `promotable` items), else on the CPU. `d_{-1} = CPU`: the inputs start on
//! the host. With `t = 0` at the start, for each item in order:
//!
//! 1. if `d_i != d_{i-1}`: `t += switch_cost_i` (activation crossing PCIe plus
//!    the fixed synchronisation overhead);
//! 2. on the CPU: `t += cpu_time_i`; resident: `t += gpu_time_i`; promoted:
//!    `t = max(t, copy_end_i) + gpu_time_i`. The wait `max(copy_end_i - t, 0)`
//!    is the item's *exposed copy time*.
//!
//! After the last item, `t += output_switch_cost` if `d_{n-1} = GPU` (the
//! output returns to the host). `T(P)` is the final `t`.
//!
//! Copies: a *GPU segment* is a maximal run of consecutive GPU items. Let `t0`
//! be the time its first item is ready to compute (after the entry switch),
//! `a` the time the CPU item just before the segment started (0 for a
//! segment that opens the round), and `p_1 < p_2 < ...` its promoted items.
//! Their copies run one at a time on the transfer stream, in execution order,
//! each in one of `slots` temporary slots, and a slot is free again when its
//! item has finished computing:
//!
//! ```text
//! copy_start(p_m) = max(a, copy_end(p_{m-1}), finish(p_{m-slots}))   (missing terms dropped)
//! copy_end(p_m)   = copy_start(p_m) + copy_time(p_m)
//! ```
//!
//! So a copy hides under the CPU item before the segment and the GPU work
//! since it (DESIGN.md's rule, plus the CPU endpoint `j` itself): with one
//! promoted item `i` in the segment its exposed time is
//! `max(w_i - lead_j - seg(j, i), 0)`, `lead_j` being item `j`'s CPU time
//! and the entry switch, `seg(j, i)` the GPU work between `j` and `i`; with
//! several, their copies also queue behind each other and behind the slots.
//! At `a` the transfer stream and every slot are idle: the previous segment
//! finished before item `j` started. Copies never start before `a`, which is
//! conservative: the executor issues a slot's next copy as soon as its last
//! reader is queued, and every time above is a max-plus, hence monotone,
//! function of the copy start times, so an executor that issues a copy
//! earlier never finishes later than the model says. This is what makes
//! streaming pay at decode, where the GPU work is tiny: the CPU computes
//! one item while the next one's weights cross the bus.
//!
//! # The DP
//!
//! The CPU items ("CPU endpoints") determine `P`: every non-resident item
//! between two consecutive endpoints is promoted. Between endpoints `j < i`
//! (`j = -1` is the round's start, `i = n` its end) the time is
//!
//! ```text
//! cost(j, i) = [j+1 < i] (switch_cost_{j+1} + seg(j, i) + exit_i) + [i < n] cpu_time_i
//! exit_i     = switch_cost_i for i < n, output_switch_cost for i = n
//! ```
//!
//! where `seg(j, i)` is the duration of the GPU segment `j+1..i` by the
//! recurrence above measured from its `t0`, copies starting `lead_j` before
//! it. It depends on `j` and `i` only, because at `a` the transfer stream
//! and every slot are idle (the previous segment finished before the CPU ran
//! item `j`). Hence
//! `best(i) = min_j best(j) + cost(j, i)` over endpoints ("partial schedule
//! ends on the CPU at `i`"), and the answer is `best(n)` ("ends on the GPU", or
//! on the CPU with an empty last segment). This is exact for the slot limit
//! too, since slots only act inside a segment. For a fixed `j` the segment
//! grows one item at a time as `i` increases, keeping the finish times of its
//! last `slots` promoted items in a ring: O(1) per pair, O(n^2) time, O(n)
//! memory.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// One item of the round, in execution order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TransferItem {
    /// Resident on the GPU by the static placement (runs there).
    pub on_gpu: bool,
    /// May be promoted this round (its weights fit a temporary slot).
    pub promotable: bool,
    /// Seconds to run it on the CPU.
    pub cpu_time: f64,
    /// Seconds to run it on the GPU.
    pub gpu_time: f64,
    /// Seconds to copy its weights to the GPU (MoE decode: the routed experts only).
    pub copy_time: f64,
    /// Seconds charged when it runs on a different device from the previous item.
    pub switch_cost: f64,
}

/// Round-wide parameters of the dynamic transfer plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TransferParams {
    /// GPU temporary slots for promoted weights (2 = double buffering; 0 = none).
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
    /// Seconds of compute on either device.
    pub compute: f64,
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

/// Chooses the promotion set minimising the round time (module docs), exactly.
pub fn plan_transfers(
    items: &[TransferItem],
    params: &TransferParams,
) -> Result<TransferPlan, TransferError> {
    validate(items, params)?;
    let n = items.len();
    // best[e]: least time to finish item e - 1 on the CPU; e = 0 is the start.
    let mut best = vec![f64::INFINITY; n + 1];
    let mut prev = vec![0usize; n + 1];
    best[0] = 0.0;
    let mut end_best = f64::INFINITY;
    let mut end_prev = 0usize;
    let mut seg = Segment::new(params.slots.min(n));

    for e in 0..=n {
        // Unreachable when item e - 1 is resident (it cannot be a CPU endpoint).
        if best[e] == f64::INFINITY {
            continue;
        }
        let base = best[e];
        // copies may start when the CPU item before the segment starts
        let lead = e.checked_sub(1).map_or(0.0, |j| items[j].cpu_time)
            + items.get(e).map_or(0.0, |it| it.switch_cost);
        seg.reset(lead);
        let mut open_to_end = true;
        for (k, it) in items.iter().enumerate().skip(e) {
            if !it.on_gpu {
                let mut cost = it.cpu_time;
                if !seg.is_empty() {
                    cost += items[e].switch_cost + seg.time + it.switch_cost;
                }
                if base + cost < best[k + 1] {
                    best[k + 1] = base + cost;
                    prev[k + 1] = e;
                }
            }
            if it.on_gpu {
                seg.run_resident(it.gpu_time);
            } else if it.promotable && params.slots > 0 {
                seg.run_promoted(it.copy_time, it.gpu_time);
            } else {
                open_to_end = false;
                break;
            }
        }
        if open_to_end {
            let cost = if seg.is_empty() {
                0.0
            } else {
                items[e].switch_cost + seg.time + params.output_switch_cost
            };
            if base + cost < end_best {
                end_best = base + cost;
                end_prev = e;
            }
        }
    }

    // Walk the endpoints back; every other non-resident item is promoted.
    let mut promote: Vec<bool> = items.iter().map(|it| !it.on_gpu).collect();
    let mut e = end_prev;
    while e > 0 {
        promote[e - 1] = false;
        e = prev[e];
    }
    let timing = round_time(items, &promote, params)?;
    Ok(TransferPlan { promote, timing })
}

/// The round time of a promotion set, by direct simulation of the cost model.
pub fn round_time(
    items: &[TransferItem],
    promote: &[bool],
    params: &TransferParams,
) -> Result<RoundTiming, TransferError> {
    validate(items, params)?;
    if promote.len() != items.len() {
        return Err(TransferError::LengthMismatch {
            items: items.len(),
            got: promote.len(),
        });
    }
    let mut timing = RoundTiming {
        total: 0.0,
        compute: 0.0,
        switch: 0.0,
        stall: 0.0,
        switches: 0,
    };
    let mut t = 0.0f64;
    let mut prev_gpu = false;
    // The current GPU segment: its start, the transfer stream's free time, and
    // the finish times of its promoted items still holding a slot.
    let mut seg_start = 0.0f64;
    let mut copy_free = 0.0f64;
    let mut in_slots: VecDeque<f64> = VecDeque::new();
    // when the latest CPU item started (0: the round's start)
    let mut cpu_start = 0.0f64;

    for (index, (it, &p)) in items.iter().zip(promote).enumerate() {
        if p && (it.on_gpu || !it.promotable) {
            return Err(TransferError::NotPromotable { index });
        }
        if p && params.slots == 0 {
            return Err(TransferError::NoSlots { index });
        }
        let gpu = it.on_gpu || p;
        if gpu != prev_gpu {
            t += it.switch_cost;
            timing.switch += it.switch_cost;
            timing.switches += 1;
            if gpu {
                seg_start = cpu_start;
                copy_free = cpu_start;
                in_slots.clear();
            }
        }
        if !gpu {
            cpu_start = t;
            t += it.cpu_time;
            timing.compute += it.cpu_time;
        } else if it.on_gpu {
            t += it.gpu_time;
            timing.compute += it.gpu_time;
        } else {
            let slot_free = if in_slots.len() == params.slots {
                in_slots.pop_front().unwrap_or(seg_start)
            } else {
                seg_start
            };
            let copy_end = copy_free.max(slot_free) + it.copy_time;
            copy_free = copy_end;
            if copy_end > t {
                timing.stall += copy_end - t;
                t = copy_end;
            }
            t += it.gpu_time;
            timing.compute += it.gpu_time;
            in_slots.push_back(t);
        }
        prev_gpu = gpu;
    }
    if prev_gpu {
        t += params.output_switch_cost;
        timing.switch += params.output_switch_cost;
        timing.switches += 1;
    }
    timing.total = t;
    Ok(timing)
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

/// A GPU segment grown one item at a time, times relative to its start.
struct Segment {
    /// When its last item finishes computing.
    time: f64,
    /// When the transfer stream is free.
    copy_free: f64,
    /// Finish times of the last `ring.len()` promoted items, oldest at
    /// `head`; a slot not used yet holds the time copies may start.
    ring: Vec<f64>,
    head: usize,
    items: usize,
}

impl Segment {
    fn new(slots: usize) -> Self {
        Self {
            time: 0.0,
            copy_free: 0.0,
            ring: vec![0.0; slots],
            head: 0,
            items: 0,
        }
    }

    /// An empty segment whose copies may start `lead` seconds before its `t0`.
    fn reset(&mut self, lead: f64) {
        self.time = 0.0;
        self.copy_free = -lead;
        self.ring.fill(-lead);
        self.head = 0;
        self.items = 0;
    }

    fn is_empty(&self) -> bool {
        self.items == 0
    }

    fn run_resident(&mut self, gpu_time: f64) {
        self.time += gpu_time;
        self.items += 1;
    }

    /// Needs a non-empty ring (at least one slot).
    fn run_promoted(&mut self, copy_time: f64, gpu_time: f64) {
        let slots = self.ring.len();
        // Fewer promoted items than slots: a slot is free from the start
        // (the ring holds the lead's start time then).
        let slot_free = self.ring[self.head];
        let copy_end = self.copy_free.max(slot_free) + copy_time;
        self.copy_free = copy_end;
        self.time = self.time.max(copy_end) + gpu_time;
        self.ring[self.head] = self.time;
        self.head = (self.head + 1) % slots;
        self.items += 1;
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
            gpu_time: gpu,
            copy_time: copy,
            switch_cost: switch,
        }
    }

    fn resident(gpu: f64, switch: f64) -> TransferItem {
        TransferItem {
            on_gpu: true,
            promotable: false,
            cpu_time: 0.0,
            gpu_time: gpu,
            copy_time: 0.0,
            switch_cost: switch,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * (1.0 + a.abs().max(b.abs()))
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
    }

    #[test]
    fn copies_start_with_the_cpu_item_before_the_segment() {
        // A 5 s CPU item before the segment hides a 4 s copy; the copy of
        // the item after the resident one starts at 0, ends at 4, before
        // the GPU reaches it at 6.
        let items = [
            cpu_item(5.0, 5.0, 100.0, 0.0),
            resident(1.0, 0.0),
            cpu_item(3.0, 1.0, 4.0, 0.0),
        ];
        let params = TransferParams::default();
        let t = round_time(&items, &[false, false, true], &params).unwrap();
        assert!(
            close(t.stall, 0.0) && close(t.total, 5.0 + 1.0 + 1.0),
            "{t:?}"
        );
        // Promoting costs 7; leaving it on the CPU costs 5 + 1 + 3 = 9.
        let plan = plan_transfers(&items, &params).unwrap();
        assert_eq!(plan.promote, vec![false, false, true]);
        // Only the CPU item just before the segment counts: two CPU items
        // of 2 s each hide 2 s of an 8 s copy (6 s exposed).
        let items = [
            cpu_item(2.0, 50.0, 100.0, 0.0),
            cpu_item(2.0, 50.0, 100.0, 0.0),
            cpu_item(20.0, 1.0, 8.0, 0.0),
        ];
        let t = round_time(&items, &[false, false, true], &params).unwrap();
        assert!(
            close(t.stall, 6.0) && close(t.total, 2.0 + 2.0 + 6.0 + 1.0),
            "{t:?}"
        );
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

    fn random_item(rng: &mut StdRng) -> TransferItem {
        let on_gpu = rng.random_bool(0.35);
        TransferItem {
            on_gpu,
            promotable: !on_gpu && rng.random_bool(0.85),
            cpu_time: rng.random_range(0.0..10.0),
            gpu_time: rng.random_range(0.0..3.0),
            copy_time: if rng.random_bool(0.1) {
                0.0
            } else {
                rng.random_range(0.0..12.0)
            },
            switch_cost: rng.random_range(0.0..2.0),
        }
    }

    #[test]
    fn matches_brute_force_on_random_instances() {
        let mut rng = StdRng::seed_from_u64(0xd1a_0001);
        for case in 0..800 {
            let n = rng.random_range(0..=12);
            let items: Vec<TransferItem> = (0..n).map(|_| random_item(&mut rng)).collect();
            let params = TransferParams {
                slots: [0, 1, 2, 3, usize::MAX][case % 5],
                output_switch_cost: if rng.random_bool(0.5) {
                    0.0
                } else {
                    rng.random_range(0.0..2.0)
                },
            };
            let dp = plan_transfers(&items, &params).unwrap();
            let bf = brute::transfer_plan(&items, &params).unwrap();
            assert!(
                close(dp.timing.total, bf.timing.total),
                "case {case}: dp {} brute {}\n{items:?}\n{params:?}",
                dp.timing.total,
                bf.timing.total
            );
            let t = &dp.timing;
            assert!(
                close(t.total, t.compute + t.switch + t.stall),
                "case {case}: {t:?}"
            );
        }
    }
}
