//! The one-token (decode) kernel of the 4-bit block formats (Q4_0, Q4_1,
//! IQ4_NL, MXFP4) and Q8_0 on AVX-512 VNNI: 16 rows at once, one per lane
//! of the FMA chains.
//!
//! The AVX2 kernel ([`super::legacy::rows4_avx2`]) sums a block in the 8
//! lanes of a 256-bit register per row, then reduces 4 rows with `hadd`.
//! Here one 512-bit register holds the same block of 4 rows, a 128-bit lane
//! each (values 0..16 in one register, 16..32 in another), so two
//! `vpdpbusd` leave 4 partial sums per row, and 9 instructions reduce 16
//! rows' partial sums into the 16 lanes of one register. The nibbles'
//! levels are looked up with `pshufb` as unsigned bytes (signed ones, and
//! Q8_0's bytes, biased by 128, whose `128 x sum(x)` the sums start from
//! minus). The nibble formats read each row's block with one 32-byte
//! load that holds its head too (the next block follows, so all but the
//! last block), and the 16 heads come together with 3 unpacks; the last
//! block and Q8_0 gather them (a gather cost 5-8% of IQ4_NL's and MXFP4's
//! decode on a Zen 4). So the integer sums are those
//! of every other path, and so are the results: per row, blocks in order,
//! `acc = fma(isum, d * dx, acc)`, then `fma(c, s, acc)`.

use std::arch::x86_64::*;

use super::legacy::{BlockC, BlockScale, LegacyBlock, Values, has_c};
use crate::matmul::acts::QuantActs;

/// Rows per call.
pub(super) const ROWS: usize = 16;

/// Lane `l` of [`reduce`]'s sums holds row `LANE_ROW[l]`.
pub(super) const LANE_ROW: [usize; ROWS] = {
    let mut order = [0; ROWS];
    let mut l = 0;
    while l < ROWS {
        order[l] = 4 * (l % 4) + l / 4;
        l += 1;
    }
    order
};

/// The 128-bit values at `p[0..4]` as the four lanes of one register.
///
/// # Safety
/// Each `p[k]` points to 16 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) unsafe fn lanes4(p: [*const u8; 4]) -> __m512i {
    // SAFETY: 16 bytes at each p[k] (caller).
    let [a, b, c, e] = unsafe {
        [
            _mm_loadu_si128(p[0] as *const __m128i),
            _mm_loadu_si128(p[1] as *const __m128i),
            _mm_loadu_si128(p[2] as *const __m128i),
            _mm_loadu_si128(p[3] as *const __m128i),
        ]
    };
    let ab = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(a), b);
    let ce = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(c), e);
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(ab), ce)
}

/// The 4 rows at `p[0..4]`'s 32 bytes from each, as bytes `0..16` (`.0`)
/// and `16..32` (`.1`) of each row in its 128-bit lane.
///
/// # Safety
/// Each `p[k]` points to 32 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) unsafe fn halves4(p: [*const u8; 4]) -> (__m512i, __m512i) {
    // SAFETY: 32 bytes at each p[k] (caller).
    let [a, b, c, e] = unsafe {
        [
            _mm256_loadu_si256(p[0] as *const __m256i),
            _mm256_loadu_si256(p[1] as *const __m256i),
            _mm256_loadu_si256(p[2] as *const __m256i),
            _mm256_loadu_si256(p[3] as *const __m256i),
        ]
    };
    let ab = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b);
    let ce = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(c), e);
    // 128-bit lanes [a.lo, a.hi, b.lo, b.hi] and [c.lo, ...]
    (
        _mm512_shuffle_i64x2::<0x88>(ab, ce),
        _mm512_shuffle_i64x2::<0xdd>(ab, ce),
    )
}

/// The sums of one block of 4 rows (128-bit lane `k`: row `k`'s four
/// partial sums), the block's values at `p[k]` stored as `values` (the
/// nibble levels looked up in `table`, bytes made unsigned by their bias),
/// against the block's activations `x[0]` (values 0..16, in every 128-bit
/// lane) and `x[1]` (16..32), starting from `init`.
///
/// # Safety
/// Each `p[k]` points to the block's values (16 bytes, or 32 for bytes).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn quad_sums(
    values: &Values,
    p: [*const u8; 4],
    table: __m512i,
    x: [__m512i; 2],
    init: __m512i,
) -> __m512i {
    // SAFETY: as the caller guarantees.
    let (lo, hi) = unsafe { quad_levels(values, p, table) };
    _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(init, lo, x[0]), hi, x[1])
}

