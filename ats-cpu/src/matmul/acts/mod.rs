//! Activation quantisation: f32 activations into the 8-bit block formats the
//! integer kernels multiply with, rounded exactly like ggml's reference
//! quantisers (`quantize_row_q8_0_ref`, `_q8_1_ref`, `_q8_K_ref`), so that
//! our products can be compared with llama.cpp's.
//!
//! The values are stored token-major (`qs[t][block]`, what a kernel streams),
//! the per-block scales block-major (`d[block][t]`, so that a tile of tokens
//! loads its scales with one vector load). Token counts are padded to
//! [`TOKEN_PAD`] (or [`TOKEN_PAD16`]) with zero blocks, so tiles never read
//! past the end.

use crate::team;
use half::f16;

use super::isa::Isa;

/// Tokens are padded to a multiple of this (the 8-token tile), or of the
/// prompt tiles' 16 or 32 tokens where they may run ([`token_pad`]).
pub(crate) const TOKEN_PAD: usize = 8;
/// The 16-token prompt tile, and the interleaving by 16 of [`QuantActs::qs16`].
pub(crate) const TOKEN_PAD16: usize = 16;

/// The padding of `n_tokens` tokens: to the widest tile that can run on
/// them (padding every product to 32 would zero four times the blocks per
/// decode step).
fn token_pad(n_tokens: usize) -> usize {
    if n_tokens < TOKEN_PAD16 {
        TOKEN_PAD
    } else if n_tokens < 2 * TOKEN_PAD16 {
        TOKEN_PAD16
    } else {
        2 * TOKEN_PAD16
    }
}
/// Elements per Q8_0 / Q8_1 block.
pub(crate) const QK8: usize = 32;
/// Elements per Q8_K super-block.
pub(crate) const QKK: usize = 256;
/// Quantise tokens in parallel above this many activations (below, the
/// fork costs more than the work).
const PAR_QUANT_MIN: usize = 1 << 15;

/// Most activations whose bits are kept to find a repeat: enough for a
/// decode round's inputs, whose K and V products then reuse Q's
/// quantisation; a prompt's products outweigh their quantising, and copying
/// its activations would cost more than it saves.
const REUSE_MAX: usize = 1 << 16;

/// Which 8-bit format the weights' kernels want.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ActFormat {
    /// 32-blocks, f16 scale; `s = d16 * sum(q)` in f32 (offset term of Q4_0/Q5_0).
    Q8_0,
    /// 32-blocks, f16 scale; `s` rounded to f16 like ggml's `block_q8_1` (Q4_1/Q5_1 mins).
    Q8_1,
    /// 256-blocks, f32 scale, 16 sums of 16 values (K-quants).
    Q8K,
}

impl ActFormat {
    /// Elements per scale block.
    pub(crate) fn block(self) -> usize {
        match self {
            ActFormat::Q8_0 | ActFormat::Q8_1 => QK8,
            ActFormat::Q8K => QKK,
        }
    }
}

/// 32 int8 values, aligned for one AVX2 load.
#[repr(C, align(32))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Q8Block(pub(crate) [i8; 32]);

/// 16 tokens' 4-value groups, one 512-bit load.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Q8x16(pub(crate) [u32; 16]);

