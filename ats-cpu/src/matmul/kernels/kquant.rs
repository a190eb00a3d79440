//! Kernels shared by the K-quant formats (Q2_K .. Q6_K) and IQ4_XS against
//! Q8_K activations.
//!
//! Each format's super-block of 256 values is first unpacked into one
//! canonical form, [`Canon`]: values `q` (unsigned 0..=63, or for
//! [`SuperBlock::SIGNED`] formats signed bytes -127..=127), and per group of
//! 16 values a scale `sc` and a min `mn` (both small integers), with two
//! float factors, so that `w = d * sc * q - dmin * mn`. IQ4_XS has no mins
//! (`mn = 0`, `dmin = 0`, so its min term adds exactly zero). Symmetric formats
//! (Q3_K, Q6_K) store their offset as a min: `d * sc * (q - 32)` is
//! `d * sc * q - d * (32 sc)`. Against Q8_K activations `x = dx * qx` with
//! group sums `bsum`:
//! `dot = dx * (d * sum_g sc_g * sum(q qx) - dmin * sum_g mn_g * bsum_g)`,
//! two exact integer sums per super-block. Every kernel then evaluates, per
//! (row, token) and super-blocks in order, `acc = fma(isum, d * dx, acc)` and
//! `acc = fma(msum, -dmin * dx, acc)` in f32, so results are bit-identical
//! across instruction sets, tile shapes, batch sizes and threads.

use crate::matmul::acts::QuantActs;
use ats_core::quant::q4_k::unpack_scale_min_k4;

/// Elements per super-block.
pub(super) const QK_K: usize = 256;

/// A super-block unpacked into the canonical form (see the module docs).
#[repr(C, align(32))]
#[derive(Clone, Debug)]
pub(super) struct Canon {
    /// Values: unsigned 0..=63, or the bytes of signed values for
    /// [`SuperBlock::SIGNED`] formats.
    pub q: [u8; QK_K],
    /// Scales per 32 values, as the integer kernels want them: `scx[v]` is
    /// `sc` of group `2v` in lanes 0..8 and of group `2v + 1` in lanes 8..16.
    pub scx: [[i16; 16]; 8],
    /// Mins per group of 16 values.
    pub mn: [i16; 16],
    /// Factor of the scales.
    pub d: f32,
    /// Factor of the mins.
    pub dmin: f32,
}

impl Default for Canon {
    fn default() -> Self {
        Canon {
            q: [0; QK_K],
            scx: [[0; 16]; 8],
            mn: [0; 16],
            d: 0.0,
            dmin: 0.0,
        }
    }
}

impl Canon {
    /// Scale of group `g` (0..16).
    pub(super) fn sc(&self, g: usize) -> i16 {
        self.scx[g / 2][(g % 2) * 8]
    }

    /// Sets the scale of group `g`.
    pub(super) fn set_sc(&mut self, g: usize, sc: i16) {
        self.scx[g / 2][(g % 2) * 8..(g % 2) * 8 + 8].fill(sc);
    }

    /// The 256 weights as floats, computed like ggml's `dequantize_row_*`
    /// (`(d * sc) * q - dmin * mn`) so tests can compare them bit for bit.
    #[cfg(test)]
    pub(super) fn dequantize(&self, sym_offset: Option<i32>, signed: bool) -> Vec<f32> {
        (0..QK_K)
            .map(|k| {
                let g = k / 16;
                let sc = self.sc(g) as f32;
                let q = if signed {
                    self.q[k] as i8 as i32
                } else {
                    self.q[k] as i32
                };
                match sym_offset {
                    Some(off) => self.d * sc * (q - off) as f32,
                    None => self.d * sc * q as f32 - self.dmin * self.mn[g] as f32,
                }
            })
            .collect()
    }
}

/// A 16-row kernel for 8 tokens: rows `first + r * stride` (`r < 16`)
/// against tokens `t0..t0 + 8`, token `t0 + n` into `out[n]`.
///
/// Safety: as the kernel's own contract states.
#[cfg(target_arch = "x86_64")]
pub(super) type Rows16Tokens8Fn = unsafe fn(
    first: *const u8,
    stride: usize,
    acts: &QuantActs,
    t0: usize,
    out: &mut [[f32; 16]; 8],
);

