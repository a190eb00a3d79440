//! Auditions: the decode plan chosen by measurement.
//!
//! The cost model ranks the decode plan shapes (static, GPU-only, dynamic)
//! by estimate, but what it cannot see (how well a copy really hides under
//! compute, a kernel slower at a shape it never measured) can reorder
//! shapes whose estimates are close, and decode is where an engine spends
//! most of its time. So at the first decode rounds each distinct candidate
//! plan runs a few real rounds (the first a warm-up), and the fastest median
//! wins; a candidate that beats the planner's choice wins only after that
//! choice, which ran first, has been measured a second time. Every
//! candidate computes the same logits, so the rounds are not wasted: they
//! are the user's first tokens. What was learned stays as a per-shape
//! correction of later estimates, so a re-plan does not undo it.

use serde::Serialize;

use super::{PlanKind, PlanSet};

/// One candidate's result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AuditionEntry {
    /// The shapes whose decode plan this candidate is (identical plans are run once).
    pub kinds: Vec<PlanKind>,
    /// Estimated seconds per decode round.
    pub est_secs: f64,
    /// Median measured seconds per decode round (after the warm-up).
    pub measured_secs: f64,
}

/// The outcome of an audition, for reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AuditionReport {
    /// Every candidate, the planner's own choice first.
    pub entries: Vec<AuditionEntry>,
    /// Index of the fastest.
    pub winner: usize,
}

/// What the audition wants after a round.
#[derive(Debug, PartialEq)]
pub(super) enum Step {
    /// Keep running the current candidate.
    Continue,
    /// Run candidate `i` next.
    Switch(usize),
    /// Finished.
    Done(AuditionReport),
}

/// An audition in progress.
#[derive(Debug)]
pub(super) struct Audition {
    candidates: Vec<PlanSet>,
    kinds: Vec<Vec<PlanKind>>,
    current: usize,
    times: Vec<Vec<f64>>,
    rounds: usize,
    /// The planner's own choice is being measured a second time.
    rechecking: bool,
}

impl Audition {
    /// Candidates (distinct decode plans, the running one first), the shapes
    /// each stands for, and rounds per candidate (at least 2).
    pub(super) fn new(candidates: Vec<(PlanSet, Vec<PlanKind>)>, rounds: usize) -> Audition {
        let n = candidates.len();
        let (candidates, kinds) = candidates.into_iter().unzip();
        Audition {
            candidates,
            kinds,
            current: 0,
            times: vec![Vec::new(); n],
            rounds: rounds.max(2),
            rechecking: false,
        }
    }

    /// Candidate `i`'s plans.
    pub(super) fn candidate(&self, i: usize) -> &PlanSet {
        &self.candidates[i]
    }

    /// Records the seconds of a decode round run with the current candidate.
    pub(super) fn record(&mut self, secs: f64) -> Step {
        self.times[self.current].push(secs);
        if self.times[self.current].len() < self.rounds {
            return Step::Continue;
        }
        if !self.rechecking && self.current + 1 < self.candidates.len() {
            self.current += 1;
            return Step::Switch(self.current);
        }
        let fastest = self
            .times
            .iter()
            .enumerate()
            .min_by(|a, b| median(&a.1[1..]).total_cmp(&median(&b.1[1..])))
            .map_or(0, |(i, _)| i);
        if fastest != 0 && !self.rechecking {
            // The planner's choice ran first, in the rounds right after the
            // prompt, which can run slow (in the simulated grid its median
            // there was 1.6x its later one): measure it again before
            // overruling the estimate.
            self.rechecking = true;
            self.times[0].clear();
            self.current = 0;
            return Step::Switch(0);
        }
        let entries: Vec<AuditionEntry> = self
            .candidates
            .iter()
            .zip(&self.kinds)
            .zip(&self.times)
            .map(|((c, k), t)| AuditionEntry {
                kinds: k.clone(),
                est_secs: c.tiers[0].est_secs,
                measured_secs: median(&t[1..]),
            })
            .collect();
        let winner = entries
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.measured_secs.total_cmp(&b.1.measured_secs))
            .map_or(0, |(i, _)| i);
        Step::Done(AuditionReport { entries, winner })
    }
}

impl AuditionReport {
    /// Per-shape corrections of decode estimates: how much slower than its
    /// estimate each candidate ran, relative to the winner (so the winner's
    /// shapes get 1 and estimates keep their scale).
    pub fn bias(&self) -> Vec<(PlanKind, f64)> {
        let ratio = |e: &AuditionEntry| {
            if e.est_secs > 0.0 && e.measured_secs.is_finite() {
                e.measured_secs / e.est_secs
            } else {
                1.0
            }
        };
        let winner = &self.entries[self.winner];
        let base = ratio(winner);
        let mut out: Vec<(PlanKind, f64)> = Vec::new();
        // one correction per shape: two plans of one shape (a re-plan
        // auditioned against the plan it would replace) leave the winner's
        // shapes at 1, and otherwise the first candidate's
        for e in std::iter::once(winner).chain(&self.entries) {
            let b = ratio(e) / base;
            for &k in &e.kinds {
                if out.iter().all(|o| o.0 != k) {
                    out.push((k, if b.is_finite() && b > 0.0 { b } else { 1.0 }));
                }
            }
        }
        out
    }
}

fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::INFINITY;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::test_set;

    fn set(kind: PlanKind, est: f64) -> PlanSet {
        let mut s = test_set(&[(1, est)]);
        s.tiers[0].kind = kind;
        s
    }

    #[test]
    fn runs_each_candidate_and_picks_the_fastest_median() {
        let mut a = Audition::new(
            vec![
                (set(PlanKind::Dynamic, 0.010), vec![PlanKind::Dynamic]),
                (
                    set(PlanKind::Static, 0.012),
                    vec![PlanKind::Static, PlanKind::GpuOnly],
                ),
            ],
            3,
        );
        // candidate 0: warm-up 0.1 (ignored), then 0.020 and 0.022
        assert_eq!(a.record(0.1), Step::Continue);
        assert_eq!(a.record(0.020), Step::Continue);
        assert_eq!(a.record(0.022), Step::Switch(1));
        assert_eq!(a.record(0.5), Step::Continue);
        assert_eq!(a.record(0.015), Step::Continue);
        // candidate 1 looks faster: the planner's choice runs again first
        assert_eq!(a.record(0.013), Step::Switch(0));
        assert_eq!(a.record(0.3), Step::Continue);
        assert_eq!(a.record(0.022), Step::Continue);
        let Step::Done(r) = a.record(0.020) else {
            panic!("three rounds each, two candidates, one recheck")
        };
        assert_eq!(r.winner, 1);
        assert!((r.entries[0].measured_secs - 0.021).abs() < 1e-12);
        assert!((r.entries[1].measured_secs - 0.014).abs() < 1e-12);
        // the winner's shapes get 1; the loser ran 2.1x its estimate
        // against the winner's 1.1667x
        let b = r.bias();
        assert_eq!(b.len(), 3);
        let get = |k| b.iter().find(|x| x.0 == k).unwrap().1;
        assert!((get(PlanKind::Static) - 1.0).abs() < 1e-12);
        assert!((get(PlanKind::GpuOnly) - 1.0).abs() < 1e-12);
        assert!((get(PlanKind::Dynamic) - 2.1 / (0.014 / 0.012)).abs() < 1e-9);
    }

    #[test]
    fn a_slow_start_does_not_overrule_the_estimate() {
        let mut a = Audition::new(
            vec![
                (set(PlanKind::GpuOnly, 0.010), vec![PlanKind::GpuOnly]),
                (set(PlanKind::Static, 0.012), vec![PlanKind::Static]),
            ],
            3,
        );
        // the first rounds after the prompt are slow for the planner's choice
        for t in [0.1, 0.017, 0.017] {
            a.record(t);
        }
        for t in [0.2, 0.012, 0.012] {
            a.record(t);
        }
        // measured again, it is the faster
        for t in [0.1, 0.0105] {
            assert_eq!(a.record(t), Step::Continue);
        }
        let Step::Done(r) = a.record(0.0105) else {
            panic!("done after the recheck")
        };
        assert_eq!(r.winner, 0);
        assert!((r.entries[0].measured_secs - 0.0105).abs() < 1e-12);
    }

    #[test]
    fn a_corrected_estimate_ranks_as_measured() {
        let r = AuditionReport {
            entries: vec![
                AuditionEntry {
                    kinds: vec![PlanKind::GpuOnly],
                    est_secs: 0.008,
                    measured_secs: 0.030,
                },
                AuditionEntry {
                    kinds: vec![PlanKind::Static],
                    est_secs: 0.020,
                    measured_secs: 0.025,
                },
            ],
            winner: 1,
        };
        let b = r.bias();
        let gpu = 0.008 * b.iter().find(|x| x.0 == PlanKind::GpuOnly).unwrap().1;
        let stat = 0.020 * b.iter().find(|x| x.0 == PlanKind::Static).unwrap().1;
        assert!(stat < gpu, "{stat} vs {gpu}");
        assert!((gpu / stat - 0.030 / 0.025).abs() < 1e-9);
    }

    #[test]
    fn two_plans_of_one_shape_leave_one_correction() {
        // a re-plan's dynamic plan against the dynamic plan it would
        // replace: the winner ran as estimated, the loser 25% under its
        // (low) estimate's ratio; the shape keeps the winner's 1
        let entry = |est: f64, measured: f64| AuditionEntry {
            kinds: vec![PlanKind::Dynamic],
            est_secs: est,
            measured_secs: measured,
        };
        for winner in [0, 1] {
            let mut entries = vec![entry(0.059, 0.0462), entry(0.044, 0.0462)];
            entries[winner].est_secs = 0.0462;
            let r = AuditionReport { entries, winner };
            assert_eq!(r.bias(), vec![(PlanKind::Dynamic, 1.0)], "winner {winner}");
        }
    }

    #[test]
    fn median_of_even_and_odd_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), f64::INFINITY);
    }
}
