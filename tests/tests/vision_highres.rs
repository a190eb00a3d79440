//! Issue 6 memory: a 2560x1440 image through a Qwen2.5-VL-shaped vision
//! tower (real widths: hidden 1280, 16 heads, MLP 3420, merger to 2048; two
//! blocks, one windowed and one full) under a 1 GB budget on the simulated
//! GPU, and on the CPU; and the VLM order of life: the device's peak is
//! max(vision, language), never their sum.

use std::sync::Arc;

use ats_core::device::{Device, KvType};
use ats_core::ledger::Region;
use ats_core::synth::SynthMmproj;
use ats_sched::engine::Policy;
use ats_tests::{VL_IMAGES, engine_on, fixtures, max_abs_diff, sim_gpu, vl_fixture};
use ats_vision::encoder::{EncoderConfig, EncoderDevice, VisionEncoder};
use ats_vision::preprocess::{DecodeLimits, PixelValues};
use ats_vision::{VisionSpec, pipeline};

const GB: u64 = 1_000_000_000;

/// A 2560x1440 PNG with edges, gradients and texture, written to `dir`.
fn make_1440p(dir: &std::path::Path) -> std::path::PathBuf {
    let img = image::RgbImage::from_fn(2560, 1440, |x, y| {
        let stripe = if (x / 80 + y / 60) % 2 == 0 { 200 } else { 40 };
        image::Rgb([(x * 255 / 2559) as u8, stripe, ((x ^ y) & 0xff) as u8])
    });
    let path = dir.join("scene-1440p.png");
    img.save(&path).unwrap();
    path
}

fn synthetic_tower(dir: &std::path::Path) -> Arc<VisionSpec> {
    let spec = SynthMmproj {
        n_layer: 2,
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

#[test]
fn a_1440p_image_encodes_within_1_gb_on_the_simulated_gpu_and_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let spec = synthetic_tower(dir.path());
    let pv = pixels(&spec, &make_1440p(dir.path()));
    // smart_resize to max_pixels: 1316x728, 94x52 patches
    assert_eq!(pv.grid_thw, [1, 52, 94]);
    let n = pv.n_patches;

    let cpu: Arc<dyn Device> = Arc::new(ats_cpu::CpuDevice::new(2).unwrap());
    let gpu = sim_gpu(GB, 2);
    let enc = VisionEncoder::new(
        spec.clone(),
        vec![cpu.clone(), gpu.clone()],
        EncoderConfig {
            device: EncoderDevice::Device(1),
            ..EncoderConfig::default()
        },
    )
    .unwrap();
    let vg = spec.graph(pv.grid_thw).unwrap();
    let plan = enc.plan(&vg).unwrap();
    println!(
        "1440p ({n} patches) on sim-gpu: planned {} B = activations {} + weight slots {} + attention scratch {} (Q chunk {})",
        plan.total_bytes(),
        plan.activation_bytes,
        plan.temp_bytes,
        plan.scratch_bytes,
        plan.q_block
    );
    // the whole tower would not be what streams: two blocks' slots plus the merger
    assert!(plan.temp_bytes < spec.gguf.file_len());
    let on_gpu = enc.encode(&pv).unwrap();
    let peak_gpu = gpu.ledger().peak_in(Region::Vision);
    println!(
        "sim-gpu: vision peak {peak_gpu} B, {:.0} ms",
        on_gpu.stats.ms
    );
    assert!(peak_gpu <= GB, "vision peak {peak_gpu} over 1 GB");
    assert!(peak_gpu <= plan.total_bytes());
    assert_eq!(gpu.ledger().used(), 0, "the encoder left memory on the GPU");
    // no N x N score matrix: attention scratch is far below one head's n^2 floats
    assert!(plan.scratch_bytes < (n * n * 4) as u64 / 100);
    assert_eq!(on_gpu.n_tokens, n / 4);
    assert_eq!(on_gpu.data.len(), n / 4 * 2048);
    assert!(on_gpu.data.iter().all(|v| v.is_finite()));

    // the CPU reads the weights from the mapping; its ledger sees activations and scratch
    let cpu_enc = VisionEncoder::new(
        spec.clone(),
        vec![cpu.clone()],
        EncoderConfig {
            device: EncoderDevice::Cpu,
            ..EncoderConfig::default()
        },
    )
    .unwrap();
    let cpu_plan = cpu_enc.plan(&vg).unwrap();
    let on_cpu = cpu_enc.encode(&pv).unwrap();
    let peak_cpu = cpu.ledger().peak_in(Region::Vision);
    println!(
        "cpu: vision peak {peak_cpu} B (activations {} + attention scratch {}, Q chunk {}), {:.0} ms",
        cpu_plan.activation_bytes, cpu_plan.scratch_bytes, cpu_plan.q_block, on_cpu.stats.ms
    );
    assert!(peak_cpu <= GB, "CPU vision peak {peak_cpu} over 1 GB");
    assert_eq!(cpu_plan.temp_bytes, 0);
    assert!(peak_cpu <= cpu_plan.activation_bytes + cpu_plan.scratch_bytes);
    assert!(cpu_plan.scratch_bytes < (n * n * 4) as u64 / 100);
    assert_eq!(cpu.ledger().used(), 0);
    let scale = on_cpu
        .data
        .iter()
        .fold(0f32, |m, v| m.max(v.abs()))
        .max(1.0);
    let d = max_abs_diff(&on_gpu.data, &on_cpu.data) / scale;
    assert!(
        d < 1e-4,
        "sim-gpu and CPU embeddings differ by {d} (relative)"
    );
}

#[test]
fn a_budget_too_small_for_the_image_falls_back_to_the_cpu_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let spec = synthetic_tower(dir.path());
    let pv = pixels(&spec, &make_1440p(dir.path()));
    let cpu: Arc<dyn Device> = Arc::new(ats_cpu::CpuDevice::new(2).unwrap());
    let gpu = sim_gpu(100_000_000, 1);
    let devices = vec![cpu.clone(), gpu.clone()];
    let vg = spec.graph(pv.grid_thw).unwrap();
    let auto = VisionEncoder::new(spec.clone(), devices.clone(), EncoderConfig::default()).unwrap();
    let plan = auto.plan(&vg).unwrap();
    assert_eq!(plan.device, 0);
    let note = plan.note.unwrap();
    assert!(!note.contains('\n') && note.contains("free"), "{note}");
    println!("{note}");
    // asked for the GPU explicitly: a clear error, nothing allocated
    let forced = VisionEncoder::new(
        spec,
        devices,
        EncoderConfig {
            device: EncoderDevice::Device(1),
            ..EncoderConfig::default()
        },
    )
    .unwrap();
    let err = forced.encode(&pv).unwrap_err().to_string();
    assert!(err.contains("--max-pixels") && !err.contains('\n'), "{err}");
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
        let devices = vec![cpu, gpu.clone()];
        let phase = vlm
            .encode_images(
                &devices,
                EncoderConfig {
                    device: EncoderDevice::Device(1),
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
