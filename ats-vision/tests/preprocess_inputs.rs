//! Bad and extreme inputs give typed errors (or the documented result), never a panic.

mod common;

use std::io::{Cursor, Write};

use ats_vision::preprocess::{
    DecodeLimits, PreprocessConfig, PreprocessError, decode_image, load_resized, preprocess_bytes,
};
use common::{read, vl_images};
use image::{DynamicImage, ImageFormat, Rgb, RgbImage};

fn encode(img: &RgbImage, format: ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    DynamicImage::ImageRgb8(img.clone())
        .write_to(&mut out, format)
        .unwrap();
    out.into_inner()
}

fn small_png() -> Vec<u8> {
    read(&vl_images().join("small.png"))
}

/// Bitwise CRC-32 (PNG's), for hand-made chunks.
fn crc32(bytes: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in bytes {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
    }
    !c
}

fn chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut out = (data.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let mut crc_in = kind.to_vec();
    crc_in.extend_from_slice(data);
    out.extend_from_slice(&crc32(&crc_in).to_be_bytes());
    out
}

/// A PNG whose IHDR says `w` x `h` RGB8 (no pixel data: the header is what is tested).
fn png_header_only(w: u32, h: u32) -> Vec<u8> {
    let mut ihdr = w.to_be_bytes().to_vec();
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    out.extend(chunk(b"IHDR", &ihdr));
    out.extend(chunk(
        b"IDAT",
        &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
    ));
    out.extend(chunk(b"IEND", &[]));
    out
}

#[test]
fn empty_input() {
    assert!(matches!(decode_image(&[]), Err(PreprocessError::Empty)));
    let err = preprocess_bytes(&[], &PreprocessConfig::default(), &DecodeLimits::default());
    assert!(matches!(err, Err(PreprocessError::Empty)));
}

