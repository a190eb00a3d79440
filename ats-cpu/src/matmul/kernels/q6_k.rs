//! Q6_K weights: super-blocks of 256 six-bit values (nibbles plus 2-bit
//! planes) in 16 groups of 16 with int8 scales and an f16 factor `d`,
//! `w = d * sc * (q - 32)` (210 bytes: nibbles 0..128, high bits 128..192,
//! scales 192..208, d 208).

use super::kquant::{Canon, SuperBlock, Wide, f16_at};
#[cfg(target_arch = "x86_64")]
use super::kquant::{TokenAccsAvx2, min_sums_avx2, prefetch_block_avx2, set_scales_avx2};
#[cfg(target_arch = "x86_64")]
use crate::matmul::acts::QuantActs;

/// The Q6_K super-block format.
pub(super) struct Q6K;

/// Canonical scales (offset 32 as a min) and factors of a Q6_K super-block.
fn scales(b: &[u8], c: &mut Canon) {
    for g in 0..16 {
        let sc = b[192 + g] as i8 as i16;
        c.set_sc(g, sc);
        c.mn[g] = 32 * sc;
    }
    c.d = f16_at(b, 208);
    c.dmin = c.d;
}

/// The 128 six-bit values of half `n` (0 or 1) of the Q6_K block at `p`, as
/// four runs of 32 bytes: run `r` takes the low (r < 2) or high nibbles of
/// nibble bytes `64n + 32 (r % 2)..`, and bits `2r..2r + 2` of high bytes
/// `128 + 32n..` as bits 4..6.
///
/// # Safety
/// The CPU must support AVX2; `p` must point to a whole 210-byte block.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn half_runs(p: *const u8, n: usize) -> [std::arch::x86_64::__m256i; 4] {
    use std::arch::x86_64::*;
    let (m, three) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(3));
    // SAFETY: nibble bytes 64n..64n + 64 and high bytes 128 + 32n .. 160 + 32n
    // are inside the block (caller, n < 2).
    let (ql0, ql1, qh) = unsafe {
        (
            _mm256_loadu_si256(p.add(64 * n) as *const __m256i),
            _mm256_loadu_si256(p.add(64 * n + 32) as *const __m256i),
            _mm256_loadu_si256(p.add(128 + 32 * n) as *const __m256i),
        )
    };
    std::array::from_fn(|r| {
        let ql = if r % 2 == 0 { ql0 } else { ql1 };
        let lo = if r < 2 {
            _mm256_and_si256(ql, m)
        } else {
            _mm256_and_si256(_mm256_srli_epi16(ql, 4), m)
        };
        let hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * r as i32)), three);
        _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4))
    })
}

