//! Adapting the plans as rounds run: the decode audition at the first
//! decode rounds, load-aware re-plans when measured times drift from the
//! estimates, and layout moves when moving weights pays for itself.
//!
//! The planner never switches plans by itself: it proposes a
//! [`PlanChange`]; the session gives its plans to the executor and then
//! [`Planner::commit`]s the change, or [`Planner::reject`]s it when the
//! executor refused (the plans stay what the executor runs). Failures on
//! the way (a re-plan the algorithms refused, a measurement the
//! re-scheduler rejected, a change the executor refused) are counted in
//! [`ReplanStats`] and logged at debug level, never dropped.

use ats_core::graph::cost::RoundShape;
use ats_core::machine::DeviceId;
use serde::Serialize;

use super::audition::{Audition, AuditionReport, Step};
use super::tier_plan::secs_at;
use super::{PlanError, PlanKind, PlanSet, Planner, TierEntry};
use crate::exec::{ExecPlan, RoundStats};
use crate::profile::NodeAt;
use crate::rescheduler::{CostSnapshot, Decision, ReschedConfig, Rescheduler};

/// Decode rounds within which a re-plan that moves weights must win back
/// the time of the copies (a move is a bet that the load lasts this long),
/// and the least number of decode rounds between two moves.
pub const PAYBACK_ROUNDS: f64 = 64.0;

/// A re-audition measures only shapes estimated within this factor of the
/// current plan's measured round (see [`Planner::reaudition`]).
const REAUDITION_RANGE: f64 = 2.0;

/// How often the plans changed, and what failed on the way.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReplanStats {
    /// Re-plans that changed a plan.
    pub replans: usize,
    /// Re-plans the re-scheduler asked for that kept every plan.
    pub refreshes: usize,
    /// Re-plans that changed the memory layout (weights or KV caches moved).
    pub relayouts: usize,
    /// Re-plans the planning algorithms refused (the plans were kept).
    pub failed: usize,
    /// Changes the executor refused (the plans were kept).
    pub rejected: usize,
    /// Measurements the re-scheduler refused (not finite, or not of this plan).
    pub bad_observations: usize,
    /// The last failure's message.
    pub last_failure: Option<String>,
}

impl ReplanStats {
    /// Whether anything failed.
    pub fn any_failure(&self) -> bool {
        self.failed + self.rejected + self.bad_observations > 0
    }

    fn fail(&mut self, what: &str, e: impl std::fmt::Display) {
        tracing::debug!("{what}: {e}");
        self.last_failure = Some(format!("{what}: {e}"));
    }
}

/// Why the planner proposes new plans.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeReason {
    /// The decode audition runs its next candidate, or installs its winner.
    Audition,
    /// Measured times drifted: the tiers were re-planned in the same layout.
    Replan,
    /// A new layout (weights or KV caches move) pays for itself.
    Relayout,
    /// The caller asked for these plans.
    Requested,
}

/// What the re-scheduler measures later rounds against once a change is
/// committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reference {
    /// The new plans' estimates.
    Estimates,
    /// The plans that ran before an audition stay: what they measured.
    Measured,
    /// Nothing changes yet (an audition's candidate takes its turn).
    Unchanged,
}

/// New plans the session should give the executor, then commit or reject.
#[derive(Debug)]
pub struct PlanChange {
    set: PlanSet,
    reason: ChangeReason,
    /// An audition that starts once the change is committed.
    audition: Option<Audition>,
    reference: Reference,
}

impl PlanChange {
    /// The plans to run.
    pub fn plans(&self) -> &[ExecPlan] {
        &self.set.plans
    }

    /// The plan set.
    pub fn set(&self) -> &PlanSet {
        &self.set
    }

    /// Why.
    pub fn reason(&self) -> ChangeReason {
        self.reason
    }
}

/// Where the decode audition is.
enum AuditionState {
    /// Not started: it starts at the first decode round.
    NotYet,
    /// Running.
    Running(Audition),
    /// Done (or off).
    Over,
}

