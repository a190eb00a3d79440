//! Settings of the simulated GPU, parsed from `--sim-gpu key=value,...`.

use std::fmt;

/// A piecewise-constant slowdown over time: `(from_seconds, factor)` steps,
/// e.g. `0:1;20:2.5;40:1` (a game starts at 20 s and stops at 40 s).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Slowdown {
    steps: Vec<(f64, f64)>,
}

impl Slowdown {
    /// No slowdown.
    pub fn none() -> Self {
        Slowdown { steps: Vec::new() }
    }

    /// Steps `(from_seconds, factor)`, sorted by time.
    pub fn steps(mut steps: Vec<(f64, f64)>) -> Self {
        steps.sort_by(|a, b| a.0.total_cmp(&b.0));
        Slowdown { steps }
    }

    /// The factor at `t` seconds since the simulation started (1 before the first step).
    pub fn at(&self, t: f64) -> f64 {
        self.steps
            .iter()
            .rev()
            .find(|s| s.0 <= t)
            .map_or(1.0, |s| s.1)
    }

    fn parse(s: &str) -> Result<Self, String> {
        let mut steps = Vec::new();
        for part in s.split(';').filter(|p| !p.is_empty()) {
            let (t, f) = part
                .split_once(':')
                .ok_or_else(|| format!("slowdown step {part:?} is not TIME:FACTOR"))?;
            let t: f64 = t
                .trim()
                .parse()
                .map_err(|_| format!("bad slowdown time {t:?}"))?;
            let f: f64 = f
                .trim()
                .parse()
                .map_err(|_| format!("bad slowdown factor {f:?}"))?;
            if !(t >= 0.0 && f.is_finite() && f >= 1.0) {
                return Err(format!(
                    "slowdown step {part:?}: time must be >= 0 and factor >= 1"
                ));
            }
            steps.push((t, f));
        }
        Ok(Slowdown::steps(steps))
    }
}

impl fmt::Display for Slowdown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.steps.iter().map(|(t, x)| format!("{t}:{x}")).collect();
        f.write_str(&parts.join(";"))
    }
}

/// The simulated GPU's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct SimGpuConfig {
    /// Device memory (the ledger's budget), bytes.
    pub memory: u64,
    /// Host<->device copy bandwidth, GB/s.
    pub copy_gbps: f64,
    /// Kernel speed relative to one CPU thread running the same kernel.
    pub speed: f64,
    /// Fixed cost of each kernel launch, microseconds.
    pub launch_us: f64,
    /// Fixed cost of each host<->device synchronisation, microseconds.
    pub sync_us: f64,
    /// Slowdown of kernels over time (GPU pressure from other programs).
    pub compute_slowdown: Slowdown,
    /// Slowdown of copies over time (PCIe pressure).
    pub copy_slowdown: Slowdown,
}

impl Default for SimGpuConfig {
    /// A small, slow GPU that any CPU can emulate in real time: 8 GiB,
    /// 8 GB/s copies, kernels as fast as one CPU thread.
    fn default() -> Self {
        SimGpuConfig {
            memory: 8 << 30,
            copy_gbps: 8.0,
            speed: 1.0,
            launch_us: 5.0,
            sync_us: 10.0,
            compute_slowdown: Slowdown::none(),
            copy_slowdown: Slowdown::none(),
        }
    }
}

/// The keys `--sim-gpu` accepts, for `--help`.
pub const SIM_GPU_KEYS: &str = "mem=SIZE (device memory, e.g. 8G; --vram also sets the budget), \
copy=GB/s (host-device bandwidth), speed=X (kernel speed relative to one CPU thread), \
launch=US (per-kernel overhead), sync=US (per switch), \
slow=T:F;T:F (kernel slowdown factor F from T seconds), copyslow=T:F;... (copy slowdown)";

