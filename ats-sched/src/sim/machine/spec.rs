//! What a modelled machine is: the host CPU, the GPU, the PCIe link between
//! them and a scenario of other programs over time; the presets by name
//! (built in `presets.rs`), and the `NAME|FILE[,key=value...]` syntax
//! of `--sim-machine`.
//!
//! Every figure of a preset says where it comes from: a vendor
//! specification, a published standard, a measurement in this repository
//! (`docs/`), or, where nothing better exists, an assumption said as such.

use std::fmt::Write as _;

use super::presets::{gen5_desktop, h200_host, rtx3060_laptop, rtx4090_desktop};
use super::script::Script;
use crate::size::{fmt_bytes, parse_size};

/// The host CPU.
#[derive(Clone, Debug, PartialEq)]
pub struct HostSpec {
    /// What it models.
    pub name: String,
    /// Cores the host offers ATS (threads beyond them are no faster).
    pub cores: usize,
    /// Matrix-product rate of one core with ATS's integer-dot kernels,
    /// compute-bound (prompt sizes), GFLOP/s.
    pub core_gflops: f64,
    /// Attention rate of one core (flash attention over an f16 cache), GFLOP/s.
    pub core_attn_gflops: f64,
    /// Memory bandwidth one core draws alone, GB/s.
    pub core_gbps: f64,
    /// The memory system's bandwidth, shared by every core and by PCIe
    /// DMA (copies take their share first), GB/s.
    pub mem_gbps: f64,
    /// Fixed cost of one op on the CPU (a thread-pool fork and join), us.
    pub dispatch_us: f64,
    /// Fixed cost of each routed expert's matrix product on the CPU, us
    /// (ATS's CPU MoE kernel runs the chosen experts one after another,
    /// each of the three products its own fork and join over small matrices).
    pub expert_us: f64,
}

/// The GPU.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuSpec {
    /// What it models.
    pub name: String,
    /// Device memory, bytes.
    pub memory: u64,
    /// Streaming multiprocessors.
    pub sms: usize,
    /// Peak memory bandwidth, GB/s.
    pub mem_gbps: f64,
    /// Fraction of the bandwidth a one-token matrix-vector product reaches.
    pub matvec_eff: f64,
    /// Fraction of the bandwidth element-wise kernels and copies reach.
    pub elem_eff: f64,
    /// Dense matrix-product rate reached at large batches, TFLOP/s.
    pub gemm_tflops: f64,
    /// Tokens per round from which a matrix product reaches `gemm_tflops`
    /// (below, the rate falls in proportion).
    pub gemm_ramp_tokens: f64,
    /// Attention rate at large batches, TFLOP/s.
    pub attn_tflops: f64,
    /// Query rows from which attention reaches `attn_tflops`.
    pub attn_ramp_tokens: f64,
    /// Fixed time of one kernel on the device (launch latency, ramp), us.
    pub kernel_us: f64,
    /// Extra fixed time of an attention kernel, us.
    pub attn_us: f64,
    /// Host time to launch one kernel, us.
    pub launch_us: f64,
    /// Host time of one host-device synchronisation, us.
    pub sync_us: f64,
    /// Rate of the routed-expert copy kernel per expert it copies, GB/s
    /// (one block row per expert, SMs reading mapped host memory: few
    /// experts, little parallelism).
    pub routed_expert_gbps: f64,
    /// Most the routed-expert copy kernel reaches, GB/s.
    pub routed_max_gbps: f64,
    /// Tokens a routed-expert kernel processes per expert at least (a
    /// tiled kernel pads each expert's few tokens to its tile; 1: a kernel
    /// that runs each token's choices as matrix-vector products).
    pub moe_tile_tokens: f64,
    /// Most the routed-expert kernel reaches, TFLOP/s, once its tiles (hit
    /// experts x tiles each, one launch) fill the SMs: its tiles are ATS's
    /// own (not cuBLAS) and reach less than `gemm_tflops`.
    pub moe_tflops: f64,
}

