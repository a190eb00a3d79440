//! Q5_0 weights: 32 five-bit values `q` (low nibbles plus a 32-bit word of
//! fifth bits) and an f16 scale `d` per block (22 bytes), `w = d * (q - 16)`,
//! against Q8_0 activations.

use super::legacy::{BlockC, LegacyBlock};
use crate::matmul::acts::ActFormat;

/// The Q5_0 block format.
pub(super) struct Q5_0;

impl LegacyBlock for Q5_0 {
    const BYTES: usize = 22;
    const ACTS: ActFormat = ActFormat::Q8_0;
    const SIGNED: bool = false;
    const C: BlockC = BlockC::Offset(-16.0);
    const I16_SUMS: usize = 4;

    fn values(b: &[u8]) -> [i32; 32] {
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        std::array::from_fn(|k| {
            let lo = if k < 16 {
                b[6 + k] & 0x0f
            } else {
                b[6 + k - 16] >> 4
            };
            lo as i32 | (((qh >> k) & 1) << 4) as i32
        })
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack_avx2(p: *const u8) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        // SAFETY: fifth bits at 2..6, nibbles at 6..22 (caller: whole block).
        unsafe {
            _mm256_or_si256(
                super::simd::nibbles(p.add(6)),
                super::simd::high_bits(p.add(2)),
            )
        }
    }
}
