//! Load-aware re-scheduling (ATSInfer): decide when the plan is stale.
//!
//! A plan is built from a [`CostSnapshot`]: per-item op times and copy times.
//! While it runs, the executor reports observed times; the [`Rescheduler`]
//! keeps an exponential moving average per item and, when asked with the
//! current time, answers [`Decision::Replan`] only if both
//!
//! - the relative deviation exceeds `epsilon`: for op times and for copy times
//!   separately, `sum_i |avg_i - snap_i| / sum_i snap_i` over the items that
//!   have observations, the larger of the two (a weighted measure, so noise on
//!   a tiny op does not count like a shift of the whole GPU), and also for
//!   the op items on the GPU alone when they hold at least [`GROUP_SHARE`]
//!   of the op time (a game ending makes a plan's GPU items 2.5x faster,
//!   only 12% of a round that runs mostly on the CPU); and
//! - at least `tau` seconds have passed since the plan was made.
//!
//! On `Replan` the averages become the new snapshot (they are the costs the
//! new plan is built from) and the plan time is reset. Time is passed in by
//! the caller, so the logic is deterministic and testable.

use serde::{Deserialize, Serialize};

/// The per-item costs a plan was built from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostSnapshot {
    /// Seconds per op item, indexed like the plan's items.
    pub op_times: Vec<f64>,
    /// Seconds per weight copy, indexed like the plan's items.
    pub copy_times: Vec<f64>,
    /// Which op items run on the GPU (empty: not known, one group).
    #[serde(default)]
    pub on_gpu: Vec<bool>,
}

/// The least share of a plan's op time its GPU items must hold for their
/// own deviation to count: below it, noise on a few small items would.
pub const GROUP_SHARE: f64 = 0.1;

/// The minimum time between two plans.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Tau {
    /// A multiple of the recent time per output token (moving average).
    TpotMultiple(f64),
    /// Seconds.
    Seconds(f64),
}

/// Tuning of the re-scheduling trigger.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReschedConfig {
    /// Relative deviation that makes a plan stale (default 0.15).
    pub epsilon: f64,
    /// Minimum time between plans (default 5 x recent TPOT).
    pub tau: Tau,
    /// Weight of a new observation in the moving averages (default 0.25).
    pub alpha: f64,
    /// A re-plan changes a tier's plan shape only when the new shape is
    /// estimated faster than the current one by more than this fraction
    /// (default 0.05), so estimates that wobble around a tie do not flip it.
    pub hysteresis: f64,
    /// A move to a new memory layout is made only when its decode round is
    /// estimated faster than the current plans' (estimated and measured)
    /// by more than this fraction (default 0.02). Lower than
    /// [`Self::hysteresis`]: a move must also win back its copies within
    /// [`crate::planner::PAYBACK_ROUNDS`] rounds, and no other move is
    /// taken until that many have run, so it cannot flap. At 5% the 2 GB
    /// load experiment kept a layout the search found 2-3% slower under CPU
    /// pressure (`docs/scheduling.md`).
    pub move_hysteresis: f64,
    /// Decode rounds each candidate decode plan runs in the audition at the
    /// first decode (the first of them a warm-up); 0 turns auditions off
    /// (default 6). See [`crate::planner`].
    pub audition_rounds: usize,
}

impl Default for ReschedConfig {
    fn default() -> Self {
        Self {
            epsilon: 0.15,
            tau: Tau::TpotMultiple(5.0),
            alpha: 0.25,
            hysteresis: 0.05,
            move_hysteresis: 0.02,
            audition_rounds: 6,
        }
    }
}

/// Why the current plan is kept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum KeepReason {
    /// Nothing observed since the plan was made.
    NoObservations,
    /// The deviation is within epsilon.
    WithinEpsilon { deviation: f64 },
    /// `tau` is a TPOT multiple and no TPOT has been observed yet.
    NoTpot { deviation: f64 },
    /// Less than `tau` has passed since the plan.
    TooSoon {
        deviation: f64,
        elapsed: f64,
        tau: f64,
    },
}

/// The answer of [`Rescheduler::check`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Decision {
    /// Keep the current plan.
    Keep(KeepReason),
    /// Rebuild the plan from `costs` (now the snapshot).
    Replan { deviation: f64, costs: CostSnapshot },
}

