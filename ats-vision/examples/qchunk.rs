//! Encode time and vision peak of a 2560x1440 image against the attention Q
//! chunk, on the CPU and on a simulated GPU with a 1 GB budget, through a
//! Qwen2.5-VL-shaped tower (real widths, `--layers` blocks).
//!
//! `cargo run --release -p ats-vision --example qchunk -- [--layers 2] [--threads 2]
//! [--embd 1280 --heads 16]` (a narrower `--embd` keeps the attention, whose
//! cost grows with n^2 per head, and shrinks the matrix work).
//!
//! The largest chunk, the whole image, is the unchunked path: one task per
//! head holding every query's accumulators (flash attention still never
//! stores a score matrix; a materialised one would need
//! `heads x n^2 x 4` bytes, printed for comparison).

use std::sync::Arc;

use ats_core::device::Device;
use ats_core::ledger::Region;
use ats_core::machine::Machine;
use ats_core::synth::SynthMmproj;
use ats_sched::sim::{SimGpu, SimGpuConfig};
use ats_vision::VisionSpec;
use ats_vision::encoder::{EncoderConfig, EncoderDevice, VisionEncoder};
use ats_vision::preprocess::{DecodeLimits, preprocess_bytes};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let (layers, threads) = (arg("--layers", 2), arg("--threads", 2));
    let base = SynthMmproj::preset("qwen2.5-vl-3b").expect("preset");
    let (embd, heads) = (arg("--embd", base.n_embd), arg("--heads", base.n_head));
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("mmproj.gguf");
    SynthMmproj {
        n_layer: layers,
        n_wa_pattern: 2,
        n_embd: embd,
        n_head: heads,
        n_ff: if embd == base.n_embd {
            base.n_ff
        } else {
            2 * embd
        },
        ..base
    }
    .write(&path, 11)
    .expect("writing the synthetic mmproj");
    let spec = Arc::new(VisionSpec::open(&path).expect("mmproj"));
    let img = image::RgbImage::from_fn(2560, 1440, |x, y| {
        image::Rgb([(x % 251) as u8, (y % 241) as u8, ((x ^ y) & 0xff) as u8])
    });
    let mut png = std::io::Cursor::new(Vec::new());
    img.write_to(&mut png, image::ImageFormat::Png)
        .expect("png");
    let pv = preprocess_bytes(
        png.get_ref(),
        &spec.preprocess_config(),
        &DecodeLimits::default(),
    )
    .expect("preprocess");
    let n = pv.n_patches;
    println!(
        "2560x1440 -> {}x{} patches ({n}), {layers} blocks of width {embd} ({heads} heads), {threads} threads; a materialised score matrix would take {:.2} GB",
        pv.grid_thw[1],
        pv.grid_thw[2],
        (spec.hp.n_head * n * n * 4) as f64 / 1e9
    );
    println!("device   q_chunk  encode_ms  vision_peak_MB  scratch_MB");
    for q in [16, 64, 256, n] {
        for on_gpu in [false, true] {
            let cpu: Arc<dyn Device> = Arc::new(ats_cpu::CpuDevice::new(threads).expect("cpu"));
            let gpu: Option<Arc<dyn Device>> = on_gpu.then(|| {
                let inner: Arc<dyn Device> = Arc::new(
                    ats_cpu::CpuDevice::with_isa(
                        threads,
                        ats_cpu::matmul::Isa::detect(),
                        "sim-gpu-kernels",
                    )
                    .expect("cpu"),
                );
                Arc::new(SimGpu::new(
                    inner,
                    SimGpuConfig {
                        memory: 1_000_000_000,
                        launch_us: 0.0,
                        sync_us: 0.0,
                        copy_gbps: 1000.0,
                        ..SimGpuConfig::default()
                    },
                )) as Arc<dyn Device>
            });
            let machine = Machine::new(cpu, gpu).expect("machine");
            let enc = VisionEncoder::new(
                spec.clone(),
                machine.clone(),
                EncoderConfig {
                    device: if on_gpu {
                        EncoderDevice::Gpu
                    } else {
                        EncoderDevice::Host
                    },
                    q_block: Some(q),
                    ..EncoderConfig::default()
                },
            )
            .expect("encoder");
            let plan = enc
                .plan(&spec.graph(pv.grid_thw).expect("graph"))
                .expect("plan");
            match enc.encode(&pv) {
                Ok(e) => println!(
                    "{:8} {q:7} {:10.0} {:15.1} {:11.2}",
                    e.stats.device,
                    e.stats.ms,
                    machine
                        .accelerator_or_host()
                        .1
                        .ledger()
                        .peak_in(Region::Vision) as f64
                        / 1e6,
                    plan.scratch_bytes as f64 / 1e6
                ),
                Err(err) => println!(
                    "{:8} {q:7} error: {err}",
                    if on_gpu { "sim-gpu" } else { "cpu" }
                ),
            }
        }
    }
}
