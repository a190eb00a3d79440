//! Test-only references, written independently of the kernels from ggml's
//! block definitions: a dequantiser per type (checked bit-exact against the
//! gguf-py fixture), ggml's reference activation quantisers, and f64 dot
//! products.

use ats_core::DType;
use half::f16;

fn h(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// A dequantised row: the weights, and per 32-block the min `m` of Q4_1 /
/// Q5_1 (0 for other types), which the Q8_1 block-sum rounding multiplies.
pub(super) struct Deq {
    pub w: Vec<f32>,
    pub mins: Vec<f32>,
}

/// Dequantises one row of `cols` elements of `dtype` like ggml's `to_float`.
pub(super) fn dequantize(dtype: DType, row: &[u8], cols: usize) -> Deq {
    let mut w = Vec::with_capacity(cols);
    let mut mins = Vec::new();
    let bs = dtype.type_size();
    match dtype {
        DType::F32 => w.extend(
            row.chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap())),
        ),
        DType::F16 => w.extend(row.chunks_exact(2).map(|b| h(b, 0))),
        DType::BF16 => w.extend(
            row.chunks_exact(2)
                .map(|b| f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16)),
        ),
        DType::Q8_0 => {
            for b in row.chunks_exact(bs) {
                let d = h(b, 0);
                w.extend(b[2..34].iter().map(|&q| q as i8 as f32 * d));
            }
        }
        DType::Q4_0 | DType::Q4_1 => {
            for b in row.chunks_exact(bs) {
                let d = h(b, 0);
                let (m, qs) = if dtype == DType::Q4_1 {
                    (h(b, 2), &b[4..20])
                } else {
                    (0.0, &b[2..18])
                };
                let mut out = [0f32; 32];
                for j in 0..16 {
                    let (x0, x1) = ((qs[j] & 0x0f) as i32, (qs[j] >> 4) as i32);
                    if dtype == DType::Q4_0 {
                        out[j] = (x0 - 8) as f32 * d;
                        out[j + 16] = (x1 - 8) as f32 * d;
                    } else {
                        out[j] = x0 as f32 * d + m;
                        out[j + 16] = x1 as f32 * d + m;
                    }
                }
                w.extend(out);
                mins.push(m);
            }
        }
        DType::Q5_0 | DType::Q5_1 => {
            for b in row.chunks_exact(bs) {
                let d = h(b, 0);
                let o = if dtype == DType::Q5_1 { 2 } else { 0 };
                let m = if dtype == DType::Q5_1 { h(b, 2) } else { 0.0 };
                let qh = u32::from_le_bytes(b[2 + o..6 + o].try_into().unwrap());
                let qs = &b[6 + o..22 + o];
                let mut out = [0f32; 32];
                for j in 0..16 {
                    let xh0 = (((qh >> j) << 4) & 0x10) as i32;
                    let xh1 = ((qh >> (j + 12)) & 0x10) as i32;
                    let x0 = (qs[j] & 0x0f) as i32 | xh0;
                    let x1 = (qs[j] >> 4) as i32 | xh1;
                    if dtype == DType::Q5_0 {
                        out[j] = (x0 - 16) as f32 * d;
                        out[j + 16] = (x1 - 16) as f32 * d;
                    } else {
                        out[j] = x0 as f32 * d + m;
                        out[j + 16] = x1 as f32 * d + m;
                    }
                }
                w.extend(out);
                mins.push(m);
            }
        }
        DType::Q2K => {
            for b in row.chunks_exact(bs) {
                let (sc, qs, d, dmin) = (&b[0..16], &b[16..80], h(b, 80), h(b, 82));
                let mut is = 0;
                for n in 0..2 {
                    let q = &qs[32 * n..];
                    for shift in [0, 2, 4, 6] {
                        for half in 0..2 {
                            let s = sc[is];
                            is += 1;
                            let (dl, ml) = (d * (s & 0x0f) as f32, dmin * (s >> 4) as f32);
                            for l in 0..16 {
                                w.push(dl * ((q[l + 16 * half] >> shift) & 3) as f32 - ml);
                            }
                        }
                    }
                }
            }
        }
        DType::Q3K => {
            for b in row.chunks_exact(bs) {
                let (hm, qs, d) = (&b[0..32], &b[32..96], h(b, 108));
                // ggml's 12-byte scale packing, decoded through four u32 words.
                let a: [u32; 3] = std::array::from_fn(|i| {
                    u32::from_le_bytes(b[96 + 4 * i..100 + 4 * i].try_into().unwrap())
                });
                let (k1, k2) = (0x0303_0303u32, 0x0f0f_0f0fu32);
                let words = [
                    (a[0] & k2) | ((a[2] & k1) << 4),
                    (a[1] & k2) | (((a[2] >> 2) & k1) << 4),
                    ((a[0] >> 4) & k2) | (((a[2] >> 4) & k1) << 4),
                    ((a[1] >> 4) & k2) | (((a[2] >> 6) & k1) << 4),
                ];
                let scales: Vec<i32> = words
                    .iter()
                    .flat_map(|w| w.to_le_bytes())
                    .map(|s| s as i8 as i32 - 32)
                    .collect();
                let (mut is, mut m) = (0, 1u8);
                for n in 0..2 {
                    let q = &qs[32 * n..];
                    for shift in [0, 2, 4, 6] {
                        for half in 0..2 {
                            let dl = d * scales[is] as f32;
                            is += 1;
                            for l in 16 * half..16 * half + 16 {
                                let v = ((q[l] >> shift) & 3) as i32
                                    - if hm[l] & m != 0 { 0 } else { 4 };
                                w.push(dl * v as f32);
                            }
                        }
                        m <<= 1;
                    }
                }
            }
        }
        DType::Q4K | DType::Q5K => {
            for b in row.chunks_exact(bs) {
                let (d, dmin, s) = (h(b, 0), h(b, 2), &b[4..16]);
                let sm = |j: usize| -> (u8, u8) {
                    if j < 4 {
                        (s[j] & 63, s[j + 4] & 63)
                    } else {
                        (
                            (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4),
                            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
                        )
                    }
                };
                let (qh, qs) = if dtype == DType::Q5K {
                    (&b[16..48], &b[48..176])
                } else {
                    (&b[0..0], &b[16..144])
                };
                for j in 0..4 {
                    let ((s1, m1), (s2, m2)) = (sm(2 * j), sm(2 * j + 1));
                    let (d1, mm1, d2, mm2) = (
                        d * s1 as f32,
                        dmin * m1 as f32,
                        d * s2 as f32,
                        dmin * m2 as f32,
                    );
                    let hb = |l: usize, bit: usize| {
                        if qh.is_empty() {
                            0
                        } else {
                            ((qh[l] >> bit) & 1) as u32 * 16
                        }
                    };
                    for l in 0..32 {
                        w.push(d1 * ((qs[32 * j + l] & 0x0f) as u32 + hb(l, 2 * j)) as f32 - mm1);
                    }
                    for l in 0..32 {
                        w.push(d2 * ((qs[32 * j + l] >> 4) as u32 + hb(l, 2 * j + 1)) as f32 - mm2);
                    }
                }
            }
        }
        // ggml's kvalues_iq4nl; MXFP4: kvalues_mxfp4 (E2M1 doubled) with an
        // E8M0 scale 2^(e - 128) built from its bits.
        DType::IQ4NL | DType::MXFP4 => {
            const NL: [i8; 16] = [
                -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
            ];
            const FP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];
            for b in row.chunks_exact(bs) {
                let (d, qs, table) = if dtype == DType::IQ4NL {
                    (h(b, 0), &b[2..18], &NL)
                } else {
                    let e = u32::from(b[0]);
                    let bits = if e < 2 {
                        0x0020_0000 << e
                    } else {
                        (e - 1) << 23
                    };
                    (f32::from_bits(bits), &b[1..17], &FP4)
                };
                let lo = qs.iter().map(|&q| d * table[(q & 0x0f) as usize] as f32);
                let hi = qs.iter().map(|&q| d * table[(q >> 4) as usize] as f32);
                w.extend(lo.collect::<Vec<_>>());
                w.extend(hi.collect::<Vec<_>>());
            }
        }
        DType::IQ4XS => {
            const NL: [i8; 16] = [
                -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
            ];
            for b in row.chunks_exact(bs) {
                let d = h(b, 0);
                let sh = u16::from_le_bytes([b[2], b[3]]);
                for ib in 0..8 {
                    let ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0x0f) as i32
                        | ((((sh >> (2 * ib)) & 3) as i32) << 4);
                    let dl = d * (ls - 32) as f32;
                    let qs = &b[8 + 16 * ib..24 + 16 * ib];
                    w.extend(
                        qs.iter()
                            .map(|&q| dl * NL[(q & 0x0f) as usize] as f32)
                            .collect::<Vec<_>>(),
                    );
                    w.extend(
                        qs.iter()
                            .map(|&q| dl * NL[(q >> 4) as usize] as f32)
                            .collect::<Vec<_>>(),
                    );
                }
            }
        }
        DType::Q6K => {
            for b in row.chunks_exact(bs) {
                let d = h(b, 208);
                let mut out = [0f32; 256];
                for n in 0..2 {
                    let (ql, qh, sc) = (&b[64 * n..], &b[128 + 32 * n..], &b[192 + 8 * n..]);
                    for l in 0..32 {
                        let is = l / 16;
                        let q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) as i32 - 32;
                        let q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                        let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                        let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                        let s = |k: usize| sc[is + k] as i8 as f32;
                        out[128 * n + l] = d * s(0) * q1 as f32;
                        out[128 * n + l + 32] = d * s(2) * q2 as f32;
                        out[128 * n + l + 64] = d * s(4) * q3 as f32;
                        out[128 * n + l + 96] = d * s(6) * q4 as f32;
                    }
                }
                w.extend(out);
            }
        }
    }
    assert_eq!(w.len(), cols, "{dtype}");
    if mins.is_empty() {
        mins = vec![0.0; cols.div_ceil(32)];
    }
    Deq { w, mins }
}