/// A 16-row kernel for a few tokens: rows `first + r * stride` (`r < 16`)
/// against tokens `t0..t0 + width`, token `t0 + n` into `out[n]`.
///
/// Safety: as the kernel's own contract states.
#[cfg(target_arch = "x86_64")]
pub(super) type Rows16TokensFn = unsafe fn(
    first: *const u8,
    stride: usize,
    acts: &QuantActs,
    t0: usize,
    width: usize,
    out: &mut [[f32; 16]],
);

/// A 16-row one-token kernel: rows `first + r * stride` (`r < 16`) against
/// token `t`, into `out[0]`.
///
/// Safety: as the kernel's own contract states.
#[cfg(target_arch = "x86_64")]
pub(super) type Rows16Fn = unsafe fn(
    first: *const u8,
    stride: usize,
    acts: &QuantActs,
    t: usize,
    out: &mut [[f32; 16]; 1],
);

/// A K-quant super-block format.
pub(super) trait SuperBlock {
    /// Bytes per super-block.
    const BYTES: usize;
    /// How many `maddubs` results (over 4 values each) of one group may be
    /// summed in int16: `2 * 4 * max_q * 127 < 2^15` gives 4 up to 5-bit
    /// values, 2 for 6-bit (Q6_K).
    const I16_SUMS: usize;
    /// Whether the canonical values are signed bytes (IQ4_XS) rather than
    /// unsigned: the kernels then move the signs onto the activations.
    const SIGNED: bool = false;
    /// The format's regrouped row kernels, if any ([`dots_avx512`],
    /// [`dots_regrouped_avx2`]).
    const WIDE: Wide = Wide::None;
    /// The format's 16-row one-token kernel on AVX-512 VNNI, if any
    /// ([`super::q4_k512`], [`super::iq4_xs512`], [`super::q6_k_rows8`]).
    #[cfg(target_arch = "x86_64")]
    const ROWS16_VNNI: Option<Rows16Fn> = None;
    /// Its 16-row kernel for a few tokens at once (up to 8), if any
    /// ([`super::q4_k512::rows16_tokens_vnni`]).
    #[cfg(target_arch = "x86_64")]
    const ROWS16_TOKENS_VNNI: Option<Rows16TokensFn> = None;
    /// Its 16-row kernel for whole tiles of 8 tokens, if any
    /// ([`super::q4_k_rows16`]).
    #[cfg(target_arch = "x86_64")]
    const ROWS16_TOKENS8_VNNI: Option<Rows16Tokens8Fn> = None;
    /// Whether that tile, run twice, beats the 16-token prompt tile at 16
    /// tokens, so that it runs up to 31 tokens (1024x2048 x 16 tokens in
    /// `isa_pair` on a Xeon: Q4_K 264 us against 280-293, Q6_K 406-410
    /// against 341-347).
    const ROWS16_TOKENS8_TO_31: bool = false;
    /// Its 8-token tile on AVX-512 VNNI for rounds of 8 tokens or more
    /// below the prompt tiles, if any ([`super::kquant_tokens8`]).
    #[cfg(target_arch = "x86_64")]
    const TOKENS8_VNNI: Option<super::kquant_tokens8::Tokens8Fn> = None;
    /// Its prompt tiles of 16 and 32 tokens on AVX-512 VNNI, if any
    /// ([`super::prompt_tiles`]).
    #[cfg(target_arch = "x86_64")]
    const PROMPT_TILES_VNNI: Option<super::prompt_tiles::Tiles> = None;

    /// Unpacks one super-block into `c`.
    fn unpack(block: &[u8], c: &mut Canon);

    /// [`Self::unpack`] with AVX2 for the values (the scales are few).
    ///
    /// # Safety
    /// The CPU must support AVX2/FMA/F16C and `p` must point to a whole block.
    #[cfg(target_arch = "x86_64")]
    unsafe fn unpack_avx2(p: *const u8, c: &mut Canon);