/// Quantised activations of one matmul call; the buffers are kept and reused.
#[derive(Debug, Default)]
pub(crate) struct QuantActs {
    /// The format of the current contents.
    pub format: Option<ActFormat>,
    /// Real tokens.
    pub n_tokens: usize,
    /// Tokens with padding (a multiple of [`TOKEN_PAD`], and from 16 and 32
    /// tokens of 16 and 32).
    pub t_pad: usize,
    /// Scale blocks per token (32- or 256-element).
    pub blocks: usize,
    /// 32-value groups per token: `qs[t * qblocks + i]`.
    pub qblocks: usize,
    /// Values, `[t_pad][qblocks]`.
    pub qs: Vec<Q8Block>,
    /// The values interleaved by groups of 8 tokens (see [`QuantActs::interleave8`]),
    /// `[t_pad / 8][qblocks][8]`; empty unless built.
    pub qs8: Vec<Q8Block>,
    /// The values interleaved by groups of 16 tokens (see
    /// [`QuantActs::interleave16`]), `[t_pad / 16][qblocks][8]`; empty unless built.
    pub qs16: Vec<Q8x16>,
    /// The values of groups of 8 tokens with each token's 4-value groups
    /// twice (see [`QuantActs::interleave8_pairs`]), `[t_pad / 8][qblocks][8]`;
    /// empty unless built.
    pub qs8p: Vec<Q8x16>,
    /// Q8_K values regrouped for the 512-bit K-quant kernels (see
    /// [`QuantActs::regroup_subblocks`]), laid out like `qs`; empty unless built.
    pub qsp: Vec<Q8Block>,
    /// Scales, `[blocks][t_pad]`.
    pub d: Vec<f32>,
    /// Block sums times the scale (Q8_0 / Q8_1), `[blocks][t_pad]`.
    pub s: Vec<f32>,
    /// Sums of 16 values (Q8_K), `[t_pad][blocks]`.
    pub bsums: Vec<[i16; 16]>,
    /// The sums interleaved by groups of 8 tokens (Q8_K, see
    /// [`QuantActs::interleave8`]): `[t_pad / 8][blocks][8]`, vector `p` holding
    /// sums `2p, 2p + 1` of the 8 tokens in turn.
    pub bsums8: Vec<[i16; 16]>,
    /// The sums interleaved by groups of 16 tokens (Q8_K, see
    /// [`QuantActs::interleave_bsums16`]): `[t_pad / 16][blocks][8]`, vector
    /// `p` holding sums `2p` (low half) and `2p + 1` (high half) of each of
    /// the 16 tokens in its 32-bit lanes.
    pub bsums16: Vec<Q8x16>,
    /// Tokens `quad_t0..quad_t0 + 4`, each token's 4-value groups twice (see
    /// [`QuantActs::interleave4_pairs`]), `[qblocks][8]`; empty unless built.
    pub qs4: Vec<Q8Block>,
    /// The integer sum of each 32-value group (see
    /// [`QuantActs::group_sums`]), `[qblocks][t_pad]` like `d`, pads zero;
    /// empty unless built.
    pub xsums: Vec<i32>,
    /// The first token of [`QuantActs::qs4`].
    pub quad_t0: usize,
    /// The bits of the activations `qs` holds, when few enough to keep
    /// ([`REUSE_MAX`]); empty otherwise.
    src: Vec<u32>,
    /// `qs` holds zeros from this block on (what [`QuantActs::quantize`]
    /// wrote last ends here; padding beyond it needs no zeroing).
    qs_written: usize,
    /// Token-major staging of `d` and `s`, written in parallel then transposed.
    tok_d: Vec<f32>,
    tok_s: Vec<f32>,
}

impl QuantActs {
    /// Quantises `n_tokens` rows of `cols` activations (`cols` a multiple of
    /// the format's block) with `isa`, which must be available. Activations
    /// bit for bit those held, in the same format, are kept as they are,
    /// with the copies built from them.
    pub(crate) fn quantize(
        &mut self,
        x: &[f32],
        n_tokens: usize,
        cols: usize,
        format: ActFormat,
        isa: Isa,
    ) {
        debug_assert_eq!(cols % format.block(), 0);
        debug_assert_eq!(x.len(), n_tokens * cols);
        if self.holds(x, n_tokens, format) {
            return;
        }
        self.keep_source(x);
        let blocks = cols / format.block();
        let qblocks = cols / QK8;
        let t_pad = n_tokens.div_ceil(token_pad(n_tokens)) * token_pad(n_tokens);
        self.format = Some(format);
        self.n_tokens = n_tokens;
        self.t_pad = t_pad;
        self.blocks = blocks;
        self.qblocks = qblocks;
        // quantise and regroup on the team when the values are many
        let large = self.large();

        // Every real token's blocks are written below, and `qs` is zero
        // from `qs_written` on: only padding that earlier values wrote is
        // zeroed (zeroing all of `qs` first was 40% of this function's
        // samples in a round of 8 decode tokens; zeroing a single token's 7
        // padding tokens every time, 1.6% of a SmolLM2 decode step's).
        let (real, len) = (n_tokens * qblocks, t_pad * qblocks);
        self.qs.resize(len, Q8Block::default());
        self.qs.truncate(len);
        let dirty = real..self.qs_written.min(len);
        if !dirty.is_empty() {
            self.qs[dirty].fill(Q8Block::default());
        }
        self.qs_written = real;
        // the interleaved copies are built on demand, for these values only
        self.qs8.clear();
        self.qs16.clear();
        self.qs8p.clear();
        self.bsums16.clear();
        self.xsums.clear();
        self.bsums8.clear();
        self.qsp.clear();
        self.tok_d.clear();
        self.tok_d.resize(n_tokens * blocks, 0.0);
        self.tok_s.clear();
        self.tok_s.resize(n_tokens * blocks, 0.0);
        self.bsums.clear();
        let nb16 = if format == ActFormat::Q8K { blocks } else { 0 };
        self.bsums.resize(t_pad * nb16, [0; 16]);

        let quant_one = |(((xr, qs), (d, s)), bs): QuantRow<'_>| {
            quantize_row(xr, qs, d, s, bs, format, isa);
        };
        let rows = x
            .chunks_exact(cols.max(1))
            .zip(self.qs.chunks_exact_mut(qblocks.max(1)))
            .zip(
                self.tok_d
                    .chunks_exact_mut(blocks.max(1))
                    .zip(self.tok_s.chunks_exact_mut(blocks.max(1))),
            );
        if large {
            let bs: Vec<&mut [[i16; 16]]> = if nb16 > 0 {
                self.bsums.chunks_exact_mut(nb16).take(n_tokens).collect()
            } else {
                (0..n_tokens).map(|_| Default::default()).collect()
            };
            let mut rows: Vec<_> = rows.zip(bs).collect();
            team::for_each_mut(&mut rows, |(((xr, qs), (d, s)), bs)| {
                quantize_row(xr, qs, d, s, bs, format, isa)
            });
        } else if nb16 > 0 {
            rows.zip(self.bsums.chunks_exact_mut(nb16))
                .for_each(quant_one);
        } else {
            rows.zip(std::iter::repeat_with(|| &mut [][..]))
                .for_each(quant_one);
        }

