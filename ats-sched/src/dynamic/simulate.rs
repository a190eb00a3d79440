//! The round time of a promotion set: the executor's order of compute and
//! copies played out item by item (the cost model in the module docs).

use std::collections::{HashMap, VecDeque};

use super::{RoundTiming, TransferError, TransferItem, TransferParams, validate};

/// The round time of a promotion set.
pub fn round_time(
    items: &[TransferItem],
    promote: &[bool],
    params: &TransferParams,
) -> Result<RoundTiming, TransferError> {
    simulate(items, promote, params, None)
}

/// Seconds each item computes in the round of promotion set `promote`: a
/// CPU item's time with the copies that overlap it, a GPU item's GPU time
/// (switches and waits for copies are not the item's).
pub fn item_secs(
    items: &[TransferItem],
    promote: &[bool],
    params: &TransferParams,
) -> Result<Vec<f64>, TransferError> {
    let mut secs = vec![0.0; items.len()];
    simulate(items, promote, params, Some(&mut secs))?;
    Ok(secs)
}

fn check_promotions(
    items: &[TransferItem],
    promote: &[bool],
    params: &TransferParams,
) -> Result<(), TransferError> {
    if promote.len() != items.len() {
        return Err(TransferError::LengthMismatch {
            items: items.len(),
            got: promote.len(),
        });
    }
    for (index, (it, &p)) in items.iter().zip(promote).enumerate() {
        if p && (it.on_gpu || !it.promotable) {
            return Err(TransferError::NotPromotable { index });
        }
        if p && params.slots == 0 {
            return Err(TransferError::NoSlots { index });
        }
    }
    Ok(())
}

fn simulate(
    items: &[TransferItem],
    promote: &[bool],
    params: &TransferParams,
    mut per_item: Option<&mut Vec<f64>>,
) -> Result<RoundTiming, TransferError> {
    validate(items, params)?;
    check_promotions(items, promote, params)?;
    let mut timing = RoundTiming {
        total: 0.0,
        compute: 0.0,
        contention: 0.0,
        switch: 0.0,
        stall: 0.0,
        switches: 0,
    };
    let mut copies = CopyStream::new(issue_order(items, promote, params.slots), items.len());
    copies.issue_ready(items);
    let mut t = 0.0f64;
    let mut prev_gpu = false;
    for (i, (it, &p)) in items.iter().zip(promote).enumerate() {
        let gpu = it.on_gpu || p;
        if gpu != prev_gpu {
            t += it.switch_cost;
            timing.switch += it.switch_cost;
            timing.switches += 1;
        }
        let computes = if !gpu {
            let end = copies.cpu_end(t, it.cpu_time, it.cpu_time_beside);
            timing.compute += it.cpu_time;
            timing.contention += (end - t - it.cpu_time).max(0.0);
            let secs = end - t;
            t = end;
            secs
        } else {
            if p {
                let ready = copies.end[i];
                if ready > t {
                    timing.stall += ready - t;
                    t = ready;
                }
            }
            t += it.gpu_time;
            timing.compute += it.gpu_time;
            if p {
                copies.finished(i, t, items);
            }
            it.gpu_time
        };
        if let Some(secs) = per_item.as_deref_mut() {
            secs[i] = computes;
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

/// The promoted items' copies in the executor's issue order, each with the
/// item whose finish frees its slot (`None`: issued when the round begins).
fn issue_order(
    items: &[TransferItem],
    promote: &[bool],
    slots: usize,
) -> Vec<(usize, Option<usize>)> {
    let mut by_group: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut first = Vec::new();
    let mut later = Vec::new();
    for (i, it) in items.iter().enumerate().filter(|&(i, _)| promote[i]) {
        let group = by_group.entry(it.slot_group).or_default();
        match group.len().checked_sub(slots) {
            Some(k) => later.push((i, Some(group[k]))),
            None => first.push((i, None)),
        }
        group.push(i);
    }
    // a slot's next copy is issued when its last reader is queued
    later.sort_by_key(|&(_, reader)| reader);
    first.extend(later);
    first
}

/// The transfer stream: copies issued so far and when each ends.
struct CopyStream {
    order: Vec<(usize, Option<usize>)>,
    next: usize,
    free_at: f64,
    /// Per item: when its copy ends (promoted items whose copy is issued).
    end: Vec<f64>,
    /// Per item: when it finished computing (NaN: not yet, or not promoted).
    finish: Vec<f64>,
    /// Busy intervals of the stream not yet over, in order.
    busy: VecDeque<(f64, f64)>,
}

impl CopyStream {
    fn new(order: Vec<(usize, Option<usize>)>, n: usize) -> CopyStream {
        CopyStream {
            order,
            next: 0,
            free_at: 0.0,
            end: vec![0.0; n],
            finish: vec![f64::NAN; n],
            busy: VecDeque::new(),
        }
    }

    /// Promoted item `i` finished computing at `t`: copies waiting for its
    /// slot may start.
    fn finished(&mut self, i: usize, t: f64, items: &[TransferItem]) {
        self.finish[i] = t;
        self.issue_ready(items);
    }

    /// Puts on the stream every copy, in issue order, whose slot is free.
    fn issue_ready(&mut self, items: &[TransferItem]) {
        while let Some(&(i, reader)) = self.order.get(self.next) {
            let freed = match reader {
                None => 0.0,
                Some(r) if self.finish[r].is_nan() => return,
                Some(r) => self.finish[r],
            };
            let start = self.free_at.max(freed);
            let end = start + items[i].copy_time;
            self.end[i] = end;
            self.free_at = end;
            if end > start {
                self.busy.push_back((start, end));
            }
            self.next += 1;
        }
    }

    /// When a CPU item that starts at `t` ends: at its speed alone while
    /// the stream is idle, at its speed beside copies while one runs.
    /// Every copy that can overlap it is on the stream already (the slots
    /// it waits for were freed by GPU items before it).
    fn cpu_end(&mut self, mut t: f64, alone: f64, beside: f64) -> f64 {
        while self.busy.front().is_some_and(|&(_, e)| e <= t) {
            self.busy.pop_front();
        }
        if alone <= 0.0 {
            return t;
        }
        let beside = beside.max(alone);
        let mut left = 1.0; // share of the item's work still to do
        for &(s, e) in &self.busy {
            if s > t {
                if left * alone <= s - t {
                    return t + left * alone;
                }
                left -= (s - t) / alone;
                t = s;
            }
            if left * beside <= e - t {
                return t + left * beside;
            }
            left -= (e - t) / beside;
            t = e;
        }
        t + left * alone
    }
}