    /// One row's dot products with tokens `t0..t0 + N` (AVX2, `N <= 8`), for
    /// rounds of 1 to 8 tokens: the row's super-blocks are read and unpacked once
    /// for all `N` tokens, through the canonical form unless the format has
    /// a direct kernel. Every path gives the same integers and the same f32
    /// sequence, so the results are bit-identical to the tiles'.
    ///
    /// # Safety
    /// The CPU must support AVX2/FMA/F16C; `row` must point to
    /// `acts.blocks` whole super-blocks; `t0 + N <= acts.t_pad`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dots_avx2<const N: usize>(
        row: *const u8,
        acts: &QuantActs,
        t0: usize,
        prefetch: usize,
    ) -> [f32; N]
    where
        Self: Sized,
    {
        let mut o = [[0f32; 1]; N];
        // SAFETY: as the caller guarantees.
        unsafe { avx2::tile::<Self, 1, N>([row], acts, t0, prefetch, &mut o) };
        o.map(|o| o[0])
    }
}

/// [`SuperBlock::dots_avx2`] on 512-bit registers for the formats that have
/// such a kernel ([`super::kquant512`]); the others run their AVX2 kernel.
/// With `vnni`, Q4_K's kernel uses VNNI. The results are the same bits
/// either way.
///
/// # Safety
/// As [`SuperBlock::dots_avx2`], and the CPU must support AVX-512 F/BW (and
/// VNNI with `vnni`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) unsafe fn dots_avx512<K: SuperBlock, const N: usize>(
    row: *const u8,
    acts: &QuantActs,
    t0: usize,
    prefetch: usize,
    vnni: bool,
) -> [f32; N] {
    use super::kquant512::{k4_dots, k4_dots_vnni, q6k_dots};
    // SAFETY: as the caller guarantees.
    unsafe {
        match K::WIDE {
            Wide::Q4K if vnni => k4_dots_vnni::<N>(row, acts, t0, prefetch),
            Wide::Q4K => k4_dots::<N, false>(row, acts, t0, prefetch),
            Wide::Q5K => k4_dots::<N, true>(row, acts, t0, prefetch),
            Wide::Q6K => q6k_dots::<N>(row, acts, t0, prefetch),
            Wide::None => K::dots_avx2::<N>(row, acts, t0, prefetch),
        }
    }
}

/// [`SuperBlock::dots_avx2`] against the regrouped activations for rounds
/// of [`super::kquant256::MIN_TOKENS`] to 8 tokens, for the formats that
/// have such a kernel ([`super::kquant256`]); the same bits either way.
///
/// # Safety
/// As [`SuperBlock::dots_avx2`], and `acts.qsp` must be built.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dots_regrouped_avx2<K: SuperBlock, const N: usize>(
    row: *const u8,
    acts: &QuantActs,
    t0: usize,
    prefetch: usize,
) -> [f32; N] {
    use super::kquant256::k4_dots;
    // SAFETY: as the caller guarantees.
    unsafe {
        match K::WIDE {
            Wide::Q4K => k4_dots::<N, false>(row, acts, t0, prefetch),
            Wide::Q5K => k4_dots::<N, true>(row, acts, t0, prefetch),
            Wide::Q6K | Wide::None => K::dots_avx2::<N>(row, acts, t0, prefetch),
        }
    }
}

/// Which regrouped row kernels ([`dots_avx512`], [`dots_regrouped_avx2`]) a
/// K-quant format has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Wide {
    /// None: the plain AVX2 kernel runs.
    None,
    /// `k4_dots` of [`super::kquant512`] and [`super::kquant256`].
    Q4K,
    /// `k4_dots` with the fifth bits.
    Q5K,
    /// `q6k_dots` (512-bit only).
    Q6K,
}

/// Portable dot product of one weight row with token `t`.
pub(super) fn dot_scalar<K: SuperBlock>(row: &[u8], acts: &QuantActs, t: usize) -> f32 {
    let (tp, nb) = (acts.t_pad, acts.blocks);
    let mut c = Canon::default();
    let mut acc = 0f32;
    for (b, blk) in row.chunks_exact(K::BYTES).enumerate() {
        K::unpack(blk, &mut c);
        let xq = &acts.qs[(t * nb + b) * 8..(t * nb + b + 1) * 8];
        let bsums = &acts.bsums[t * nb + b];
        let (mut isum, mut msum) = (0i32, 0i32);
        for g in 0..16 {
            let x = &xq[g / 2].0[(g % 2) * 16..(g % 2) * 16 + 16];
            let q = &c.q[g * 16..g * 16 + 16];
            let dot: i32 = q
                .iter()
                .zip(x)
                .map(|(&q, &x)| value::<K>(q) * x as i32)
                .sum();
            isum += c.sc(g) as i32 * dot;
            msum += c.mn[g] as i32 * bsums[g] as i32;
        }
        let dx = acts.d[b * tp + t];
        acc = (isum as f32).mul_add(c.d * dx, acc);
        acc = (msum as f32).mul_add(-c.dmin * dx, acc);
    }
    acc
}

