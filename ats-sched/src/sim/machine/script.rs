//! Values scripted over virtual time: `T:V;T:V` steps, as `--sim-gpu`'s
//! `slow=` and `copyslow=` settings are written.

use std::fmt;

/// A piecewise-constant value over the machine's virtual time: `(from
/// seconds, value)` steps, the default before the first.
#[derive(Clone, Debug, PartialEq)]
pub struct Script {
    default: f64,
    steps: Vec<(f64, f64)>,
}

impl Script {
    /// A constant.
    pub fn constant(v: f64) -> Script {
        Script {
            default: v,
            steps: Vec::new(),
        }
    }

    /// `default` before the first step, then the steps (sorted by time).
    pub fn steps(default: f64, mut steps: Vec<(f64, f64)>) -> Script {
        steps.sort_by(|a, b| a.0.total_cmp(&b.0));
        Script { default, steps }
    }

    /// The value at `t` seconds.
    pub fn at(&self, t: f64) -> f64 {
        self.steps
            .iter()
            .rev()
            .find(|s| s.0 <= t)
            .map_or(self.default, |s| s.1)
    }

    /// The first step strictly after `t` (`INFINITY`: none).
    pub fn next_after(&self, t: f64) -> f64 {
        self.steps
            .iter()
            .map(|s| s.0)
            .find(|&s| s > t)
            .unwrap_or(f64::INFINITY)
    }

    /// Whether the value never changes from the default.
    pub fn is_constant(&self) -> bool {
        self.steps.iter().all(|s| s.1 == self.default)
    }

    /// The steps.
    pub fn step_list(&self) -> &[(f64, f64)] {
        &self.steps
    }

    /// Parses `T:V;T:V` (empty: the default only), each value within `range`.
    pub fn parse(
        s: &str,
        default: f64,
        range: std::ops::RangeInclusive<f64>,
        what: &str,
    ) -> Result<Script, String> {
        let mut steps = Vec::new();
        for part in s.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (t, v) = part
                .split_once(':')
                .ok_or_else(|| format!("{what}: step {part:?} is not TIME:VALUE"))?;
            let t: f64 = t
                .trim()
                .parse()
                .map_err(|_| format!("{what}: bad time {t:?}"))?;
            let v: f64 = v
                .trim()
                .parse()
                .map_err(|_| format!("{what}: bad value {v:?}"))?;
            if !(t.is_finite() && t >= 0.0) {
                return Err(format!("{what}: step {part:?}: the time must be >= 0"));
            }
            if !(v.is_finite() && range.contains(&v)) {
                return Err(format!(
                    "{what}: step {part:?}: the value must be {} to {}",
                    range.start(),
                    range.end()
                ));
            }
            steps.push((t, v));
        }
        Ok(Script::steps(default, steps))
    }
}

impl fmt::Display for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.steps.iter().map(|(t, v)| format!("{t}:{v}")).collect();
        f.write_str(&parts.join(";"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_and_breakpoints() {
        let s = Script::parse("20:0.5;40:0", 0.0, 0.0..=0.95, "cpuload").unwrap();
        assert_eq!(
            (s.at(0.0), s.at(20.0), s.at(39.9), s.at(41.0)),
            (0.0, 0.5, 0.5, 0.0)
        );
        assert_eq!(
            (s.next_after(0.0), s.next_after(20.0), s.next_after(40.0)),
            (20.0, 40.0, f64::INFINITY)
        );
        assert!(Script::parse("3:2", 0.0, 0.0..=0.95, "cpuload").is_err());
        assert!(Script::parse("3", 0.0, 0.0..=1.0, "x").is_err());
        assert!(
            Script::parse("", 1.0, 1.0..=10.0, "x")
                .unwrap()
                .is_constant()
        );
        assert_eq!(s.to_string(), "20:0.5;40:0");
    }
}
