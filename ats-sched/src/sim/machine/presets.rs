//! The presets of `--sim-machine`: the papers' consumer machines, two
//! desktops of the NVIDIA paper's PCIe study and the lent H200 host, each
//! figure with where it comes from (see [`super::spec`]).

use super::spec::{GpuSpec, HostSpec, LinkSpec, MachineSpec, Scenario};

/// One Zen 3 core (the development machine, `docs/benchmarks.md`): ATS's
/// AVX2 integer-dot kernels ran SmolLM2-135M's pp512 at 1049.7 tokens/s on
/// 2 cores, 0.27 GFLOP a token: about 140 GFLOP/s a core; a rayon fork and
/// join 3.5 us. Cores of other machines scale from it by clock and vector width.
const ZEN3_CORE_GFLOPS: f64 = 140.0;

/// The share of the dense matrix-product rate ATS's routed-expert kernel
/// reached on the H200 (`moe_tflops` of `h200-host`: ~13 of 185 TFLOP/s).
const MOE_SHARE: f64 = 0.07;

/// ATSInfer's laptop: an RTX 3060 Laptop GPU with an 8-core laptop CPU. The
/// paper's exact CPU is not recorded here; this is a common pairing, an
/// Intel Core i7-11800H (Tiger Lake-H).
pub(super) fn rtx3060_laptop() -> MachineSpec {
    MachineSpec {
        name: "rtx3060-laptop".into(),
        host: HostSpec {
            name: "8-core laptop CPU (i7-11800H class, DDR4-3200 x2)".into(),
            // Intel i7-11800H: 8 cores, 2.3 GHz base / 4.2-4.6 GHz turbo, AVX-512
            // (Intel ARK 213803)
            cores: 8,
            // all-core turbo ~4.2 GHz against the Zen 3 reference's ~3.2 GHz,
            // AVX-512 VNNI assumed 1.5x AVX2 per clock: 140 * 4.2/3.2 * 1.5,
            // less 35% for a laptop's sustained all-core clock (assumption)
            core_gflops: ZEN3_CORE_GFLOPS * 4.2 / 3.2 * 1.5 * 0.65,
            core_attn_gflops: 40.0,
            // one core streams about 12-15 GB/s on client parts (assumption,
            // in line with the 2-core Zen 3 reading 47.6 GB/s here)
            core_gbps: 12.0,
            // DDR4-3200 dual channel: 51.2 GB/s peak (JEDEC); ~70% sustained
            mem_gbps: 51.2 * 0.7,
            dispatch_us: 5.0,
            // assumed: two fork-joins' worth per expert product
            expert_us: 10.0,
        },
        gpu: GpuSpec {
            name: "RTX 3060 Laptop GPU".into(),
            // NVIDIA GeForce RTX 3060 Laptop GPU: 3840 CUDA cores (30 SMs),
            // boost 1283-1703 MHz by TGP, 6 GB GDDR6 on 192 bits at 14 Gbps:
            // 336 GB/s (nvidia.com, GeForce RTX 30 Series Laptops specs)
            memory: 6 << 30,
            sms: 30,
            mem_gbps: 336.0,
            // assumed: ATS's wide matvec kernels at 60% of the bandwidth on a
            // GPU whose 30 SMs a 4096-wide matrix fills (the H200's 132 SMs
            // were far from full, see h200-host)
            matvec_eff: 0.6,
            elem_eff: 0.6,
            // FP16 tensor rate of GA106 at 1.7 GHz: 3840 cores * 2 * 1.703
            // GHz = 13.1 TFLOP/s FP32, x4 dense FP16 with FP16 accumulate
            // (Ampere GA102 whitepaper ratio); cuBLAS reaches ~60% (assumed)
            gemm_tflops: 13.1 * 4.0 * 0.6,
            gemm_ramp_tokens: 256.0,
            attn_tflops: 8.0,
            attn_ramp_tokens: 64.0,
            kernel_us: 4.0,
            attn_us: 10.0,
            // cuLaunchKernel costs 2-5 us of host time (CUDA C Best Practices)
            launch_us: 4.0,
            sync_us: 10.0,
            // assumed as fitted on the H200 (same kernel geometry), capped
            // at half the link
            routed_expert_gbps: 0.39,
            routed_max_gbps: 12.5,
            // the decode MoE kernel of 2026-12-01 (one grid row per choice)
            moe_tile_tokens: 1.0,
            // assumed: the same kernel reaches the share of the dense rate
            // it reached on the H200 (see h200-host)
            moe_tflops: 13.1 * 4.0 * 0.6 * MOE_SHARE,
        },
        // the i7-11800H's 16 CPU lanes are PCIe 4.0 (Intel ARK 213803); the
        // RTX 3060 Laptop GPU is a PCIe 4.0 x16 part
        link: LinkSpec::pcie(4, 16).expect("gen4"),
        scenario: Scenario::default(),
        compute: true,
    }
}