/// The planner's adaptive state.
pub(super) struct Adaptation {
    resched: Option<Rescheduler>,
    cfg: ReschedConfig,
    /// Seconds of the rounds observed so far: the re-scheduler's clock.
    busy_secs: f64,
    audition: AuditionState,
    pub last_audition: Option<AuditionReport>,
    /// Per-shape corrections of decode estimates, learned by auditions.
    pub bias: Vec<(PlanKind, f64)>,
    /// Decode rounds since the layout last changed (or since the start).
    rounds_since_move: usize,
    /// An audition at the first decode or after a drift ran: plan once
    /// more when it is over ([`Planner::settled_replan`]).
    replan_after_audition: bool,
    pub stats: ReplanStats,
    has_gpu: bool,
}

impl Adaptation {
    pub fn new(has_gpu: bool, cfg: ReschedConfig) -> Adaptation {
        Adaptation {
            resched: None,
            cfg,
            busy_secs: 0.0,
            audition: AuditionState::NotYet,
            last_audition: None,
            bias: Vec::new(),
            rounds_since_move: 0,
            replan_after_audition: false,
            stats: ReplanStats::default(),
            has_gpu,
        }
    }

    /// Starts the re-scheduler from the first plans (only with a GPU: there
    /// is nothing to re-plan without one).
    pub fn start(&mut self, set: &PlanSet) -> Result<(), PlanError> {
        if self.has_gpu {
            let r = Rescheduler::new(self.cfg.clone(), snapshot(set), 0.0)
                .map_err(|e| PlanError::Algorithm(format!("re-scheduler: {e}")))?;
            self.resched = Some(r);
        }
        Ok(())
    }

    pub fn auditioning(&self) -> bool {
        matches!(self.audition, AuditionState::Running(_))
    }

    fn end_audition(&mut self) {
        self.audition = AuditionState::Over;
    }

    /// Tells the re-scheduler that the plans it watches stay, and their
    /// measured times are the reference now.
    fn note_kept(&mut self) {
        let now = self.busy_secs;
        if let Some(rs) = &mut self.resched
            && let Err(e) = rs.rebase(now)
        {
            self.stats.bad_observations += 1;
            self.stats.fail("re-scheduler rebase", e);
        }
    }

    /// Tells the re-scheduler that `set`'s estimates are the reference now.
    fn note_replanned(&mut self, set: &PlanSet) {
        let now = self.busy_secs;
        if let Some(rs) = &mut self.resched
            && let Err(e) = rs.replanned(snapshot(set), now)
        {
            self.stats.bad_observations += 1;
            self.stats.fail("re-scheduler snapshot", e);
        }
    }
}

impl Planner {
    /// Takes a round's measurements into the cost model and the
    /// re-scheduler, and proposes new plans when the audition or the
    /// measurements call for them.
    pub fn observe(&mut self, stats: &RoundStats, shape: RoundShape) -> Option<PlanChange> {
        self.adapt.busy_secs += stats.total_secs.max(0.0);
        // Without a GPU there is nothing to place or re-plan: learning every
        // node's time would cost 2% of a small model's decode for no reader.
        self.gpu.as_ref()?;
        self.learn_costs(stats, shape);
        if shape.n_tokens != 1 {
            return None;
        }
        self.adapt.rounds_since_move += 1;
        if let Some(step) = self.audition_step(stats.total_secs) {
            return step;
        }
        if std::mem::take(&mut self.adapt.replan_after_audition) {
            return self.settled_replan();
        }
        self.observe_drift(stats);
        self.maybe_replan()
    }

    /// Node and copy times into the cost model.
    fn learn_costs(&mut self, stats: &RoundStats, shape: RoundShape) {
        let kv_f16 = self.run.kv_type == ats_core::device::KvType::F16;
        let (bytes, secs) = gpu_copies(stats);
        // A decode round that streams weights runs some host items beside
        // the copies: their times go in at the speed alone the plan's
        // estimate implies, so that they say how loaded the host is and can
        // price plans that copy differently (or not at all).
        let slowdown = if bytes > 0 && shape.n_tokens == 1 {
            self.node_slowdowns()
        } else {
            Vec::new()
        };
        for &(node, d, secs) in &stats.node_secs {
            let f = match d {
                DeviceId::Host => slowdown.get(node).copied().unwrap_or(1.0),
                _ => 1.0,
            };
            let at = NodeAt {
                g: &self.graph,
                node,
                shape,
                kv_f16,
            };
            self.cost.observe(at, d, secs / f);
        }
        if bytes > 0 {
            self.cost.observe_copy(DeviceId::Gpu, bytes as f64, secs);
        }
    }

