//! Issue 6 memory: a 2560x1440 image through a Qwen2.5-VL-shaped vision
//! tower under a 1 GB budget on the simulated GPU and on the CPU, the Q chunk
//! chosen from the budget; and the VLM order of life: the device's peak is
//! max(vision, language), never their sum.
//!
//! CI runs on two cores, so the tower here is narrow (hidden 64, 4 heads): a
//! materialised score matrix of its 4888 patches would still take 382 MB, a
//! real tower's 16 heads 1.5 GB. `cargo run --release -p ats-vision --example
//! qchunk` runs the real widths (docs/vision.md has its figures).

use ats_core::machine::DeviceId;
use std::sync::Arc;

use ats_core::device::{Device, KvType};
use ats_core::ledger::Region;
use ats_core::synth::SynthMmproj;
use ats_sched::config::Policy;
use ats_tests::{
    VL_IMAGES, engine_on, fixtures, host_only, max_abs_diff, sim_gpu, vl_fixture, with_gpu,
    write_1440p_png,
};
use ats_vision::encoder::{EncoderConfig, EncoderDevice, VisionEncoder};
use ats_vision::preprocess::{DecodeLimits, PixelValues};
use ats_vision::{VisionSpec, pipeline};

const GB: u64 = 1_000_000_000;

/// Two blocks (one windowed, one full), 4 heads of 16 columns.
fn synthetic_tower(dir: &std::path::Path) -> Arc<VisionSpec> {
    let spec = SynthMmproj {
        n_embd: 64,
        n_head: 4,
        n_ff: 128,
        n_layer: 2,
        projection_dim: 96,
        n_wa_pattern: 2,
        ..SynthMmproj::preset("qwen2.5-vl-3b").unwrap()
    };
    let path = dir.join("mmproj-synthetic.gguf");
    spec.write(&path, 11).unwrap();
    Arc::new(VisionSpec::open(&path).unwrap())
}

fn pixels(spec: &VisionSpec, path: &std::path::Path) -> PixelValues {
    let bytes = std::fs::read(path).unwrap();
    ats_vision::preprocess::preprocess_bytes(
        &bytes,
        &spec.preprocess_config(),
        &DecodeLimits::default(),
    )
    .unwrap()
}

fn cpu() -> Arc<dyn Device> {
    Arc::new(ats_cpu::CpuDevice::new(2).unwrap())
}

#[test]
fn a_1440p_image_encodes_within_1_gb_on_the_simulated_gpu_and_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let spec = synthetic_tower(dir.path());
    let pv = pixels(&spec, &write_1440p_png(dir.path()));
    // smart_resize to max_pixels: 1316x728, 94x52 patches
    assert_eq!(pv.grid_thw, [1, 52, 94]);
    let n = pv.n_patches;
    let heads = spec.hp.n_head as u64;
    // what a materialised score matrix would take, in every head at once
    let scores = heads * (n * n * 4) as u64;
    let vg = spec.graph(pv.grid_thw).unwrap();
    let on_gpu = |budget: u64, q_block: Option<usize>| {
        let gpu = sim_gpu(budget, 2);
        let enc = VisionEncoder::new(
            spec.clone(),
            with_gpu(cpu(), gpu.clone()),
            EncoderConfig {
                device: EncoderDevice::Gpu,
                q_block,
                ..EncoderConfig::default()
            },
        )
        .unwrap();
        let plan = enc.plan(&vg).unwrap();
        let out = enc.encode(&pv).unwrap();
        let peak = gpu.ledger().peak_in(Region::Vision);
        assert_eq!(gpu.ledger().used(), 0, "the encoder left memory on the GPU");
        (plan, out, peak)
    };

    // 1 GB: the largest chunk fits; the ledger's peak stays within the plan and the budget
    let (plan, big, peak) = on_gpu(GB, None);
    println!(
        "1440p ({n} patches) on sim-gpu at 1 GB: vision peak {peak} B (planned {} = activations {} + weight slots {} + attention scratch {}, Q chunk {}), {:.0} ms",
        plan.total_bytes(),
        plan.activation_bytes,
        plan.temp_bytes,
        plan.scratch_bytes,
        plan.q_block,
        big.stats.ms
    );
    assert!(peak <= GB, "vision peak {peak} over 1 GB");
    assert!(peak <= plan.total_bytes());
    assert!(plan.scratch_bytes > 0 && plan.scratch_bytes < scores / 1000);
    assert_eq!(big.n_tokens, n / 4);
    assert_eq!(big.data.len(), n / 4 * 96);
    assert!(big.data.iter().all(|v| v.is_finite()));

    // a budget that leaves room for little scratch: the chunk shrinks to fit it
    let tight = plan.activation_bytes + plan.temp_bytes + plan.scratch_bytes / 2;
    let (small_plan, small, small_peak) = on_gpu(tight, None);
    println!(
        "at {tight} B: Q chunk {}, scratch {} B, vision peak {small_peak} B",
        small_plan.q_block, small_plan.scratch_bytes
    );
    assert!(small_plan.q_block < plan.q_block);
    assert!(small_peak <= tight);
    // every chunk computes the same attention
    let d = max_abs_diff(&small.data, &big.data);
    assert!(
        d < 1e-4,
        "Q chunk {} vs {}: {d}",
        small_plan.q_block,
        plan.q_block
    );

    // the CPU reads the weights from the mapping; its ledger sees activations and scratch
    let host = cpu();
    let cpu_enc = VisionEncoder::new(
        spec.clone(),
        host_only(host.clone()),
        EncoderConfig {
            device: EncoderDevice::Host,
            ..EncoderConfig::default()
        },
    )
    .unwrap();
    let cpu_plan = cpu_enc.plan(&vg).unwrap();
    let on_cpu = cpu_enc.encode(&pv).unwrap();
    let peak_cpu = host.ledger().peak_in(Region::Vision);
    println!(
        "cpu: vision peak {peak_cpu} B (activations {} + attention scratch {}, Q chunk {}), {:.0} ms",
        cpu_plan.activation_bytes, cpu_plan.scratch_bytes, cpu_plan.q_block, on_cpu.stats.ms
    );
    assert!(peak_cpu <= GB, "CPU vision peak {peak_cpu} over 1 GB");
    assert_eq!(cpu_plan.temp_bytes, 0);
    assert!(peak_cpu <= cpu_plan.activation_bytes + cpu_plan.scratch_bytes);
    assert!(cpu_plan.scratch_bytes > 0 && cpu_plan.scratch_bytes < scores / 1000);
    assert_eq!(host.ledger().used(), 0);
    let d = max_abs_diff(&big.data, &on_cpu.data);
    assert!(d < 1e-4, "sim-gpu and CPU embeddings differ by {d}");
}