/// The unsigned levels of one block of 4 rows at `p[k]`, stored as
/// `values`: values 0..16 (`.0`) and 16..32 (`.1`) of row `k` in 128-bit
/// lane `k`.
///
/// # Safety
/// Each `p[k]` points to the block's values (16 bytes, or 32 for bytes).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) unsafe fn quad_levels(
    values: &Values,
    p: [*const u8; 4],
    table: __m512i,
) -> (__m512i, __m512i) {
    match values {
        // SAFETY: 16 bytes at each p[k] (caller).
        Values::Nibbles { levels: l, .. } => {
            let lookup = *l != super::legacy::UNSIGNED;
            levels(unsafe { lanes4(p) }, table, lookup)
        }
        Values::Bytes { .. } => {
            // SAFETY: 32 bytes at each p[k] (caller).
            let (lo, hi) = unsafe {
                let q = [p[0].add(16), p[1].add(16), p[2].add(16), p[3].add(16)];
                (lanes4(p), lanes4(q))
            };
            // signed bytes plus 128, as unsigned ones
            let bias = _mm512_set1_epi8(-128);
            (_mm512_xor_si512(lo, bias), _mm512_xor_si512(hi, bias))
        }
    }
}

/// The levels of the nibbles `q` of 4 rows, looked up in `table` when
/// `lookup` (levels other than the nibbles themselves, as Q4_0's and
/// Q4_1's are): the low nibbles (values 0..16) and the high ones (16..32).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
fn levels(q: __m512i, table: __m512i, lookup: bool) -> (__m512i, __m512i) {
    let m4 = _mm512_set1_epi8(0x0f);
    let (lo, hi) = (
        _mm512_and_si512(q, m4),
        _mm512_and_si512(_mm512_srli_epi16::<4>(q), m4),
    );
    if !lookup {
        return (lo, hi);
    }
    (
        _mm512_shuffle_epi8(table, lo),
        _mm512_shuffle_epi8(table, hi),
    )
}

/// Whether a format's nibbles stand for levels other than themselves
/// ([`levels`] looks those up).
pub(super) const fn needs_lookup(values: &Option<Values>) -> bool {
    match values {
        Some(Values::Nibbles { levels, .. }) => {
            let mut k = 0;
            while k < 16 {
                if levels[k] != super::legacy::UNSIGNED[k] {
                    return true;
                }
                k += 1;
            }
            false
        }
        _ => false,
    }
}

/// [`quad_levels`] for nibble formats from one 32-byte load per row at the
/// block's start `p[k]`: the levels, and the rows' first 16 bytes (the head
/// in dword 0 of each lane). The nibbles start `AT` bytes in; `table` is
/// [`levels`]' table and whether to look up.
///
/// # Safety
/// Each `p[k]` points to 32 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) unsafe fn quad_levels_headed<const AT: i32>(
    p: [*const u8; 4],
    table: (__m512i, bool),
) -> (__m512i, __m512i, __m512i) {
    // SAFETY: 32 bytes at each p[k] (caller).
    let (first, second) = unsafe { halves4(p) };
    // per lane: bytes AT..AT + 16 of the row
    let (lo, hi) = levels(_mm512_alignr_epi8::<AT>(second, first), table.0, table.1);
    (lo, hi, first)
}

/// Dword 0 of each lane of four quads' registers, row `LANE_ROW[l]` in lane
/// `l`, as [`reduce`] orders its sums (the blocks' heads, as [`heads16`]
/// gathers them).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) fn first_dwords(h: &[__m512i; 4]) -> __m512i {
    let p = _mm512_unpacklo_epi32(h[0], h[1]);
    let q = _mm512_unpacklo_epi32(h[2], h[3]);
    _mm512_unpacklo_epi64(p, q)
}

/// The 16 rows' sums of [`quad_sums`]' four registers, row `LANE_ROW[l]` in
/// lane `l` (exact: int32 adds).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) fn reduce(s: [__m512i; 4]) -> __m512i {
    // per 128-bit lane: [a0 + a2, b0 + b2, a1 + a3, b1 + b3]
    let p = _mm512_add_epi32(
        _mm512_unpacklo_epi32(s[0], s[1]),
        _mm512_unpackhi_epi32(s[0], s[1]),
    );
    let q = _mm512_add_epi32(
        _mm512_unpacklo_epi32(s[2], s[3]),
        _mm512_unpackhi_epi32(s[2], s[3]),
    );
    // per 128-bit lane k: the whole sums of lane k of s[0], s[1], s[2], s[3]
    _mm512_add_epi32(_mm512_unpacklo_epi64(p, q), _mm512_unpackhi_epi64(p, q))
}