/// Why an observation or check is rejected.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ReschedError {
    /// A configuration value out of range.
    #[error("rescheduler {name} = {value} is out of range ({expected})")]
    InvalidConfig {
        name: &'static str,
        value: f64,
        expected: &'static str,
    },
    /// Snapshot op and copy tables of different lengths.
    #[error("cost snapshot has {ops} op times but {copies} copy times")]
    SnapshotShape { ops: usize, copies: usize },
    /// A time is negative, NaN or infinite.
    #[error("{what} {value} is not a finite non-negative time")]
    InvalidTime { what: &'static str, value: f64 },
    /// An item index beyond the snapshot.
    #[error("item {index} is outside the plan's {items} items")]
    UnknownItem { index: usize, items: usize },
    /// The clock went backwards.
    #[error("time {now} is before the last plan at {plan_time}")]
    TimeWentBack { now: f64, plan_time: f64 },
}

/// The moving averages of observed times.
#[derive(Clone, Debug)]
struct Observed {
    ops: Vec<Option<f64>>,
    copies: Vec<Option<f64>>,
}

/// Decides when observed costs have drifted enough to rebuild the plan.
#[derive(Clone, Debug)]
pub struct Rescheduler {
    config: ReschedConfig,
    snapshot: CostSnapshot,
    observed: Observed,
    /// Whether anything was observed since the last plan.
    fresh: bool,
    tpot: Option<f64>,
    plan_time: f64,
}

impl Rescheduler {
    /// Starts tracking a plan built from `snapshot` at time `now` (seconds).
    pub fn new(
        config: ReschedConfig,
        snapshot: CostSnapshot,
        now: f64,
    ) -> Result<Self, ReschedError> {
        check_config(&config)?;
        check_snapshot(&snapshot)?;
        check_time("plan time", now)?;
        let n = snapshot.op_times.len();
        Ok(Self {
            config,
            snapshot,
            observed: Observed {
                ops: vec![None; n],
                copies: vec![None; n],
            },
            fresh: false,
            tpot: None,
            plan_time: now,
        })
    }

    /// The costs the current plan was built from.
    pub fn snapshot(&self) -> &CostSnapshot {
        &self.snapshot
    }

    /// The moving average of observed time per output token, if any.
    pub fn tpot(&self) -> Option<f64> {
        self.tpot
    }

    /// The current `tau` in seconds, if known.
    pub fn tau_seconds(&self) -> Option<f64> {
        match self.config.tau {
            Tau::Seconds(s) => Some(s),
            Tau::TpotMultiple(m) => self.tpot.map(|t| m * t),
        }
    }

    /// Records an observed op time of item `index`.
    pub fn observe_op(&mut self, index: usize, seconds: f64) -> Result<(), ReschedError> {
        check_time("op time", seconds)?;
        let items = self.observed.ops.len();
        let slot = self
            .observed
            .ops
            .get_mut(index)
            .ok_or(ReschedError::UnknownItem { index, items })?;
        *slot = Some(ema(*slot, seconds, self.config.alpha));
        self.fresh = true;
        Ok(())
    }

    /// Records an observed weight-copy time of item `index`.
    pub fn observe_copy(&mut self, index: usize, seconds: f64) -> Result<(), ReschedError> {
        check_time("copy time", seconds)?;
        let items = self.observed.copies.len();
        let slot = self
            .observed
            .copies
            .get_mut(index)
            .ok_or(ReschedError::UnknownItem { index, items })?;
        *slot = Some(ema(*slot, seconds, self.config.alpha));
        self.fresh = true;
        Ok(())
    }

    /// Records an observed time per output token (for `tau`).
    pub fn observe_tpot(&mut self, seconds: f64) -> Result<(), ReschedError> {
        check_time("TPOT", seconds)?;
        self.tpot = Some(ema(self.tpot, seconds, self.config.alpha));
        Ok(())
    }

    /// The relative deviation of the averages from the snapshot (module docs).
    pub fn deviation(&self) -> f64 {
        let ops = relative_deviation(&self.snapshot.op_times, &self.observed.ops);
        let copies = relative_deviation(&self.snapshot.copy_times, &self.observed.copies);
        ops.max(copies).max(self.gpu_deviation())
    }

