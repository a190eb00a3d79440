//! Dot-product kernels, one file per weight type, and the dispatch from a
//! (type, instruction set) pair to the tiles that [`gemm`](super::gemm) runs.
//!
//! Each type file holds the type's block decoding in scalar and SIMD form;
//! the loops around it are shared by family: [`float`] (F32, F16, BF16),
//! [`legacy`] (32-element blocks, IQ4_NL and MXFP4 among them; with
//! [`legacy512`] their one-token kernel on AVX-512 VNNI) and [`kquant`]
//! (256-element super-blocks, IQ4_XS among them). On AVX-512 VNNI, prompts
//! of 16 tokens or more run the prompt tiles ([`prompt_tiles`]:
//! [`legacy_tiles`], [`k4_tiles`], [`q6_k512`], IQ4_XS's in [`iq4_xs512`]),
//! and the block formats' rounds of 3 to 15 tokens [`legacy_pairs`].

mod bf16;
mod f16;
mod f32;
mod float;
mod iq4_nl;
mod iq4_xs;
#[cfg(target_arch = "x86_64")]
mod iq4_xs512;
#[cfg(target_arch = "x86_64")]
mod k4_tiles;
mod kquant;
#[cfg(target_arch = "x86_64")]
mod kquant256;
#[cfg(target_arch = "x86_64")]
mod kquant512;
#[cfg(target_arch = "x86_64")]
mod kquant_tokens8;
mod legacy;
#[cfg(target_arch = "x86_64")]
mod legacy512;
#[cfg(target_arch = "x86_64")]
mod legacy_pairs;
#[cfg(target_arch = "x86_64")]
mod legacy_rows16;
#[cfg(target_arch = "x86_64")]
mod legacy_tiles;
mod mxfp4;
#[cfg(target_arch = "x86_64")]
mod prompt_tiles;
mod q2_k;
mod q3_k;
mod q4_0;
mod q4_1;
mod q4_k;
#[cfg(target_arch = "x86_64")]
mod q4_k512;
#[cfg(target_arch = "x86_64")]
mod q4_k_rows16;
mod q5_0;
mod q5_1;
mod q5_k;
mod q6_k;
#[cfg(target_arch = "x86_64")]
mod q6_k512;
#[cfg(target_arch = "x86_64")]
mod q6_k_rows16;
#[cfg(target_arch = "x86_64")]
mod q6_k_rows8;
mod q8_0;
#[cfg(target_arch = "x86_64")]
mod simd;

#[cfg(test)]
pub(super) mod testing;

use ats_core::DType;

use super::acts::{ActFormat, QuantActs};
use super::gemm::{self, Shape};
use super::{Isa, WeightMatrix};
use float::FloatElem;
use kquant::SuperBlock;
use legacy::LegacyBlock;

/// Computes `y = x * W^T` for a validated `w`, `x`, `y` and an available `isa`.
pub(super) fn run(
    w: &WeightMatrix<'_>,
    x: &[f32],
    n_tokens: usize,
    y: &mut [f32],
    isa: Isa,
    acts: &mut QuantActs,
) {
    match w.dtype {
        DType::F32 => run_float::<f32::F32>(w, x, n_tokens, y, isa),
        DType::F16 => run_float::<f16::F16>(w, x, n_tokens, y, isa),
        DType::BF16 => run_float::<bf16::Bf16>(w, x, n_tokens, y, isa),
        DType::Q8_0 => run_legacy::<q8_0::Q8_0>(w, x, n_tokens, y, isa, acts),
        DType::Q4_0 => run_legacy::<q4_0::Q4_0>(w, x, n_tokens, y, isa, acts),
        DType::Q4_1 => run_legacy::<q4_1::Q4_1>(w, x, n_tokens, y, isa, acts),
        DType::Q5_0 => run_legacy::<q5_0::Q5_0>(w, x, n_tokens, y, isa, acts),
        DType::Q5_1 => run_legacy::<q5_1::Q5_1>(w, x, n_tokens, y, isa, acts),
        DType::Q2K => run_kquant::<q2_k::Q2K>(w, x, n_tokens, y, isa, acts),
        DType::Q3K => run_kquant::<q3_k::Q3K>(w, x, n_tokens, y, isa, acts),
        DType::Q4K => run_kquant::<q4_k::Q4K>(w, x, n_tokens, y, isa, acts),
        DType::Q5K => run_kquant::<q5_k::Q5K>(w, x, n_tokens, y, isa, acts),
        DType::Q6K => run_kquant::<q6_k::Q6K>(w, x, n_tokens, y, isa, acts),
        DType::IQ4NL => run_legacy::<iq4_nl::Iq4Nl>(w, x, n_tokens, y, isa, acts),
        DType::IQ4XS => run_kquant::<iq4_xs::Iq4Xs>(w, x, n_tokens, y, isa, acts),
        DType::MXFP4 => run_legacy::<mxfp4::Mxfp4>(w, x, n_tokens, y, isa, acts),
    }
}

