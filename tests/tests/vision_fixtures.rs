//! Issue 6 correctness: for both vision-language fixtures and both images,
//! pixel values, image embeddings (on the CPU and on a simulated GPU that
//! streams the vision weights), window layout, prompt ids, M-RoPE positions,
//! logits at every position and the greedy continuation against Hugging Face.

use std::sync::Arc;

use ats_core::device::{Device, KvType};
use ats_core::ledger::Region;
use ats_sched::config::Policy;
use ats_tests::{
    Reference, VL_FIXTURES, VL_IMAGES, argmax, engine_on, fixtures, host_only, max_abs_diff,
    sim_gpu, vl_fixture, with_gpu,
};
use ats_vision::encoder::{EncodeStats, EncoderConfig, EncoderDevice, ImageEmbedding};
use ats_vision::preprocess::{DecodeLimits, PixelValues};
use ats_vision::windows::window_index;
use ats_vision::{Vlm, VlmInput, pipeline};

const PROMPT: &str = "Describe this image.";

fn pixels(vlm: &Vlm, case: &str) -> PixelValues {
    let cfg = vlm.preprocess_config(None, None).unwrap();
    let path = fixtures().join(format!("vl_images/{case}.png"));
    vlm.load_image(&path, &cfg, &DecodeLimits::default())
        .unwrap()
}

fn cpu() -> Arc<dyn Device> {
    Arc::new(ats_cpu::CpuDevice::new(2).unwrap())
}

/// The reference embeddings as if the encoder had made them.
fn reference_embedding(r: &Reference, case: &str) -> ImageEmbedding {
    let (data, shape) = r.f32(&format!("{case}.image_embeds"));
    let (grid, _) = r.i64(&format!("{case}.image_grid_thw"));
    ImageEmbedding {
        data,
        n_tokens: shape[0],
        n_embd: shape[1],
        grid: [grid[0] as usize, grid[1] as usize / 2, grid[2] as usize / 2],
        stats: EncodeStats::default(),
    }
}

fn input_for(vlm: &Vlm, img: &ImageEmbedding) -> VlmInput {
    let rendered = vlm.render_prompt(PROMPT, 1, None).unwrap();
    vlm.input(&rendered, std::slice::from_ref(img)).unwrap()
}

#[test]
fn pixel_values_and_image_embeddings_match_hf_on_cpu_and_simulated_gpu() {
    let pv_ref = Reference::open("vl_images/pixel_values.safetensors");
    for (dir, _, _) in VL_FIXTURES {
        let vlm = vl_fixture(dir);
        let r = Reference::open(&format!("{dir}/reference.safetensors"));
        for case in VL_IMAGES {
            let pv = pixels(&vlm, case);
            let (want_px, shape) = pv_ref.f32(&format!("{case}.pixel_values"));
            assert_eq!([pv.n_patches, pv.row_len], [shape[0], shape[1]]);
            let d = max_abs_diff(&pv.data, &want_px);
            assert!(d <= 1e-6, "{dir} {case}: pixel values differ by {d}");
            let (grid, _) = pv_ref.i64(&format!("{case}.image_grid_thw"));
            assert_eq!(pv.grid_thw.map(|x| x as i64).to_vec(), grid);

            let (want, _) = r.f32(&format!("{case}.image_embeds"));
            let cpu = cpu();
            let on_cpu = vlm
                .encode_images(
                    &host_only(cpu.clone()),
                    EncoderConfig::default(),
                    std::slice::from_ref(&pv),
                )
                .unwrap();
            let e = &on_cpu.images[0];
            let d_cpu = max_abs_diff(&e.data, &want);
            println!("{dir} {case}: image_embeds max |diff| {d_cpu:.2e} (CPU)");
            assert!(
                d_cpu < 5e-4,
                "{dir} {case}: CPU image embeddings differ by {d_cpu}"
            );
            assert_eq!(cpu.ledger().used_in(Region::Vision), 0);

            // the simulated GPU streams every vision weight through its temp slots
            let budget = 64 << 20;
            let gpu = sim_gpu(budget, 2);
            let cfg = EncoderConfig {
                device: EncoderDevice::Gpu,
                ..EncoderConfig::default()
            };
            let on_gpu = vlm
                .encode_images(
                    &with_gpu(cpu.clone(), gpu.clone()),
                    cfg,
                    std::slice::from_ref(&pv),
                )
                .unwrap();
            let g = &on_gpu.images[0];
            assert_eq!(g.stats.device, "sim-gpu");
            let d_gpu = max_abs_diff(&g.data, &want);
            let d_same = max_abs_diff(&g.data, &e.data);
            println!(
                "{dir} {case}: sim-gpu image_embeds max |diff| {d_gpu:.2e}, vs CPU {d_same:.2e}, vision peak {} B",
                g.stats.vision_peak_bytes
            );
            assert!(
                d_gpu < 5e-4 && d_same < 1e-5,
                "{dir} {case}: {d_gpu} {d_same}"
            );
            let l = gpu.ledger();
            assert_eq!(l.used(), 0, "{dir} {case}: vision memory left on the GPU");
            assert!(l.peak_in(Region::Vision) > 0 && l.peak_in(Region::Vision) <= budget);
            assert!(l.peak_in(Region::Vision) <= g.stats.planned_bytes);
            assert_eq!(l.peak_in(Region::Temp) + l.peak_in(Region::Compute), 0);
        }
    }
}