/// ATSInfer's desktop: an RTX 4090 with a 16-core desktop CPU (Ryzen 9
/// 7950X class; the paper's exact CPU is not recorded here).
pub(super) fn rtx4090_desktop() -> MachineSpec {
    MachineSpec {
        name: "rtx4090-desktop".into(),
        host: HostSpec {
            name: "16-core desktop CPU (Ryzen 9 7950X class, DDR5-5200 x2)".into(),
            // AMD Ryzen 9 7950X: 16 cores, 4.5 GHz base / 5.7 GHz boost,
            // AVX-512 on 256-bit units (amd.com product page)
            cores: 16,
            // ~5.0 GHz all-core against the reference's ~3.2 GHz; AVX-512
            // VNNI on double-pumped 256-bit units assumed 1.3x AVX2 per clock
            core_gflops: ZEN3_CORE_GFLOPS * 5.0 / 3.2 * 1.3,
            core_attn_gflops: 50.0,
            core_gbps: 15.0,
            // DDR5-5200 dual channel: 83.2 GB/s peak (the 7950X's rated
            // memory speed, amd.com); ~75% sustained
            mem_gbps: 83.2 * 0.75,
            dispatch_us: 4.0,
            // assumed: two fork-joins' worth per expert product
            expert_us: 8.0,
        },
        gpu: GpuSpec {
            name: "RTX 4090".into(),
            // NVIDIA Ada whitepaper: RTX 4090, 128 SMs (16384 cores), boost
            // 2.52 GHz, 24 GB GDDR6X on 384 bits at 21 Gbps: 1008 GB/s; FP16
            // tensor with FP32 accumulate 165.2 TFLOP/s dense
            memory: 24 << 30,
            sms: 128,
            mem_gbps: 1008.0,
            matvec_eff: 0.6,
            elem_eff: 0.6,
            // cuBLAS reaches ~60% of the whitepaper rate (assumed)
            gemm_tflops: 165.2 * 0.6,
            gemm_ramp_tokens: 512.0,
            attn_tflops: 30.0,
            attn_ramp_tokens: 64.0,
            kernel_us: 3.0,
            attn_us: 8.0,
            launch_us: 3.0,
            sync_us: 8.0,
            routed_expert_gbps: 0.39,
            routed_max_gbps: 12.5,
            // the decode MoE kernel of 2026-12-01 (one grid row per choice)
            moe_tile_tokens: 1.0,
            // assumed, as the RTX 3060's
            moe_tflops: 165.2 * 0.6 * MOE_SHARE,
        },
        // the RTX 4090 is a PCIe 4.0 x16 card (Ada whitepaper)
        link: LinkSpec::pcie(4, 16).expect("gen4"),
        scenario: Scenario::default(),
        compute: true,
    }
}

/// The NVIDIA paper's sensitivity study: one high-end desktop whose link
/// runs at PCIe 3.0 or 5.0 x16. Modelled as an RTX 5090 with a 24-core
/// desktop CPU (Core Ultra 9 285K class; the paper's exact parts are not
/// recorded here).
pub(super) fn gen5_desktop(generation: u32, name: &str) -> MachineSpec {
    MachineSpec {
        name: name.into(),
        host: HostSpec {
            name: "24-core desktop CPU (Core Ultra 9 285K class, DDR5-6400 x2)".into(),
            // Intel Core Ultra 9 285K: 8 P-cores + 16 E-cores, up to 5.7 GHz,
            // DDR5-6400 (Intel ARK 241060); E-cores counted at 60% of a
            // P-core (assumption): 8 + 16 * 0.6 = 17.6 P-core equivalents
            cores: 24,
            core_gflops: ZEN3_CORE_GFLOPS * 5.0 / 3.2 * (17.6 / 24.0),
            core_attn_gflops: 40.0,
            core_gbps: 14.0,
            // DDR5-6400 dual channel: 102.4 GB/s peak; ~75% sustained
            mem_gbps: 102.4 * 0.75,
            dispatch_us: 4.0,
            // assumed: two fork-joins' worth per expert product
            expert_us: 8.0,
        },
        gpu: GpuSpec {
            name: "RTX 5090".into(),
            // NVIDIA GeForce RTX 5090: 21760 cores (170 SMs), boost 2.41 GHz,
            // 32 GB GDDR7 on 512 bits at 28 Gbps: 1792 GB/s (nvidia.com);
            // FP16 tensor dense with FP32 accumulate ~209.5 TFLOP/s
            // (Blackwell RTX whitepaper)
            memory: 32 << 30,
            sms: 170,
            mem_gbps: 1792.0,
            matvec_eff: 0.6,
            elem_eff: 0.6,
            gemm_tflops: 209.5 * 0.6,
            gemm_ramp_tokens: 512.0,
            attn_tflops: 40.0,
            attn_ramp_tokens: 64.0,
            kernel_us: 3.0,
            attn_us: 8.0,
            launch_us: 3.0,
            sync_us: 8.0,
            routed_expert_gbps: 0.39,
            routed_max_gbps: 0.5
                * LinkSpec::pcie(generation, 16)
                    .expect("gen3 or gen5")
                    .h2d_gbps,
            moe_tile_tokens: 1.0,
            // assumed, as the RTX 3060's
            moe_tflops: 209.5 * 0.6 * MOE_SHARE,
        },
        // the RTX 5090 is a PCIe 5.0 x16 card; the study sets the slot to gen 3
        link: LinkSpec::pcie(generation, 16).expect("gen3 or gen5"),
        scenario: Scenario::default(),
        compute: true,
    }
}