/// A canonical value as an integer.
#[inline]
fn value<K: SuperBlock>(q: u8) -> i32 {
    if K::SIGNED { q as i8 as i32 } else { q as i32 }
}

/// Fills the canonical scales and mins of a Q4_K / Q5_K super-block (eight
/// sub-blocks of 32, each two groups of 16).
pub(super) fn set_k4_scales(block: &[u8], c: &mut Canon) {
    let (sc, mn) = unpack_scale_min_k4(block[4..16].try_into().expect("12 scale bytes"));
    for v in 0..8 {
        c.scx[v] = [sc[v] as i16; 16];
        c.mn[2 * v] = mn[v] as i16;
        c.mn[2 * v + 1] = mn[v] as i16;
    }
    c.d = f16_at(block, 0);
    c.dmin = f16_at(block, 2);
}

/// The eight 6-bit scales and eight mins of a Q4_K / Q5_K block from its
/// three packed 32-bit words (bytes 4..16), four to a word: `[scales 0..4,
/// scales 4..8, mins 0..4, mins 4..8]`.
#[cfg(target_arch = "x86_64")]
#[inline]
pub(super) fn k4_scale_words(a0: u32, a1: u32, a2: u32) -> [u32; 4] {
    let (m6, m4, m2) = (0x3f3f_3f3fu32, 0x0f0f_0f0fu32, 0x0303_0303u32);
    [
        a0 & m6,
        (a2 & m4) | (((a0 >> 6) & m2) << 4),
        a1 & m6,
        ((a2 >> 4) & m4) | (((a1 >> 6) & m2) << 4),
    ]
}

/// The min sums of a Q4_K / Q5_K super-block `b` for tokens `t0..t0 + N`,
/// from its two words of 8 mins (one per sub-block of two groups).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn k4_min_sums_avx2<const N: usize>(
    mn_lo: u32,
    mn_hi: u32,
    acts: &QuantActs,
    b: usize,
    t0: usize,
) -> [std::arch::x86_64::__m256i; N] {
    use std::arch::x86_64::*;
    let dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    let mn = _mm_set_epi32(0, 0, mn_hi as i32, mn_lo as i32);
    min_sums_avx2::<N>(_mm256_cvtepu8_epi16(_mm_shuffle_epi8(mn, dup)), acts, b, t0)
}

/// [`set_k4_scales`] with AVX2: the 6-bit fields decoded on three 32-bit
/// words at once, then widened.
///
/// # Safety
/// The CPU must support AVX2/FMA/F16C; `block` is a whole Q4_K / Q5_K block.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn set_k4_scales_avx2(block: &[u8], c: &mut Canon) {
    use std::arch::x86_64::*;
    let w = |i: usize| {
        u32::from_le_bytes([
            block[4 + 4 * i],
            block[5 + 4 * i],
            block[6 + 4 * i],
            block[7 + 4 * i],
        ])
    };
    let [sc_lo, sc_hi, mn_lo, mn_hi] = k4_scale_words(w(0), w(1), w(2));
    // Bytes: 8 scales then 8 mins, one per 32-value sub-block.
    let v = _mm_set_epi32(mn_hi as i32, mn_lo as i32, sc_hi as i32, sc_lo as i32);
    // Each sub-block covers two groups of 16: duplicate every byte.
    let dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    let sc = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(v, dup));
    let mn = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_srli_si128(v, 8), dup));
    set_scales_avx2(c, sc, mn);
    c.d = f16_at(block, 0);
    c.dmin = f16_at(block, 2);
}