    /// Per graph node: the current decode plan's estimated slowdown of its
    /// item beside weight copies (1 where none overlaps it).
    fn node_slowdowns(&self) -> Vec<f64> {
        let mut f = vec![1.0; self.graph.nodes.len()];
        for (it, e) in self.set.layout.items.iter().zip(&self.set.decode) {
            for &n in &it.nodes {
                if let Some(x) = f.get_mut(n) {
                    *x = e.slowdown.max(1.0);
                }
            }
        }
        f
    }

    /// A decode round's item and copy times against the re-scheduler's snapshot.
    fn observe_drift(&mut self, stats: &RoundStats) {
        let Some(rs) = &mut self.adapt.resched else {
            return;
        };
        let mut this_round: std::collections::HashMap<usize, f64> = Default::default();
        for &(node, _, secs) in &stats.node_secs {
            *this_round.entry(node).or_default() += secs;
        }
        let mut bad = Vec::new();
        if let Err(e) = rs.observe_tpot(stats.total_secs) {
            bad.push(e);
        }
        for (i, it) in self.set.layout.items.iter().enumerate() {
            let times: Option<f64> = it.nodes.iter().map(|n| this_round.get(n).copied()).sum();
            if let Some(s) = times
                && let Err(e) = rs.observe_op(i, s)
            {
                bad.push(e);
            }
        }
        let (bytes, secs) = gpu_copies(stats);
        if bytes > 0 {
            // copies are logged in bulk: scale each streamed item's estimate
            // by the observed over assumed seconds per byte
            let factor = (secs / bytes as f64 * 1e9) / self.set.copy_secs_per_gb.max(1e-12);
            for (i, e) in self.set.decode.iter().enumerate() {
                if streamed(&self.set, i)
                    && e.copy_secs.is_finite()
                    && let Err(err) = rs.observe_copy(i, e.copy_secs * factor)
                {
                    bad.push(err);
                }
            }
        }
        for e in bad {
            self.adapt.stats.bad_observations += 1;
            self.adapt.stats.fail("re-scheduler observation", e);
        }
    }

    /// Feeds a decode round to the audition (starting it at the first
    /// decode). `None`: no audition runs, the round tells about drift;
    /// `Some(change)`: the audition took the round (and maybe proposes its
    /// next candidate or its winner).
    fn audition_step(&mut self, secs: f64) -> Option<Option<PlanChange>> {
        if matches!(self.adapt.audition, AuditionState::NotYet) {
            self.adapt.audition = AuditionState::Over;
            let candidates = self.audition_candidates();
            if self.run.resched.audition_rounds == 0 || candidates.len() < 2 {
                return None;
            }
            // this round ran the planner's choice: it is that candidate's warm-up
            let candidates = self.priced_now(candidates);
            let a = Audition::new(candidates, self.run.resched.audition_rounds);
            self.adapt.audition = AuditionState::Running(a);
            // the first plans rest on the profile alone
            self.adapt.replan_after_audition = true;
        }
        let AuditionState::Running(a) = &mut self.adapt.audition else {
            return None;
        };
        let change = |set: PlanSet, reference| PlanChange {
            set,
            reason: ChangeReason::Audition,
            audition: None,
            reference,
        };
        Some(match a.record(secs) {
            Step::Continue => None,
            Step::Switch(i) => Some(change(a.candidate(i).clone(), Reference::Unchanged)),
            Step::Done(report) => {
                let winner = a.candidate(report.winner).clone();
                // shapes this audition measured take their new correction;
                // the others keep what an earlier audition learned
                let fresh = report.bias();
                self.adapt.bias.retain(|b| fresh.iter().all(|f| f.0 != b.0));
                self.adapt.bias.extend(fresh);
                // candidate 0 is the plans that ran before the audition
                let reference = if report.winner == 0 {
                    Reference::Measured
                } else {
                    Reference::Estimates
                };
                self.adapt.last_audition = Some(report);
                self.adapt.end_audition();
                Some(change(winner, reference))
            }
        })
    }