/// Activations as the kernels see them, per token: the dequantised values,
/// and per 32-block the error of the stored block sum (`s - sum(x_hat)`,
/// nonzero only for Q8_1's f16 sums).
pub(super) struct ActRef {
    pub xhat: Vec<f64>,
    pub s_err: Vec<f64>,
}

/// ggml's reference quantisation of one token for the kernels of `dtype`
/// (`None` for float weights: activations stay f32).
pub(super) fn quantize_acts(dtype: DType, x: &[f32]) -> ActRef {
    let nb = x.len().div_ceil(32);
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => ActRef {
            xhat: x.iter().map(|&v| v as f64).collect(),
            s_err: vec![0.0; nb],
        },
        DType::Q2K | DType::Q3K | DType::Q4K | DType::Q5K | DType::Q6K | DType::IQ4XS => {
            let mut xhat = Vec::with_capacity(x.len());
            for b in x.chunks_exact(256) {
                let (mut amax, mut max) = (0f32, 0f32);
                for &v in b {
                    if v.abs() > amax {
                        amax = v.abs();
                        max = v;
                    }
                }
                if amax == 0.0 {
                    xhat.extend(std::iter::repeat_n(0.0, 256));
                    continue;
                }
                let iscale = -127.0 / max;
                let d = 1.0 / iscale;
                // nearest_int: the 1.5 * 2^23 trick rounds half to even.
                xhat.extend(b.iter().map(|&v| {
                    let r = (iscale * v + 12_582_912.0) - 12_582_912.0;
                    (r as i32).min(127) as f64 * d as f64
                }));
            }
            ActRef {
                xhat,
                s_err: vec![0.0; nb],
            }
        }
        _ => {
            let q8_1 = matches!(dtype, DType::Q4_1 | DType::Q5_1);
            let mut xhat = Vec::with_capacity(x.len());
            let mut s_err = Vec::with_capacity(nb);
            for b in x.chunks_exact(32) {
                let amax = b
                    .iter()
                    .fold(0f32, |m, v| if m > v.abs() { m } else { v.abs() });
                let d = amax / 127.0;
                let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                let q: Vec<i32> = b.iter().map(|&v| libm_roundf(v * id)).collect();
                let d16 = f16::from_f32(d).to_f32() as f64;
                let sum: i32 = q.iter().sum();
                xhat.extend(q.iter().map(|&q| q as f64 * d16));
                let s = if q8_1 {
                    f16::from_f32(sum as f32 * d).to_f32() as f64
                } else {
                    sum as f64 * d16
                };
                s_err.push(s - sum as f64 * d16);
            }
            ActRef { xhat, s_err }
        }
    }
}