#[test]
fn a_budget_too_small_for_the_image_falls_back_to_the_cpu_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let spec = synthetic_tower(dir.path());
    let pv = pixels(&spec, &write_1440p_png(dir.path()));
    let cpu: Arc<dyn Device> = Arc::new(ats_cpu::CpuDevice::new(2).unwrap());
    let gpu = sim_gpu(1 << 20, 1);
    let devices = with_gpu(cpu.clone(), gpu.clone());
    let vg = spec.graph(pv.grid_thw).unwrap();
    let auto = VisionEncoder::new(spec.clone(), devices.clone(), EncoderConfig::default()).unwrap();
    let plan = auto.plan(&vg).unwrap();
    assert_eq!(plan.device, DeviceId::Host);
    let note = plan.note.unwrap();
    assert!(!note.contains('\n') && note.contains("free"), "{note}");
    println!("{note}");
    // asked for the GPU explicitly: a clear error, nothing allocated
    let forced = VisionEncoder::new(
        spec,
        devices,
        EncoderConfig {
            device: EncoderDevice::Gpu,
            ..EncoderConfig::default()
        },
    )
    .unwrap();
    let err = forced.encode(&pv).unwrap_err().to_string();
    assert!(err.contains("fewer pixels") && !err.contains('\n'), "{err}");
    assert_eq!(gpu.ledger().peak(), 0);
}

#[test]
fn vlm_peak_is_the_larger_phase_not_the_sum() {
    let vlm = vl_fixture("qwen2_5_vl");
    let cfg = vlm.preprocess_config(None, None).unwrap();
    let image = vlm
        .load_image(
            &fixtures().join(format!("vl_images/{}.png", VL_IMAGES[1])),
            &cfg,
            &DecodeLimits::default(),
        )
        .unwrap();
    let run = |budget: u64| {
        let cpu: Arc<dyn Device> = Arc::new(ats_cpu::CpuDevice::new(2).unwrap());
        let gpu = sim_gpu(budget, 1);
        let devices = with_gpu(cpu, gpu.clone());
        let phase = vlm
            .encode_images(
                &devices,
                EncoderConfig {
                    device: EncoderDevice::Gpu,
                    ..EncoderConfig::default()
                },
                std::slice::from_ref(&image),
            )
            .unwrap();
        // the language model is made only now, on a device the encoder left empty
        assert_eq!(gpu.ledger().used(), 0);
        let mut e = engine_on(vlm.lm.clone(), devices, 256, KvType::F32, Policy::Ats, true);
        let rendered = vlm.render_prompt("Describe this image.", 1, None).unwrap();
        let input = vlm.input(&rendered, &phase.images).unwrap();
        let logits = pipeline::eval(&mut e, &input).unwrap();
        let l = gpu.ledger();
        (
            phase.device_peak(),
            l.peak(),
            l.peak_in(Region::Vision),
            logits,
        )
    };
    let (vision, language, in_ledger, want) = run(8 * GB);
    assert_eq!(vision, in_ledger);
    println!("vision peak {vision} B, language peak {language} B");
    assert!(vision > 0 && language > 0);
    // a budget that holds either phase but not both at once
    let budget = vision.max(language) + (64 << 10);
    assert!(budget < vision + language);
    let (v2, l2, _, got) = run(budget);
    assert!(v2 <= budget && l2 <= budget);
    let d = max_abs_diff(&got, &want);
    assert!(d < 1e-4, "logits under the tight budget differ by {d}");
}