/// How far ahead of its reads a one-token kernel asks for cache lines: about
/// 2 KiB, which measured best for streaming reads here (the hardware
/// prefetcher alone reaches about 85% of that bandwidth).
#[cfg(target_arch = "x86_64")]
const PREFETCH: usize = 2048;

/// Whether the 16-row one-token kernels can run: they need VNNI, and
/// gather the rows' block heads with 32-bit offsets (16 rows of `rb` bytes).
fn rows16_fit(isa: Isa, rb: usize) -> bool {
    isa == Isa::Avx512Vnni && 16 * rb <= i32::MAX as usize
}

/// Whether a tile's 16 rows are 16 in a row (not a task's last rows, which
/// repeat).
#[cfg(target_arch = "x86_64")]
fn in_a_row(r: &[usize; 16]) -> bool {
    r[15] == r[0] + 15
}

/// `rows.map(f)` written as a loop: an array map's closure was left as a
/// call to `try_map` in the tile closures, once per tile.
#[inline(always)]
fn ptrs<const N: usize>(rows: &[usize; N], f: impl Fn(usize) -> *const u8) -> [*const u8; N] {
    let mut p = [std::ptr::null(); N];
    for (p, &r) in p.iter_mut().zip(rows) {
        *p = f(r);
    }
    p
}

/// Bytes per weight row; `w` is validated, so this cannot fail.
fn row_bytes(w: &WeightMatrix<'_>) -> usize {
    w.data.len() / w.rows.max(1)
}

fn run_float<E: FloatElem>(
    w: &WeightMatrix<'_>,
    x: &[f32],
    n_tokens: usize,
    y: &mut [f32],
    isa: Isa,
) {
    let (rb, cols, data) = (row_bytes(w), w.cols, w.data);
    let shape = Shape {
        rows: w.rows,
        n_tokens,
        row_bytes: rb,
    };
    let row = |r: usize| &data[r * rb..(r + 1) * rb];
    // Token tiles may run past the last token: clamp (the extra results are dropped).
    let xrow = |t: usize| &x[t.min(n_tokens - 1) * cols..][..cols];
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        let tile = |r: &[usize; 3], t0: usize, o: &mut [[f32; 3]; 4]| {
            // SAFETY: `isa` is available (AVX2/FMA/F16C); rows and activation
            // rows are whole slices of `cols` elements.
            unsafe {
                float::tile_avx2::<E, 3, 4>(
                    ptrs(r, |r| row(r).as_ptr()),
                    std::array::from_fn(|j| xrow(t0 + j).as_ptr()),
                    cols,
                    0,
                    o,
                )
            }
        };
        // One row at a time: a linear stream through the weights.
        let single = |r: &[usize; 4], t: usize, o: &mut [[f32; 4]; 1]| {
            for (i, &r) in r.iter().enumerate() {
                let mut oi = [[0f32; 1]; 1];
                // SAFETY: as above.
                unsafe {
                    float::tile_avx2::<E, 1, 1>(
                        [row(r).as_ptr()],
                        [xrow(t).as_ptr()],
                        cols,
                        PREFETCH,
                        &mut oi,
                    )
                };
                o[0][i] = oi[0][0];
            }
        };
        return gemm::drive(
            shape,
            y,
            gemm::Tiles {
                tile: &tile,
                narrow: None,
                single: &single,
                wide_min: 2,
            },
        );
    }
    let _ = isa;
    let dot = |r: &[usize; 1], t: usize, o: &mut [[f32; 1]; 1]| {
        o[0][0] = float::dot_scalar::<E>(row(r[0]), xrow(t));
    };
    gemm::drive_dots(shape, y, &dot)
}

/// How far ahead the 8-token kernels prefetch for `n_tokens` tokens: only a
/// single tile's worth of tokens (a round of a few sequences' decode tokens)
/// reads every weight once from DRAM; larger products re-read weights from L2.
#[cfg(target_arch = "x86_64")]
fn tile_prefetch(n_tokens: usize) -> usize {
    if n_tokens <= 8 { PREFETCH } else { 0 }
}

/// Rows per prefill tile of the block formats (x 8 tokens): the 8
/// activation vectors of a block and 4 accumulators fill the registers.
#[cfg(target_arch = "x86_64")]
const LMR: usize = 4;
/// Fewest tokens of a product that runs the 16-token prompt tiles on
/// AVX-512 VNNI (a round of a few sequences' decode tokens keeps the
/// 8-token tile, which streams its weights once)...
const TOKENS16_MIN: usize = crate::matmul::acts::TOKEN_PAD16;
/// ...and the 32-token ones, whose broadcast weights each serve two
/// `vpdpbusd` (IQ4_XS 64 tokens: 1225 -> 926-958 us in `isa_pair`).
const TOKENS32_MIN: usize = 2 * crate::matmul::acts::TOKEN_PAD16;

/// A prompt tile of 4 rows and as many tokens as its output holds.
#[cfg(target_arch = "x86_64")]
type PromptTile<'a> = &'a (dyn Fn(&[usize; LMR], usize, &mut [[f32; LMR]]) + Sync);

