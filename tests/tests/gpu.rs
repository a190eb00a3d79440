//! Issue 5 on a real GPU (each test prints why and passes when there is
//! none): every text fixture on the GPU alone and on random CPU + GPU
//! placements gives the CPU's logits; the quantised fixtures give the
//! dequantised reference; the ledger stays within the budget and agrees with
//! what the driver reports.

use std::sync::Arc;

use ats_core::device::{Device, HostMemory, KvType};
use ats_core::round::{Positions, Round};
use ats_core::spec::ModelSpec;
use ats_cpu::CpuDevice;
use ats_cuda::{CudaDevice, CudaOptions};
use ats_sched::config::Policy;
use ats_sched::exec::{ExecConfig, ExecPlan, Executor, WeightHome};
use ats_tests::{
    Reference, XorShift, engine_on, fixtures, gpu_if, host_only, max_abs_diff, with_gpu,
};

const TEXT: [(&str, &str); 4] = [
    ("llama", "llama-f32.gguf"),
    ("qwen2", "qwen2-f32.gguf"),
    ("qwen3", "qwen3-f32.gguf"),
    ("qwen3_moe", "qwen3_moe-f32.gguf"),
];

/// The GPU with these options, or `None` after saying why there is none.
fn gpu(opts: CudaOptions) -> Option<Arc<CudaDevice>> {
    match CudaDevice::open(opts) {
        Ok(d) => {
            for n in d.notes() {
                eprintln!("gpu note: {n}");
            }
            Some(Arc::new(d))
        }
        Err(e) => {
            eprintln!("skipping: no usable GPU: {e}");
            None
        }
    }
}

fn opts(budget: u64, cublas: bool) -> CudaOptions {
    CudaOptions {
        budget: Some(budget),
        use_cublas: cublas,
        ..CudaOptions::default()
    }
}

/// mode 0: all on the GPU with resident weights; 1: all on the GPU with
/// every weight streamed; 2: alternating nodes, streamed; else random.
fn plan(g: &ats_core::graph::Graph, rng: &mut XorShift, mode: usize) -> ExecPlan {
    let mut p = ExecPlan::all_cpu(g);
    for i in 0..g.nodes.len() {
        p.node_device[i] = match mode {
            0 | 1 => gpu_if(true),
            2 => gpu_if(i % 2 == 1),
            _ => gpu_if(rng.coin(50)),
        };
    }
    for w in 0..g.weights.len() {
        p.weight_home[w] = match mode {
            0 => WeightHome::Resident,
            1 | 2 => WeightHome::Host,
            _ if rng.coin(40) => WeightHome::Resident,
            _ => WeightHome::Host,
        };
    }
    ats_tests::caches_follow_attention(g, &mut p);
    p
}

fn text_round(spec: &ModelSpec, ids: &[u32], past: usize) -> Arc<Round> {
    let mut r = Round::text(ids.to_vec(), past, true);
    if spec.arch.uses_mrope() {
        r.positions = Positions::mrope_text(past, ids.len());
    }
    Arc::new(r)
}

/// Prefill of all but two ids, then two decode steps.
fn rounds(ex: &mut Executor, spec: &ModelSpec, ids: &[u32]) -> Vec<Vec<f32>> {
    let (a, b) = ids.split_at(ids.len() - 2);
    vec![
        ex.run(&text_round(spec, a, 0)).unwrap().to_vec(),
        ex.run(&text_round(spec, &b[..1], a.len()))
            .unwrap()
            .to_vec(),
        ex.run(&text_round(spec, &b[1..], a.len() + 1))
            .unwrap()
            .to_vec(),
    ]
}