impl SimGpuConfig {
    /// Parses `key=value` pairs separated by commas (empty: the defaults).
    pub fn parse(spec: &str) -> Result<SimGpuConfig, String> {
        let mut c = SimGpuConfig::default();
        for kv in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').ok_or_else(|| {
                format!("--sim-gpu: {kv:?} is not key=value (keys: {SIM_GPU_KEYS})")
            })?;
            let num = |v: &str| -> Result<f64, String> {
                v.parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x > 0.0)
                    .ok_or_else(|| format!("--sim-gpu {k}: {v:?} is not a positive number"))
            };
            match k {
                "mem" => {
                    c.memory =
                        crate::size::parse_size(v).map_err(|e| format!("--sim-gpu mem: {e}"))?
                }
                "copy" => c.copy_gbps = num(v)?,
                "speed" => c.speed = num(v)?,
                "launch" => {
                    c.launch_us = v
                        .parse()
                        .ok()
                        .filter(|x: &f64| *x >= 0.0)
                        .ok_or("--sim-gpu launch: not a number >= 0")?
                }
                "sync" => {
                    c.sync_us = v
                        .parse()
                        .ok()
                        .filter(|x: &f64| *x >= 0.0)
                        .ok_or("--sim-gpu sync: not a number >= 0")?
                }
                "slow" => c.compute_slowdown = Slowdown::parse(v)?,
                "copyslow" => c.copy_slowdown = Slowdown::parse(v)?,
                other => {
                    return Err(format!(
                        "--sim-gpu: unknown key {other:?} (keys: {SIM_GPU_KEYS})"
                    ));
                }
            }
        }
        Ok(c)
    }
}

impl SimGpuConfig {
    /// The profile this simulated GPU would measure, derived from the host
    /// CPU's profile: each kernel as one CPU thread runs it (samples at the
    /// fewest threads, scaled to one), divided by `speed`, plus the launch
    /// cost; copies at `copy_gbps`; switches at `sync_us`.
    pub fn derive_profile(
        &self,
        name: &str,
        cpu: &crate::profile::DeviceProfile,
    ) -> crate::profile::DeviceProfile {
        let min_threads = cpu
            .samples
            .iter()
            .filter(|s| !s.contended)
            .map(|s| s.threads)
            .min()
            .unwrap_or(1);
        let samples = cpu
            .samples
            .iter()
            .filter(|s| !s.contended && s.threads == min_threads)
            .map(|s| crate::profile::Sample {
                threads: 1,
                secs: self.launch_us * 1e-6 + s.secs * min_threads as f64 / self.speed,
                ..s.clone()
            })
            .collect();
        crate::profile::DeviceProfile {
            device: name.to_string(),
            kind: "simulated_gpu".into(),
            samples,
            h2d_pinned_gbps: Some(self.copy_gbps),
            h2d_pageable_gbps: Some(self.copy_gbps),
            d2h_gbps: Some(self.copy_gbps),
            switch_secs: Some(self.sync_us * 1e-6 + self.launch_us * 1e-6),
            // its routed copy moves the chosen experts at the link's rate,
            // whatever their count: one sample says so
            routed_copies: vec![crate::profile::RoutedCopySample {
                experts: 1,
                bytes: 1 << 20,
                secs: (1u64 << 20) as f64 / (self.copy_gbps * 1e9),
            }],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_keys_and_scripts() {
        let c = SimGpuConfig::parse("mem=2G,copy=4,speed=0.5,slow=0:1;10:3,launch=0").unwrap();
        assert_eq!(c.memory, 2_000_000_000);
        assert_eq!((c.copy_gbps, c.speed, c.launch_us), (4.0, 0.5, 0.0));
        assert_eq!(c.compute_slowdown.at(5.0), 1.0);
        assert_eq!(c.compute_slowdown.at(12.0), 3.0);
        assert_eq!(SimGpuConfig::parse("").unwrap(), SimGpuConfig::default());
        assert!(
            SimGpuConfig::parse("warp=9")
                .unwrap_err()
                .contains("unknown key")
        );
        assert!(SimGpuConfig::parse("copy=-1").is_err());
        assert!(SimGpuConfig::parse("slow=3:0.5").is_err());
    }
}