/// The PCIe link between host and GPU.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkSpec {
    /// PCIe generation.
    pub generation: u32,
    /// Lanes.
    pub lanes: u32,
    /// Host-to-device rate of the copy engine from pinned memory, GB/s.
    pub h2d_gbps: f64,
    /// Device-to-host rate, GB/s.
    pub d2h_gbps: f64,
    /// Host-to-device rate from pageable memory (a staged copy), GB/s.
    pub pageable_gbps: f64,
    /// Rate of SM-driven copies over mapped host memory (activations), GB/s.
    pub sm_copy_gbps: f64,
    /// Host time to issue one asynchronous copy, us.
    pub copy_us: f64,
}

/// Raw rate of one PCIe lane per direction, GB/s, by generation
/// (PCI-SIG base specifications: 2.5, 5, 8, 16, 32 GT/s; 8b/10b encoding
/// for generations 1-2, 128b/130b from generation 3).
pub fn pcie_lane_gbps(generation: u32) -> Option<f64> {
    match generation {
        1 => Some(0.25),
        2 => Some(0.5),
        3 => Some(8.0 * 128.0 / 130.0 / 8.0),
        4 => Some(16.0 * 128.0 / 130.0 / 8.0),
        5 => Some(32.0 * 128.0 / 130.0 / 8.0),
        6 => Some(64.0 * 242.0 / 256.0 / 8.0),
        _ => None,
    }
}

/// Share of the raw link rate a pinned copy-engine transfer reaches: about
/// 12.3-13 GB/s of 15.75 on PCIe 3.0 x16 in CUDA's `bandwidthTest`, 48.3 of
/// 63 GB/s measured on the lent H200's PCIe 5.0 x16 (`docs/gpu-results.md`).
const LINK_EFF: f64 = 0.79;

impl LinkSpec {
    /// A link of generation `gen` and `lanes` lanes at the usual efficiencies.
    pub fn pcie(generation: u32, lanes: u32) -> Option<LinkSpec> {
        let raw = pcie_lane_gbps(generation)? * lanes as f64;
        Some(LinkSpec {
            generation,
            lanes,
            h2d_gbps: raw * LINK_EFF,
            d2h_gbps: raw * LINK_EFF,
            // pageable copies stage through a pinned bounce buffer: about
            // half the pinned rate (CUDA Best Practices Guide, "Pinned Memory")
            pageable_gbps: raw * LINK_EFF * 0.5,
            // SM loads over mapped memory: assumed 70% of the copy engine's
            // rate (small activation rows never reach the full rate)
            sm_copy_gbps: raw * LINK_EFF * 0.7,
            copy_us: 2.0,
        })
    }
}

/// Other programs on the machine over time: the load ATS must adapt to.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// Share of the host's cores other programs take (0 to 0.95).
    pub cpu_load: Script,
    /// Share of the GPU's SM time another program (a game) takes (0 to 0.95).
    pub gpu_load: Script,
    /// VRAM another program holds from the start, bytes (the budget ATS
    /// can have is the rest).
    pub gpu_vram: u64,
    /// Slowdown of the PCIe link (1 and more: other traffic, a throttled link).
    pub pcie_slow: Script,
    /// GPU clock as a share of nominal (a thermal wall: 1 until T, then less).
    pub gpu_clock: Script,
    /// CPU clock as a share of nominal.
    pub cpu_clock: Script,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            cpu_load: Script::constant(0.0),
            gpu_load: Script::constant(0.0),
            gpu_vram: 0,
            pcie_slow: Script::constant(1.0),
            gpu_clock: Script::constant(1.0),
            cpu_clock: Script::constant(1.0),
        }
    }
}

impl Scenario {
    /// Whether nothing changes over time.
    pub fn is_quiet(&self) -> bool {
        self.cpu_load.is_constant()
            && self.gpu_load.is_constant()
            && self.pcie_slow.is_constant()
            && self.gpu_clock.is_constant()
            && self.cpu_clock.is_constant()
    }
}

