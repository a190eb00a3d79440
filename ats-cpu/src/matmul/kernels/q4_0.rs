//! Q4_0 weights: 32 four-bit values `q` and an f16 scale `d` per block (18
//! bytes), `w = d * (q - 8)`, against Q8_0 activations.

use super::legacy::{BlockC, LegacyBlock, UNSIGNED, Values};
use crate::matmul::acts::ActFormat;

/// The Q4_0 block format.
pub(super) struct Q4_0;

impl LegacyBlock for Q4_0 {
    const BYTES: usize = 18;
    const ACTS: ActFormat = ActFormat::Q8_0;
    const SIGNED: bool = false;
    const C: BlockC = BlockC::Offset(-8.0);
    const I16_SUMS: usize = 8;
    const VALUES: Option<Values> = Some(Values::Nibbles {
        at: 2,
        levels: UNSIGNED,
    });

    fn values(b: &[u8]) -> [i32; 32] {
        std::array::from_fn(|k| {
            (if k < 16 {
                b[2 + k] & 0x0f
            } else {
                b[2 + k - 16] >> 4
            }) as i32
        })
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack_avx2(p: *const u8) -> std::arch::x86_64::__m256i {
        // SAFETY: 16 bytes of nibbles follow the scale (caller).
        unsafe { super::simd::nibbles(p.add(2)) }
    }
}