    /// The distinct decode plans of the allowed shapes, each with the
    /// shapes it stands for; the current choice first.
    fn audition_candidates(&mut self) -> Vec<(PlanSet, Vec<PlanKind>)> {
        let cur = self.set.clone();
        let Some(t1) = cur.decode_tier().cloned() else {
            return Vec::new();
        };
        let mut out: Vec<(PlanSet, Vec<PlanKind>)> = vec![(cur.clone(), vec![t1.kind])];
        for &(kind, est) in &t1.estimates {
            if est.is_none() || kind == t1.kind {
                continue;
            }
            let forced = match self.plans_forced(kind) {
                Ok(Some(f)) => f,
                Ok(None) => continue,
                Err(e) => {
                    self.adapt.stats.failed += 1;
                    self.adapt.stats.fail("audition candidate", e);
                    continue;
                }
            };
            let Some(f1) = forced.tiers.first() else {
                continue;
            };
            let plan = &forced.plans[f1.plan];
            if let Some(same) = out
                .iter_mut()
                .find(|c| &c.0.plans[c.0.tiers[0].plan] == plan)
            {
                same.1.push(kind);
                continue;
            }
            // the current plans with only the decode tier replaced
            let mut c = with_decode_plan(&cur, plan, f1.clone());
            c.decode = forced.decode.clone();
            out.push((c, vec![kind]));
        }
        out
    }

    /// Audition candidates with their decode rounds priced at the current
    /// costs and without the shapes' corrections: an estimate made when a
    /// plan was chosen rests on costs learned since (the first plan's, on
    /// the profile alone, was 28% above its run on `rtx3060-laptop`, and
    /// every other shape's correction took that error), and the corrections
    /// an audition reports replace the earlier ones rather than multiply
    /// them. A candidate that cannot be priced keeps its estimate.
    fn priced_now(
        &mut self,
        mut candidates: Vec<(PlanSet, Vec<PlanKind>)>,
    ) -> Vec<(PlanSet, Vec<PlanKind>)> {
        let mut failures = Vec::new();
        {
            let ctx = self.ctx(None);
            for (set, _) in &mut candidates {
                let Some(e) = set.tiers.first() else {
                    continue;
                };
                let (resident, streaming) = (&set.layout.resident, set.layout.streaming);
                match secs_at(&ctx, &e.on_gpu, resident, streaming, ctx.decode_shape()) {
                    Ok(secs) => set.tiers[0].est_secs = secs,
                    Err(err) => failures.push(err),
                }
            }
        }
        for err in failures {
            self.adapt.stats.failed += 1;
            self.adapt.stats.fail("audition estimate", err);
        }
        candidates
    }

    /// A re-plan when the re-scheduler says the measurements drifted.
    fn maybe_replan(&mut self) -> Option<PlanChange> {
        let now = self.adapt.busy_secs;
        let rs = self.adapt.resched.as_mut()?;
        match rs.check(now) {
            Ok(Decision::Replan { .. }) => self.rebuild(true),
            Ok(Decision::Keep(_)) => None,
            Err(e) => {
                self.adapt.stats.bad_observations += 1;
                self.adapt.stats.fail("re-scheduler check", e);
                None
            }
        }
    }

    /// Re-runs the per-tier plans with the live costs, keeping the layout
    /// (`None` without a GPU, or when the re-plan failed: see
    /// [`Planner::replan_stats`]).
    pub fn replan_now(&mut self) -> Option<PlanChange> {
        self.rebuild(false)
    }

    /// Proposes `set` (of the current layout) as the plans to run, for
    /// experiments that measure plans the planner did not choose; ends any
    /// audition, which would otherwise replace them.
    pub fn request(&mut self, set: PlanSet) -> PlanChange {
        self.adapt.end_audition();
        PlanChange {
            set,
            reason: ChangeReason::Requested,
            audition: None,
            reference: Reference::Estimates,
        }
    }