/// Runs a product with the prompt tile `tile` 32 tokens wide from
/// [`TOKENS32_MIN`] tokens, else 16 (the activations are padded to match),
/// `narrow` for a last tile of 2-4 tokens and `single` for single tokens.
#[cfg(target_arch = "x86_64")]
fn drive_prompt<const MRD: usize>(
    shape: Shape,
    y: &mut [f32],
    tile: PromptTile<'_>,
    narrow: Option<gemm::TileFn<'_, LMR, { gemm::NARROW }>>,
    single: gemm::TileFn<'_, MRD, 1>,
) {
    let wide_min = WIDE_MIN;
    if shape.n_tokens >= TOKENS32_MIN {
        let t32 = |r: &[usize; LMR], t0: usize, o: &mut [[f32; LMR]; 32]| tile(r, t0, o);
        let tiles = gemm::Tiles {
            tile: &t32,
            narrow,
            single,
            wide_min,
        };
        return gemm::drive(shape, y, tiles);
    }
    let t16 = |r: &[usize; LMR], t0: usize, o: &mut [[f32; LMR]; 16]| tile(r, t0, o);
    let tiles = gemm::Tiles {
        tile: &t16,
        narrow,
        single,
        wide_min,
    };
    gemm::drive(shape, y, tiles)
}

/// Runs a product of 16 rows per tile on AVX-512 VNNI: `tile16(first, t0,
/// out)` for 16 rows in a row from `first` and 8 tokens from `t0`; a task's
/// last rows, which repeat, per token with `single`; a last token tile of
/// 2-4 tokens with `quad`, 4 rows at a time.
#[cfg(target_arch = "x86_64")]
fn drive_legacy_rows16(
    shape: Shape,
    y: &mut [f32],
    single: gemm::TileFn<'_, { legacy512::ROWS }, 1>,
    quad: gemm::TileFn<'_, LMR, { gemm::NARROW }>,
    tile16: impl Fn(usize, usize, &mut [[f32; legacy512::ROWS]; legacy_rows16::TOKENS]) + Sync,
) {
    const R: usize = legacy512::ROWS;
    let n_tokens = shape.n_tokens;
    let tile = |r: &[usize; R], t0: usize, o: &mut [[f32; R]; legacy_rows16::TOKENS]| {
        if in_a_row(r) {
            return tile16(r[0], t0, o);
        }
        for (t, o) in (t0..n_tokens).zip(o.iter_mut()) {
            let mut one = [[0f32; R]; 1];
            single(r, t, &mut one);
            *o = one[0];
        }
    };
    let narrow = |r: &[usize; R], t0: usize, o: &mut [[f32; R]; gemm::NARROW]| {
        by_quads(r, o, |r4, o4| quad(r4, t0, o4))
    };
    let tiles = gemm::Tiles {
        tile: &tile,
        narrow: Some(&narrow),
        single,
        wide_min: WIDE_MIN,
    };
    gemm::drive(shape, y, tiles)
}

/// Runs `f` on the 16 rows `r` four at a time, each into its columns of
/// `o`, up to a task's last row (the repeats past it are dropped).
#[cfg(target_arch = "x86_64")]
fn by_quads<const N: usize>(
    r: &[usize; 16],
    o: &mut [[f32; 16]; N],
    f: impl Fn(&[usize; LMR], &mut [[f32; LMR]; N]),
) {
    for q in 0..16 / LMR {
        let r4 = [r[4 * q], r[4 * q + 1], r[4 * q + 2], r[4 * q + 3]];
        if q > 0 && r4[0] == r[4 * q - 1] {
            break;
        }
        let mut o4 = [[0f32; LMR]; N];
        f(&r4, &mut o4);
        for (o, o4) in o.iter_mut().zip(&o4) {
            o[4 * q..4 * q + 4].copy_from_slice(o4);
        }
    }
}

/// Fewest tokens in a tile worth the 8-token kernel (below, the one-token
/// kernel runs per token: a padded tile costs about 3 one-token passes).
const WIDE_MIN: usize = 3;