#[test]
fn window_layout_matches_hf_get_window_index() {
    let r = Reference::open("qwen2_5_vl/reference.safetensors");
    let vlm = vl_fixture("qwen2_5_vl");
    for case in VL_IMAGES {
        let (grid, _) = r.i64(&format!("{case}.image_grid_thw"));
        let (h, w) = (grid[1] as usize / 2, grid[2] as usize / 2);
        let win = window_index(h, w, vlm.vision.hp.window_groups(), 4);
        let (idx, _) = r.i64(&format!("{case}.window_index"));
        let (cu, _) = r.i64(&format!("{case}.cu_window_seqlens"));
        assert_eq!(win.index.iter().map(|&x| x as i64).collect::<Vec<_>>(), idx);
        assert_eq!(
            win.cu_seqlens.iter().map(|&x| x as i64).collect::<Vec<_>>(),
            cu
        );
    }
}

#[test]
fn prompt_ids_and_mrope_positions_match_hf() {
    for (dir, _, _) in VL_FIXTURES {
        let vlm = vl_fixture(dir);
        let r = Reference::open(&format!("{dir}/reference.safetensors"));
        for case in VL_IMAGES {
            let input = input_for(&vlm, &reference_embedding(&r, case));
            assert_eq!(
                input.ids,
                r.ids(&format!("{case}.input_ids")),
                "{dir} {case}"
            );
            let (pos, shape) = r.i64(&format!("{case}.position_ids"));
            let n = shape[1];
            assert_eq!(input.positions.len(), n);
            for c in 0..3 {
                for t in 0..n {
                    assert_eq!(
                        input.positions.get(t, c) as i64,
                        pos[c * n + t],
                        "{dir} {case}: position {t} section {c}"
                    );
                }
            }
            let (delta, _) = r.i64(&format!("{case}.rope_delta"));
            assert_eq!(input.rope_delta(), delta[0], "{dir} {case}");
            // the decode positions: S + k + rope_delta
            let (full, fshape) = r.i64(&format!("{case}.full_position_ids"));
            let m = fshape[1];
            assert_eq!(input.next_pos, full[n], "{dir} {case}");
            assert_eq!(full[m - 1], input.next_pos + (m - n - 1) as i64);
        }
    }
}

/// Logits at every position, then 16 greedy steps with the KV cache, each
/// against the reference; returns the largest logit difference.
fn check_language(vlm: &Vlm, r: &Reference, case: &str, input: &VlmInput, tol: f32) -> f32 {
    let mut e = engine_on(
        vlm.lm.clone(),
        host_only(cpu()),
        256,
        KvType::F32,
        Policy::Ats,
        true,
    );
    let vocab = vlm.lm.hp.n_vocab;
    let (want, _) = r.f32(&format!("{case}.logits"));
    let got = pipeline::eval(&mut e, input).unwrap();
    let mut worst = max_abs_diff(&got, &want);
    assert!(worst < tol, "{case}: prompt logits differ by {worst}");
    let greedy = r.ids(&format!("{case}.greedy_ids"));
    let (g_logits, _) = r.f32(&format!("{case}.greedy_logits"));
    e.reset();
    let mut logits = e.prefill_with(&input.ids, false, input.embeds()).unwrap();
    for (k, &id) in greedy.iter().enumerate() {
        let d = max_abs_diff(&logits, &g_logits[k * vocab..(k + 1) * vocab]);
        worst = worst.max(d);
        assert!(d < tol, "{case}: greedy step {k} logits differ by {d}");
        assert_eq!(argmax(&logits) as u32, id, "{case}: greedy step {k}");
        logits = e.decode(id).unwrap();
    }
    worst
}

#[test]
fn logits_and_greedy_continuation_match_hf_with_reference_and_own_embeddings() {
    for (dir, _, _) in VL_FIXTURES {
        let vlm = vl_fixture(dir);
        let r = Reference::open(&format!("{dir}/reference.safetensors"));
        for case in VL_IMAGES {
            let reference = input_for(&vlm, &reference_embedding(&r, case));
            let d_ref = check_language(&vlm, &r, case, &reference, 1e-3);
            let own = vlm
                .encode_images(
                    &host_only(cpu()),
                    EncoderConfig::default(),
                    &[pixels(&vlm, case)],
                )
                .unwrap();
            let input = input_for(&vlm, &own.images[0]);
            assert_eq!(input.ids, reference.ids);
            let d_e2e = check_language(&vlm, &r, case, &input, 1e-2);
            println!(
                "{dir} {case}: logits max |diff| {d_ref:.2e} with reference embeddings, {d_e2e:.2e} end to end (greedy ids identical)"
            );
        }
    }
}

#[test]
fn greedy_generation_through_the_pipeline_reproduces_the_fixture() {
    use ats_core::sampling::SamplerConfig;
    use ats_sched::session::GenParams;
    for (dir, _, _) in VL_FIXTURES {
        let vlm = vl_fixture(dir);
        let r = Reference::open(&format!("{dir}/reference.safetensors"));
        let case = "large";
        let phase = vlm
            .encode_images(
                &host_only(cpu()),
                EncoderConfig::default(),
                &[pixels(&vlm, case)],
            )
            .unwrap();
        let input = input_for(&vlm, &phase.images[0]);
        let mut e = engine_on(
            vlm.lm.clone(),
            host_only(cpu()),
            256,
            KvType::F32,
            Policy::Ats,
            false,
        );
        let params = GenParams {
            max_tokens: 16,
            sampler: SamplerConfig {
                temperature: 0.0,
                ..SamplerConfig::default()
            },
            stop: vec![],
            ignore_eos: true,
            ..Default::default()
        };
        let mut text = String::new();
        let g = pipeline::generate(&mut e, &input, &params, &mut |ev| {
            if let ats_sched::session::GenEvent::Text(t) = ev {
                text.push_str(t);
            }
            true
        })
        .unwrap();
        assert_eq!(g.tokens, r.ids(&format!("{case}.greedy_ids")), "{dir}");
        assert_eq!(g.text, text);
    }
}