#[test]
fn text_fixtures_on_the_gpu_and_mixed_placements_match_the_cpu() {
    let Some(dev) = gpu(opts(2 << 30, true)) else {
        return;
    };
    let Some(dev_tiled) = gpu(opts(1 << 30, false)) else {
        return;
    };
    let mut rng = XorShift(0x5eed_cafe_f00d_0001);
    // every case runs and reports; the test fails at the end with the list
    let mut failures = Vec::new();
    for (dir, file) in TEXT {
        let spec = ModelSpec::open(fixtures().join(dir).join(file)).unwrap();
        let graph = spec.graph().clone();
        let host: Arc<dyn HostMemory> = spec.gguf.backing().clone();
        let ids = Reference::open(&format!("{dir}/reference.safetensors")).ids("full_ids");
        let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(2).unwrap());
        for (kv, tol) in [(KvType::F32, 1e-3f32), (KvType::F16, 5e-2)] {
            let cfg = ExecConfig {
                kv_capacity: 64,
                kv_block_tokens: ats_sched::session::KV_BLOCK_TOKENS,
                kv_type: kv,
                slots_per_role: 2,
                region: None,
            };
            let mut base = Executor::new(
                graph.clone(),
                host.clone(),
                host_only(cpu.clone()),
                cfg.clone(),
                ExecPlan::all_cpu(&graph),
            )
            .unwrap();
            let want = rounds(&mut base, &spec, &ids);
            for trial in 0..8 {
                // trial 4 runs everything on the GPU without cuBLAS (tiled kernels)
                let g: Arc<dyn Device> = if trial == 4 {
                    dev_tiled.clone()
                } else {
                    dev.clone()
                };
                let mode = if trial == 4 { 0 } else { trial.min(3) };
                let p = plan(&graph, &mut rng, mode);
                g.pin_host(&host).unwrap();
                let mut ex = Executor::new(
                    graph.clone(),
                    host.clone(),
                    with_gpu(cpu.clone(), g.clone()),
                    cfg.clone(),
                    p.clone(),
                )
                .unwrap();
                let got = rounds(&mut ex, &spec, &ids);
                for (k, (gl, wl)) in got.iter().zip(&want).enumerate() {
                    let d = max_abs_diff(gl, wl);
                    eprintln!("{dir} {kv:?} trial {trial} round {k}: max |gpu - cpu| = {d:.2e}");
                    if d.is_nan() || d >= tol {
                        failures.push(format!(
                            "{dir} {kv:?} trial {trial} round {k}: {d} over {tol} ({} switches)",
                            p.switches()
                        ));
                    }
                }
                let t = g.drain_timings();
                assert!(t.nodes.iter().all(|&(_, s)| s >= 0.0));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn quantised_fixtures_match_the_dequantised_reference() {
    let Some(dev) = gpu(opts(1 << 30, true)) else {
        return;
    };
    let Some(dev_tiled) = gpu(opts(1 << 30, false)) else {
        return;
    };
    let mut failures = Vec::new();
    let r = Reference::open("llama_quant/reference.safetensors");
    let ids = Reference::open("llama/reference.safetensors").ids("input_ids");
    for (variant, file) in [
        ("Q8_0", "llama-Q8_0.gguf"),
        ("Q4_0", "llama-Q4_0.gguf"),
        ("Q4_1", "llama-Q4_1.gguf"),
        ("Q4_K_M", "llama-Q4_K_M.gguf"),
        ("Q5_K_M", "llama-Q5_K_M.gguf"),
        ("Q6_K", "llama-Q6_K.gguf"),
        ("Q4_K_M-mix", "llama-Q4_K_M-mix.gguf"),
    ] {
        let (want, _) = r.f32(&format!("{variant}.hf_dequant_logits"));
        let spec = ModelSpec::open(fixtures().join("llama_quant").join(file)).unwrap();
        let graph = spec.graph().clone();
        let host: Arc<dyn HostMemory> = spec.gguf.backing().clone();
        let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(2).unwrap());
        let cfg = ExecConfig {
            kv_capacity: 64,
            kv_block_tokens: ats_sched::session::KV_BLOCK_TOKENS,
            kv_type: KvType::F32,
            slots_per_role: 2,
            region: None,
        };
        // exact f32 tiles (1e-3, the fixture's tolerance); cuBLAS with f16
        // activations (looser: 11-bit activations)
        for (g, tol, what) in [
            (dev_tiled.clone(), 1e-3f32, "tiled"),
            (dev.clone(), 5e-2, "cuBLAS f16"),
        ] {
            let g: Arc<dyn Device> = g;
            let p = plan(&graph, &mut XorShift(1), 0);
            let mut ex = Executor::new(
                graph.clone(),
                host.clone(),
                with_gpu(cpu.clone(), g),
                cfg.clone(),
                p,
            )
            .unwrap();
            let got = ex
                .run(&Arc::new(Round::text(ids.clone(), 0, true)))
                .unwrap();
            let d = max_abs_diff(got, &want);
            eprintln!("{variant} {what}: max |gpu - hf_dequant| = {d:.2e}");
            if d.is_nan() || d >= tol {
                failures.push(format!("{variant} {what}: {d} over {tol}"));
            }
            // decode rows go through the quantised matrix-vector kernels
            let mut ex1 = ex;
            let got1 = ex1
                .run(&Arc::new(Round::text(vec![ids[0]], 0, true)))
                .unwrap();
            let d1 = max_abs_diff(got1, &want[..got1.len()]);
            eprintln!("{variant} {what} decode: max |gpu - hf_dequant| = {d1:.2e}");
            if d1.is_nan() || d1 >= 1e-3 {
                failures.push(format!("{variant} {what} decode: {d1} over 1e-3"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_ledger_holds_the_budget_and_agrees_with_the_driver() {
    let budget: u64 = 512 << 20;
    let Some(dev) = gpu(opts(budget, true)) else {
        return;
    };
    dev.load_kernels().unwrap();
    let (free0, total) = dev.mem_info().unwrap();
    let used0 = dev.ledger().used();
    for (dir, file) in TEXT {
        let spec = Arc::new(ModelSpec::open(fixtures().join(dir).join(file)).unwrap());
        let ids = Reference::open(&format!("{dir}/reference.safetensors")).ids("full_ids");
        let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(2).unwrap());
        let g: Arc<dyn Device> = dev.clone();
        let mut e = engine_on(
            spec.clone(),
            with_gpu(cpu.clone(), g),
            64,
            KvType::F16,
            Policy::Ats,
            true,
        );
        let got = e.eval(&ids).unwrap();
        let mut base = engine_on(spec, host_only(cpu), 64, KvType::F16, Policy::Ats, true);
        let want = base.eval(&ids).unwrap();
        let d = max_abs_diff(&got, &want);
        assert!(d < 5e-2, "{dir}: engine logits differ by {d}");
        let (free1, _) = dev.mem_info().unwrap();
        let ledger = dev.ledger().used() - used0;
        let driver = free0.saturating_sub(free1) as u64;
        eprintln!(
            "{dir}: ledger {ledger} bytes held since open, driver {driver} bytes; peak {} of {budget}; GPU total {total}",
            dev.ledger().peak()
        );
        assert!(dev.ledger().peak() <= budget);
        // the driver rounds allocations up (2 MiB pages) and adds its own
        // per-context memory; the ledger must never claim more than it holds
        assert!(
            driver + (4 << 20) >= ledger,
            "{dir}: driver {driver} < ledger {ledger}"
        );
        let overhead = driver.saturating_sub(ledger);
        eprintln!("{dir}: CUDA context overhead beyond the ledger: {overhead} bytes");
        assert!(overhead < 256 << 20, "{dir}: {overhead} bytes unaccounted");
        drop(e);
    }
}

/// A vision encoder on the CUDA device (the host CPU beside it).
fn gpu_encoder(
    spec: &Arc<ats_vision::VisionSpec>,
    dev: &Arc<CudaDevice>,
) -> ats_vision::encoder::VisionEncoder {
    use ats_vision::encoder::{EncoderConfig, EncoderDevice, VisionEncoder};
    let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(2).unwrap());
    let g: Arc<dyn Device> = dev.clone();
    VisionEncoder::new(
        spec.clone(),
        with_gpu(cpu, g),
        EncoderConfig {
            device: EncoderDevice::Gpu,
            ..EncoderConfig::default()
        },
    )
    .unwrap()
}

#[test]
fn vision_fixtures_on_the_gpu_match_hugging_face() {
    use ats_core::ledger::Region;
    use ats_tests::{VL_FIXTURES, VL_IMAGES};
    use ats_vision::VisionSpec;
    use ats_vision::preprocess::{DecodeLimits, preprocess_bytes};
    // vision weights stay on the host and stream through slots
    let budget: u64 = 256 << 20;
    let Some(dev) = gpu(opts(budget, true)) else {
        return;
    };
    let held = dev.ledger().used();
    for (dir, _, mmproj) in VL_FIXTURES {
        // the tower alone (the GPU check carries no language models)
        let spec = Arc::new(VisionSpec::open(fixtures().join(dir).join(mmproj)).unwrap());
        let r = Reference::open(&format!("{dir}/reference.safetensors"));
        let enc = gpu_encoder(&spec, &dev);
        for case in VL_IMAGES {
            let bytes = std::fs::read(fixtures().join(format!("vl_images/{case}.png"))).unwrap();
            let pv = preprocess_bytes(&bytes, &spec.preprocess_config(), &DecodeLimits::default())
                .unwrap();
            let e = enc.encode(&pv).unwrap();
            let (want, _) = r.f32(&format!("{case}.image_embeds"));
            let d = max_abs_diff(&e.data, &want);
            eprintln!(
                "{dir} {case}: image_embeds on {} max |diff| {d:.2e}, vision peak {} B, {:.1} ms",
                e.stats.device, e.stats.vision_peak_bytes, e.stats.ms
            );
            assert_ne!(e.stats.device, "cpu", "{dir} {case}: encoded on the CPU");
            // the cuBLAS path multiplies f16 activations
            assert!(d < 2e-2, "{dir} {case}: image embeddings differ by {d}");
            assert_eq!(
                dev.ledger().used_in(Region::Vision),
                0,
                "{dir} {case}: vision memory left"
            );
            // besides, only the device's own round-input buffer may grow
            let grown = dev.ledger().used() - held;
            assert!(grown < 1 << 20, "{dir} {case}: {grown} B more held");
            assert!(dev.ledger().peak() <= budget);
        }
    }
}

#[test]
fn a_1440p_image_encodes_within_1_gb_on_the_gpu() {
    use ats_core::ledger::Region;
    use ats_core::synth::SynthMmproj;
    use ats_vision::VisionSpec;
    use ats_vision::encoder::{EncoderConfig, EncoderDevice, VisionEncoder};
    use ats_vision::preprocess::{DecodeLimits, preprocess_bytes};
    const GB: u64 = 1_000_000_000;
    let Some(dev) = gpu(opts(GB, true)) else {
        return;
    };
    dev.load_kernels().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(ats_tests::write_1440p_png(dir.path())).unwrap();
    let held = dev.ledger().used();
    // the real Qwen2.5-VL-3B tower (32 blocks, F16, 1.3 GB of weights on the
    // host), then two of its blocks also on the CPU to compare
    for layers in [32, 2] {
        let path = dir.path().join(format!("mmproj-{layers}.gguf"));
        SynthMmproj {
            n_layer: layers,
            ..SynthMmproj::preset("qwen2.5-vl-3b").unwrap()
        }
        .write(&path, 7)
        .unwrap();
        let spec = Arc::new(VisionSpec::open(&path).unwrap());
        let pv =
            preprocess_bytes(&bytes, &spec.preprocess_config(), &DecodeLimits::default()).unwrap();
        dev.ledger().reset_peak();
        let enc = gpu_encoder(&spec, &dev);
        let vg = spec.graph(pv.grid_thw).unwrap();
        let plan = enc.plan(&vg).unwrap();
        let out = enc.encode(&pv).unwrap();
        let peak = dev.ledger().peak_in(Region::Vision);
        eprintln!(
            "1440p ({} patches), {layers} blocks on the GPU at 1 GB: vision peak {peak} B (planned {} = activations {} + weight slots {} + attention scratch {}, Q chunk {}), {:.0} ms",
            pv.n_patches,
            plan.total_bytes(),
            plan.activation_bytes,
            plan.temp_bytes,
            plan.scratch_bytes,
            plan.q_block,
            out.stats.ms
        );
        assert_ne!(out.stats.device, "cpu");
        assert!(peak <= GB, "vision peak {peak} over 1 GB");
        assert!(dev.ledger().peak() <= GB);
        assert!(out.data.iter().all(|v| v.is_finite()));
        assert_eq!(
            dev.ledger().used_in(Region::Vision),
            0,
            "the encoder left memory on the GPU"
        );
        // besides, only the device's own round-input buffer may grow
        let grown = dev.ledger().used() - held;
        assert!(grown < 1 << 20, "{grown} B more held after encoding");
        if layers == 2 {
            let cpu_enc = VisionEncoder::new(
                spec.clone(),
                host_only(Arc::new(
                    CpuDevice::new(std::thread::available_parallelism().map_or(2, |n| n.get()))
                        .unwrap(),
                )),
                EncoderConfig {
                    device: EncoderDevice::Host,
                    ..EncoderConfig::default()
                },
            )
            .unwrap();
            let want = cpu_enc.encode(&pv).unwrap();
            let scale = want.data.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = max_abs_diff(&out.data, &want.data);
            eprintln!(
                "2 blocks: GPU vs CPU max |diff| {d:.2e} (largest |value| {scale:.2e}); CPU {:.0} ms",
                want.stats.ms
            );
            assert!(d <= 2e-2 * scale.max(1.0), "GPU and CPU differ by {d}");
        }
    }
}

/// Decode rounds (one token: the decode attention kernel, the wide and
/// routed matrix-vector kernels) against one prefill round of the same
/// tokens (the general attention kernel, the tiled products), both on the
/// GPU without cuBLAS, on synthetic Q4_K/Q6_K models whose shapes the
/// decode kernels take: a dense one past 256 keys (several key splits)
/// and a MoE one (routed experts).
#[test]
fn synthetic_models_decode_as_they_prefill_on_the_gpu() {
    let Some(dev) = gpu(opts(1 << 30, false)) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("ats-gpu-synth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tiny = ats_core::synth::SynthSpec::preset("tiny").unwrap();
    let moe = ats_core::synth::SynthSpec {
        arch: "qwen3moe".into(),
        n_expert: 8,
        n_expert_used: 2,
        n_ff_expert: 256,
        tied: false,
        ..tiny.clone()
    };
    let mut failures = Vec::new();
    for (name, spec_w, n_prompt) in [("dense", tiny, 300), ("moe", moe, 12)] {
        let path = dir.join(format!("{name}.gguf"));
        spec_w.write(&path, 7).unwrap();
        let spec = ModelSpec::open(&path).unwrap();
        let graph = spec.graph().clone();
        let host: Arc<dyn HostMemory> = spec.gguf.backing().clone();
        let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(2).unwrap());
        let g: Arc<dyn Device> = dev.clone();
        g.pin_host(&host).unwrap();
        let cfg = ExecConfig {
            kv_capacity: n_prompt + 8,
            kv_block_tokens: ats_sched::session::KV_BLOCK_TOKENS,
            kv_type: KvType::F16,
            slots_per_role: 2,
            region: None,
        };
        let mut rng = XorShift(0x5eed_0005);
        let vocab = spec_w.n_vocab as u64;
        let ids: Vec<u32> = (0..n_prompt + 3)
            .map(|_| (rng.next_u64() % vocab) as u32)
            .collect();
        let executor = || {
            Executor::new(
                graph.clone(),
                host.clone(),
                with_gpu(cpu.clone(), g.clone()),
                cfg.clone(),
                plan(&graph, &mut XorShift(1), 0),
            )
            .unwrap()
        };
        let all = executor()
            .run(&Arc::new(Round::text(ids.clone(), 0, true)))
            .unwrap()
            .to_vec();
        let n_vocab = all.len() / ids.len();
        let scale = all.iter().fold(1f32, |m, v| m.max(v.abs()));
        let mut ex = executor();
        ex.run(&Arc::new(Round::text(ids[..n_prompt].to_vec(), 0, false)))
            .unwrap();
        for (i, &id) in ids.iter().enumerate().skip(n_prompt) {
            let got = ex.run(&Arc::new(Round::text(vec![id], i, true))).unwrap();
            let d = max_abs_diff(got, &all[i * n_vocab..(i + 1) * n_vocab]);
            eprintln!(
                "{name} decode at {i}: max |decode - prefill| = {d:.2e} (logits up to {scale:.2})"
            );
            if d.is_nan() || d > 1e-4 * scale {
                failures.push(format!("{name} at {i}: {d} over {}", 1e-4 * scale));
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn gpt_oss_on_the_gpu_matches_hf() {
    // sinks, sliding windows crossed by the prompt, YaRN, biased experts with the clamp
    repo_fixture_on_the_gpu_matches_hf("gpt-oss", 0x6770_7405_0019_0001);
}

#[test]
fn glm4moe_on_the_gpu_matches_hf() {
    // a dense lead, sigmoid routers with a selection bias, shared experts, q/k norms
    repo_fixture_on_the_gpu_matches_hf("glm4moe", 0x676c_6d45_0019_0001);
}

/// The repository's own fixture `name` (`tests/fixtures/NAME/NAME-f32.gguf`)
/// on the GPU under random placements, tiled and not, against transformers.
fn repo_fixture_on_the_gpu_matches_hf(name: &str, seed: u64) {
    let Some(dev) = gpu(opts(1 << 30, true)) else {
        return;
    };
    let Some(dev_tiled) = gpu(opts(1 << 30, false)) else {
        return;
    };
    let dir = ats_tests::repo_fixtures().join(name);
    let r = Reference::open_path(&dir.join("reference.safetensors"));
    let spec = ModelSpec::open(dir.join(format!("{name}-f32.gguf"))).unwrap();
    let graph = spec.graph().clone();
    let host: Arc<dyn HostMemory> = spec.gguf.backing().clone();
    let ids = r.ids("full_ids");
    let vocab = spec.hp.n_vocab;
    let cpu: Arc<dyn Device> = Arc::new(CpuDevice::new(2).unwrap());
    let mut rng = XorShift(seed);
    let mut failures = Vec::new();
    for (kv, want_name, tol) in [
        (KvType::F32, "full_logits", 1e-3f32),
        // HF with f16-rounded keys and values (see tests/tests/gpt_oss.rs)
        (KvType::F16, "full_logits_f16kv", 2e-2),
    ] {
        let (want, _) = r.f32(want_name);
        let cfg = ExecConfig {
            kv_capacity: 64,
            kv_block_tokens: ats_sched::session::KV_BLOCK_TOKENS,
            kv_type: kv,
            slots_per_role: 2,
            region: None,
        };
        for trial in 0..6 {
            let g: Arc<dyn Device> = if trial == 4 {
                dev_tiled.clone()
            } else {
                dev.clone()
            };
            let mode = if trial == 4 { 0 } else { trial.min(3) };
            let p = plan(&graph, &mut rng, mode);
            g.pin_host(&host).unwrap();
            let mut ex = Executor::new(
                graph.clone(),
                host.clone(),
                with_gpu(cpu.clone(), g.clone()),
                cfg.clone(),
                p.clone(),
            )
            .unwrap();
            // prefill of 38 tokens (every row's logits), two decode steps
            let got = rounds(&mut ex, &spec, &ids);
            let n = ids.len();
            let checks = [
                (&got[0], &want[..(n - 2) * vocab]),
                (&got[1], &want[(n - 2) * vocab..(n - 1) * vocab]),
                (&got[2], &want[(n - 1) * vocab..]),
            ];
            for (k, (gl, wl)) in checks.iter().enumerate() {
                let d = max_abs_diff(gl, wl);
                eprintln!("{name} {kv:?} trial {trial} round {k}: max |gpu - hf| = {d:.2e}");
                if d.is_nan() || d >= tol {
                    failures.push(format!(
                        "{name} {kv:?} trial {trial} round {k}: {d} over {tol}"
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
