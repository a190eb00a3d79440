//! The steps of one round for a plan and a round shape: activation copies
//! between devices and node runs, with activation buffers assigned to slots
//! by liveness (values whose lifetimes do not overlap share a slot).

use std::collections::HashMap;

use ats_core::graph::{Graph, GraphInput};
use ats_core::machine::{DeviceId, PerDevice};

use super::plan::ExecPlan;

/// One copy of a value on one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Instance {
    /// The value.
    pub value: usize,
    /// The device holding this copy.
    pub device: DeviceId,
    /// The activation slot on that device.
    pub slot: usize,
    /// Bytes.
    pub bytes: usize,
}

/// A step of the round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Copy an activation between devices.
    Copy {
        /// Source instance.
        from: usize,
        /// Destination instance.
        to: usize,
    },
    /// Run a node.
    Run {
        /// Node index.
        node: usize,
        /// Device.
        device: DeviceId,
        /// Input instances (the token input has none).
        inputs: Vec<usize>,
        /// Output instance.
        output: usize,
    },
}

/// The steps and buffers of one round.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// Steps in order.
    pub steps: Vec<Step>,
    /// Every value instance.
    pub instances: Vec<Instance>,
    /// Bytes of each activation slot, per device.
    pub slot_bytes: PerDevice<Vec<usize>>,
    /// The instance holding the graph input rows, if the graph has f32 input rows.
    pub input: Option<usize>,
    /// The instance holding the graph output.
    pub output: usize,
}

impl Schedule {
    /// Builds the schedule of `plan` for a round of `n_tokens` rows and `n_outputs` outputs.
    pub fn build(g: &Graph, plan: &ExecPlan, n_tokens: usize, n_outputs: usize) -> Schedule {
        Self::build_reading(g, plan, n_tokens, n_outputs, false)
    }

    /// [`Schedule::build`]; with `hidden`, the graph's last node is left out
    /// and the value read back is its first input ([`Graph::hidden_value`]).
    pub fn build_reading(
        g: &Graph,
        plan: &ExecPlan,
        n_tokens: usize,
        n_outputs: usize,
        hidden: bool,
    ) -> Schedule {
        let (n_nodes, read) = match g.hidden_value().filter(|_| hidden) {
            Some((last, v)) => (last, v),
            None => (g.nodes.len(), g.output),
        };
        let mut instances: Vec<Instance> = Vec::new();
        let mut where_: HashMap<(usize, DeviceId), usize> = HashMap::new();
        let mut produced_on = vec![DeviceId::Host; g.values.len()];
        let mut steps = Vec::new();
        let bytes_of = |v: usize| g.value_bytes(v, n_tokens, n_outputs) as usize;
        let new_inst = |instances: &mut Vec<Instance>, value: usize, device: DeviceId| {
            instances.push(Instance {
                value,
                device,
                slot: usize::MAX,
                bytes: bytes_of(value),
            });
            instances.len() - 1
        };

        let mut input = None;
        if let GraphInput::Rows { .. } = g.input {
            // the input rows start on the device of their first reader
            let d = g
                .nodes
                .iter()
                .position(|n| n.inputs.contains(&0))
                .map_or(DeviceId::Host, |i| plan.node_device[i]);
            let i = new_inst(&mut instances, 0, d);
            where_.insert((0, d), i);
            produced_on[0] = d;
            input = Some(i);
        }

        for (ni, node) in g.nodes.iter().enumerate().take(n_nodes) {
            let d = plan.node_device[ni];
            let mut ins = Vec::with_capacity(node.inputs.len());
            for &v in &node.inputs {
                if v == 0 && g.input == GraphInput::Tokens {
                    continue;
                }
                let inst = match where_.get(&(v, d)) {
                    Some(&i) => i,
                    None => {
                        let src = where_[&(v, produced_on[v])];
                        let dst = new_inst(&mut instances, v, d);
                        steps.push(Step::Copy { from: src, to: dst });
                        where_.insert((v, d), dst);
                        dst
                    }
                };
                ins.push(inst);
            }
            let out = new_inst(&mut instances, node.output, d);
            where_.insert((node.output, d), out);
            produced_on[node.output] = d;
            steps.push(Step::Run {
                node: ni,
                device: d,
                inputs: ins,
                output: out,
            });
        }
        let output = where_[&(read, produced_on[read])];

        // lifetimes: [first step, last step] of each instance
        let mut first = vec![usize::MAX; instances.len()];
        let mut last = vec![0usize; instances.len()];
        if let Some(i) = input {
            first[i] = 0;
        }
        for (s, step) in steps.iter().enumerate() {
            let (reads, writes): (Vec<usize>, usize) = match step {
                Step::Copy { from, to } => (vec![*from], *to),
                Step::Run { inputs, output, .. } => (inputs.clone(), *output),
            };
            for r in reads {
                last[r] = last[r].max(s);
            }
            first[writes] = first[writes].min(s);
            last[writes] = last[writes].max(s);
        }
        last[output] = steps.len();

        // greedy interval colouring, best fit by size, per device
        let mut slot_bytes: PerDevice<Vec<usize>> = PerDevice::default();
        let mut busy_until: PerDevice<Vec<usize>> = PerDevice::default();
        let mut order: Vec<usize> = (0..instances.len()).collect();
        order.sort_by_key(|&i| first[i]);
        for i in order {
            let d = instances[i].device;
            let need = instances[i].bytes;
            let free = |s: usize| busy_until[d][s] < first[i];
            let best = (0..slot_bytes[d].len())
                .filter(|&s| free(s))
                .min_by_key(|&s| {
                    let b = slot_bytes[d][s];
                    // prefer slots that already fit, smallest first; else the largest to grow
                    if b >= need {
                        (0, b)
                    } else {
                        (1, usize::MAX - b)
                    }
                });
            let s = match best {
                Some(s) => s,
                None => {
                    slot_bytes[d].push(0);
                    busy_until[d].push(0);
                    slot_bytes[d].len() - 1
                }
            };
            slot_bytes[d][s] = slot_bytes[d][s].max(need);
            busy_until[d][s] = last[i];
            instances[i].slot = s;
        }
        Schedule {
            steps,
            instances,
            slot_bytes,
            input,
            output,
        }
    }

    /// Bytes of activation slots on a device.
    pub fn compute_bytes(&self, device: DeviceId) -> usize {
        self.slot_bytes[device].iter().sum()
    }
}
