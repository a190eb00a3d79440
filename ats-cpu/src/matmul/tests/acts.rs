//! Activation quantisation: the scalar and SIMD quantisers give identical
//! bytes, and both match ggml's reference rounding (ties included).

use ats_core::DType;

use super::random;
use super::reference::quantize_acts;
use crate::matmul::Isa;
use crate::matmul::acts::{ActFormat, QuantActs};

fn quantize(x: &[f32], n: usize, format: ActFormat, isa: Isa) -> QuantActs {
    let mut a = QuantActs::default();
    a.quantize(x, n, x.len() / n, format, isa);
    a
}

/// Inputs with exact ties after scaling: the block max is 127, so the scale is
/// 1 and x.5 values must round away from zero (Q8_0/1) or to even (Q8_K).
fn tie_inputs() -> Vec<f32> {
    let mut x = vec![0f32; 512];
    for (k, v) in x.iter_mut().enumerate() {
        *v = ((k % 64) as f32 - 32.0) + 0.5;
    }
    for b in x.chunks_mut(32) {
        b[3] = 127.0;
    }
    x
}

#[test]
fn simd_quantisers_match_scalar_bit_for_bit() {
    let mut r = random::rng(5);
    let mut inputs = vec![random::activations(4 * 512, &mut r), tie_inputs().repeat(4)];
    inputs.push(vec![0.0; 4 * 512]);
    // rows of 18 blocks (SmolLM2's 576): a group of 16 and a tail of 2
    let mut narrow = random::activations(4 * 576, &mut r);
    narrow[600] = 0.0;
    narrow[32 * 20..32 * 21].fill(0.0);
    narrow[33 * 32 + 7] = -1e-30;
    for x in &inputs {
        for format in [ActFormat::Q8_0, ActFormat::Q8_1, ActFormat::Q8K] {
            let s = quantize(x, 4, format, Isa::Scalar);
            for isa in Isa::available() {
                let v = quantize(x, 4, format, isa);
                assert_eq!(v.qs, s.qs, "{isa} {format:?}");
                assert_eq!(v.bsums, s.bsums, "{isa} {format:?}");
                let bits = |f: &[f32]| f.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&v.d), bits(&s.d), "{isa} {format:?}");
                assert_eq!(bits(&v.s), bits(&s.s), "{isa} {format:?}");
            }
        }
    }
    for format in [ActFormat::Q8_0, ActFormat::Q8_1] {
        let s = quantize(&narrow, 4, format, Isa::Scalar);
        for isa in Isa::available() {
            let v = quantize(&narrow, 4, format, isa);
            let bits = |f: &[f32]| f.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(v.qs, s.qs, "{isa} {format:?}, 576 columns");
            assert_eq!(bits(&v.d), bits(&s.d), "{isa} {format:?}, 576 columns");
            assert_eq!(bits(&v.s), bits(&s.s), "{isa} {format:?}, 576 columns");
        }
    }
}