/// A modelled machine.
#[derive(Clone, Debug, PartialEq)]
pub struct MachineSpec {
    /// The preset (or file) it came from, with any overrides.
    pub name: String,
    /// The host CPU.
    pub host: HostSpec,
    /// The GPU.
    pub gpu: GpuSpec,
    /// The link.
    pub link: LinkSpec,
    /// Other programs over time.
    pub scenario: Scenario,
    /// Whether ops really compute (exact logits; the default). Without,
    /// only time is modelled: outputs are zeros and MoE routing is a fixed
    /// pseudo-random pattern (experiments on models too large to compute here).
    pub compute: bool,
}

/// The presets' names, for `--help` and errors.
pub const PRESETS: [&str; 5] = [
    "rtx3060-laptop",
    "rtx4090-desktop",
    "pcie-gen3-desktop",
    "pcie-gen5-desktop",
    "h200-host",
];

/// The keys a spec accepts after its name (or in its file), for `--help`.
pub const MACHINE_KEYS: &str = "cores=N, core_gflops=X, core_attn_gflops=X, core_gbps=X, \
mem_gbps=X, dispatch_us=X, expert_us=X (host); vram=SIZE, gpu_gbps=X, matvec_eff=F, elem_eff=F, \
gemm_tflops=X, gemm_ramp=N, attn_tflops=X, attn_ramp=N, kernel_us=X, attn_us=X, launch_us=X, \
sync_us=X, routed_expert_gbps=X, routed_max_gbps=X, moe_tile=N, moe_tflops=X (GPU); pcie=genGxL, h2d_gbps=X, d2h_gbps=X, pageable_gbps=X, sm_copy_gbps=X, \
copy_us=X (link); cpuload=T:F;.. (share of cores taken from T seconds), gpuload=T:F;.. \
(share of SM time), gamevram=SIZE, pcieslow=T:F;.. (link slowdown >= 1), thermal=T:F;.. \
(GPU clock share from T), cputhermal=T:F;.. (CPU clock share); compute=on|off";

impl MachineSpec {
    /// A preset by name.
    pub fn preset(name: &str) -> Option<MachineSpec> {
        let spec = match name {
            "rtx3060-laptop" => rtx3060_laptop(),
            "rtx4090-desktop" => rtx4090_desktop(),
            "pcie-gen3-desktop" => gen5_desktop(3, "pcie-gen3-desktop"),
            "pcie-gen5-desktop" => gen5_desktop(5, "pcie-gen5-desktop"),
            "h200-host" => h200_host(),
            _ => return None,
        };
        Some(spec)
    }

    /// `NAME|FILE[,key=value...]`: a preset or a file of `key=value` lines
    /// (`base=NAME` first, `#` comments), then overrides.
    pub fn parse(arg: &str) -> Result<MachineSpec, String> {
        let mut parts = split_top(arg);
        let head = parts.remove(0);
        let head = head.trim();
        let mut spec = match MachineSpec::preset(head) {
            Some(s) => s,
            None if std::path::Path::new(head).is_file() => {
                let text = std::fs::read_to_string(head)
                    .map_err(|e| format!("--sim-machine {head}: {e}"))?;
                MachineSpec::from_file_text(&text)
                    .map_err(|e| format!("--sim-machine {head}: {e}"))?
            }
            None => {
                return Err(format!(
                    "--sim-machine: {head:?} is neither a preset ({}) nor a file",
                    PRESETS.join(", ")
                ));
            }
        };
        for kv in parts {
            spec.set_kv(&kv)?;
        }
        if !arg.trim().eq(head) {
            spec.name = arg.trim().to_string();
        }
        Ok(spec)
    }