fn run_legacy<B: LegacyBlock>(
    w: &WeightMatrix<'_>,
    x: &[f32],
    n_tokens: usize,
    y: &mut [f32],
    isa: Isa,
    acts: &mut QuantActs,
) {
    acts.quantize(x, n_tokens, w.cols, B::ACTS, isa);
    // the 512-bit one-token kernel's, for 16 rows in a row, and on VNNI
    // the 8-token tile's too (which reads `qs` as it is)
    let rows16 = B::VALUES.is_some() && rows16_fit(isa, row_bytes(w));
    // Prompts on AVX-512 VNNI run 16- or 32-token tiles, the rest 8-token
    // ones; the 16-row 8-token tile runs up to 31 tokens (16 tokens of
    // SmolLM2's Q4_1 MLP in `isa_pair`: 118 us as two passes, 134 in the
    // 16-token tile; 64 tokens: 472 against 435).
    let wide_from = if rows16 { TOKENS32_MIN } else { TOKENS16_MIN };
    let wide16 = isa == Isa::Avx512Vnni && n_tokens >= wide_from;
    let nr = match (wide16, n_tokens >= TOKENS32_MIN) {
        (true, true) => 32,
        (true, false) => 16,
        _ => 8,
    };
    // The last token tile: narrow (2-4 tokens) or full.
    let last = n_tokens.div_ceil(nr).saturating_sub(1) * nr;
    let narrow_last = isa.has_avx2() && (2..=gemm::NARROW).contains(&(n_tokens - last));
    // the 8-token tiles' copies (the 16-row tile reads `qs` as it is)
    let copies8 = (n_tokens > 8 || (n_tokens >= WIDE_MIN && !narrow_last)) && !rows16;
    if wide16 {
        acts.interleave16();
    } else if isa.has_avx2() && copies8 {
        // the 8-token tile's activations: by pairs of lanes on VNNI
        if isa == Isa::Avx512Vnni {
            acts.interleave8_pairs();
        } else {
            acts.interleave8();
        }
    }
    if narrow_last {
        acts.interleave4_pairs(last);
    }
    // the VNNI kernels bias signed weights and take the sums off again (the
    // 16-row ones only where their levels needed a bias: not Q4_1's)
    let biased = const { legacy512::unsigned_levels(&B::VALUES).1 != 0 };
    if (rows16 && biased) || (isa == Isa::Avx512Vnni && B::SIGNED) {
        acts.group_sums();
    }
    let acts = &*acts;
    let (rb, data) = (row_bytes(w), w.data);
    let shape = Shape {
        rows: w.rows,
        n_tokens: acts.n_tokens,
        row_bytes: rb,
    };
    let row = |r: usize| &data[r * rb..(r + 1) * rb];
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        let pf8 = tile_prefetch(acts.n_tokens);
        let vnni = isa == Isa::Avx512Vnni;
        let tile = |r: &[usize; LMR], t0: usize, o: &mut [[f32; LMR]; 8]| {
            let r = ptrs(r, |r| row(r).as_ptr());
            // SAFETY: `isa` is available (VNNI only when it is the ISA, so
            // AVX-512 F/BW/VL too); each row holds `acts.blocks` whole
            // blocks; the driver passes t0 multiple of 8 with t0 + 8 <=
            // t_pad, and `qs8p` (VNNI, with `xsums`) or `qs8` is built
            // whenever wide tiles run.
            unsafe {
                if vnni {
                    legacy_pairs::tokens8_vnni::<B, LMR>(r, acts, t0, pf8, o)
                } else {
                    legacy::tokens8_avx2::<B, LMR>(r, acts, t0, pf8, o)
                }
            }
        };
        // 16 rows a call: the 512-bit kernel's when they are 16 in a row,
        // else (a task's last rows, repeated) four of the AVX2 kernel's
        let single = |r: &[usize; legacy512::ROWS],
                      t: usize,
                      o: &mut [[f32; legacy512::ROWS]; 1]| {
            let pf = PREFETCH;
            if rows16 && in_a_row(r) {
                let first = row(r[0]).as_ptr();
                // SAFETY: as above (VNNI is the ISA, so AVX-512 F/BW/VL too;
                // a format with a value layout; 16 whole rows from r[0]), with
                // t < n_tokens.
                return unsafe { legacy512::rows16_vnni::<B>(first, rb, acts, t, o) };
            }
            by_quads(r, o, |r4, o4| {
                // SAFETY: as above, with t < n_tokens.
                unsafe { legacy::rows4_avx2::<B>(ptrs(r4, |r| row(r).as_ptr()), acts, t, pf, o4) }
            });
        };
        let quad = |r: &[usize; LMR], t0: usize, o: &mut [[f32; LMR]; gemm::NARROW]| {
            // SAFETY: as above; the driver runs the narrow tile only on the
            // last token tile when it holds 2-4 tokens, for which `qs4` is built.
            unsafe { legacy::tokens4_avx2::<B>(ptrs(r, |r| row(r).as_ptr()), acts, t0, pf8, o) }
        };
        let narrow: Option<gemm::TileFn<'_, LMR, { gemm::NARROW }>> = Some(&quad);
        if rows16 && !wide16 {
            return drive_legacy_rows16(shape, y, &single, &quad, |first, t0, o| {
                // SAFETY: VNNI is the ISA (`rows16`, so AVX-512 F/BW/VL
                // too); a format with a value layout; 16 whole rows from
                // `first`, `rb` apart with `16 * rb` below 2^31
                // (`rows16_fit`); the driver passes t0 + 8 <= t_pad; `xsums`
                // is built whenever `rows16` and the layout has a bias.
                unsafe { legacy_rows16::tokens8_vnni::<B>(row(first).as_ptr(), rb, acts, t0, o) }
            });
        }
        if wide16 {
            let tile = |r: &[usize; LMR], t0: usize, o: &mut [[f32; LMR]]| {
                let r = ptrs(r, |r| row(r).as_ptr());
                // SAFETY: VNNI is the ISA (so AVX-512 F/BW/VL too); each
                // row holds `acts.blocks` whole blocks; the driver passes
                // t0 multiple of the tile with t0 + tile <= t_pad (padded
                // to the tile); `qs16` is built, and `xsums` (VNNI).
                unsafe {
                    if o.len() == 32 {
                        legacy_tiles::tokens_vnni::<B, 2, LMR>(r, acts, t0, o)
                    } else {
                        legacy_tiles::tokens_vnni::<B, 1, LMR>(r, acts, t0, o)
                    }
                }
            };
            return drive_prompt(shape, y, &tile, narrow, &single);
        }
        return gemm::drive(
            shape,
            y,
            gemm::Tiles {
                tile: &tile,
                narrow,
                single: &single,
                wide_min: WIDE_MIN,
            },
        );
    }
    let _ = isa;
    let dot = |r: &[usize; 1], t: usize, o: &mut [[f32; 1]; 1]| {
        o[0][0] = legacy::dot_scalar::<B>(row(r[0]), acts, t);
    };
    gemm::drive_dots(shape, y, &dot)
}

