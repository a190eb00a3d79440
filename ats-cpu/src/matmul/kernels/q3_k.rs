//! Q3_K weights: super-blocks of 256 three-bit values (two low bits plus a
//! high-bit mask) in 16 groups of 16 with signed 6-bit scales and an f16
//! factor `d`, `w = d * sc * (q - 4)` (110 bytes: high bits 0..32, low bits
//! 32..96, packed scales 96..108, d 108).

use super::kquant::{Canon, SuperBlock, f16_at};

/// The Q3_K super-block format.
pub(super) struct Q3K;

/// Canonical scales (offset 4 as a min) and factors of a Q3_K super-block.
fn scales(b: &[u8], c: &mut Canon) {
    let s = &b[96..108];
    for g in 0..16 {
        // Low 4 bits: bytes 0..8 (low nibble for groups 0..8, high for 8..16);
        // high 2 bits: bytes 8..12, two bits per group.
        let lo = if g < 8 { s[g] & 0x0f } else { s[g - 8] >> 4 };
        let hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
        let sc = (lo | (hi << 4)) as i16 - 32;
        c.set_sc(g, sc);
        c.mn[g] = 4 * sc;
    }
    c.d = f16_at(b, 108);
    c.dmin = c.d;
}

impl SuperBlock for Q3K {
    const BYTES: usize = 110;
    const I16_SUMS: usize = 4;

    fn unpack(b: &[u8], c: &mut Canon) {
        scales(b, c);
        // Value 128n + 32j + l: bits 2j..2j+2 of low byte 32n + l, plus bit
        // 4n + j of mask byte l as the third bit.
        for n in 0..2 {
            for j in 0..4 {
                for l in 0..32 {
                    let lo = (b[32 + 32 * n + l] >> (2 * j)) & 3;
                    let hi = (b[l] >> (4 * n + j)) & 1;
                    c.q[128 * n + 32 * j + l] = lo | (hi << 2);
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack_avx2(p: *const u8, c: &mut Canon) {
        use std::arch::x86_64::*;
        // SAFETY: a whole 110-byte block at p (caller).
        let b = unsafe { std::slice::from_raw_parts(p, Self::BYTES) };
        // The 6-bit scales on 32-bit words: low nibbles of bytes 0..8 and
        // 2-bit fields of bytes 8..12, then minus 32.
        let w = |i: usize| {
            u32::from_le_bytes([b[96 + 4 * i], b[97 + 4 * i], b[98 + 4 * i], b[99 + 4 * i]])
        };
        let (a0, a1, a2) = (w(0), w(1), w(2));
        let (m4, m2) = (0x0f0f_0f0fu32, 0x0303_0303u32);
        let g = [
            (a0 & m4) | ((a2 & m2) << 4),
            (a1 & m4) | (((a2 >> 2) & m2) << 4),
            ((a0 >> 4) & m4) | (((a2 >> 4) & m2) << 4),
            ((a1 >> 4) & m4) | (((a2 >> 6) & m2) << 4),
        ];
        let v = _mm_sub_epi8(
            _mm_set_epi32(g[3] as i32, g[2] as i32, g[1] as i32, g[0] as i32),
            _mm_set1_epi8(32),
        );
        let sc = _mm256_cvtepi8_epi16(v);
        super::kquant::set_scales_avx2(c, sc, _mm256_slli_epi16(sc, 2));
        c.d = f16_at(b, 108);
        c.dmin = c.d;
        let (three, one) = (_mm256_set1_epi8(3), _mm256_set1_epi8(1));
        // SAFETY: the mask is bytes 0..32.
        let hm = unsafe { _mm256_loadu_si256(p as *const __m256i) };
        let out = c.q.as_mut_ptr() as *mut __m256i;
        for n in 0..2 {
            // SAFETY: low bits 32 + 32n .. 64 + 32n are inside the block.
            let v = unsafe { _mm256_loadu_si256(p.add(32 + 32 * n) as *const __m256i) };
            for j in 0..4 {
                let lo =
                    _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * j as i32)), three);
                let hi = _mm256_and_si256(
                    _mm256_srl_epi16(hm, _mm_cvtsi32_si128((4 * n + j) as i32)),
                    one,
                );
                let q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 2));
                // SAFETY: 4n + j < 8 aligned 32-byte slots in `c.q`.
                unsafe { _mm256_store_si256(out.add(4 * n + j), q) };
            }
        }
    }
}