    /// The executor runs `change`'s plans now: they become the current ones.
    pub fn commit(&mut self, change: PlanChange) {
        match change.reason {
            ChangeReason::Audition | ChangeReason::Requested => {}
            ChangeReason::Replan => self.adapt.stats.replans += 1,
            ChangeReason::Relayout => {
                self.adapt.stats.replans += 1;
                self.adapt.stats.relayouts += 1;
                self.adapt.rounds_since_move = 0;
            }
        }
        match change.reference {
            Reference::Estimates => self.adapt.note_replanned(&change.set),
            Reference::Measured => self.adapt.note_kept(),
            Reference::Unchanged => {}
        }
        if let Some(a) = change.audition {
            self.adapt.audition = AuditionState::Running(a);
        }
        self.peak_planned = self.peak_planned.max(change.set.layout.peak_bytes());
        self.set = change.set;
    }

    /// The executor refused `change` (`why`): the current plans stay, an
    /// audition in progress ends with them.
    pub fn reject(&mut self, change: PlanChange, why: &str) {
        self.adapt.stats.rejected += 1;
        self.adapt.stats.fail(
            &format!("the executor refused a {:?} change", change.reason),
            why,
        );
        self.adapt.end_audition();
    }

    /// Re-plans; with `only_if_changed` (the load-aware loop), a change
    /// only when the decode plan changes (see [`Planner::replan_in_layout`]);
    /// without (a re-plan asked for), always the fresh plans.
    fn rebuild(&mut self, only_if_changed: bool) -> Option<PlanChange> {
        self.gpu.as_ref()?;
        let new = match self.plan_in_layout(&self.set, None) {
            Ok(s) => s,
            Err(e) => {
                self.adapt.stats.failed += 1;
                self.adapt.stats.fail("re-plan", e);
                return None;
            }
        };
        if !only_if_changed {
            // a re-plan asked for: a move that pays, else the fresh plans
            if let Some(change) = self.move_if_it_pays(&new, false) {
                return Some(change);
            }
        } else if self.run.resched.audition_rounds == 0 {
            // without auditions a drift's move is now or never
            if let Some(change) = self.move_if_it_pays(&new, true) {
                return Some(change);
            }
            return self.replan_in_layout(new);
        } else {
            // a drift is seen while the live costs are still moving: the
            // move waits for the re-plan after the audition the drift
            // starts (a move made the round a game ended, on costs half-way
            // back, left decode 7.7% slower than the static policy for
            // good); with no audition to wait for, it is weighed now
            return match self.replan_in_layout(new.clone()) {
                Some(c) => {
                    self.adapt.replan_after_audition |= c.audition.is_some();
                    Some(c)
                }
                None => self.move_if_it_pays(&new, true),
            };
        }
        Some(PlanChange {
            set: new,
            reason: ChangeReason::Replan,
            audition: None,
            reference: Reference::Estimates,
        })
    }

    /// A move to a new memory layout, when it pays against `same` (the
    /// re-plan that keeps the layout, [`Planner::relayout`]). With
    /// `after_rounds`, only once [`PAYBACK_ROUNDS`] rounds ran since the
    /// last move: a move is a bet on that many rounds, and the
    /// re-scheduler does not take another before they have run (no
    /// thrashing on noise).
    fn move_if_it_pays(&mut self, same: &PlanSet, after_rounds: bool) -> Option<PlanChange> {
        let settled = self.adapt.rounds_since_move >= PAYBACK_ROUNDS as usize;
        if after_rounds && !settled {
            return None;
        }
        let moved = self.relayout(same)?;
        Some(PlanChange {
            set: moved,
            reason: ChangeReason::Relayout,
            audition: None,
            reference: Reference::Estimates,
        })
    }

    /// A re-plan at a decode round, in the same layout: the executor
    /// switches only for a different decode plan, and measures it first:
    /// estimates from live costs taken under one plan (a CPU slowed by
    /// another plan's copies, routed experts that vary by token) can flip
    /// the ranking the last audition measured. A same-shape plan within the
    /// hysteresis, or new prompt tiers alone, are not worth a switch (each
    /// re-makes the executor's temp slots and schedules; on the H200, 22
    /// such switches in 134 rounds cost more than they saved): the prompt
    /// tiers are re-planned with the next switch.
    fn replan_in_layout(&mut self, new: PlanSet) -> Option<PlanChange> {
        match self.switch_to(new) {
            Switch::To(change) => Some(change),
            Switch::Kept(kept, new) => {
                // the current decode plan stays; the estimates could not
                // explain what it measures, so its measurements are the reference
                let fresh = kept.unwrap_or(*new);
                self.adapt.note_kept();
                self.adapt.stats.refreshes += 1;
                if same_plans(&fresh, &self.set) {
                    self.set = fresh;
                }
                self.reaudition()
            }
        }
    }