/// Most tokens of a K-quant product that runs row by row (each row read and
/// decoded once per 8 tokens, values in registers) rather than in the
/// broadcast 8-token tiles: measured faster up to 128 tokens on the 1B
/// Q4_K_M (2 threads: 16 decode tokens +25%, 24-128 prompt tokens +10-40%),
/// even at 256, and 8% slower at 1024. The 512-bit row kernels have no such
/// limit: on an AVX-512 Xeon they beat the AVX2 tiles at 512 prompt tokens
/// (1B Q4_K_M pp512 71-73 -> 74-88 t/s).
const KQ_DIRECT_MAX: usize = 128;

/// One K-quant row's dot products with tokens `t0..t0 + width` (1 to 8), in
/// the leading lanes.
///
/// # Safety
/// The CPU must support `isa` (AVX2/FMA/F16C at least); `p` must point to
/// `acts.blocks` whole super-blocks; `t0 + width <= acts.t_pad`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn kquant_dots<K: SuperBlock>(
    p: *const u8,
    acts: &QuantActs,
    t0: usize,
    width: usize,
    isa: Isa,
) -> [f32; 8] {
    fn pad<const N: usize>(d: [f32; N]) -> [f32; 8] {
        std::array::from_fn(|i| if i < N { d[i] } else { 0.0 })
    }
    // SAFETY: as the caller guarantees.
    unsafe {
        match width {
            1 => pad(kquant_row::<K, 1>(p, acts, t0, isa)),
            2 => pad(kquant_row::<K, 2>(p, acts, t0, isa)),
            3 => pad(kquant_row::<K, 3>(p, acts, t0, isa)),
            4 => pad(kquant_row::<K, 4>(p, acts, t0, isa)),
            5 => pad(kquant_row::<K, 5>(p, acts, t0, isa)),
            6 => pad(kquant_row::<K, 6>(p, acts, t0, isa)),
            7 => pad(kquant_row::<K, 7>(p, acts, t0, isa)),
            _ => kquant_row::<K, 8>(p, acts, t0, isa),
        }
    }
}

/// One token's dot products with rows `r` by [`kquant_row`], into `o`; a
/// row repeated past a task's last one takes the result before it.
///
/// # Safety
/// As [`kquant_row`] for one token, for each row `row(r[i])`.
#[cfg(target_arch = "x86_64")]
unsafe fn kquant_rows_one<K: SuperBlock, const R: usize>(
    r: &[usize; R],
    row: impl Fn(usize) -> *const u8,
    acts: &QuantActs,
    t: usize,
    isa: Isa,
    o: &mut [f32; R],
) {
    for i in 0..R {
        o[i] = if i > 0 && r[i] == r[i - 1] {
            o[i - 1]
        } else {
            // SAFETY: as the caller guarantees.
            let dot = unsafe { kquant_row::<K, 1>(row(r[i]), acts, t, isa) };
            dot[0]
        };
    }
}

/// One K-quant row's dot products with tokens `t0..t0 + N`, on 512-bit
/// registers when `isa` has AVX-512 (Q4_K with VNNI when it has that), else
/// against the regrouped activations from [`kquant256::MIN_TOKENS`] tokens
/// (both need `acts.qsp`).
///
/// # Safety
/// The CPU must support `isa` (AVX2/FMA/F16C at least); `p` must point to
/// `acts.blocks` whole super-blocks; `t0 + N <= acts.t_pad`; `acts.qsp` is
/// built when `isa` has AVX-512 or `N >= kquant256::MIN_TOKENS`.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn kquant_row<K: SuperBlock, const N: usize>(
    p: *const u8,
    acts: &QuantActs,
    t0: usize,
    isa: Isa,
) -> [f32; N] {
    // SAFETY: as the caller guarantees.
    unsafe {
        if isa.has_avx512() {
            kquant::dots_avx512::<K, N>(p, acts, t0, PREFETCH, isa == Isa::Avx512Vnni)
        } else if N >= kquant256::MIN_TOKENS {
            kquant::dots_regrouped_avx2::<K, N>(p, acts, t0, PREFETCH)
        } else {
            K::dots_avx2::<N>(p, acts, t0, PREFETCH)
        }
    }
}