        // Scales block-major, pads zero.
        self.d.clear();
        self.d.resize(blocks * t_pad, 0.0);
        self.s.clear();
        self.s.resize(blocks * t_pad, 0.0);
        for (dst, src) in [(&mut self.d, &self.tok_d), (&mut self.s, &self.tok_s)] {
            let block = |b: usize, dst: &mut [f32]| {
                for (t, d) in dst.iter_mut().enumerate().take(n_tokens) {
                    *d = src[t * blocks + b];
                }
            };
            by_chunks(large, dst, t_pad.max(1), block);
        }
    }
}

impl QuantActs {
    /// Whether `qs` holds `x` (`n_tokens` rows) in `format` already: a
    /// layer's Q, K and V products (and gate and up) read one input, and a
    /// batch of 8 decode tokens spent 11% of its time quantising.
    fn holds(&self, x: &[f32], n_tokens: usize, format: ActFormat) -> bool {
        self.format == Some(format)
            && self.n_tokens == n_tokens
            && !self.src.is_empty()
            && self.src[..] == *bytemuck::cast_slice::<f32, u32>(x)
    }

    /// Keeps `x`'s bits for [`QuantActs::holds`] when they are few.
    fn keep_source(&mut self, x: &[f32]) {
        self.src.clear();
        if x.len() <= REUSE_MAX {
            self.src.extend_from_slice(bytemuck::cast_slice(x));
        }
    }

    /// Builds [`QuantActs::xsums`], the integer sums the VNNI kernels take
    /// off again after biasing signed weights to unsigned bytes.
    pub(crate) fn group_sums(&mut self) {
        if !self.xsums.is_empty() {
            return; // built for these values
        }
        let (qb, tp, n) = (self.qblocks, self.t_pad, self.n_tokens);
        self.xsums.resize(qb * tp, 0);
        let qs = &self.qs;
        // by blocks: block b's sums of every token, `[t_pad]`
        let block = |b: usize, sums: &mut [i32]| {
            for (t, s) in sums.iter_mut().enumerate().take(n) {
                *s = qs[t * qb + b].0.iter().map(|&v| i32::from(v)).sum();
            }
        };
        by_chunks(self.large(), &mut self.xsums, tp.max(1), block);
    }

    /// Whether the interleaved copies of these activations are built on
    /// the current team: as for quantising, when the values are many.
    fn large(&self) -> bool {
        self.t_pad * self.qblocks * QK8 >= PAR_QUANT_MIN && team::current_threads() > 1
    }

