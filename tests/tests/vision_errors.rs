//! Issue 6 bad input: each is a clear one-line error or a documented, correct
//! behaviour, never a panic.

use std::path::Path;
use std::sync::Arc;

use ats_core::device::Device;
use ats_core::gguf::{GgufFile, GgufWriter, Value};
use ats_core::names::{self, clip};
use ats_core::spec::ModelSpec;
use ats_core::synth::SynthMmproj;
use ats_tests::{fixtures, host_only, vl_fixture};
use ats_vision::encoder::{EncoderConfig, VisionEncoder};
use ats_vision::preprocess::DecodeLimits;
use ats_vision::{VisionError, VisionSpec, Vlm};

fn one_line(e: &impl std::fmt::Display) -> String {
    let s = e.to_string();
    assert!(!s.contains('\n'), "not one line: {s}");
    s
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn png(w: u32, h: u32) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    image::RgbImage::from_fn(w, h, |x, y| image::Rgb([x as u8, y as u8, 9]))
        .write_to(&mut out, image::ImageFormat::Png)
        .unwrap();
    out.into_inner()
}

#[test]
fn bad_images_are_one_line_errors_that_name_the_file() {
    let vlm = vl_fixture("qwen2_vl");
    let cfg = vlm.preprocess_config(None, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let good = png(64, 48);
    let mut corrupt = good.clone();
    let mid = corrupt.len() / 2;
    corrupt[mid..mid + 16].fill(0xAB);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("corrupt.png", corrupt, "PNG"),
        (
            "truncated.png",
            good[..good.len() / 2].to_vec(),
            "truncated PNG",
        ),
        (
            "scan.tiff",
            b"II*\x00\x08\x00\x00\x00\x00\x00\x00\x00".to_vec(),
            "unsupported",
        ),
        ("empty.png", Vec::new(), "empty"),
        ("noise.bin", vec![7u8; 100], "unrecognised"),
    ];
    for (name, bytes, what) in cases {
        let path = write(dir.path(), name, &bytes);
        let err = vlm
            .load_image(&path, &cfg, &DecodeLimits::default())
            .unwrap_err();
        let s = one_line(&err);
        println!("{s}");
        assert!(matches!(err, VisionError::Image { .. }), "{name}: {s}");
        assert!(s.contains(name) && s.contains(what), "{name}: {s}");
    }
    let missing = dir.path().join("missing.png");
    let s = one_line(
        &vlm.load_image(&missing, &cfg, &DecodeLimits::default())
            .unwrap_err(),
    );
    assert!(s.contains("missing.png"), "{s}");
}