/// [`run_kquant`] with 16-row tiles on AVX-512 VNNI: the format's kernels
/// for 1 (`kernels.1`) and 2 to 8 tokens (`kernels.0`) where the tile's 16
/// rows are in a row, else the row kernels, once per distinct row (a task's
/// last rows repeat).
#[cfg(target_arch = "x86_64")]
fn drive_rows16<K: SuperBlock>(
    shape: Shape,
    y: &mut [f32],
    kernels: (kquant::Rows16TokensFn, kquant::Rows16Fn),
    acts: &QuantActs,
    data: &[u8],
    isa: Isa,
) {
    let (rb, n) = (shape.row_bytes, acts.n_tokens);
    let row = |r: usize| data[r * rb..(r + 1) * rb].as_ptr();
    let tokens = |r: &[usize; 16], t0: usize, o: &mut [[f32; 16]]| {
        let width = (n - t0).min(o.len());
        if in_a_row(r) {
            // SAFETY: VNNI is the ISA (so AVX-512 F/BW/VL too); 16 whole
            // rows from r[0], rb apart; t0 + width <= n_tokens; Q8_K
            // activations, regrouped.
            return unsafe { kernels.0(row(r[0]), rb, acts, t0, width, o) };
        }
        for i in 0..16 {
            if i > 0 && r[i] == r[i - 1] {
                continue;
            }
            // SAFETY: as above: a whole row, tokens below t_pad.
            let dots = unsafe { kquant_dots::<K>(row(r[i]), acts, t0, width, isa) };
            for (o, &v) in o.iter_mut().zip(&dots).take(width) {
                o[i] = v;
            }
        }
    };
    let tile = |r: &[usize; 16], t0: usize, o: &mut [[f32; 16]; 8]| {
        if let (Some(kernel), true) = (K::ROWS16_TOKENS8_VNNI, in_a_row(r) && n - t0 >= 8) {
            // SAFETY: as in `tokens` above, with t0 + 8 <= n_tokens.
            return unsafe { kernel(row(r[0]), rb, acts, t0, o) };
        }
        tokens(r, t0, o)
    };
    let narrow = |r: &[usize; 16], t0: usize, o: &mut [[f32; 16]; gemm::NARROW]| tokens(r, t0, o);
    let single = |r: &[usize; 16], t: usize, o: &mut [[f32; 16]; 1]| {
        if in_a_row(r) {
            // SAFETY: as above, with t < n_tokens.
            return unsafe { kernels.1(row(r[0]), rb, acts, t, o) };
        }
        tokens(r, t, o)
    };
    gemm::drive(
        shape,
        y,
        gemm::Tiles {
            tile: &tile,
            narrow: Some(&narrow),
            single: &single,
            wide_min: 2,
        },
    )
}

/// [`run_kquant`] with the format's prompt tiles (`kernels`: 16 and 32
/// tokens), the row kernels for a last tile of 2-4 tokens (`narrow`) and
/// the one-token kernels for single tokens.
#[cfg(target_arch = "x86_64")]
fn drive_kquant_prompt<K: SuperBlock>(
    shape: Shape,
    y: &mut [f32],
    kernels: prompt_tiles::Tiles,
    narrow: gemm::TileFn<'_, LMR, { gemm::NARROW }>,
    acts: &QuantActs,
    data: &[u8],
    isa: Isa,
) {
    let rb = shape.row_bytes;
    let row = |r: usize| data[r * rb..(r + 1) * rb].as_ptr();
    let tile = |r: &[usize; LMR], t0: usize, o: &mut [[f32; LMR]]| {
        let kernel = if o.len() == 32 {
            kernels[1]
        } else {
            kernels[0]
        };
        // SAFETY: VNNI is the ISA (so AVX-512 F/BW/VL too); whole rows;
        // the driver passes t0 multiple of the tile with t0 + tile <= t_pad
        // (padded to the tile); `qs16` and the format's sums are built.
        unsafe { kernel(ptrs(r, row), acts, t0, o) }
    };
    let rows16 = K::ROWS16_VNNI.filter(|_| rows16_fit(isa, rb));
    let single = |r: &[usize; 16], t: usize, o: &mut [[f32; 16]; 1]| {
        if let (Some(kernel), true) = (rows16, in_a_row(r)) {
            // SAFETY: VNNI is the ISA; 16 whole rows from r[0], rb apart;
            // t < n_tokens; Q8_K activations.
            return unsafe { kernel(row(r[0]), rb, acts, t, o) };
        }
        // SAFETY: whole rows; t < n_tokens.
        unsafe { kquant_rows_one::<K, 16>(r, row, acts, t, isa, &mut o[0]) }
    };
    drive_prompt(shape, y, &tile, Some(narrow), &single)
}