/// The 256 six-bit values of the Q6_K block at `p` ([`half_runs`]) into
/// the 8 32-byte slots at `out`.
///
/// # Safety
/// The CPU must support AVX2; `p` points to a whole block; `out` is 8
/// aligned 32-byte slots.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn store_values(p: *const u8, out: *mut std::arch::x86_64::__m256i) {
    use std::arch::x86_64::*;
    for n in 0..2 {
        // SAFETY: a whole block at p (caller).
        let runs = unsafe { half_runs(p, n) };
        for (r, v) in runs.into_iter().enumerate() {
            // SAFETY: 4n + r < 8 aligned 32-byte slots at `out` (caller).
            unsafe { _mm256_store_si256(out.add(4 * n + r), v) };
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl super::kquant_tokens8::Unpack8 for Q6K {
    /// The canonical form's values, and its offset 32 as a min `32 x sc`
    /// with factor d (as [`SuperBlock::unpack_avx2`]).
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack8(p: *const u8, out: &mut super::kquant_tokens8::Block) {
        use std::arch::x86_64::*;
        // SAFETY: a whole 210-byte block at p (caller): scales at 192..208.
        let sc = unsafe { _mm_loadu_si128(p.add(192) as *const __m128i) };
        let dst = out.sc.as_mut_ptr() as *mut __m256i;
        // SAFETY: `out.sc` is 16 i32 (64 bytes), `out.mn` 8 u32 (32 bytes).
        unsafe {
            _mm256_storeu_si256(dst, _mm256_cvtepi8_epi32(sc));
            _mm256_storeu_si256(dst.add(1), _mm256_cvtepi8_epi32(_mm_srli_si128::<8>(sc)));
            let mn = _mm256_slli_epi16::<5>(_mm256_cvtepi8_epi16(sc));
            _mm256_storeu_si256(out.mn.as_mut_ptr() as *mut __m256i, mn);
        }
        // SAFETY: as above.
        out.d = f16_at(
            unsafe { std::slice::from_raw_parts(p, <Self as SuperBlock>::BYTES) },
            208,
        );
        out.dmin = out.d;
        // SAFETY: a whole block at p (caller); `out.q` is 8 aligned 32-byte slots.
        unsafe { store_values(p, out.q.as_mut_ptr() as *mut __m256i) };
    }
}

impl SuperBlock for Q6K {
    const BYTES: usize = 210;
    const I16_SUMS: usize = 2;
    const WIDE: Wide = Wide::Q6K;
    #[cfg(target_arch = "x86_64")]
    const ROWS16_VNNI: Option<super::kquant::Rows16Fn> = Some(super::q6_k_rows8::rows16);
    #[cfg(target_arch = "x86_64")]
    const TOKENS8_VNNI: Option<super::kquant_tokens8::Tokens8Fn> =
        Some(super::kquant_tokens8::tokens8_vnni::<Q6K>);
    #[cfg(target_arch = "x86_64")]
    const ROWS16_TOKENS8_VNNI: Option<super::kquant::Rows16Tokens8Fn> =
        Some(super::q6_k_rows16::tokens8_vnni);
    #[cfg(target_arch = "x86_64")]
    const PROMPT_TILES_VNNI: Option<super::prompt_tiles::Tiles> = Some([
        super::q6_k512::tokens_vnni::<1, 4>,
        super::q6_k512::tokens_vnni::<2, 4>,
    ]);

    fn unpack(b: &[u8], c: &mut Canon) {
        scales(b, c);
        // Per half n: four runs of 32 values. Run r takes the low (r < 2) or
        // high (r >= 2) nibbles of nibble bytes 64n + 32 (r % 2) + l, and
        // bits 2r..2r+2 of high byte 128 + 32n + l as bits 4..6.
        for n in 0..2 {
            for r in 0..4 {
                for l in 0..32 {
                    let ql = b[64 * n + 32 * (r % 2) + l];
                    let lo = if r < 2 { ql & 0x0f } else { ql >> 4 };
                    let hi = (b[128 + 32 * n + l] >> (2 * r)) & 3;
                    c.q[128 * n + 32 * r + l] = lo | (hi << 4);
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack_avx2(p: *const u8, c: &mut Canon) {
        use std::arch::x86_64::*;
        // SAFETY: a whole 210-byte block at p (caller): scales at 192..208.
        let sc = _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(p.add(192) as *const __m128i) });
        super::kquant::set_scales_avx2(c, sc, _mm256_slli_epi16(sc, 5));
        // SAFETY: as above.
        c.d = f16_at(unsafe { std::slice::from_raw_parts(p, Self::BYTES) }, 208);
        c.dmin = c.d;
        // SAFETY: a whole block at p (caller); `c.q` is 8 aligned 32-byte slots.
        unsafe { store_values(p, c.q.as_mut_ptr() as *mut __m256i) };
    }

    /// Without storing the values: each run of 32 six-bit values is built
    /// in a register and meets all `N` tokens' activations there (the
    /// canonical path stores the block, then reloads it once per token).
    /// Integer sums and FMAs are the canonical path's.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn dots_avx2<const N: usize>(
        row: *const u8,
        acts: &QuantActs,
        t0: usize,
        prefetch: usize,
    ) -> [f32; N] {
        use std::arch::x86_64::*;
        let (nb, tp) = (acts.blocks, acts.t_pad);
        debug_assert!(t0 + N <= tp);
        // only the scale vectors are used
        let mut c = Canon::default();
        let mut accs = TokenAccsAvx2::<N>::new();
        for b in 0..nb {
            // SAFETY: super-block b is inside the row (caller).
            let p = unsafe { row.add(b * Self::BYTES) };
            prefetch_block_avx2(p, Self::BYTES, prefetch);
            // SAFETY: the 16 scales at 192..208 of the block.
            let sc = _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(p.add(192) as *const __m128i) });
            let mn = _mm256_slli_epi16(sc, 5);
            set_scales_avx2(&mut c, sc, mn);
            // SAFETY: as above.
            let d = f16_at(unsafe { std::slice::from_raw_parts(p, Self::BYTES) }, 208);
            // SAFETY: the 8 value blocks of super-block b of tokens t0..t0 + N
            // are in `qs` (t0 + N <= t_pad).
            let x: [*const __m256i; N] = std::array::from_fn(|t| unsafe {
                acts.qs.as_ptr().add(((t0 + t) * nb + b) * 8) as *const __m256i
            });
            let mut isum = [_mm256_setzero_si256(); N];
            for n in 0..2 {
                // SAFETY: super-block b is a whole block (caller).
                let runs = unsafe { half_runs(p, n) };
                for (r, q) in runs.into_iter().enumerate() {
                    let v = 4 * n + r;
                    // SAFETY: `scx` is 32-byte aligned (Canon); v < 8.
                    let s = unsafe { _mm256_load_si256(c.scx[v].as_ptr() as *const __m256i) };
                    for (isum, x) in isum.iter_mut().zip(&x) {
                        // SAFETY: as for `x`; `Q8Block`s are 32-byte aligned.
                        let xv = unsafe { _mm256_load_si256(x.add(v)) };
                        let prod = _mm256_madd_epi16(_mm256_maddubs_epi16(q, xv), s);
                        *isum = _mm256_add_epi32(*isum, prod);
                    }
                }
            }
            // the offset 32 is a min of 32 sc with factor d
            let msum = min_sums_avx2::<N>(mn, acts, b, t0);
            accs.add_block(&isum, Some((&msum, d)), d, acts, b, t0);
        }
        accs.finish()
    }
}