#[test]
fn a_zero_pixel_image_is_an_error() {
    let vlm = vl_fixture("qwen2_vl");
    let cfg = vlm.preprocess_config(None, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // a 0x0 BMP header: image's decoders refuse it
    let mut bmp = Vec::new();
    bmp.extend_from_slice(b"BM");
    bmp.extend_from_slice(&54u32.to_le_bytes());
    bmp.extend_from_slice(&[0; 4]);
    bmp.extend_from_slice(&54u32.to_le_bytes());
    bmp.extend_from_slice(&40u32.to_le_bytes());
    bmp.extend_from_slice(&0i32.to_le_bytes());
    bmp.extend_from_slice(&0i32.to_le_bytes());
    bmp.extend_from_slice(&1u16.to_le_bytes());
    bmp.extend_from_slice(&24u16.to_le_bytes());
    bmp.extend_from_slice(&[0; 24]);
    let path = write(dir.path(), "zero.bmp", &bmp);
    let s = one_line(
        &vlm.load_image(&path, &cfg, &DecodeLimits::default())
            .unwrap_err(),
    );
    println!("{s}");
    assert!(s.contains("zero.bmp"), "{s}");
}

#[test]
fn a_20000_pixel_square_is_downscaled_to_max_pixels() {
    let vlm = vl_fixture("qwen2_5_vl");
    let cfg = vlm.preprocess_config(None, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // written row by row: a 1.2 GB image that never sits in memory
    let path = dir.path().join("huge.png");
    {
        let f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        let mut enc = png::Encoder::new(f, 20_000, 20_000);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_compression(png::Compression::Fast);
        // every row after the first filters to zeros: quick to write and to inflate
        enc.set_filter(png::Filter::Up);
        let mut header = enc.write_header().unwrap();
        let mut w = header.stream_writer().unwrap();
        let row: Vec<u8> = (0..20_000u32)
            .flat_map(|x| [(x / 200) as u8, 128, (x % 256) as u8])
            .collect();
        for _ in 0..20_000 {
            std::io::Write::write_all(&mut w, &row).unwrap();
        }
        w.finish().unwrap();
        header.finish().unwrap();
    }
    let t0 = std::time::Instant::now();
    let pv = vlm
        .load_image(&path, &cfg, &DecodeLimits::default())
        .unwrap();
    println!(
        "20000x20000 read and resized in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(pv.grid_thw, [1, 70, 70]);
    assert!((pv.n_patches * 14 * 14) as u64 <= cfg.max_pixels);
    assert!(pv.data.iter().all(|v| v.is_finite()));
    // the encoder takes it as any image of this size (the 1440p test in
    // vision_highres.rs encodes one of 4888 patches): a bounded plan, no N x N scratch
    let cpu: Arc<dyn Device> = Arc::new(ats_cpu::CpuDevice::new(2).unwrap());
    let enc =
        VisionEncoder::new(vlm.vision.clone(), host_only(cpu), EncoderConfig::default()).unwrap();
    let plan = enc.plan(&vlm.vision.graph(pv.grid_thw).unwrap()).unwrap();
    let n = pv.n_patches as u64;
    assert!(plan.scratch_bytes < n * n * 4 / 100, "{plan:?}");
}

#[test]
fn an_mmproj_of_another_model_is_refused() {
    let qwen2vl = fixtures().join("qwen2_vl");
    let mmproj = qwen2vl.join("mmproj-qwen2_vl-f32.gguf");
    // a text model without M-RoPE
    let err = Vlm::open(&fixtures().join("qwen2/qwen2-f32.gguf"), &mmproj).unwrap_err();
    let s = one_line(&err);
    println!("{s}");
    assert!(
        matches!(err, VisionError::Mismatch { .. }) && s.contains("qwen2"),
        "{s}"
    );
    // a projector of another width
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("mmproj-tiny.gguf");
    SynthMmproj::preset("tiny")
        .unwrap()
        .write(&other, 1)
        .unwrap();
    let err = Vlm::open(&qwen2vl.join("qwen2_vl-f32.gguf"), &other).unwrap_err();
    let s = one_line(&err);
    println!("{s}");
    assert!(s.contains("96") && s.contains("256"), "{s}");
    // a language model as the projector
    let err = VisionSpec::open(qwen2vl.join("qwen2_vl-f32.gguf")).unwrap_err();
    let s = one_line(&err);
    assert!(matches!(err, VisionError::NotMmproj { .. }), "{s}");
}

/// The fixture's mmproj with one metadata value replaced.
fn mmproj_with(key: &str, value: Value, dir: &Path) -> std::path::PathBuf {
    let src = GgufFile::open(fixtures().join("qwen2_vl/mmproj-qwen2_vl-f32.gguf")).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata.iter() {
        if k != "general.alignment" {
            w.kv(k, if k == key { value.clone() } else { v.clone() });
        }
    }
    let mut data = Vec::new();
    for t in src.tensors() {
        w.tensor(&t.name, t.ne.clone(), t.dtype().unwrap()).unwrap();
        data.push(src.tensor_data(t).to_vec());
    }
    let p = dir.join(format!("mmproj-{}.gguf", key.replace('.', "_")));
    std::fs::write(&p, w.to_bytes(&data).unwrap()).unwrap();
    p
}

#[test]
fn unsupported_projectors_and_bad_metadata_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let p = mmproj_with(clip::PROJECTOR_TYPE, Value::str("llava"), dir.path());
    let err = VisionSpec::open(&p).unwrap_err();
    let s = one_line(&err);
    println!("{s}");
    assert!(matches!(err, VisionError::UnsupportedProjector { .. }) && s.contains("\"llava\""));
    let p = mmproj_with(clip::HEAD_COUNT, Value::U32(3), dir.path());
    let s = one_line(&VisionSpec::open(&p).unwrap_err());
    assert!(s.contains(clip::HEAD_COUNT), "{s}");
    let p = mmproj_with(names::ARCH, Value::str("llama"), dir.path());
    let s = one_line(&VisionSpec::open(&p).unwrap_err());
    assert!(s.contains("not a vision projector"), "{s}");
    // every fixture mmproj passes
    for d in ["qwen2_vl", "qwen2_5_vl"] {
        let spec = ModelSpec::open(fixtures().join(d).join(format!("{d}-f32.gguf"))).unwrap();
        assert!(spec.arch.uses_mrope());
        let v = vl_fixture(d);
        assert_eq!(v.vision.hp.projection_dim, spec.hp.n_embd);
    }
}

#[test]
fn an_mmproj_with_a_zero_std_is_blamed_on_its_key() {
    // it used to load, then fail as "--min-pixels/--max-pixels: ... std[1]"
    let dir = tempfile::tempdir().unwrap();
    let p = mmproj_with(
        clip::IMAGE_STD,
        Value::Array(
            ats_core::gguf::ValueType::F32,
            vec![Value::F32(0.5), Value::F32(0.0), Value::F32(0.5)],
        ),
        dir.path(),
    );
    let err = VisionSpec::open(&p).unwrap_err();
    let s = one_line(&err);
    assert!(
        s.contains(clip::IMAGE_STD) && !s.contains("--min-pixels"),
        "{s}"
    );
}

#[test]
fn a_qwen2_vl_projector_with_a_qwen2_5_vl_model_is_refused() {
    // the two fixtures' text models differ only by name; the name says which
    for (text, mmproj) in [
        (
            "qwen2_5_vl/qwen2_5_vl-f32.gguf",
            "qwen2_vl/mmproj-qwen2_vl-f32.gguf",
        ),
        (
            "qwen2_vl/qwen2_vl-f32.gguf",
            "qwen2_5_vl/mmproj-qwen2_5_vl-f32.gguf",
        ),
    ] {
        let err = Vlm::open(&fixtures().join(text), &fixtures().join(mmproj)).unwrap_err();
        let s = one_line(&err);
        assert!(matches!(err, VisionError::Mismatch { .. }), "{text}: {s}");
        assert!(s.contains("Qwen2"), "{s}");
    }
}