/// Runs a K-quant product of 8 tokens or more (below the prompt tiles)
/// with the format's 8-token tile `tile8` ([`kquant_tokens8`]) for each
/// whole or padded tile of 8 tokens and the row kernel for a last one or
/// two.
#[cfg(target_arch = "x86_64")]
fn drive_tokens8_vnni<K: SuperBlock>(
    shape: Shape,
    y: &mut [f32],
    tile8: kquant_tokens8::Tokens8Fn,
    acts: &QuantActs,
    data: &[u8],
    isa: Isa,
) {
    const ROWS: usize = kquant_tokens8::ROWS;
    let rb = shape.row_bytes;
    if let Some(rows16) = K::ROWS16_TOKENS8_VNNI.filter(|_| rows16_fit(isa, rb)) {
        return drive_tokens8_rows16::<K>(shape, y, (rows16, tile8), acts, data, isa);
    }
    let row = |r: usize| data[r * rb..(r + 1) * rb].as_ptr();
    let tile = |r: &[usize; ROWS], t0: usize, o: &mut [[f32; ROWS]; 8]| {
        // SAFETY: the caller checked VNNI and built `qs8` and `bsums8`;
        // whole rows; the driver passes t0 a multiple of 8 with t0 + 8 <=
        // t_pad.
        unsafe { tile8(ptrs(r, row), acts, t0, ROWS * rb, o) }
    };
    let single = |r: &[usize; ROWS], t: usize, o: &mut [[f32; ROWS]; 1]| {
        // SAFETY: `isa` is available; whole rows; t < n_tokens.
        unsafe { kquant_rows_one::<K, ROWS>(r, row, acts, t, isa, &mut o[0]) }
    };
    let tiles = gemm::Tiles {
        tile: &tile,
        narrow: None,
        single: &single,
        wide_min: WIDE_MIN,
    };
    gemm::drive(shape, y, tiles)
}

/// [`drive_tokens8_vnni`] with the format's 16-row 8-token tile
/// (`kernels.0`) where the tile's rows are in a row, else its 8-row tile
/// (`kernels.1`) twice (a task's last rows, which repeat).
#[cfg(target_arch = "x86_64")]
fn drive_tokens8_rows16<K: SuperBlock>(
    shape: Shape,
    y: &mut [f32],
    kernels: (kquant::Rows16Tokens8Fn, kquant_tokens8::Tokens8Fn),
    acts: &QuantActs,
    data: &[u8],
    isa: Isa,
) {
    const HALF: usize = kquant_tokens8::ROWS;
    let rb = shape.row_bytes;
    let row = |r: usize| data[r * rb..(r + 1) * rb].as_ptr();
    let tile = |r: &[usize; 16], t0: usize, o: &mut [[f32; 16]; 8]| {
        if in_a_row(r) {
            // SAFETY: VNNI is the ISA (the caller checked); 16 whole rows
            // from r[0], rb apart, 16 * rb below 2^31; the driver passes
            // t0 + 8 <= t_pad; Q8_K activations.
            return unsafe { kernels.0(row(r[0]), rb, acts, t0, o) };
        }
        for half in 0..2 {
            let rows: [usize; HALF] = std::array::from_fn(|i| r[HALF * half + i]);
            let mut part = [[0f32; HALF]; 8];
            // SAFETY: as above, and `qs8`/`bsums8` are built for the
            // 8-row tile; no prefetch past the rows (0).
            unsafe { kernels.1(ptrs(&rows, row), acts, t0, 0, &mut part) };
            for (o, p) in o.iter_mut().zip(&part) {
                o[HALF * half..HALF * (half + 1)].copy_from_slice(p);
            }
        }
    };
    let single = |r: &[usize; 16], t: usize, o: &mut [[f32; 16]; 1]| {
        // SAFETY: `isa` is available; whole rows; t < n_tokens.
        unsafe { kquant_rows_one::<K, 16>(r, row, acts, t, isa, &mut o[0]) }
    };
    let tiles = gemm::Tiles {
        tile: &tile,
        narrow: None,
        single: &single,
        wide_min: WIDE_MIN,
    };
    gemm::drive(shape, y, tiles)
}