    /// A spec from a file's text: `base=NAME`, then `key=value` lines.
    pub fn from_file_text(text: &str) -> Result<MachineSpec, String> {
        let lines: Vec<&str> = text
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .filter(|l| !l.is_empty())
            .collect();
        let Some(first) = lines.first() else {
            return Err("the file is empty (give base=NAME, then key=value lines)".into());
        };
        let base = first
            .strip_prefix("base=")
            .ok_or("the first line must be base=NAME (one of the presets)")?
            .trim();
        let mut spec = MachineSpec::preset(base)
            .ok_or_else(|| format!("base={base}: no such preset ({})", PRESETS.join(", ")))?;
        for l in &lines[1..] {
            spec.set_kv(l)?;
        }
        spec.name = format!("{base} (from a file)");
        Ok(spec)
    }

    /// Sets one `key=value`.
    pub fn set_kv(&mut self, kv: &str) -> Result<(), String> {
        let (k, v) = kv.split_once('=').ok_or_else(|| {
            format!("--sim-machine: {kv:?} is not key=value (keys: {MACHINE_KEYS})")
        })?;
        let (k, v) = (k.trim(), v.trim());
        let pos = |v: &str| -> Result<f64, String> {
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| format!("--sim-machine {k}: {v:?} is not a positive number"))
        };
        let nonneg = |v: &str| -> Result<f64, String> {
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| format!("--sim-machine {k}: {v:?} is not a number >= 0"))
        };
        let frac = |v: &str| -> Result<f64, String> {
            pos(v).and_then(|x| {
                if x <= 1.0 {
                    Ok(x)
                } else {
                    Err(format!(
                        "--sim-machine {k}: {v:?} is not a fraction in (0, 1]"
                    ))
                }
            })
        };
        let what = format!("--sim-machine {k}");
        match k {
            "cores" => {
                self.host.cores = v
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or_else(|| format!("{what}: {v:?} is not a count >= 1"))?
            }
            "core_gflops" => self.host.core_gflops = pos(v)?,
            "core_attn_gflops" => self.host.core_attn_gflops = pos(v)?,
            "core_gbps" => self.host.core_gbps = pos(v)?,
            "mem_gbps" => self.host.mem_gbps = pos(v)?,
            "dispatch_us" => self.host.dispatch_us = nonneg(v)?,
            "expert_us" => self.host.expert_us = nonneg(v)?,
            "routed_expert_gbps" => self.gpu.routed_expert_gbps = pos(v)?,
            "routed_max_gbps" => self.gpu.routed_max_gbps = pos(v)?,
            "moe_tile" => self.gpu.moe_tile_tokens = pos(v)?,
            "moe_tflops" => self.gpu.moe_tflops = pos(v)?,
            "vram" => self.gpu.memory = parse_size(v).map_err(|e| format!("{what}: {e}"))?,
            "gpu_gbps" => self.gpu.mem_gbps = pos(v)?,
            "matvec_eff" => self.gpu.matvec_eff = frac(v)?,
            "elem_eff" => self.gpu.elem_eff = frac(v)?,
            "gemm_tflops" => self.gpu.gemm_tflops = pos(v)?,
            "gemm_ramp" => self.gpu.gemm_ramp_tokens = pos(v)?,
            "attn_tflops" => self.gpu.attn_tflops = pos(v)?,
            "attn_ramp" => self.gpu.attn_ramp_tokens = pos(v)?,
            "kernel_us" => self.gpu.kernel_us = nonneg(v)?,
            "attn_us" => self.gpu.attn_us = nonneg(v)?,
            "launch_us" => self.gpu.launch_us = nonneg(v)?,
            "sync_us" => self.gpu.sync_us = nonneg(v)?,
            "pcie" => {
                let bad = || format!("{what}: {v:?} is not genGxL (e.g. gen4x16)");
                let (g, l) = v
                    .strip_prefix("gen")
                    .and_then(|r| r.split_once('x'))
                    .ok_or_else(bad)?;
                let (g, l): (u32, u32) =
                    (g.parse().map_err(|_| bad())?, l.parse().map_err(|_| bad())?);
                if !matches!(l, 1 | 2 | 4 | 8 | 16) {
                    return Err(format!("{what}: {l} lanes (1, 2, 4, 8 or 16)"));
                }
                let copy_us = self.link.copy_us;
                self.link = LinkSpec::pcie(g, l)
                    .ok_or_else(|| format!("{what}: no PCIe generation {g}"))?;
                self.link.copy_us = copy_us;
            }
            "h2d_gbps" => self.link.h2d_gbps = pos(v)?,
            "d2h_gbps" => self.link.d2h_gbps = pos(v)?,
            "pageable_gbps" => self.link.pageable_gbps = pos(v)?,
            "sm_copy_gbps" => self.link.sm_copy_gbps = pos(v)?,
            "copy_us" => self.link.copy_us = nonneg(v)?,
            "cpuload" => self.scenario.cpu_load = Script::parse(v, 0.0, 0.0..=0.95, &what)?,
            "gpuload" => self.scenario.gpu_load = Script::parse(v, 0.0, 0.0..=0.95, &what)?,
            "gamevram" => {
                self.scenario.gpu_vram = if v == "0" {
                    0
                } else {
                    parse_size(v).map_err(|e| format!("{what}: {e}"))?
                }
            }
            "pcieslow" => self.scenario.pcie_slow = Script::parse(v, 1.0, 1.0..=1000.0, &what)?,
            "thermal" => self.scenario.gpu_clock = Script::parse(v, 1.0, 0.05..=1.0, &what)?,
            "cputhermal" => self.scenario.cpu_clock = Script::parse(v, 1.0, 0.05..=1.0, &what)?,
            "compute" => {
                self.compute = match v {
                    "on" | "true" | "1" => true,
                    "off" | "false" | "0" => false,
                    _ => return Err(format!("{what}: {v:?} is not on or off")),
                }
            }
            other => {
                return Err(format!(
                    "--sim-machine: unknown key {other:?} (keys: {MACHINE_KEYS})"
                ));
            }
        }
        Ok(())
    }

    /// VRAM ATS can have: the device's memory less what another program holds.
    pub fn vram_available(&self) -> u64 {
        self.gpu.memory.saturating_sub(self.scenario.gpu_vram)
    }

    /// Every setting, one `key=value` a line (a file `--sim-machine` reads back).
    pub fn to_file_text(&self) -> String {
        let h = &self.host;
        let g = &self.gpu;
        let l = &self.link;
        let s = &self.scenario;
        let base = self.name.split([',', ' ']).next().unwrap_or("");
        let mut o = String::new();
        let _ = writeln!(o, "base={base}");
        let _ = writeln!(o, "# host: {}", h.name);
        for (k, v) in [
            ("cores", h.cores as f64),
            ("core_gflops", h.core_gflops),
            ("core_attn_gflops", h.core_attn_gflops),
            ("core_gbps", h.core_gbps),
            ("mem_gbps", h.mem_gbps),
            ("dispatch_us", h.dispatch_us),
            ("expert_us", h.expert_us),
        ] {
            let _ = writeln!(o, "{k}={v}");
        }
        let _ = writeln!(o, "# GPU: {}", g.name);
        let _ = writeln!(o, "vram={}", g.memory);
        for (k, v) in [
            ("gpu_gbps", g.mem_gbps),
            ("matvec_eff", g.matvec_eff),
            ("elem_eff", g.elem_eff),
            ("gemm_tflops", g.gemm_tflops),
            ("gemm_ramp", g.gemm_ramp_tokens),
            ("attn_tflops", g.attn_tflops),
            ("attn_ramp", g.attn_ramp_tokens),
            ("kernel_us", g.kernel_us),
            ("attn_us", g.attn_us),
            ("launch_us", g.launch_us),
            ("sync_us", g.sync_us),
            ("routed_expert_gbps", g.routed_expert_gbps),
            ("routed_max_gbps", g.routed_max_gbps),
            ("moe_tile", g.moe_tile_tokens),
            ("moe_tflops", g.moe_tflops),
        ] {
            let _ = writeln!(o, "{k}={v}");
        }
        let _ = writeln!(o, "# link\npcie=gen{}x{}", l.generation, l.lanes);
        for (k, v) in [
            ("h2d_gbps", l.h2d_gbps),
            ("d2h_gbps", l.d2h_gbps),
            ("pageable_gbps", l.pageable_gbps),
            ("sm_copy_gbps", l.sm_copy_gbps),
            ("copy_us", l.copy_us),
        ] {
            let _ = writeln!(o, "{k}={v}");
        }
        let _ = writeln!(o, "# scenario");
        let _ = writeln!(o, "cpuload={}", s.cpu_load);
        let _ = writeln!(o, "gpuload={}", s.gpu_load);
        let _ = writeln!(o, "gamevram={}", s.gpu_vram);
        let _ = writeln!(o, "pcieslow={}", s.pcie_slow);
        let _ = writeln!(o, "thermal={}", s.gpu_clock);
        let _ = writeln!(o, "cputhermal={}", s.cpu_clock);
        let _ = writeln!(o, "compute={}", if self.compute { "on" } else { "off" });
        o
    }

    /// One line for logs: what is modelled.
    pub fn summary(&self) -> String {
        format!(
            "{}: {} ({} cores, {:.0} GB/s) + {} ({}, {:.0} GB/s) over PCIe {}.0 x{} ({:.1} GB/s){}{}",
            self.name,
            self.host.name,
            self.host.cores,
            self.host.mem_gbps,
            self.gpu.name,
            fmt_bytes(self.gpu.memory),
            self.gpu.mem_gbps,
            self.link.generation,
            self.link.lanes,
            self.link.h2d_gbps,
            if self.scenario.is_quiet() && self.scenario.gpu_vram == 0 {
                ""
            } else {
                ", with a load scenario"
            },
            if self.compute {
                ""
            } else {
                ", timing only (no logits)"
            },
        )
    }
}