/// The GPU host the workplace lends (`docs/gpu-results.md`): an H200 on PCIe
/// 5.0 x16 with 16 host cores, fitted to what ATS's kernels of 2026-12-01
/// measured there (the quick profile and the benchmarks), not to the
/// H200's datasheet: ATS reached a small share of its bandwidth.
pub(super) fn h200_host() -> MachineSpec {
    MachineSpec {
        name: "h200-host".into(),
        host: HostSpec {
            name: "16 host cores of the lent H200 machine".into(),
            cores: 16,
            // fitted to the 2026-12-01 runs (docs/gpu-results.md): `layers`
            // at 2G decoded its ~3.5 GB of CPU weights at 15.2-18.0 tokens/s
            // and ATS's static plan its ~3.7 GB in 55-56 ms a token: about
            // 80 GB/s on 16 threads, a server's memory that PCIe traffic
            // does not saturate
            core_gflops: ZEN3_CORE_GFLOPS,
            // `layers` prompts (512-token batches whose CPU-cached layers
            // attend on the CPU) ran 340-439 tokens/s at 2G and 607 at 4G
            core_attn_gflops: 10.0,
            core_gbps: 5.0,
            mem_gbps: 200.0,
            // qwen3-30b-a3b under `layers` (nearly all on the CPU) decoded at
            // 13.0-14.3 tokens/s against ~30 ms of memory traffic: per-op
            // and per-expert fork-joins on 16 threads
            dispatch_us: 20.0,
            expert_us: 20.0,
        },
        gpu: GpuSpec {
            name: "H200 (ATS kernels of 2026-12-01)".into(),
            // NVIDIA H200: 141 GB HBM3e at 4.8 TB/s, 132 SMs (nvidia.com);
            // the lent device showed 143,771 MiB
            memory: 143_771 << 20,
            sms: 132,
            mem_gbps: 4800.0,
            // fitted: the all-resident llama-8b decode (8G) ran 27.4-30.6 ms
            // a token (32.7-36.5 tokens/s), of which 32 attention kernels
            // ~6.7 ms (the profile's 225-277 us less its sync): the products
            // move 4.9 GB at ~240 GB/s (5% of the 4.8 TB/s)
            matvec_eff: 0.05,
            elem_eff: 0.05,
            // the profile measured 148-221 TFLOP/s for products at 2048
            // tokens and 10-18 at 128 (cuBLAS on f16 activations)
            gemm_tflops: 185.0,
            gemm_ramp_tokens: 2048.0,
            // fitted: decode attention 225 us at 256 keys, 277 at 2048
            // (the profile, with its ~15 us of launch and sync)
            attn_tflops: 8.0,
            attn_ramp_tokens: 16.0,
            kernel_us: 4.0,
            attn_us: 205.0,
            launch_us: 5.0,
            // the quick profile's switch cost: 10.4 us
            sync_us: 10.4,
            // fitted: qwen3-30b-a3b's GPU-only decode (8 of 128 experts a
            // layer copied by the routed-copy kernel) ran 338-375 ms a token,
            // ~1.17 GB: ~3.1 GB/s for 8 experts; `layers` prompts of
            // 512-token batches, every expert copied, 164-210 tokens/s: the
            // link's rate
            routed_expert_gbps: 0.39,
            routed_max_gbps: 48.3,
            // the runs' MoE kernel tiled 64 tokens, one routed token in each
            // tile at decode (docs/gpu-results.md: static decode 49-63 ms
            // against 10-14 ms estimated)
            moe_tile_tokens: 64.0,
            // fitted: qwen3-30b-a3b's prompts (512-token chunks, all 128
            // experts hit, 32 tokens each: 128 tiles on 132 SMs) ran
            // 683-796 tokens/s at 2G-8G (docs/gpu-results.md), about 6 ms a
            // layer's experts once the routed copies (at the link's rate,
            // after the router) are taken out; their 77 GFLOP padded to
            // 64-token tiles: ~13 TFLOP/s
            moe_tflops: 185.0 * MOE_SHARE,
        },
        link: LinkSpec {
            generation: 5,
            lanes: 16,
            // measured by the quick profile: 48.3 GB/s pinned
            h2d_gbps: 48.3,
            d2h_gbps: 48.3,
            pageable_gbps: 24.0,
            sm_copy_gbps: 30.0,
            copy_us: 3.0,
        },
        scenario: Scenario::default(),
        compute: true,
    }
}