fn run_kquant<K: SuperBlock>(
    w: &WeightMatrix<'_>,
    x: &[f32],
    n_tokens: usize,
    y: &mut [f32],
    isa: Isa,
    acts: &mut QuantActs,
) {
    acts.quantize(x, n_tokens, w.cols, ActFormat::Q8K, isa);
    // Only the AVX2 8-token tile reads the interleaved activations, past
    // `KQ_DIRECT_MAX` tokens; below it (and always on AVX-512) rounds run
    // row by row, the regrouped kernels on the regrouped activations.
    let direct_max = if isa.has_avx512() {
        usize::MAX
    } else {
        KQ_DIRECT_MAX
    };
    if isa.has_avx2() && n_tokens > direct_max {
        acts.interleave8();
    } else if isa.has_avx512() {
        acts.regroup_subblocks();
        if n_tokens >= 8 {
            // the 512-bit row kernels sum whole tiles' mins with tokens in lanes
            acts.interleave_bsums8();
        }
    }
    #[cfg(target_arch = "x86_64")]
    let prompt_from = if K::ROWS16_TOKENS8_TO_31 && rows16_fit(isa, row_bytes(w)) {
        TOKENS32_MIN
    } else {
        TOKENS16_MIN
    };
    #[cfg(target_arch = "x86_64")]
    let prompt = K::PROMPT_TILES_VNNI.filter(|_| isa == Isa::Avx512Vnni && n_tokens >= prompt_from);
    // below the prompt tiles, the format's 8-token tile from 8 tokens
    #[cfg(target_arch = "x86_64")]
    let tokens8 =
        K::TOKENS8_VNNI.filter(|_| isa == Isa::Avx512Vnni && n_tokens >= 8 && prompt.is_none());
    #[cfg(target_arch = "x86_64")]
    if prompt.is_some() {
        // what the format's tiles read: the values by 16 tokens, and the
        // sums of 32 (the signed IQ4_XS's bias) or the paired sums of 16
        // (the mins and Q6_K's offset)
        acts.interleave16();
        if K::SIGNED {
            acts.group_sums();
        } else {
            acts.interleave_bsums16();
        }
    } else if tokens8.is_some() {
        // what the format's 8-token tile reads: the values by 8 tokens
        acts.interleave8();
    } else if isa.has_avx2() && n_tokens >= kquant256::MIN_TOKENS {
        acts.regroup_subblocks();
    }
    let acts = &*acts;
    let (rb, data) = (row_bytes(w), w.data);
    let shape = Shape {
        rows: w.rows,
        n_tokens: acts.n_tokens,
        row_bytes: rb,
    };
    let row = |r: usize| &data[r * rb..(r + 1) * rb];
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        let n = acts.n_tokens;
        // Row by row, each row read and decoded once for the tile's tokens.
        let rows_direct = |r: &[usize; LMR], t0: usize, o: &mut [[f32; LMR]]| {
            for (i, &r) in r.iter().enumerate() {
                let width = (n - t0).min(8);
                // SAFETY: `isa` is available; the row holds `acts.blocks`
                // whole super-blocks; the tile's tokens are below t_pad.
                let dots = unsafe { kquant_dots::<K>(row(r).as_ptr(), acts, t0, width, isa) };
                for (o, &v) in o.iter_mut().zip(&dots) {
                    o[i] = v;
                }
            }
        };
        if let Some(tile) = tokens8 {
            return drive_tokens8_vnni::<K>(shape, y, tile, acts, data, isa);
        }
        let tile = |r: &[usize; LMR], t0: usize, o: &mut [[f32; LMR]; 8]| {
            if n <= direct_max {
                return rows_direct(r, t0, o);
            }
            // No prefetch: past `KQ_DIRECT_MAX` tokens the tiles re-read
            // their weights from L2.
            // SAFETY: `isa` is available; each row holds `acts.blocks` whole
            // super-blocks; the driver passes t0 multiple of 8 with
            // t0 + 8 <= t_pad, and the interleaved activations are built
            // whenever wide tiles run.
            unsafe { kquant::tokens8_avx2::<K, LMR>(ptrs(r, |r| row(r).as_ptr()), acts, t0, 0, o) }
        };
        // The last tile of 2-4 tokens.
        let narrow =
            |r: &[usize; LMR], t0: usize, o: &mut [[f32; LMR]; gemm::NARROW]| rows_direct(r, t0, o);
        if let Some(kernels) = prompt {
            return drive_kquant_prompt::<K>(shape, y, kernels, &narrow, acts, data, isa);
        }
        let rows16_tokens = K::ROWS16_TOKENS_VNNI.filter(|_| rows16_fit(isa, rb));
        if let (Some(kernel), Some(one)) = (rows16_tokens, K::ROWS16_VNNI) {
            return drive_rows16::<K>(shape, y, (kernel, one), acts, data, isa);
        }
        // 16 rows a call: the format's 512-bit kernel when they are 16 in a
        // row, else one row at a time (a linear stream through the weights),
        // once each (a task's last rows repeat)
        let rows16 = K::ROWS16_VNNI.filter(|_| rows16_fit(isa, rb));
        let single = |r: &[usize; 16], t: usize, o: &mut [[f32; 16]; 1]| {
            if let (Some(kernel), true) = (rows16, in_a_row(r)) {
                // SAFETY: VNNI is the ISA (so AVX-512 F/BW/VL too); 16 whole
                // rows from r[0], rb apart; t < n_tokens; Q8_K activations.
                return unsafe { kernel(row(r[0]).as_ptr(), rb, acts, t, o) };
            }
            let row = |r: usize| row(r).as_ptr();
            // SAFETY: as above, with t < n_tokens.
            unsafe { kquant_rows_one::<K, 16>(r, row, acts, t, isa, &mut o[0]) }
        };
        return gemm::drive(
            shape,
            y,
            gemm::Tiles {
                tile: &tile,
                narrow: Some(&narrow),
                single: &single,
                wide_min: WIDE_MIN,
            },
        );
    }
    let _ = isa;
    let dot = |r: &[usize; 1], t: usize, o: &mut [[f32; 1]; 1]| {
        o[0][0] = kquant::dot_scalar::<K>(row(r[0]), acts, t);
    };
    gemm::drive_dots(shape, y, &dot)
}