    /// Builds [`QuantActs::qs8`] (and for Q8_K [`QuantActs::bsums8`]): for
    /// each group of 8 tokens and each 32-value block, 8 vectors; vector `v`
    /// holds values `4v..4v + 4` of the 8 tokens in turn, so that a kernel
    /// can multiply 4 weights (broadcast) with 8 tokens at once.
    pub(crate) fn interleave8(&mut self) {
        if !self.qs8.is_empty() {
            return; // built for these values
        }
        let qb = self.qblocks;
        self.qs8.resize(self.qs.len(), Q8Block::default());
        for (g, dst) in self.qs8.chunks_exact_mut(8 * qb.max(1)).enumerate() {
            let src = &self.qs[8 * g * qb..8 * (g + 1) * qb];
            for (b, dst) in dst.chunks_exact_mut(8).enumerate() {
                let t = transpose8(std::array::from_fn(|t| bytemuck::cast(src[t * qb + b].0)));
                for (d, w) in dst.iter_mut().zip(t) {
                    d.0 = bytemuck::cast(w);
                }
            }
        }
        self.interleave_bsums8();
    }

    /// Builds [`QuantActs::qs16`]: [`QuantActs::interleave8`]'s layout for
    /// groups of 16 tokens (vector `v` of a block: values `4v..4v + 4` of
    /// the 16 tokens in turn). Needs [`TOKEN_PAD16`] padding.
    pub(crate) fn interleave16(&mut self) {
        if !self.qs16.is_empty() {
            return; // built for these values
        }
        let qb = self.qblocks;
        debug_assert!(self.t_pad.is_multiple_of(TOKEN_PAD16));
        self.qs16
            .resize(self.t_pad / TOKEN_PAD16 * qb * 8, Q8x16::default());
        let large = self.large();
        lanes_by_token::<16>(&self.qs, qb, large, &mut self.qs16, |lane| lane);
    }

    /// Builds [`QuantActs::qs8p`]: for each group of 8 tokens and each
    /// 32-value block, 8 vectors; vector `v` holds values `4v..4v + 4` of
    /// tokens `0, 0, 1, 1, .., 7, 7` of the group, so that one 64-bit
    /// broadcast of two weight rows' 4 values meets all 8 tokens for both
    /// rows in one 512-bit register.
    pub(crate) fn interleave8_pairs(&mut self) {
        if !self.qs8p.is_empty() {
            return; // built for these values
        }
        let qb = self.qblocks;
        debug_assert!(self.t_pad.is_multiple_of(TOKEN_PAD));
        self.qs8p
            .resize(self.t_pad / TOKEN_PAD * qb * 8, Q8x16::default());
        let large = self.large();
        lanes_by_token::<8>(&self.qs, qb, large, &mut self.qs8p, |lane| lane / 2);
    }

    /// Builds [`QuantActs::bsums16`] (Q8_K; nothing otherwise): the sums of
    /// 16 values in pairs, for 16 tokens at once, so that one `vpdpwssd`
    /// weighs two of them per token. Needs [`TOKEN_PAD16`] padding.
    pub(crate) fn interleave_bsums16(&mut self) {
        if !self.bsums16.is_empty() {
            return; // built for these values
        }
        let nb = self.blocks;
        if self.format != Some(ActFormat::Q8K) {
            return;
        }
        debug_assert!(self.t_pad.is_multiple_of(TOKEN_PAD16));
        self.bsums16
            .resize(self.t_pad / TOKEN_PAD16 * nb * 8, Q8x16::default());
        let bsums = &self.bsums;
        let group = |g: usize, dst: &mut [Q8x16]| {
            let src = &bsums[16 * g * nb..16 * (g + 1) * nb];
            for (b, dst) in dst.chunks_exact_mut(8).enumerate() {
                for (p, d) in dst.iter_mut().enumerate() {
                    d.0 = std::array::from_fn(|t| {
                        let [lo, hi] = [src[t * nb + b][2 * p], src[t * nb + b][2 * p + 1]];
                        u32::from(lo as u16) | u32::from(hi as u16) << 16
                    });
                }
            }
        };
        by_chunks(self.large(), &mut self.bsums16, 8 * nb.max(1), group);
    }

