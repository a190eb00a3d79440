//! Q5_1 weights: 32 five-bit values `q`, an f16 scale `d` and an f16 min `m`
//! per block (24 bytes), `w = d * q + m`, against Q8_1 activations.

use super::legacy::{BlockC, LegacyBlock};
use crate::matmul::acts::ActFormat;

/// The Q5_1 block format.
pub(super) struct Q5_1;

impl LegacyBlock for Q5_1 {
    const BYTES: usize = 24;
    const ACTS: ActFormat = ActFormat::Q8_1;
    const SIGNED: bool = false;
    const C: BlockC = BlockC::Min;
    const I16_SUMS: usize = 4;

    fn values(b: &[u8]) -> [i32; 32] {
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        std::array::from_fn(|k| {
            let lo = if k < 16 {
                b[8 + k] & 0x0f
            } else {
                b[8 + k - 16] >> 4
            };
            lo as i32 | (((qh >> k) & 1) << 4) as i32
        })
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack_avx2(p: *const u8) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        // SAFETY: fifth bits at 4..8, nibbles at 8..24 (caller: whole block).
        unsafe {
            _mm256_or_si256(
                super::simd::nibbles(p.add(8)),
                super::simd::high_bits(p.add(4)),
            )
        }
    }
}
