//! Q4_1 weights: 32 four-bit values `q`, an f16 scale `d` and an f16 min `m`
//! per block (20 bytes), `w = d * q + m`, against Q8_1 activations.

use super::legacy::{BlockC, LegacyBlock, UNSIGNED, Values};
use crate::matmul::acts::ActFormat;

/// The Q4_1 block format.
pub(super) struct Q4_1;

impl LegacyBlock for Q4_1 {
    const BYTES: usize = 20;
    const ACTS: ActFormat = ActFormat::Q8_1;
    const SIGNED: bool = false;
    const C: BlockC = BlockC::Min;
    const I16_SUMS: usize = 8;
    const VALUES: Option<Values> = Some(Values::Nibbles {
        at: 4,
        levels: UNSIGNED,
    });

    fn values(b: &[u8]) -> [i32; 32] {
        std::array::from_fn(|k| {
            (if k < 16 {
                b[4 + k] & 0x0f
            } else {
                b[4 + k - 16] >> 4
            }) as i32
        })
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack_avx2(p: *const u8) -> std::arch::x86_64::__m256i {
        // SAFETY: 16 bytes of nibbles follow scale and min (caller).
        unsafe { super::simd::nibbles(p.add(4)) }
    }
}