/// Splits `a,b=c;d,e` at the commas that start a new `key=` (script values
/// contain `;` and `:`, never `,`).
fn split_top(s: &str) -> Vec<String> {
    s.split(',').map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_parse_and_round_trip_through_a_file() {
        for p in PRESETS {
            let s = MachineSpec::parse(p).unwrap();
            assert_eq!(s.name, p);
            let back = MachineSpec::from_file_text(&s.to_file_text()).unwrap();
            assert_eq!(back.host, s.host, "{p}");
            assert_eq!(back.gpu, s.gpu, "{p}");
            assert_eq!(back.link, s.link, "{p}");
            assert_eq!(back.scenario, s.scenario, "{p}");
        }
        let gen3 = MachineSpec::parse("pcie-gen3-desktop").unwrap();
        assert!(
            (gen3.link.h2d_gbps - 12.4).abs() < 0.1,
            "{}",
            gen3.link.h2d_gbps
        );
    }

    #[test]
    fn overrides_and_scenarios() {
        let s = MachineSpec::parse(
            "rtx3060-laptop,cores=4,pcie=gen3x8,cpuload=10:0.5;20:0,thermal=30:0.7,compute=off",
        )
        .unwrap();
        assert_eq!(s.host.cores, 4);
        assert_eq!((s.link.generation, s.link.lanes), (3, 8));
        assert_eq!(s.scenario.cpu_load.at(15.0), 0.5);
        assert_eq!(s.scenario.gpu_clock.at(31.0), 0.7);
        assert!(!s.compute);
        assert!(s.name.contains("cores=4"));
        for bad in [
            "nope",
            "rtx3060-laptop,warp=9",
            "rtx3060-laptop,cores=0",
            "rtx3060-laptop,pcie=gen9x16",
            "rtx3060-laptop,cpuload=1:2",
            "rtx3060-laptop,thermal=5:0",
        ] {
            assert!(MachineSpec::parse(bad).is_err(), "{bad}");
        }
    }
}