    /// The switch to `new`'s decode plan, auditioned against the current
    /// one, when it is estimated faster by more than the hysteresis.
    fn switch_to(&mut self, new: PlanSet) -> Switch {
        let hysteresis = self.run.resched.hysteresis;
        let rounds = self.run.resched.audition_rounds;
        match with_decode_of(&new, &self.set) {
            Some(keep) if worth_switching(&new, &self.set, hysteresis) => {
                let kinds = |set: &PlanSet| vec![set.tiers[0].kind];
                let audition = (rounds > 0).then(|| {
                    let pair = vec![(keep.clone(), kinds(&self.set)), (new.clone(), kinds(&new))];
                    Audition::new(self.priced_now(pair), rounds)
                });
                // without auditions the new plans are taken as they are
                let set = if audition.is_some() { keep } else { new };
                // with an audition, its end sets the reference
                let reference = if audition.is_some() {
                    Reference::Unchanged
                } else {
                    Reference::Estimates
                };
                Switch::To(PlanChange {
                    set,
                    reason: ChangeReason::Replan,
                    audition,
                    reference,
                })
            }
            kept => Switch::Kept(kept, Box::new(new)),
        }
    }

    /// The re-plan an audition owes: the first plans were made from the
    /// profile alone, and a drift that started a re-audition was seen when
    /// the live costs had taken only part of the new load in (a drift
    /// shows once an item's average has moved by the threshold), so those
    /// plans were made from them half-way. After the audition's rounds the
    /// live costs have caught up: plan again, and switch only when that
    /// pays (no further re-audition).
    fn settled_replan(&mut self) -> Option<PlanChange> {
        let new = match self.plan_in_layout(&self.set, None) {
            Ok(s) => s,
            Err(e) => {
                self.adapt.stats.failed += 1;
                self.adapt.stats.fail("re-plan after an audition", e);
                return None;
            }
        };
        if let Some(change) = self.move_if_it_pays(&new, true) {
            return Some(change);
        }
        match self.switch_to(new) {
            Switch::To(change) => Some(change),
            Switch::Kept(..) => None,
        }
    }

    /// After a drift the estimates kept the decode plan, but some of them
    /// rest on costs last measured under another load (a link not used
    /// since the plan stopped streaming still counts as slow; a device's
    /// load is seen only through the ops it runs): measure the shapes
    /// again for a few rounds rather than trust them. A shape estimated
    /// more than [`REAUDITION_RANGE`] times the current plan's measured
    /// round is left out: its rounds would cost more than a stale estimate
    /// can be off.
    fn reaudition(&mut self) -> Option<PlanChange> {
        let rounds = self.run.resched.audition_rounds;
        let measured = self.adapt.resched.as_ref().and_then(Rescheduler::tpot)?;
        if rounds == 0 {
            return None;
        }
        // a plan that copies nothing has not seen the link since it moved
        // off it: the candidates are priced at the profile's rate and the
        // audition measures them (priced at a game's 3x, a streaming plan
        // promoted nothing and was never tried again once the game ended)
        if !(0..self.set.decode.len()).any(|i| streamed(&self.set, i)) {
            self.cost.forget_copy_scale(DeviceId::Gpu);
        }
        // the first candidate is the current plan
        let candidates: Vec<_> = (self.audition_candidates().into_iter().enumerate())
            .filter(|(i, c)| {
                *i == 0
                    || c.0
                        .tiers
                        .first()
                        .is_some_and(|t| t.est_secs <= REAUDITION_RANGE * measured)
            })
            .map(|(_, c)| c)
            .collect();
        let candidates = self.priced_now(candidates);
        self.adapt.replan_after_audition = candidates.len() >= 2;
        (candidates.len() >= 2).then(|| PlanChange {
            set: self.set.clone(),
            reason: ChangeReason::Replan,
            audition: Some(Audition::new(candidates, rounds)),
            reference: Reference::Unchanged,
        })
    }