/// The 4 rows from `q`, `stride` bytes apart (addresses only).
#[inline]
pub(super) fn quad_rows(q: *const u8, stride: usize) -> [*const u8; 4] {
    [
        q,
        q.wrapping_add(stride),
        q.wrapping_add(2 * stride),
        q.wrapping_add(3 * stride),
    ]
}

/// Stores the 16 lanes of `acc` as the rows they hold ([`LANE_ROW`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) fn store_rows(acc: __m512, out: &mut [f32; ROWS]) {
    let mut lanes = [0f32; ROWS];
    // SAFETY: `lanes` holds 16 floats.
    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), acc) };
    for (l, v) in lanes.into_iter().enumerate() {
        out[LANE_ROW[l]] = v;
    }
}

/// The offset of row `LANE_ROW[l]` from the first, in lane `l`, for
/// [`heads16`]: rows `stride` bytes apart, `16 * stride` below 2^31.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) fn head_offsets(stride: usize) -> __m512i {
    let mut heads = [0i32; ROWS];
    for (h, r) in heads.iter_mut().zip(LANE_ROW) {
        *h = (r * stride) as i32;
    }
    // SAFETY: `heads` is 64 bytes.
    unsafe { _mm512_loadu_si512(heads.as_ptr() as *const __m512i) }
}

/// The first 4 bytes of 16 blocks, lane `l` from `base + idx[l]`.
///
/// # Safety
/// Each `base + idx[l]` points to 4 readable bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) unsafe fn heads16(base: *const u8, idx: __m512i) -> __m512i {
    // SAFETY: 4 bytes at each address (caller).
    unsafe { _mm512_i32gather_epi32::<1>(idx, base as *const i32) }
}

/// The f16 values in the 16-bit halves `HALF` of `v`'s lanes, as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) fn f16_lanes<const SHIFT: u32>(v: __m512i) -> __m512 {
    _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32::<SHIFT>(v)))
}

/// `2^(e - 128)` for the E8M0 bytes in the low bytes of `v`'s lanes
/// ([`ats_core::quant::mxfp4::e8m0_to_f32_half`]'s bits).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
fn e8m0_lanes(v: __m512i) -> __m512 {
    let e = _mm512_and_si512(v, _mm512_set1_epi32(0xff));
    let normal = _mm512_slli_epi32::<23>(_mm512_sub_epi32(e, _mm512_set1_epi32(1)));
    // bytes 0 and 1 are the f32 subnormals 2^-128 and 2^-127
    let subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x0020_0000), e);
    let small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
    _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, subnormal))
}

/// Scales `d` and constants `c` of 16 blocks from their first 4 bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) fn scales16<B: LegacyBlock>(heads: __m512i) -> (__m512, __m512) {
    let d = match B::SCALE {
        BlockScale::F16 => f16_lanes::<0>(heads),
        BlockScale::E8m0Half => e8m0_lanes(heads),
    };
    let c = match B::C {
        BlockC::None => _mm512_setzero_ps(),
        BlockC::Offset(k) => _mm512_mul_ps(_mm512_set1_ps(k), d),
        // the min follows the f16 scale
        BlockC::Min => f16_lanes::<16>(heads),
    };
    (d, c)
}

/// The nibbles' levels as the unsigned bytes `vpdpbusd` multiplies, and the
/// bias that made them so: 128 for signed levels and for Q8_0's bytes (which
/// are biased as loaded), else 0.
pub(super) const fn unsigned_levels(values: &Option<Values>) -> ([u8; 16], u8) {
    match values {
        Some(Values::Nibbles { levels, .. }) => {
            let mut bias = 0u8;
            let mut k = 0;
            while k < 16 {
                if levels[k] < 0 {
                    bias = 128;
                }
                k += 1;
            }
            let mut out = [0u8; 16];
            let mut k = 0;
            while k < 16 {
                out[k] = (levels[k] as u8).wrapping_add(bias);
                k += 1;
            }
            (out, bias)
        }
        Some(Values::Bytes { .. }) => ([0; 16], 128),
        None => ([0; 16], 0),
    }
}

/// How far ahead of its reads the kernel asks for lines into L1 and into
/// L2. The 16 rows are one stretch of memory read 16 blocks a step, which
/// the hardware prefetchers do not follow: without these hints SmolLM2
/// IQ4_NL decodes at 71-75 tokens/s, with the L1 one alone at 123-140, with
/// both at 171 (Zen 4, one thread; 4-16 KiB and 16-64 KiB measured).
const L1_AHEAD: usize = 8192;
/// See [`L1_AHEAD`]; the super-block kernels ask for L2 only.
pub(super) const L2_AHEAD: usize = 32768;