#[test]
fn random_bytes_are_unknown_format() {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let bytes: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    let err = decode_image(&bytes).unwrap_err();
    assert!(
        matches!(err, PreprocessError::UnknownFormat { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("unrecognised image data"), "{err}");
    // A known signature followed by garbage is a corrupt (or truncated) PNG.
    let mut fake = b"\x89PNG\r\n\x1a\n".to_vec();
    fake.extend_from_slice(&bytes);
    let err = decode_image(&fake).unwrap_err();
    println!("PNG signature + random bytes: {err}");
    assert!(
        matches!(err, PreprocessError::Corrupt { format: "PNG", .. }),
        "{err}"
    );
}

#[test]
fn unsupported_container_is_named() {
    let tiff = b"II*\x00\x08\x00\x00\x00\x00\x00\x00\x00";
    let err = decode_image(tiff).unwrap_err();
    assert!(matches!(err, PreprocessError::Unsupported { .. }), "{err}");
    assert!(err.to_string().contains("Tiff"), "{err}");
}

#[test]
fn truncated_png() {
    let png = small_png();
    for cut in [png.len() / 2, 40, png.len() - 200] {
        let err = decode_image(&png[..cut]).unwrap_err();
        println!("PNG cut at {cut} of {}: {err}", png.len());
        assert!(
            matches!(err, PreprocessError::Truncated { format: "PNG", .. }),
            "cut {cut}: {err}"
        );
    }
    // The header alone (signature + IHDR) decodes dimensions but no pixels.
    let err = decode_image(&png[..33]).unwrap_err();
    assert!(matches!(err, PreprocessError::Truncated { .. }), "{err}");
    // Cut inside the signature: the format is not recognisable.
    assert!(matches!(
        decode_image(&png[..4]),
        Err(PreprocessError::UnknownFormat { .. })
    ));
}

#[test]
fn corrupt_png_data() {
    let mut png = small_png();
    // Flip bytes inside the first IDAT payload; its CRC no longer matches.
    let idat = png.windows(4).position(|w| w == b"IDAT").unwrap();
    for b in &mut png[idat + 20..idat + 40] {
        *b ^= 0x5a;
    }
    let err = decode_image(&png).unwrap_err();
    println!("corrupt IDAT: {err}");
    assert!(
        matches!(err, PreprocessError::Corrupt { format: "PNG", .. }),
        "{err}"
    );
}

#[test]
fn truncated_other_formats() {
    let img = RgbImage::from_fn(64, 48, |x, y| Rgb([(x * 4) as u8, (y * 5) as u8, 77]));
    for format in [
        ImageFormat::Jpeg,
        ImageFormat::WebP,
        ImageFormat::Gif,
        ImageFormat::Bmp,
    ] {
        let bytes = encode(&img, format);
        decode_image(&bytes).unwrap_or_else(|e| panic!("{format:?} whole: {e}"));
        let cut = &bytes[..bytes.len() / 2];
        let got = decode_image(cut);
        println!(
            "{format:?} cut to {} of {} bytes: {:?}",
            cut.len(),
            bytes.len(),
            got.as_ref().map(|i| i.dimensions())
        );
        let err = got.unwrap_err();
        // WebP's decoder reports a cut stream as a corrupt bitstream; the others as truncation.
        if format == ImageFormat::WebP {
            assert!(
                matches!(err, PreprocessError::Corrupt { format: "WebP", .. }),
                "{err}"
            );
        } else {
            assert!(
                matches!(err, PreprocessError::Truncated { .. }),
                "{format:?}: {err}"
            );
        }
    }
}

#[test]
fn zero_sized_png() {
    // image's encoder refuses to write a 0x0 PNG, so the header is made by hand.
    let enc = image::codecs::png::PngEncoder::new(Vec::new());
    assert!(
        image::ImageEncoder::write_image(enc, &[], 0, 0, image::ExtendedColorType::Rgb8).is_err()
    );
    for (w, h) in [(0, 0), (0, 10), (10, 0)] {
        let err = decode_image(&png_header_only(w, h)).unwrap_err();
        println!("{w}x{h} PNG: {err}");
        // The PNG decoder rejects the header itself (zero sides are invalid PNG).
        assert!(
            matches!(err, PreprocessError::Corrupt { format: "PNG", .. }),
            "{err}"
        );
        assert!(
            err.to_string().contains("Invalid image dimensions"),
            "{err}"
        );
    }
}

#[test]
fn header_limits_refuse_before_decoding() {
    // Headers claiming 20000 x 15000 and 60000 x 60000 (no pixel data follows): refused by
    // max_alloc and by max_pixels from the header alone.
    let err = decode_image(&png_header_only(20_000, 15_000)).unwrap_err();
    assert!(
        matches!(
            err,
            PreprocessError::TooLarge {
                width: 20_000,
                height: 15_000,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("needs 900000000 bytes, max_alloc is 268435456"),
        "{err}"
    );
    let err = decode_image(&png_header_only(60_000, 60_000)).unwrap_err();
    assert!(
        err.to_string()
            .contains("60000x60000 exceeds the decode limit: max_pixels is 1073741824"),
        "{err}"
    );
    // Beyond max_side even streaming is refused.
    let bytes = png_header_only(70_000, 1000);
    let cfg = PreprocessConfig::default();
    let err = load_resized(&bytes, &cfg, &DecodeLimits::default()).unwrap_err();
    assert!(err.to_string().contains("max_side is 65535"), "{err}");
    // Extreme aspect ratio: HF's smart_resize error, before any decoding.
    let wide = encode(&RgbImage::new(402, 2), ImageFormat::Png);
    let err = load_resized(&wide, &cfg, &DecodeLimits::default()).unwrap_err();
    assert!(
        matches!(
            err,
            PreprocessError::AspectRatio {
                height: 2,
                width: 402,
                ..
            }
        ),
        "{err}"
    );
}

/// Writes a flat-colour RGB PNG of `w` x `h` row by row (never holding the pixels).
fn flat_png(w: u32, h: u32, rgb: [u8; 3]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::Fast);
    let mut header = enc.write_header().unwrap();
    let mut writer = header.stream_writer().unwrap();
    let row = rgb.repeat(w as usize);
    for _ in 0..h {
        writer.write_all(&row).unwrap();
    }
    writer.finish().unwrap();
    header.finish().unwrap();
    out
}

#[test]
fn huge_png_is_refused_in_memory_and_streamed_to_max_pixels() {
    let bytes = flat_png(20_000, 20_000, [10, 120, 250]);
    println!("20000x20000 flat PNG: {} bytes", bytes.len());
    // In memory it would take 1.2 GB: refused from the header.
    let err = decode_image(&bytes).unwrap_err();
    assert!(
        matches!(
            err,
            PreprocessError::TooLarge {
                width: 20_000,
                height: 20_000,
                ..
            }
        ),
        "{err}"
    );
    println!("decode_image: {err}");
    // Streamed: downscaled to smart_resize's 980x980 (<= max_pixels) while decoding.
    let cfg = PreprocessConfig::default();
    let img = load_resized(&bytes, &cfg, &DecodeLimits::default()).unwrap();
    assert_eq!(img.dimensions(), (980, 980));
    assert!(img.pixels().all(|p| p.0 == [10, 120, 250]));
    let pv = ats_vision::preprocess::patchify(&img, &cfg).unwrap();
    assert_eq!(pv.grid_thw, [1, 70, 70]);
    // Under a pixel-count limit it is refused instead.
    let limits = DecodeLimits {
        max_pixels: 100_000_000,
        ..Default::default()
    };
    let err = load_resized(&bytes, &cfg, &limits).unwrap_err();
    assert!(err.to_string().contains("max_pixels is 100000000"), "{err}");
}

#[test]
fn truncated_streamed_png() {
    let bytes = flat_png(3000, 3000, [1, 2, 3]);
    let cut = &bytes[..bytes.len() * 2 / 3];
    let limits = DecodeLimits {
        max_alloc: 8 << 20,
        ..Default::default()
    };
    let err = load_resized(cut, &PreprocessConfig::default(), &limits).unwrap_err();
    println!("streamed PNG cut to 2/3: {err}");
    assert!(
        matches!(err, PreprocessError::Truncated { format: "PNG", .. }),
        "{err}"
    );
}
