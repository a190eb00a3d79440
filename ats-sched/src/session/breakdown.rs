//! Where decode time goes: the nodes' own times per device and op kind,
//! weight copies and device switches, summed over decode rounds. A CPU's
//! nodes are timed on the host; an asynchronous device's by the timing
//! events around each node on its stream: kernel time, plus any gap while
//! the host had not launched the kernel yet (a GPU waiting on its host).

use std::collections::BTreeMap;

use ats_core::graph::Graph;
use ats_core::machine::{DeviceId, Machine};
use serde::Serialize;

use crate::exec::RoundStats;

/// Decode rounds' times, summed (see the module documentation).
#[derive(Clone, Debug, Default)]
pub struct DecodeBreakdown {
    /// Decode rounds summed.
    pub rounds: usize,
    /// Their wall time.
    pub wall_secs: f64,
    /// Per `(device, op kind)`: seconds and nodes.
    pub ops: BTreeMap<(DeviceId, &'static str), (f64, usize)>,
    /// Weight bytes copied by asynchronous devices, and their copy seconds.
    pub copy_bytes: u64,
    /// Seconds of those copies (they overlap compute).
    pub copy_secs: f64,
    /// Device switches.
    pub switches: usize,
    /// Activation bytes moved between devices.
    pub activation_bytes: u64,
}

impl DecodeBreakdown {
    /// Adds one round's statistics.
    pub fn add(&mut self, g: &Graph, stats: &RoundStats) {
        self.rounds += 1;
        self.wall_secs += stats.total_secs;
        for &(node, d, secs) in &stats.node_secs {
            let Some(n) = g.nodes.get(node) else { continue };
            let e = self.ops.entry((d, n.op.kind_name())).or_default();
            e.0 += secs;
            e.1 += 1;
        }
        for &(_, bytes, secs) in &stats.async_copies {
            self.copy_bytes += bytes;
            self.copy_secs += secs;
        }
        self.switches += stats.switches;
        self.activation_bytes += stats.activation_bytes;
    }

    /// Per token, with devices named as `machine` names them.
    pub fn report(&self, machine: &Machine) -> BreakdownReport {
        let per = 1.0 / self.rounds.max(1) as f64;
        let mut by_device: BTreeMap<DeviceId, DeviceShare> = BTreeMap::new();
        for (&(d, op), &(secs, nodes)) in &self.ops {
            let share = by_device.entry(d).or_insert_with(|| DeviceShare {
                device: machine
                    .get(d)
                    .map_or_else(|| d.to_string(), |dev| dev.info().name.clone()),
                ms: 0.0,
                ops: Vec::new(),
            });
            share.ms += secs * per * 1e3;
            share.ops.push(OpShare {
                op,
                ms: secs * per * 1e3,
                nodes: nodes as f64 * per,
            });
        }
        let mut devices: Vec<DeviceShare> = by_device.into_values().collect();
        for s in &mut devices {
            s.ops.sort_by(|a, b| b.ms.total_cmp(&a.ms));
        }
        BreakdownReport {
            rounds: self.rounds,
            wall_ms: self.wall_secs * per * 1e3,
            virtual_time: machine.virtual_time(),
            devices,
            copy_mb: self.copy_bytes as f64 * per / 1e6,
            copy_ms: self.copy_secs * per * 1e3,
            switches: self.switches as f64 * per,
            activation_kb: self.activation_bytes as f64 * per / 1e3,
        }
    }
}

/// A [`DecodeBreakdown`] per token.
#[derive(Clone, Debug, Serialize)]
pub struct BreakdownReport {
    /// Decode rounds it averages.
    pub rounds: usize,
    /// Wall milliseconds per token (the machine's clock: virtual under a
    /// machine model).
    pub wall_ms: f64,
    /// Whether the times are a machine model's virtual time.
    pub virtual_time: bool,
    /// Per device, its nodes' milliseconds per token.
    pub devices: Vec<DeviceShare>,
    /// Weight megabytes copied per token.
    pub copy_mb: f64,
    /// Copy milliseconds per token (overlapping compute).
    pub copy_ms: f64,
    /// Device switches per token.
    pub switches: f64,
    /// Activation kilobytes moved between devices per token.
    pub activation_kb: f64,
}

/// One device's share of a decode step.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceShare {
    /// Its name.
    pub device: String,
    /// Milliseconds per token in its nodes.
    pub ms: f64,
    /// Per op kind, slowest first.
    pub ops: Vec<OpShare>,
}

/// One op kind's share on a device.
#[derive(Clone, Debug, Serialize)]
pub struct OpShare {
    /// The op kind (`matmul`, `attention`, ...).
    pub op: &'static str,
    /// Milliseconds per token.
    pub ms: f64,
    /// Nodes per token.
    pub nodes: f64,
}

impl std::fmt::Display for BreakdownReport {
    /// One line: `decode per token (N rounds): wall X ms; dev Y ms (op Z, ...); ...`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "decode per token ({} rounds): {} {:.2} ms",
            self.rounds,
            if self.virtual_time { "virtual" } else { "wall" },
            self.wall_ms
        )?;
        for d in &self.devices {
            write!(f, "; {} {:.2} ms (", d.device, d.ms)?;
            for (i, o) in d.ops.iter().enumerate() {
                let sep = if i == 0 { "" } else { ", " };
                write!(f, "{sep}{} {:.2}", o.op, o.ms)?;
            }
            write!(f, ")")?;
        }
        write!(
            f,
            "; copies {:.1} MB in {:.2} ms; {:.1} switches, {:.1} KB of activations",
            self.copy_mb, self.copy_ms, self.switches, self.activation_kb
        )
    }
}