    /// The deviation of the GPU's op items alone, if they hold at least
    /// [`GROUP_SHARE`] of the snapshot's op time (else 0).
    fn gpu_deviation(&self) -> f64 {
        let on_gpu = &self.snapshot.on_gpu;
        if on_gpu.len() != self.snapshot.op_times.len() {
            return 0.0;
        }
        let gpu_time: f64 = (self.snapshot.op_times.iter().zip(on_gpu))
            .filter_map(|(s, g)| g.then_some(s))
            .sum();
        if gpu_time < GROUP_SHARE * self.snapshot.op_times.iter().sum::<f64>() {
            return 0.0;
        }
        let rows = (self.snapshot.op_times.iter().zip(&self.observed.ops)).zip(on_gpu);
        deviation_of(rows.filter_map(|((s, o), g)| g.then_some((*s, *o))))
    }

    /// Whether to rebuild the plan at time `now`; on `Replan` the averages
    /// become the snapshot and `now` the plan time.
    pub fn check(&mut self, now: f64) -> Result<Decision, ReschedError> {
        check_time("check time", now)?;
        if now < self.plan_time {
            return Err(ReschedError::TimeWentBack {
                now,
                plan_time: self.plan_time,
            });
        }
        if !self.fresh {
            return Ok(Decision::Keep(KeepReason::NoObservations));
        }
        let deviation = self.deviation();
        if deviation <= self.config.epsilon {
            return Ok(Decision::Keep(KeepReason::WithinEpsilon { deviation }));
        }
        let Some(tau) = self.tau_seconds() else {
            return Ok(Decision::Keep(KeepReason::NoTpot { deviation }));
        };
        let elapsed = now - self.plan_time;
        if elapsed < tau {
            return Ok(Decision::Keep(KeepReason::TooSoon {
                deviation,
                elapsed,
                tau,
            }));
        }
        let costs = self.current_costs();
        self.replanned(costs.clone(), now)?;
        Ok(Decision::Replan { deviation, costs })
    }

    /// The best current estimate per item: the average where observed, else the snapshot.
    pub fn current_costs(&self) -> CostSnapshot {
        let merge = |snap: &[f64], obs: &[Option<f64>]| -> Vec<f64> {
            snap.iter().zip(obs).map(|(s, o)| o.unwrap_or(*s)).collect()
        };
        CostSnapshot {
            op_times: merge(&self.snapshot.op_times, &self.observed.ops),
            copy_times: merge(&self.snapshot.copy_times, &self.observed.copies),
            on_gpu: self.snapshot.on_gpu.clone(),
        }
    }

    /// Takes the measured averages as the reference at `now`, for a plan
    /// kept after a re-plan: the estimates did not explain what it measured
    /// (a re-plan with them changed nothing), so from now on only a change
    /// of its measured times is drift.
    pub fn rebase(&mut self, now: f64) -> Result<(), ReschedError> {
        check_time("plan time", now)?;
        self.snapshot = self.current_costs();
        self.plan_time = now;
        self.fresh = false;
        Ok(())
    }

    /// Records a plan rebuilt at `now` from `snapshot` (for re-plans the caller
    /// makes for other reasons). The moving averages carry on and are measured
    /// against the new snapshot; `check` waits for a new observation.
    pub fn replanned(&mut self, snapshot: CostSnapshot, now: f64) -> Result<(), ReschedError> {
        check_snapshot(&snapshot)?;
        check_time("plan time", now)?;
        let n = snapshot.op_times.len();
        if n != self.observed.ops.len() {
            // A plan over different items: earlier averages do not apply.
            self.observed = Observed {
                ops: vec![None; n],
                copies: vec![None; n],
            };
        }
        // an item the new plan does not copy will not be observed copying:
        // its old average would count as drift for as long as the plan runs
        for (o, &s) in self.observed.copies.iter_mut().zip(&snapshot.copy_times) {
            if s == 0.0 {
                *o = None;
            }
        }
        self.snapshot = snapshot;
        self.plan_time = now;
        self.fresh = false;
        Ok(())
    }
}

fn ema(prev: Option<f64>, x: f64, alpha: f64) -> f64 {
    match prev {
        Some(p) => p + alpha * (x - p),
        None => x,
    }
}

/// `sum |avg - snap| / sum snap` over observed items; 0 when nothing is observed.
fn relative_deviation(snap: &[f64], obs: &[Option<f64>]) -> f64 {
    deviation_of(snap.iter().copied().zip(obs.iter().copied()))
}