/// Asks for the `bytes` at `at + L2_AHEAD` into L2 and, with `L1`, at `at +
/// L1_AHEAD` into L1 (hints only: the addresses may lie past the matrix,
/// never read). The super-block kernels read 2-2.3 KiB a step: asking for
/// all of it in L1 at once measured 23 tokens/s on a 1B IQ4_XS, against 30
/// with L2 alone.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) fn prefetch_ahead<const L1: bool>(at: *const u8, bytes: usize) {
    for line in 0..bytes.div_ceil(64) {
        let a = at.wrapping_add(64 * line);
        if L1 {
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(L1_AHEAD) as *const i8);
        }
        _mm_prefetch::<_MM_HINT_T1>(a.wrapping_add(L2_AHEAD) as *const i8);
    }
}

/// Super-blocks ahead that the 16-row 8-token tiles ask for each row's
/// weights ([`prefetch_rows`]).
pub(super) const ROWS_AHEAD: usize = 4;

/// Asks, into L2, for the `bytes`-byte block `b` of each of the 16 rows
/// from `first` (`stride` apart), or past the rows' ends (`b >= nb`) for
/// the next tile's rows (the 16 below): hints only, the addresses may lie
/// past the matrix (never read). The 8-token tiles spend long enough on a
/// block of 16 rows that asking for each row's block a few ahead beats a
/// sweep of the tile's bytes [`L2_AHEAD`] on: a sweep reaches the blocks
/// in the wrong order once a tile is larger than that (16 rows of 8192
/// Q6_K values are 105 KiB), and early otherwise.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) fn prefetch_rows(first: *const u8, stride: usize, bytes: usize, b: usize, nb: usize) {
    let at = match b.checked_sub(nb) {
        None => first.wrapping_add(b * bytes),
        Some(k) => first.wrapping_add(ROWS * stride + k * bytes),
    };
    for r in 0..ROWS {
        let row = at.wrapping_add(r * stride);
        for line in (0..bytes).step_by(64) {
            _mm_prefetch::<_MM_HINT_T1>(row.wrapping_add(line) as *const i8);
        }
    }
}

/// How the 16-row kernels read a format with a value layout
/// ([`LegacyBlock::VALUES`]).
pub(super) struct Layout {
    /// The format's values.
    pub values: &'static Values,
    /// The levels' table in every 128-bit lane, and whether to look up
    /// ([`levels`]).
    pub table: (__m512i, bool),
    /// The bias that made the levels unsigned bytes.
    pub bias: u8,
    /// Whether one 32-byte load per row holds a block's head and nibbles
    /// where the next block follows (nibble formats, blocks of 16 bytes and
    /// more), so that no gather is needed.
    pub headed: bool,
}

impl Layout {
    /// The layout of `B`, which must have one.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
    pub(super) fn of<B: LegacyBlock>() -> Layout {
        let values = const { B::VALUES.as_ref() }
            .expect("the dispatch runs only formats with a value layout here");
        let (levels, bias) = const { unsigned_levels(&B::VALUES) };
        // SAFETY: `levels` is 16 bytes.
        let table =
            _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(levels.as_ptr() as *const __m128i) });
        Layout {
            values,
            table: (table, const { needs_lookup(&B::VALUES) }),
            bias,
            headed: 2 * B::BYTES >= 32 && matches!(values, Values::Nibbles { at: 1 | 2 | 4, .. }),
        }
    }

    /// Where the values start in a block.
    #[inline]
    pub(super) fn at(&self) -> usize {
        match self.values {
            Values::Nibbles { at, .. } | Values::Bytes { at } => *at,
        }
    }
}

/// The block at `q + k * stride` of a quad of rows (`k < 4`): its levels
/// (values 0..16 and 16..32 of row `k` in 128-bit lane `k`) and, when
/// `headed` (the layout's, with the next block following), the rows'
/// first 16 bytes (the head in dword 0 of each lane; else zeros).
///
/// # Safety
/// Each row holds the block at `q + k * stride`, and the next one too when
/// `headed`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw")]
pub(super) unsafe fn quad_block(
    q: *const u8,
    stride: usize,
    layout: &Layout,
    headed: bool,
) -> (__m512i, __m512i, __m512i) {
    let p = quad_rows(q, stride);
    // SAFETY: headed: blocks b and b + 1 (at least 32 bytes) at each p[k],
    // else the block's values at p[k] + at (caller).
    unsafe {
        match (headed, layout.at()) {
            (true, 1) => quad_levels_headed::<1>(p, layout.table),
            (true, 2) => quad_levels_headed::<2>(p, layout.table),
            (true, _) => quad_levels_headed::<4>(p, layout.table),
            (false, at) => {
                let p = quad_rows(q.wrapping_add(at), stride);
                let (lo, hi) = quad_levels(layout.values, p, layout.table.0);
                (lo, hi, _mm512_setzero_si512())
            }
        }
    }
}