    /// Builds [`QuantActs::qsp`] (Q8_K; nothing otherwise): the 256 values of
    /// each block of each token as four 64-byte registers, register `j`
    /// holding values `8j..8j + 8` of each of the 8 sub-blocks in turn, so
    /// that every 16-bit lane of a product stays in one sub-block.
    pub(crate) fn regroup_subblocks(&mut self) {
        if !self.qsp.is_empty() {
            return; // built for these values
        }
        if self.format != Some(ActFormat::Q8K) {
            return;
        }
        self.qsp.resize(self.qs.len(), Q8Block::default());
        for (src, dst) in self.qs.chunks_exact(8).zip(self.qsp.chunks_exact_mut(8)) {
            for j in 0..4 {
                for (s, sub) in src.iter().enumerate() {
                    let at = 64 * j + 8 * s;
                    dst[at / 32].0[at % 32..at % 32 + 8].copy_from_slice(&sub.0[8 * j..8 * j + 8]);
                }
            }
        }
    }

    /// The first of the 8 regrouped value blocks of token `t`'s 256-value
    /// block `b` ([`QuantActs::qsp`], which must be built).
    #[inline]
    pub(crate) fn regrouped(&self, t: usize, b: usize) -> *const Q8Block {
        debug_assert!(self.qsp.len() == self.qs.len() && b < self.blocks);
        self.qsp[(t * self.blocks + b) * 8..].as_ptr()
    }

    /// Builds [`QuantActs::bsums8`] alone (Q8_K; nothing otherwise).
    pub(crate) fn interleave_bsums8(&mut self) {
        if !self.bsums8.is_empty() {
            return; // built for these values
        }
        let nb = self.blocks;
        if self.format == Some(ActFormat::Q8K) {
            self.bsums8.resize(self.bsums.len(), [0; 16]);
            for (g, dst) in self.bsums8.chunks_exact_mut(8 * nb.max(1)).enumerate() {
                let src = &self.bsums[8 * g * nb..8 * (g + 1) * nb];
                for (b, dst) in dst.chunks_exact_mut(8).enumerate() {
                    let t = transpose8(std::array::from_fn(|t| bytemuck::cast(src[t * nb + b])));
                    for (d, w) in dst.iter_mut().zip(t) {
                        *d = bytemuck::cast(w);
                    }
                }
            }
        }
    }
}

impl QuantActs {
    /// Builds [`QuantActs::qs4`] for tokens `t0..t0 + 4` (`t0` a multiple of
    /// 4): vector `v` of block `b` holds values `4v..4v + 4` of tokens
    /// `t0, t0, t0+1, t0+1, .., t0+3, t0+3`, so that one 64-bit broadcast of
    /// two weight rows' 4 values multiplies both rows with all 4 tokens.
    pub(crate) fn interleave4_pairs(&mut self, t0: usize) {
        let qb = self.qblocks;
        debug_assert!(t0.is_multiple_of(4) && t0 + 4 <= self.t_pad);
        self.quad_t0 = t0;
        self.qs4.clear();
        self.qs4.resize(8 * qb, Q8Block::default());
        for b in 0..qb {
            for v in 0..8 {
                let dst = &mut self.qs4[8 * b + v].0;
                for lane in 0..8 {
                    let q = &self.qs[(t0 + lane / 2) * qb + b].0[4 * v..4 * v + 4];
                    dst[4 * lane..4 * lane + 4].copy_from_slice(q);
                }
            }
        }
    }
}

/// Regroups `qs` (`qb` blocks a token) by groups of `G` tokens into `dst`
/// (`[groups][qb][8]`): vector `v` of a block holds values `4v..4v + 4` of
/// token `token(lane)` of the group in each 32-bit lane.
fn lanes_by_token<const G: usize>(
    qs: &[Q8Block],
    qb: usize,
    large: bool,
    dst: &mut [Q8x16],
    token: impl Fn(usize) -> usize + Sync,
) {
    let group = |g: usize, dst: &mut [Q8x16]| {
        let src = &qs[G * g * qb..G * (g + 1) * qb];
        for (b, dst) in dst.chunks_exact_mut(8).enumerate() {
            let words: [[u32; 8]; G] = std::array::from_fn(|t| bytemuck::cast(src[t * qb + b].0));
            for (v, d) in dst.iter_mut().enumerate() {
                d.0 = std::array::from_fn(|lane| words[token(lane)][v]);
            }
        }
    };
    by_chunks(large, dst, 8 * qb.max(1), group);
}

/// `f(i, chunk i)` for `data` cut into chunks of `chunk` items: on the
/// current team when `large`, here otherwise.
fn by_chunks<T: Send>(
    large: bool,
    data: &mut [T],
    chunk: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    if large {
        team::for_each_chunk_mut(data, chunk, f);
    } else {
        data.chunks_mut(chunk)
            .enumerate()
            .for_each(|(i, c)| f(i, c));
    }
}