/// `sum |observed - snapshot| / sum snapshot` over the items observed.
fn deviation_of(rows: impl Iterator<Item = (f64, Option<f64>)>) -> f64 {
    let (mut diff, mut base) = (0.0, 0.0);
    for (s, o) in rows {
        if let Some(o) = o {
            diff += (o - s).abs();
            base += s;
        }
    }
    if diff == 0.0 {
        0.0
    } else if base == 0.0 {
        f64::INFINITY
    } else {
        diff / base
    }
}

fn check_time(what: &'static str, value: f64) -> Result<(), ReschedError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(ReschedError::InvalidTime { what, value })
    }
}

fn check_snapshot(s: &CostSnapshot) -> Result<(), ReschedError> {
    if s.op_times.len() != s.copy_times.len()
        || !(s.on_gpu.is_empty() || s.on_gpu.len() == s.op_times.len())
    {
        return Err(ReschedError::SnapshotShape {
            ops: s.op_times.len(),
            copies: s.copy_times.len(),
        });
    }
    for &t in &s.op_times {
        check_time("snapshot op time", t)?;
    }
    for &t in &s.copy_times {
        check_time("snapshot copy time", t)?;
    }
    Ok(())
}

fn check_config(c: &ReschedConfig) -> Result<(), ReschedError> {
    let bad = |name, value, expected| {
        Err(ReschedError::InvalidConfig {
            name,
            value,
            expected,
        })
    };
    if !(c.epsilon.is_finite() && c.epsilon >= 0.0) {
        return bad("epsilon", c.epsilon, "finite, >= 0");
    }
    if !(c.alpha > 0.0 && c.alpha <= 1.0) {
        return bad("alpha", c.alpha, "in (0, 1]");
    }
    if !(c.hysteresis >= 0.0 && c.hysteresis < 1.0) {
        return bad("hysteresis", c.hysteresis, "in [0, 1)");
    }
    if !(c.move_hysteresis >= 0.0 && c.move_hysteresis < 1.0) {
        return bad("move hysteresis", c.move_hysteresis, "in [0, 1)");
    }
    if c.audition_rounds == 1 {
        return bad(
            "audition rounds",
            1.0,
            "0 (off) or at least 2 (a warm-up and a measured round)",
        );
    }
    match c.tau {
        Tau::TpotMultiple(m) if !(m.is_finite() && m >= 0.0) => {
            bad("tau multiple", m, "finite, >= 0")
        }
        Tau::Seconds(s) if !(s.is_finite() && s >= 0.0) => bad("tau seconds", s, "finite, >= 0"),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> CostSnapshot {
        CostSnapshot {
            op_times: vec![0.010, 0.020, 0.030, 0.040],
            copy_times: vec![0.0, 0.005, 0.005, 0.0],
            on_gpu: vec![],
        }
    }

    /// alpha = 1: the average is the last observation, so scripts are exact.
    fn config(tau: Tau) -> ReschedConfig {
        ReschedConfig {
            epsilon: 0.15,
            tau,
            alpha: 1.0,
            ..ReschedConfig::default()
        }
    }

    fn observe_all_ops(r: &mut Rescheduler, scale: f64) {
        for (i, t) in snapshot().op_times.iter().enumerate() {
            r.observe_op(i, t * scale).unwrap();
        }
    }

    fn is_replan(d: &Decision) -> bool {
        matches!(d, Decision::Replan { .. })
    }

    #[test]
    fn no_replan_under_threshold() {
        let mut r = Rescheduler::new(config(Tau::Seconds(1.0)), snapshot(), 0.0).unwrap();
        assert_eq!(
            r.check(10.0).unwrap(),
            Decision::Keep(KeepReason::NoObservations)
        );
        observe_all_ops(&mut r, 1.10);
        match r.check(10.0).unwrap() {
            Decision::Keep(KeepReason::WithinEpsilon { deviation }) => {
                assert!((deviation - 0.10).abs() < 1e-12)
            }
            d => panic!("{d:?}"),
        }
        // Faster by 14% also stays.
        observe_all_ops(&mut r, 0.86);
        assert!(!is_replan(&r.check(20.0).unwrap()));
    }

    #[test]
    fn no_replan_within_tau() {
        let mut r = Rescheduler::new(config(Tau::Seconds(2.0)), snapshot(), 1.0).unwrap();
        observe_all_ops(&mut r, 1.5);
        match r.check(2.5).unwrap() {
            Decision::Keep(KeepReason::TooSoon {
                deviation,
                elapsed,
                tau,
            }) => {
                assert!((deviation - 0.5).abs() < 1e-12);
                assert_eq!((elapsed, tau), (1.5, 2.0));
            }
            d => panic!("{d:?}"),
        }
        assert!(is_replan(&r.check(3.0).unwrap()));
    }

    #[test]
    fn replan_when_both_hold_and_snapshot_resets() {
        let mut r = Rescheduler::new(config(Tau::Seconds(1.0)), snapshot(), 0.0).unwrap();
        // A slower copy engine alone (e.g. a game using PCIe) is enough.
        r.observe_copy(1, 0.010).unwrap();
        r.observe_copy(2, 0.005).unwrap();
        let d = r.check(5.0).unwrap();
        let Decision::Replan { deviation, costs } = d else {
            panic!("{d:?}")
        };
        assert!((deviation - 0.5).abs() < 1e-12);
        assert_eq!(costs.copy_times, vec![0.0, 0.010, 0.005, 0.0]);
        assert_eq!(costs.op_times, snapshot().op_times);
        assert_eq!(r.snapshot(), &costs);
        // The same times again: no deviation from the new snapshot.
        r.observe_copy(1, 0.010).unwrap();
        match r.check(100.0).unwrap() {
            Decision::Keep(KeepReason::WithinEpsilon { deviation }) => assert_eq!(deviation, 0.0),
            d => panic!("{d:?}"),
        }
        // tau counts from the re-plan at 5.0.
        r.observe_copy(1, 0.020).unwrap();
        let mut r2 = r.clone();
        r2.replanned(r.snapshot().clone(), 100.0).unwrap();
        r2.observe_copy(1, 0.020).unwrap();
        assert!(matches!(
            r2.check(100.5).unwrap(),
            Decision::Keep(KeepReason::TooSoon { .. })
        ));
        assert!(is_replan(&r.check(100.0).unwrap()));
    }

    #[test]
    fn a_rebased_plan_drifts_only_when_its_measurements_change() {
        let mut r = Rescheduler::new(config(Tau::Seconds(1.0)), snapshot(), 0.0).unwrap();
        // the estimates are 40% off and stay so: a re-plan kept the plan
        observe_all_ops(&mut r, 1.4);
        assert!(r.deviation() > 0.15);
        r.rebase(2.0).unwrap();
        assert_eq!(
            r.check(10.0).unwrap(),
            Decision::Keep(KeepReason::NoObservations)
        );
        observe_all_ops(&mut r, 1.4);
        match r.check(10.0).unwrap() {
            Decision::Keep(KeepReason::WithinEpsilon { deviation }) => {
                assert!(deviation.abs() < 1e-12)
            }
            d => panic!("{d:?}"),
        }
        // the load changes: 1.4 -> 2.1 is drift again
        observe_all_ops(&mut r, 2.1);
        assert!(is_replan(&r.check(10.0).unwrap()));
    }

    /// The GPU items of a plan that runs mostly on the CPU: a GPU 2.5x
    /// faster is drift when they hold enough of the op time, noise when
    /// they hold too little.
    #[test]
    fn the_gpus_items_drift_on_their_own_when_they_hold_a_share() {
        let gpu_faster = |on_gpu: Vec<bool>| {
            let snap = CostSnapshot {
                on_gpu,
                ..snapshot()
            };
            let mut r = Rescheduler::new(config(Tau::Seconds(0.0)), snap, 0.0).unwrap();
            for (i, t) in snapshot().op_times.iter().enumerate() {
                let gpu = r.snapshot().on_gpu.get(i).copied().unwrap_or(false);
                r.observe_op(i, if gpu { t / 2.5 } else { *t }).unwrap();
            }
            r.deviation()
        };
        // item 1 on the GPU: 20% of the op time, 12% of the whole saved
        let held = gpu_faster(vec![false, true, false, false]);
        assert!((held - 0.6).abs() < 1e-9, "{held}");
        assert!((gpu_faster(vec![true, true, false, false]) - 0.6).abs() < 1e-9);
        // the device not known: nothing moved
        assert_eq!(gpu_faster(vec![]), 0.0);
        // GPU items with 1% of the op time: only the whole plan's deviation
        let tiny = CostSnapshot {
            op_times: vec![0.001, 0.1],
            copy_times: vec![0.0, 0.0],
            on_gpu: vec![true, false],
        };
        let mut r = Rescheduler::new(config(Tau::Seconds(0.0)), tiny, 0.0).unwrap();
        r.observe_op(0, 0.0004).unwrap();
        r.observe_op(1, 0.1).unwrap();
        assert!(r.deviation() < 0.01, "{}", r.deviation());
        let bad = CostSnapshot {
            on_gpu: vec![true],
            ..snapshot()
        };
        assert!(Rescheduler::new(ReschedConfig::default(), bad, 0.0).is_err());
    }

    #[test]
    fn a_plan_that_stops_copying_an_item_forgets_its_copy_average() {
        let mut r = Rescheduler::new(config(Tau::Seconds(1.0)), snapshot(), 0.0).unwrap();
        r.observe_copy(1, 0.005).unwrap();
        r.observe_copy(2, 0.005).unwrap();
        // the new plan streams item 2 only, its copies estimated 3x slower
        let next = CostSnapshot {
            op_times: snapshot().op_times,
            copy_times: vec![0.0, 0.0, 0.015, 0.0],
            on_gpu: vec![],
        };
        r.replanned(next, 1.0).unwrap();
        r.observe_copy(2, 0.015).unwrap();
        // item 1's old average no longer counts against the plan
        assert!(r.deviation().abs() < 1e-12, "{}", r.deviation());
        assert_eq!(r.current_costs().copy_times[1], 0.0);
    }

    #[test]
    fn tau_from_tpot() {
        let mut r = Rescheduler::new(config(Tau::TpotMultiple(5.0)), snapshot(), 0.0).unwrap();
        observe_all_ops(&mut r, 2.0);
        assert!(matches!(
            r.check(1.0).unwrap(),
            Decision::Keep(KeepReason::NoTpot { .. })
        ));
        r.observe_tpot(0.1).unwrap();
        assert_eq!(r.tau_seconds(), Some(0.5));
        assert!(matches!(
            r.check(0.4).unwrap(),
            Decision::Keep(KeepReason::TooSoon { .. })
        ));
        assert!(is_replan(&r.check(0.5).unwrap()));
    }

    #[test]
    fn moving_average_smooths_spikes() {
        let cfg = ReschedConfig {
            tau: Tau::Seconds(0.0),
            ..ReschedConfig::default()
        };
        let mut r = Rescheduler::new(cfg, snapshot(), 0.0).unwrap();
        // Every op shifts to 1.5x: with weight 0.25 the average is +12.5% after
        // one sample (kept) and +21.9% after two (re-plan).
        observe_all_ops(&mut r, 1.0);
        observe_all_ops(&mut r, 1.5);
        assert!((r.deviation() - 0.125).abs() < 1e-12);
        assert!(!is_replan(&r.check(1.0).unwrap()));
        observe_all_ops(&mut r, 1.5);
        assert!((r.deviation() - 0.21875).abs() < 1e-12);
        assert!(is_replan(&r.check(1.0).unwrap()));
    }

    #[test]
    fn rejects_bad_input() {
        let bad_eps = ReschedConfig {
            epsilon: f64::NAN,
            ..ReschedConfig::default()
        };
        assert!(matches!(
            Rescheduler::new(bad_eps, snapshot(), 0.0),
            Err(ReschedError::InvalidConfig {
                name: "epsilon",
                ..
            })
        ));
        let shape = CostSnapshot {
            op_times: vec![1.0],
            copy_times: vec![],
            on_gpu: vec![],
        };
        assert_eq!(
            Rescheduler::new(ReschedConfig::default(), shape, 0.0).err(),
            Some(ReschedError::SnapshotShape { ops: 1, copies: 0 })
        );
        let mut r = Rescheduler::new(ReschedConfig::default(), snapshot(), 5.0).unwrap();
        assert_eq!(
            r.observe_op(4, 1.0),
            Err(ReschedError::UnknownItem { index: 4, items: 4 })
        );
        assert!(matches!(
            r.observe_copy(0, -1.0),
            Err(ReschedError::InvalidTime { .. })
        ));
        assert_eq!(
            r.check(4.0),
            Err(ReschedError::TimeWentBack {
                now: 4.0,
                plan_time: 5.0
            })
        );
    }
}