    /// A new memory layout from the live costs, when its decode round beats
    /// `same`'s (the re-plan that keeps the layout) by more than the move
    /// hysteresis and the copies the move needs pay for themselves within
    /// [`PAYBACK_ROUNDS`] decode rounds.
    fn relayout(&mut self, same: &PlanSet) -> Option<PlanSet> {
        let set = match self.plan_fresh(super::search::Search::Move) {
            Ok(s) => s,
            Err(e) => {
                self.adapt.stats.failed += 1;
                self.adapt.stats.fail("re-layout", e);
                return None;
            }
        };
        let (keep_est, moved) = (same.tiers.first()?.est_secs, set.tiers.first()?.est_secs);
        // the current plans' decode round is measured, the move's only
        // estimated: the move must beat the measurement too
        let measured = self.adapt.resched.as_ref().and_then(Rescheduler::tpot);
        let keep = measured.map_or(keep_est, |m| keep_est.min(m));
        // NaN estimates compare false and keep the layout
        let better = moved < keep * (1.0 - self.run.resched.move_hysteresis);
        if !better {
            return None;
        }
        let (new_l, old_l) = (&set.layout, &same.layout);
        let pairs = || new_l.items.iter().zip(&new_l.resident).zip(&old_l.resident);
        let moved_in: u64 = pairs()
            .filter(|((_, n), o)| **n && !**o)
            .map(|((it, _), _)| it.bytes())
            .sum();
        // only KV caches are copied back; weights leaving are just freed
        let moved_out: u64 = pairs()
            .filter(|((_, n), o)| !**n && **o)
            .map(|((it, _), _)| it.kv_bytes)
            .sum();
        let copy = self.cost.h2d_secs(DeviceId::Gpu, moved_in as f64)
            + self.cost.d2h_secs(DeviceId::Gpu, moved_out as f64);
        (copy <= (keep - moved) * PAYBACK_ROUNDS).then_some(set)
    }
}

/// What a re-plan in the layout does with the decode plan.
enum Switch {
    /// Switch (after an audition, if auditions are on).
    To(PlanChange),
    /// Keep it: the current decode plan in the new plans' tiers (if any),
    /// and the new plans.
    Kept(Option<PlanSet>, Box<PlanSet>),
}

/// Bytes and seconds of the GPU's weight copies in a round.
fn gpu_copies(stats: &RoundStats) -> (u64, f64) {
    stats
        .async_copies
        .iter()
        .filter(|c| c.0 == DeviceId::Gpu)
        .fold((0, 0.0), |(b, s), c| (b + c.1, s + c.2))
}

/// Whether `new`'s decode plan is worth switching to from `cur`'s: another
/// shape, or an estimate better by more than the hysteresis.
fn worth_switching(new: &PlanSet, cur: &PlanSet, hysteresis: f64) -> bool {
    match (new.tiers.first(), cur.tiers.first()) {
        (Some(n), Some(c)) => n.kind != c.kind || n.est_secs < c.est_secs * (1.0 - hysteresis),
        _ => false,
    }
}

/// Whether the executor would run `a` and `b` alike: the same plan list and
/// the same plan per tier.
fn same_plans(a: &PlanSet, b: &PlanSet) -> bool {
    a.plans == b.plans
        && a.tiers.len() == b.tiers.len()
        && a.tiers.iter().zip(&b.tiers).all(|(x, y)| x.plan == y.plan)
}

/// `new` with its decode tier replaced by `cur`'s decode plan, when the two
/// decode plans differ (`None`: same decode plan, or no decode tier).
fn with_decode_of(new: &PlanSet, cur: &PlanSet) -> Option<PlanSet> {
    let (n1, c1) = (new.decode_tier()?, cur.decode_tier()?);
    if new.plans[n1.plan] == cur.plans[c1.plan] {
        return None;
    }
    let mut out = with_decode_plan(new, &cur.plans[c1.plan], c1.clone());
    // the items' decode estimates are of the decode plan that runs
    out.decode = cur.decode.clone();
    Some(out)
}