#[test]
fn quantisers_match_ggml_reference_rounding() {
    let mut r = random::rng(6);
    for x in [random::activations(512, &mut r), tie_inputs()] {
        for (format, dtype) in [
            (ActFormat::Q8_0, DType::Q4_0),
            (ActFormat::Q8_1, DType::Q4_1),
            (ActFormat::Q8K, DType::Q4K),
        ] {
            let want = quantize_acts(dtype, &x);
            for isa in Isa::available() {
                let a = quantize(&x, 1, format, isa);
                let bs = format.block();
                for (k, &w) in want.xhat.iter().enumerate() {
                    let q = a.qs[k / 32].0[k % 32] as f64;
                    let got = q * a.d[(k / bs) * a.t_pad] as f64;
                    assert_eq!(got, w, "{isa} {format:?} element {k}");
                }
                if format != ActFormat::Q8K {
                    for b in 0..16 {
                        let sum: f64 = want.xhat[32 * b..32 * b + 32].iter().sum();
                        assert_eq!(
                            a.s[b * a.t_pad] as f64,
                            sum + want.s_err[b],
                            "{isa} {format:?} sum {b}"
                        );
                    }
                } else {
                    for g in 0..32 {
                        let sum: i32 = (0..16)
                            .map(|l| a.qs[(16 * g + l) / 32].0[(16 * g + l) % 32] as i32)
                            .sum();
                        assert_eq!(a.bsums[g / 16][g % 16] as i32, sum);
                    }
                }
            }
        }
    }
    // The ties themselves (block max 127, so scale 1): Q8_0 rounds away from
    // zero, Q8_K (iscale -1) to even.
    let x = tie_inputs();
    assert_eq!((x[0], x[1], x[32], x[33]), (-31.5, -30.5, 0.5, 1.5));
    let a = quantize(&x, 1, ActFormat::Q8_0, Isa::Scalar);
    assert_eq!(
        (a.qs[0].0[0], a.qs[0].0[1], a.qs[1].0[0], a.qs[1].0[1]),
        (-32, -31, 1, 2)
    );
    let k = quantize(&x, 1, ActFormat::Q8K, Isa::Scalar);
    assert_eq!(
        (k.qs[0].0[0], k.qs[0].0[1], k.qs[1].0[0], k.qs[1].0[1]),
        (32, 30, 0, -2)
    );
}

#[test]
fn repeated_activations_are_kept_and_changed_ones_quantised_again() {
    let mut r = random::rng(9);
    let x = random::activations(8 * 512, &mut r);
    let mut a = QuantActs::default();
    a.quantize(&x, 8, 512, ActFormat::Q8_0, Isa::Scalar);
    a.interleave8();
    let fresh = (a.qs.clone(), a.qs8.clone());
    // marks: a kept quantisation (and copy) leaves them, a new one does not
    a.qs[0].0[0] = i8::MIN;
    a.qs8[0].0[0] = i8::MIN;
    a.quantize(&x, 8, 512, ActFormat::Q8_0, Isa::Scalar);
    a.interleave8();
    assert_eq!((a.qs[0].0[0], a.qs8[0].0[0]), (i8::MIN, i8::MIN));
    // one bit of one value, another format, or another split into tokens
    let mut y = x.clone();
    y[4095] = f32::from_bits(y[4095].to_bits() ^ 1);
    for (v, n, format) in [
        (&y, 8, ActFormat::Q8_0),
        (&x, 8, ActFormat::Q8_1),
        (&x, 4, ActFormat::Q8_0),
    ] {
        a.quantize(&x, 8, 512, ActFormat::Q8_0, Isa::Scalar);
        a.qs[0].0[0] = i8::MIN;
        a.quantize(v, n, v.len() / n, format, Isa::Scalar);
        assert_ne!(a.qs[0].0[0], i8::MIN, "{n} tokens of {format:?}");
    }
    a.quantize(&x, 8, 512, ActFormat::Q8_0, Isa::Scalar);
    a.interleave8();
    assert_eq!((a.qs.clone(), a.qs8.clone()), fresh);
}

#[test]
fn reused_buffers_hold_the_bytes_of_fresh_ones_padding_included() {
    // shapes that grow, shrink and change width, so that padding left by
    // earlier values lies where later values pad
    let mut r = random::rng(11);
    let mut a = QuantActs::default();
    for (n, cols, format) in [
        (8, 1536, ActFormat::Q8_0),
        (1, 576, ActFormat::Q8_0),
        (3, 1536, ActFormat::Q8_1),
        (1, 1536, ActFormat::Q8_1),
        (9, 512, ActFormat::Q8K),
        (2, 256, ActFormat::Q8K),
        (17, 576, ActFormat::Q8_0),
        (1, 2048, ActFormat::Q8K),
    ] {
        let x = random::activations(n * cols, &mut r);
        a.quantize(&x, n, cols, format, Isa::Scalar);
        let fresh = quantize(&x, n, format, Isa::Scalar);
        assert_eq!(a.t_pad, fresh.t_pad, "{n} x {cols}");
        assert!(a.qs == fresh.qs, "{n} tokens of {cols} in {format:?}");
        assert!(a.qs[n * a.qblocks..].iter().all(|b| b.0 == [0; 32]));
    }
}
