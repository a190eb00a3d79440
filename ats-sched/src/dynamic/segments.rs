//! The segment model's exact optimum: the search's best start.
//!
//! A simpler cost model than [`super::round_time`]'s: each GPU segment's
//! copies start with the CPU item just before it (`lead_j`: its CPU time
//! alone plus the entry switch; 0 for a segment that opens the round), the
//! transfer stream and every slot idle then, and `slots` slots shared by
//! all groups. Segments are then independent, so the best promotion set is
//! found exactly by a DP over "CPU endpoints", the CPU items: every
//! non-resident item between two consecutive endpoints is promoted.
//! Between endpoints `j < i` (`j = -1` is the round's start, `i = n` its
//! end) the time is
//!
//! ```text
//! cost(j, i) = [j+1 < i] (switch_cost_{j+1} + seg(j, i) + exit_i) + [i < n] cpu_time_i
//! exit_i     = switch_cost_i for i < n, output_switch_cost for i = n
//! ```
//!
//! `seg(j, i)` is the duration of the GPU segment `j+1..i`, copies starting
//! `lead_j` before it, one at a time, each once a slot is free (a slot is
//! free again when its item has finished). `best(i) = min_j best(j) +
//! cost(j, i)`; for a fixed `j` the segment grows one item at a time as
//! `i` increases, keeping the finish times of its last `slots` promoted
//! items in a ring: O(1) per pair, O(n^2) time, O(n) memory.

use super::{TransferItem, TransferParams};

/// The promotion set that is optimal under the segment model.
pub(super) fn plan(items: &[TransferItem], params: &TransferParams) -> Vec<bool> {
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
    promote
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
    use std::collections::VecDeque;

    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// The segment model's round time of a promotion set, by direct simulation.
    fn segment_time(items: &[TransferItem], promote: &[bool], params: &TransferParams) -> f64 {
        let mut t = 0.0f64;
        let mut prev_gpu = false;
        let (mut seg_start, mut copy_free, mut cpu_start) = (0.0f64, 0.0f64, 0.0f64);
        let mut in_slots: VecDeque<f64> = VecDeque::new();
        for (it, &p) in items.iter().zip(promote) {
            let gpu = it.on_gpu || p;
            if gpu != prev_gpu {
                t += it.switch_cost;
                if gpu {
                    seg_start = cpu_start;
                    copy_free = cpu_start;
                    in_slots.clear();
                }
            }
            if !gpu {
                cpu_start = t;
                t += it.cpu_time;
            } else if it.on_gpu {
                t += it.gpu_time;
            } else {
                let slot_free = if in_slots.len() == params.slots {
                    in_slots.pop_front().unwrap_or(seg_start)
                } else {
                    seg_start
                };
                copy_free = copy_free.max(slot_free) + it.copy_time;
                t = t.max(copy_free) + it.gpu_time;
                in_slots.push_back(t);
            }
            prev_gpu = gpu;
        }
        if prev_gpu {
            t += params.output_switch_cost;
        }
        t
    }

    #[test]
    fn the_dp_is_exact_under_the_segment_model() {
        let mut rng = StdRng::seed_from_u64(0xd1a_0001);
        for case in 0..600 {
            let n = rng.random_range(0..=11);
            let items: Vec<TransferItem> = (0..n)
                .map(|_| super::super::random_item(&mut rng, 1.0, 1))
                .collect();
            let params = TransferParams {
                slots: [0, 1, 2, 3, usize::MAX][case % 5],
                output_switch_cost: rng.random_range(0.0..2.0),
            };
            let dp = segment_time(&items, &plan(&items, &params), &params);
            let free: Vec<usize> = (0..n)
                .filter(|&i| !items[i].on_gpu && items[i].promotable && params.slots > 0)
                .collect();
            let brute = (0u32..1 << free.len())
                .map(|mask| {
                    let mut p = vec![false; n];
                    for (b, &i) in free.iter().enumerate() {
                        p[i] = (mask >> b) & 1 == 1;
                    }
                    segment_time(&items, &p, &params)
                })
                .fold(f64::INFINITY, f64::min);
            assert!(
                (dp - brute).abs() <= 1e-9 * (1.0 + brute),
                "case {case}: dp {dp} brute {brute}\n{items:?}"
            );
        }
    }
}