/// Dot products of 16 evenly spaced weight rows of a format with a value
/// layout ([`LegacyBlock::VALUES`]) with token `t`, into `out[0]`: the
/// one-token kernel.
///
/// # Safety
/// The CPU must support AVX2/FMA/F16C and AVX-512 F/BW/VL/VNNI; `B::VALUES`
/// is set; row `r` (`0..16`) at `first + r * stride` holds `acts.blocks`
/// whole blocks, with `16 * stride` below 2^31; `t < acts.n_tokens`;
/// `acts.xsums` is built where the layout has a bias.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn rows16_vnni<B: LegacyBlock>(
    first: *const u8,
    stride: usize,
    acts: &QuantActs,
    t: usize,
    out: &mut [[f32; ROWS]; 1],
) {
    let layout = Layout::of::<B>();
    let (nb, tp) = (acts.blocks, acts.t_pad);
    debug_assert!(t < acts.n_tokens && (layout.bias == 0 || acts.xsums.len() == tp * nb));
    // each row's 4 partial sums start from a quarter of the bias's share
    let quarter = -i32::from(layout.bias / 4);
    let idx = head_offsets(stride);
    let xq = acts.qs[t * nb..(t + 1) * nb].as_ptr();
    let mut acc = _mm512_setzero_ps();
    for b in 0..nb {
        let off = b * B::BYTES;
        // SAFETY: block b of the token (`Q8Block` is 32-byte aligned).
        let x = unsafe {
            let x = xq.add(b) as *const __m128i;
            [
                _mm512_broadcast_i32x4(_mm_load_si128(x)),
                _mm512_broadcast_i32x4(_mm_load_si128(x.add(1))),
            ]
        };
        let init = if quarter == 0 {
            _mm512_setzero_si512() // no bias, no sums (not built)
        } else {
            _mm512_set1_epi32(quarter * acts.xsums[b * tp + t])
        };
        let z = _mm512_setzero_si512();
        let (mut quads, mut heads) = ([z; 4], [z; 4]);
        let headed = layout.headed && b + 1 < nb;
        // A loop, not a closure: closures are not inlined into kernels here.
        for g in 0..4 {
            let q = first.wrapping_add(4 * g * stride + off);
            // SAFETY: block b (and b + 1 when headed) of each row (caller).
            let (lo, hi, head) = unsafe { quad_block(q, stride, &layout, headed) };
            quads[g] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(init, lo, x[0]), hi, x[1]);
            heads[g] = head;
        }
        let isum = reduce(quads);
        prefetch_ahead::<true>(first.wrapping_add(ROWS * off), ROWS * B::BYTES);
        let heads = if headed {
            first_dwords(&heads)
        } else {
            // SAFETY: the heads of block b of each row (caller).
            unsafe { heads16(first.wrapping_add(off), idx) }
        };
        let (d, c) = scales16::<B>(heads);
        let dx = _mm512_set1_ps(acts.d[b * tp + t]);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, dx), acc);
        if has_c::<B>() {
            acc = _mm512_fmadd_ps(c, _mm512_set1_ps(acts.s[b * tp + t]), acc);
        }
    }
    store_rows(acc, &mut out[0]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matmul::Isa;
    use ats_core::quant::mxfp4::e8m0_to_f32_half;

    #[test]
    fn e8m0_lanes_match_the_scalar_conversion_for_every_byte() {
        if !Isa::Avx512Vnni.is_available() {
            return;
        }
        for chunk in (0..=255u8).collect::<Vec<_>>().chunks(16) {
            let words: Vec<i32> = chunk.iter().map(|&e| 0x5a5a_5a00 | i32::from(e)).collect();
            let mut got = [0f32; 16];
            // SAFETY: the CPU has AVX-512 (checked above); 16 ints and floats.
            unsafe {
                let v = _mm512_loadu_si512(words.as_ptr() as *const __m512i);
                _mm512_storeu_ps(got.as_mut_ptr(), e8m0_lanes(v));
            }
            for (&e, g) in chunk.iter().zip(got) {
                assert_eq!(g.to_bits(), e8m0_to_f32_half(e).to_bits(), "byte {e}");
            }
        }
    }
}