/// The little-endian f16 at byte `at` of `b`, as f32.
#[inline]
pub(super) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16_bits_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// Exact f16 -> f32 in a few integer operations that inline into every
/// kernel. `half`'s conversion calls a feature-detected function per value,
/// which cost a Q4_K decode about half its time (two scales per block).
#[inline]
pub(super) fn f16_bits_to_f32(h: u16) -> f32 {
    const SHIFTED_EXP: u32 = 0x7c00 << 13;
    let h = u32::from(h);
    let mut o = (h & 0x7fff) << 13;
    let exp = o & SHIFTED_EXP;
    o += (127 - 15) << 23;
    let f = if exp == SHIFTED_EXP {
        f32::from_bits(o + ((128 - 16) << 23)) // infinity, NaN
    } else if exp == 0 {
        // zero and subnormals: renormalise through the float unit (exact)
        f32::from_bits(o + (1 << 23)) - f32::from_bits(113 << 23)
    } else {
        f32::from_bits(o)
    };
    f32::from_bits(f.to_bits() | ((h & 0x8000) << 16))
}

#[cfg(target_arch = "x86_64")]
pub(super) use avx2::{
    TokenAccs as TokenAccsAvx2, min_sums as min_sums_avx2, prefetch_block as prefetch_block_avx2,
    set_scales as set_scales_avx2, tokens8 as tokens8_avx2,
};

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{Canon, SuperBlock};
    use crate::matmul::acts::QuantActs;
    use crate::matmul::kernels::simd;

    /// Sum of the eight int32 lanes of `v` (exact).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::matmul::kernels) fn hsum_i32(v: __m256i) -> i32 {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01));
        _mm_cvtsi128_si32(s)
    }

    /// The f32 accumulators of one row's dot products with `N <= 8` tokens:
    /// each super-block adds its integer sums with one FMA per token (and
    /// one more for the mins), the f32 sequence of every K-quant kernel. One
    /// token keeps a scalar; more keep four tokens to a vector and reduce
    /// their `N` integer sums together.
    pub(in crate::matmul::kernels) struct TokenAccs<const N: usize> {
        one: f32,
        /// token `n`'s accumulator in lane `n`
        lanes: __m256,
    }

    impl<const N: usize> TokenAccs<N> {
        /// All zero.
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(in crate::matmul::kernels) fn new() -> Self {
            debug_assert!((1..=8).contains(&N));
            TokenAccs {
                one: 0.0,
                lanes: _mm256_setzero_ps(),
            }
        }

        /// Adds super-block `b`'s sums for tokens `t0..t0 + N`: token `n`'s
        /// accumulator gets `isum[n] * (d * dx)`, then `msum[n] * (-dmin *
        /// dx)` if the format has mins (`dx` the token's scale, each sum
        /// that of its eight int32 lanes).
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        #[allow(clippy::too_many_arguments)]
        pub(in crate::matmul::kernels) fn add_block(
            &mut self,
            isum: &[__m256i; N],
            mins: Option<(&[__m256i; N], f32)>,
            d: f32,
            acts: &QuantActs,
            b: usize,
            t0: usize,
        ) {
            let dx = &acts.d[b * acts.t_pad + t0..][..N];
            if N == 1 {
                self.one = (hsum_i32(isum[0]) as f32).mul_add(d * dx[0], self.one);
                if let Some((msum, dmin)) = mins {
                    self.one = (hsum_i32(msum[0]) as f32).mul_add(-dmin * dx[0], self.one);
                }
                return;
            }
            let at = |n: usize| if n < N { dx[n] } else { 0.0 };
            let dx = _mm256_setr_ps(at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7));
            self.add_lanes(Self::token_sums(isum), d, dx);
            if let Some((msum, dmin)) = mins {
                self.add_lanes(Self::token_sums(msum), -dmin, dx);
            }
        }

        /// Token `n`'s sum of the eight int32 lanes of `sums[n]`, in lane `n`.
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        fn token_sums(sums: &[__m256i; N]) -> __m256i {
            let at = |n: usize| {
                if n < N {
                    sums[n]
                } else {
                    _mm256_setzero_si256()
                }
            };
            let quad = |g: usize| {
                // per 128-bit half: [sum of 4 lanes of token 4g, of 4g + 1, ...]
                let h = _mm256_hadd_epi32(
                    _mm256_hadd_epi32(at(4 * g), at(4 * g + 1)),
                    _mm256_hadd_epi32(at(4 * g + 2), at(4 * g + 3)),
                );
                _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1))
            };
            if N > 4 {
                _mm256_set_m128i(quad(1), quad(0))
            } else {
                _mm256_zextsi128_si256(quad(0))
            }
        }

        /// Adds to token `n`'s accumulator the integer in lane `n` of `s`
        /// times `f * dx[n]` (the lanes past `N` are not read back).
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(in crate::matmul::kernels) fn add_lanes(&mut self, s: __m256i, f: f32, dx: __m256) {
            let fx = _mm256_mul_ps(_mm256_set1_ps(f), dx);
            self.lanes = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), fx, self.lanes);
        }

        /// The accumulated dot products.
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(in crate::matmul::kernels) fn finish(&self) -> [f32; N] {
            if N == 1 {
                return [self.one; N];
            }
            let mut all = [0f32; 8];
            // SAFETY: 8 floats.
            unsafe { _mm256_storeu_ps(all.as_mut_ptr(), self.lanes) };
            std::array::from_fn(|n| all[n])
        }
    }

    /// Per token of `t0..t0 + N`, super-block `b`'s 16 group mins `mn` times
    /// the token's 16 group sums, as 8 int32 lanes.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::matmul::kernels) fn min_sums<const N: usize>(
        mn: __m256i,
        acts: &QuantActs,
        b: usize,
        t0: usize,
    ) -> [__m256i; N] {
        let sums = &acts.bsums[..];
        std::array::from_fn(|n| {
            let at = &sums[(t0 + n) * acts.blocks + b];
            // SAFETY: `at` is 16 i16 (32 bytes).
            let bs = unsafe { _mm256_loadu_si256(at.as_ptr() as *const __m256i) };
            _mm256_madd_epi16(mn, bs)
        })
    }

    /// Asks for the cache lines of the `bytes`-byte block at `p`, `ahead`
    /// bytes further on (0: none).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::matmul::kernels) fn prefetch_block(p: *const u8, bytes: usize, ahead: usize) {
        if ahead == 0 {
            return;
        }
        for l in (0..bytes).step_by(64) {
            // A hint only: the address may lie past the matrix (never read).
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(ahead + l) as *const i8);
        }
    }

    /// Pairwise products of canonical values `w` and activations `x`, summed
    /// in pairs into int16: `maddubs` takes unsigned weights, so signed ones
    /// give their signs to the activations first.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::matmul::kernels) fn maddubs<K: SuperBlock>(w: __m256i, x: __m256i) -> __m256i {
        if K::SIGNED {
            _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
        } else {
            _mm256_maddubs_epi16(w, x)
        }
    }

    /// Stores 16 group scales and mins (i16, group order) into `c`, expanding
    /// the scales to the per-32 vectors the kernels multiply with.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::matmul::kernels) fn set_scales(c: &mut Canon, sc: __m256i, mn: __m256i) {
        // Even groups to the low 128-bit lane, odd groups to the high one...
        let eo = _mm256_shuffle_epi8(
            sc,
            _mm256_setr_epi8(
                0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9, 12, 13, 2,
                3, 6, 7, 10, 11, 14, 15,
            ),
        );
        let eo = _mm256_permute4x64_epi64(eo, 0b11_01_10_00);
        // ...so that one in-lane shuffle puts group 2v in lanes 0..8 and 2v + 1 in 8..16.
        let out = c.scx.as_mut_ptr() as *mut __m256i;
        for v in 0..8 {
            let idx = _mm256_set1_epi16((2 * v as i16) | ((2 * v as i16 + 1) << 8));
            // SAFETY: v < 8 slots of 32 bytes in `c.scx` (32-byte aligned).
            unsafe { _mm256_store_si256(out.add(v), _mm256_shuffle_epi8(eo, idx)) };
        }
        // SAFETY: `c.mn` is 16 i16 (32 bytes).
        unsafe { _mm256_storeu_si256(c.mn.as_mut_ptr() as *mut __m256i, mn) };
    }

    /// Dot products of `MR` weight rows with tokens `t0..t0 + NR`; every pair
    /// runs the same sequence whatever the tile shape. `prefetch` as in the
    /// legacy tile.
    ///
    /// # Safety
    /// The CPU must support AVX2/FMA/F16C; each `rows[i]` must point to
    /// `acts.blocks` whole super-blocks; `t0 + NR <= acts.t_pad`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::matmul::kernels) unsafe fn tile<
        K: SuperBlock,
        const MR: usize,
        const NR: usize,
    >(
        rows: [*const u8; MR],
        acts: &QuantActs,
        t0: usize,
        prefetch: usize,
        out: &mut [[f32; MR]; NR],
    ) {
        let (nb, tp) = (acts.blocks, acts.t_pad);
        debug_assert!(t0 + NR <= tp && acts.qs.len() == tp * nb * 8);
        let mut acc = [[0f32; NR]; MR];
        let mut canon: [Canon; MR] = std::array::from_fn(|_| Canon::default());
        let xq = acts.qs.as_ptr();
        for b in 0..nb {
            for i in 0..MR {
                // SAFETY: super-block b of row i is inside the row (caller).
                let p = unsafe { rows[i].add(b * K::BYTES) };
                if prefetch != 0 {
                    // Hints only: the addresses may lie past the matrix (never read).
                    for l in (0..K::BYTES).step_by(64) {
                        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(prefetch + l) as *const i8);
                    }
                }
                // SAFETY: as above.
                unsafe { K::unpack_avx2(p, &mut canon[i]) };
            }
            for (c, acc) in canon.iter().zip(acc.iter_mut()) {
                let cq = c.q.as_ptr() as *const __m256i;
                for (j, acc) in acc.iter_mut().enumerate() {
                    let t = t0 + j;
                    // SAFETY: token t < t_pad: its 8 value blocks of super-block b are in `qs`.
                    let x = unsafe { xq.add((t * nb + b) * 8) } as *const __m256i;
                    let mut isum = _mm256_setzero_si256();
                    for v in 0..8 {
                        // SAFETY: `Canon` and `Q8Block` are 32-byte aligned; v < 8.
                        let (w, xv, s) = unsafe {
                            (
                                _mm256_load_si256(cq.add(v)),
                                _mm256_load_si256(x.add(v)),
                                _mm256_load_si256(c.scx[v].as_ptr() as *const __m256i),
                            )
                        };
                        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(maddubs::<K>(w, xv), s));
                    }
                    // SAFETY: the bsums of (t, b) exist (t < t_pad); 32 bytes each.
                    let msum = unsafe {
                        _mm256_madd_epi16(
                            _mm256_loadu_si256(c.mn.as_ptr() as *const __m256i),
                            _mm256_loadu_si256(
                                acts.bsums.as_ptr().add(t * nb + b) as *const __m256i
                            ),
                        )
                    };
                    let dx = acts.d[b * tp + t];
                    *acc = (hsum_i32(isum) as f32).mul_add(c.d * dx, *acc);
                    *acc = (hsum_i32(msum) as f32).mul_add(-c.dmin * dx, *acc);
                }
            }
        }
        for (i, acc) in acc.iter().enumerate() {
            for (j, &a) in acc.iter().enumerate() {
                out[j][i] = a;
            }
        }
    }

    /// Dot products of `MR` weight rows with tokens `t0..t0 + 8` (lanes =
    /// tokens), from the token-interleaved activations and block sums: each
    /// 4 canonical values of a row are broadcast against the same 4 values
    /// of 8 tokens; group scales apply through `madd`. It prefetches
    /// `prefetch` bytes ahead in each row (0: none): a round of a few decode
    /// tokens reads its weights once, from DRAM.
    ///
    /// # Safety
    /// The CPU must support AVX2/FMA/F16C; each `rows[i]` must point to
    /// `acts.blocks` whole super-blocks; `t0` is a multiple of 8 with
    /// `t0 + 8 <= acts.t_pad`, and `acts.qs8` / `acts.bsums8` are built.
    // `g`, `u` and `i` index several arrays and pointer offsets at once.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::matmul::kernels) unsafe fn tokens8<K: SuperBlock, const MR: usize>(
        rows: [*const u8; MR],
        acts: &QuantActs,
        t0: usize,
        prefetch: usize,
        out: &mut [[f32; MR]; 8],
    ) {
        let (nb, tp) = (acts.blocks, acts.t_pad);
        debug_assert!(t0.is_multiple_of(8) && t0 + 8 <= tp);
        debug_assert!(acts.qs8.len() == tp * nb * 8 && acts.bsums8.len() == tp * nb);
        let x8 = acts.qs8[t0 * nb * 8..(t0 + 8) * nb * 8].as_ptr() as *const __m256i;
        let s8 = acts.bsums8[t0 * nb..(t0 + 8) * nb].as_ptr() as *const __m256i;
        let mut acc = [_mm256_setzero_ps(); MR];
        let mut canon: [Canon; MR] = std::array::from_fn(|_| Canon::default());
        for b in 0..nb {
            if prefetch != 0 {
                for r in rows {
                    for line in (0..K::BYTES).step_by(64) {
                        let at = r.wrapping_add(b * K::BYTES + prefetch + line);
                        // A hint only: the address may lie past the matrix (never read).
                        _mm_prefetch::<_MM_HINT_T0>(at as *const i8);
                    }
                }
            }
            for i in 0..MR {
                // SAFETY: super-block b of row i is inside the row (caller).
                unsafe { K::unpack_avx2(rows[i].add(b * K::BYTES), &mut canon[i]) };
            }
            // Broadcasts read the canonical values from memory (load unit);
            // `black_box` keeps LLVM from turning them into shuffles.
            let cn = std::hint::black_box(&canon);
            let q: [&[u32; 64]; MR] = std::array::from_fn(|i| {
                // SAFETY: 256 bytes, 4-aligned (Canon is 32-aligned).
                unsafe { &*(cn[i].q.as_ptr() as *const [u32; 64]) }
            });
            let mut isum = [_mm256_setzero_si256(); MR];
            for g in 0..16 {
                let mut s16 = [_mm256_setzero_si256(); MR];
                for u in 4 * g..4 * g + 4 {
                    // SAFETY: vector u of super-block b of this token group; aligned.
                    let x = unsafe { _mm256_load_si256(x8.add(64 * b + u)) };
                    for i in 0..MR {
                        let p = maddubs::<K>(_mm256_set1_epi32(q[i][u] as i32), x);
                        s16[i] = _mm256_add_epi16(s16[i], p);
                    }
                    if (u + 1) % K::I16_SUMS == 0 {
                        for i in 0..MR {
                            let sc = _mm256_set1_epi16(cn[i].sc(g));
                            isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(s16[i], sc));
                            s16[i] = _mm256_setzero_si256();
                        }
                    }
                }
            }
            let mut msum = [_mm256_setzero_si256(); MR];
            for p in 0..8 {
                // SAFETY: sums 2p, 2p + 1 of the 8 tokens; 32 bytes.
                let s = unsafe { _mm256_loadu_si256(s8.add(8 * b + p)) };
                for i in 0..MR {
                    let pair = (cn[i].mn[2 * p] as u16 as u32)
                        | ((cn[i].mn[2 * p + 1] as u16 as u32) << 16);
                    msum[i] = _mm256_add_epi32(
                        msum[i],
                        _mm256_madd_epi16(s, _mm256_set1_epi32(pair as i32)),
                    );
                }
            }
            // SAFETY: 8 floats of the scales of super-block b.
            let xd = unsafe { _mm256_loadu_ps(acts.d[b * tp + t0..][..8].as_ptr()) };
            for i in 0..MR {
                let sums = (isum[i], msum[i]);
                acc[i] = simd::add_block8(acc[i], sums, (cn[i].d, cn[i].dmin), xd);
            }
        }
        simd::store_tokens8(acc, out);
    }
}

#[cfg(test)]
mod tests {
    use super::f16_bits_to_f32;

    #[test]
    fn f16_conversion_is_exact_for_every_value() {
        for h in 0..=u16::MAX {
            let want = half::f16::from_bits(h).to_f32();
            let got = f16_bits_to_f32(h);
            if want.is_nan() {
                assert!(got.is_nan(), "{h:#06x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{h:#06x}");
            }
        }
    }
}