/// `out[v][t] = m[t][v]`: 8 tokens' 8 words (4 bytes of values or 2 sums
/// each) to the tokens-in-lanes order of the 8-token kernels. Whole arrays,
/// so no index is checked (the copy loop it replaced, checking every 4
/// bytes, was 2% of a batched SmolLM2 round).
fn transpose8(m: [[u32; 8]; 8]) -> [[u32; 8]; 8] {
    std::array::from_fn(|v| std::array::from_fn(|t| m[t][v]))
}

/// One token's input row and output buffers.
type QuantRow<'a> = (
    (
        (&'a [f32], &'a mut [Q8Block]),
        (&'a mut [f32], &'a mut [f32]),
    ),
    &'a mut [[i16; 16]],
);

/// Quantises one token's row with the best code for `isa`.
fn quantize_row(
    x: &[f32],
    qs: &mut [Q8Block],
    d: &mut [f32],
    s: &mut [f32],
    bsums: &mut [[i16; 16]],
    format: ActFormat,
    isa: Isa,
) {
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: the caller only passes an available `isa`, so the CPU runs
        // AVX2/FMA/F16C, and AVX-512 F where `has_avx512`; the slices have
        // the lengths the format implies (checked by the debug asserts
        // inside).
        unsafe {
            match format {
                ActFormat::Q8K => avx2::q8k_row(x, qs, d, bsums),
                _ if isa.has_avx512() => avx512::q8_row(x, qs, d, s, format),
                _ => avx2::q8_row(x, qs, d, s, format),
            }
        }
        return;
    }
    let _ = isa;
    match format {
        ActFormat::Q8K => q8k_row_scalar(x, qs, d, bsums),
        _ => q8_row_scalar(x, qs, d, s, format),
    }
}

/// ggml's `s` for a block with integer sum `sum`, scale `d` (f32, before
/// rounding) and `d16` (the stored f16 scale).
fn block_sum(sum: i32, d: f32, d16: f32, format: ActFormat) -> f32 {
    match format {
        ActFormat::Q8_1 => f16::from_f32(sum as f32 * d).to_f32(),
        _ => sum as f32 * d16,
    }
}

/// Q8_0 / Q8_1 quantisation of one row (ggml reference rounding:
/// `d = amax / 127`, `q = roundf(x / d)` half away from zero, `d` stored f16).
pub(crate) fn q8_row_scalar(
    x: &[f32],
    qs: &mut [Q8Block],
    d: &mut [f32],
    s: &mut [f32],
    format: ActFormat,
) {
    for (((xb, qb), db), sb) in x.chunks_exact(QK8).zip(qs).zip(d).zip(s) {
        let amax = xb
            .iter()
            .fold(0f32, |m, v| if m > v.abs() { m } else { v.abs() });
        let dd = amax / 127.0;
        let id = if dd != 0.0 { 1.0 / dd } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in qb.0.iter_mut().zip(xb) {
            *q = (v * id).round() as i8;
            sum += *q as i32;
        }
        let d16 = f16::from_f32(dd).to_f32();
        *db = d16;
        *sb = block_sum(sum, dd, d16, format);
    }
}

/// Q8_K quantisation of one row (ggml reference: scale from the value of
/// largest magnitude, `q = nearest_int(-127 / max * x)` half to even).
pub(crate) fn q8k_row_scalar(
    x: &[f32],
    qs: &mut [Q8Block],
    d: &mut [f32],
    bsums: &mut [[i16; 16]],
) {
    for (((xb, qb), db), bs) in x
        .chunks_exact(QKK)
        .zip(qs.chunks_exact_mut(8))
        .zip(d)
        .zip(bsums)
    {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in xb {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            *db = 0.0;
            qb.fill(Q8Block::default());
            *bs = [0; 16];
            continue;
        }
        let iscale = -127.0 / max;
        for (g, q) in qb.iter_mut().flat_map(|b| b.0.iter_mut()).enumerate() {
            *q = ((iscale * xb[g]).round_ties_even() as i32).min(127) as i8;
        }
        for (g, sum) in bs.iter_mut().enumerate() {
            let vals = &qb[g / 2].0[(g % 2) * 16..(g % 2) * 16 + 16];
            *sum = vals.iter().map(|&q| q as i16).sum();
        }
        *db = 1.0 / iscale;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2;

#[cfg(target_arch = "x86_64")]
mod avx512;
