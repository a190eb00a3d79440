//! Q8_0 weights: 32 int8 values and an f16 scale per block (34 bytes),
//! against Q8_0 activations.

use super::legacy::{BlockC, LegacyBlock, Values};
use crate::matmul::acts::ActFormat;

/// The Q8_0 block format.
pub(super) struct Q8_0;

impl LegacyBlock for Q8_0 {
    const BYTES: usize = 34;
    const ACTS: ActFormat = ActFormat::Q8_0;
    const SIGNED: bool = true;
    const C: BlockC = BlockC::None;
    const I16_SUMS: usize = 1;
    const VALUES: Option<Values> = Some(Values::Bytes { at: 2 });

    fn values(b: &[u8]) -> [i32; 32] {
        std::array::from_fn(|k| b[2 + k] as i8 as i32)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack_avx2(p: *const u8) -> std::arch::x86_64::__m256i {
        use std::arch::x86_64::*;
        // SAFETY: the block's 32 values follow its 2-byte scale (caller).
        unsafe { _mm256_loadu_si256(p.add(2) as *const __m256i) }
    }
}