/// C's `roundf`: half away from zero.
fn libm_roundf(v: f32) -> i32 {
    let t = v.trunc();
    if (v - t).abs() >= 0.5 {
        (t + v.signum()) as i32
    } else {
        t as i32
    }
}

/// Elements per group sharing a scale/offset, for the error bounds.
pub(super) fn group(dtype: DType) -> usize {
    match dtype.block_size() {
        1 => 1,
        32 => 32,
        _ => 16,
    }
}

/// Reference outputs and tolerances of one (row, token) pair.
pub(super) struct Expect {
    /// f64 dot with the exact f32 activations.
    pub exact: f64,
    /// f64 dot with the activations as the kernels quantise them.
    pub emulated: f64,
    /// Float rounding allowed against `emulated`.
    pub tol_emulated: f64,
    /// Allowed against `exact`: the activation quantisation error bound
    /// plus `tol_emulated`.
    pub tol_exact: f64,
}

/// References for weight row `w` and token activations `x` (quantised `a`).
pub(super) fn expect(dtype: DType, w: &Deq, x: &[f32], a: &ActRef) -> Expect {
    let cols = x.len();
    let g = group(dtype);
    let mut exact = 0f64;
    let mut emulated = 0f64;
    // Sum of |term| that the kernels' float roundings act on: every integer
    // term `d*q*qx` is at most (|w| + |offset|) * |x_hat|, with the group's
    // offset bounded by its largest |w|; the offset term adds once more.
    let mut magnitude = 0f64;
    let mut quant_err = 0f64;
    for (k, (&wk, &xk)) in w.w.iter().zip(x).enumerate() {
        let gmax = w.w[k / g * g..(k / g + 1) * g]
            .iter()
            .fold(0f64, |m, v| m.max(v.abs() as f64));
        let wk = wk as f64;
        exact += wk * xk as f64;
        emulated += wk * a.xhat[k];
        magnitude += (wk.abs() + 2.0 * gmax) * a.xhat[k].abs().max((xk as f64).abs());
        quant_err += wk.abs() * (xk as f64 - a.xhat[k]).abs();
    }
    for (m, e) in w.mins.iter().zip(&a.s_err) {
        emulated += *m as f64 * e;
        quant_err += (*m as f64 * e).abs();
        magnitude += (*m as f64 * e).abs();
    }
    // Chains of about cols/8 (float) or cols/32 (blocks) f32 additions per
    // lane, plus a few roundings per term and the final lane sum.
    let chain = if g == 1 {
        cols / 8 + 24
    } else {
        cols / 32 + 16
    };
    let tol_emulated = chain as f64 * f32::EPSILON as f64 * magnitude + 1e-30;
    Expect {
        exact,
        emulated,
        tol_emulated,
        tol_exact: quant_err + tol_emulated,
    }
}