/// `set` with its decode tier running `plan`, described by `entry` (whose
/// plan index is set here); plans no tier runs any more are dropped (the
/// executor makes slots for every plan it holds).
fn with_decode_plan(set: &PlanSet, plan: &ExecPlan, entry: TierEntry) -> PlanSet {
    let mut out = set.clone();
    let idx = out.plans.iter().position(|p| p == plan).unwrap_or_else(|| {
        out.plans.push(plan.clone());
        out.plans.len() - 1
    });
    out.tiers[0] = TierEntry { plan: idx, ..entry };
    let mut kept: Vec<ExecPlan> = Vec::new();
    for t in &mut out.tiers {
        let p = &out.plans[t.plan];
        t.plan = kept.iter().position(|k| k == p).unwrap_or_else(|| {
            kept.push(p.clone());
            kept.len() - 1
        });
    }
    out.plans = kept;
    out
}

/// The re-scheduler's snapshot: per item, its estimated decode time where
/// it runs, and its weight copy's time where the decode plan streams it (0
/// where it does not: no copy will be observed to compare with).
fn snapshot(set: &PlanSet) -> CostSnapshot {
    let finite = |x: f64| if x.is_finite() { x.max(0.0) } else { 0.0 };
    CostSnapshot {
        op_times: set.decode.iter().map(|e| finite(e.decode_secs)).collect(),
        copy_times: set
            .decode
            .iter()
            .enumerate()
            .map(|(i, e)| {
                if streamed(set, i) {
                    finite(e.copy_secs)
                } else {
                    0.0
                }
            })
            .collect(),
        on_gpu: set.decode.iter().map(|e| e.on_gpu).collect(),
    }
}

/// Whether `set`'s decode plan streams item `i` (runs it on the GPU from a
/// temp slot).
fn streamed(set: &PlanSet, i: usize) -> bool {
    set.decode.get(i).is_some_and(|e| e.on_gpu)
        && !set.layout.resident.get(i).copied().unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(tiers: &[(usize, f64)]) -> PlanSet {
        crate::planner::test_set(tiers)
    }

    fn exec(devs: &[DeviceId]) -> ExecPlan {
        ExecPlan {
            node_device: devs.to_vec(),
            weight_home: Vec::new(),
            kv_device: Vec::new(),
        }
    }

    #[test]
    fn a_changed_decode_plan_is_auditioned_against_the_current_one() {
        use DeviceId::{Gpu, Host};
        // current: decode on plan A; new: decode on plan B, prompt tier on C
        let mut cur = set(&[(1, 0.020), (64, 0.100)]);
        cur.plans = vec![exec(&[Host, Gpu]), exec(&[Gpu, Gpu])];
        let mut new = set(&[(1, 0.015), (64, 0.090)]);
        new.plans = vec![exec(&[Gpu, Host]), exec(&[Host, Host])];
        new.tiers[0].kind = PlanKind::Dynamic;
        let keep = with_decode_of(&new, &cur).unwrap();
        // the decode tier runs the current plan, the prompt tier the new one
        assert_eq!(keep.plans.len(), 2, "no plan that no tier runs");
        assert_eq!(keep.plans[keep.tiers[0].plan], cur.plans[0]);
        assert_eq!(keep.tiers[0].kind, PlanKind::Static);
        assert_eq!(keep.plans[keep.tiers[1].plan], new.plans[1]);
        assert_eq!(keep.tiers[1].est_secs, 0.090);
        // the same decode plan: nothing to audition
        let mut same = new.clone();
        same.plans[0] = cur.plans[0].clone();
        assert!(with_decode_of(&same, &cur).is_none());
    }

    #[test]
    fn one_token_runs_the_decode_plan_even_when_a_prompt_tier_looks_cheaper() {
        // the decode estimate is deep into the context, tier 4's at an empty cache
        let s = set(&[(1, 0.020), (4, 0.012), (64, 0.100)]);
        assert_eq!(s.choose(1), (0, 1));
        assert_eq!(s.choose(0), (0, 1));
        // more tokens: ceil(n / tier) * est
        assert_eq!(s.choose(3), (1, 3));
        assert_eq!(s.choose(20), (1, 4));
        assert_eq!(s.choose(40), (2, 40));
        assert_eq!(s.choose(200), (2, 64));
        // estimates that are not times leave the smallest tier
        let bad = set(&[(1, 0.020), (4, f64::NAN)]);
        assert_eq!(bad.choose(8), (0, 1));
    }
}
