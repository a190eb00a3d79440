//! MXFP4 weights: 32 E2M1 nibbles and an E8M0 exponent per block (17
//! bytes), `w = 2^(e - 128) * KVALUES[q]` with the E2M1 values doubled to
//! small integers, against Q8_0 activations.

use ats_core::quant::mxfp4::KVALUES;

use super::legacy::{BlockC, BlockScale, LegacyBlock, Values};
use crate::matmul::acts::ActFormat;

/// The MXFP4 block format.
pub(super) struct Mxfp4;

impl LegacyBlock for Mxfp4 {
    const BYTES: usize = 17;
    const ACTS: ActFormat = ActFormat::Q8_0;
    const SIGNED: bool = true;
    const C: BlockC = BlockC::None;
    const SCALE: BlockScale = BlockScale::E8m0Half;
    // |level| <= 12: 8 maddubs pairs of 2 x 12 x 127 fit in int16 (8 x 3048)
    const I16_SUMS: usize = 8;
    const VALUES: Option<Values> = Some(Values::Nibbles {
        at: 1,
        levels: KVALUES,
    });

    fn values(b: &[u8]) -> [i32; 32] {
        std::array::from_fn(|k| {
            let q = if k < 16 {
                b[1 + k] & 0x0f
            } else {
                b[1 + k - 16] >> 4
            };
            i32::from(KVALUES[usize::from(q)])
        })
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack_avx2(p: *const u8) -> std::arch::x86_64::__m256i {
        // SAFETY: 16 bytes of nibbles follow the exponent byte (caller).
        unsafe { super::simd::table_nibbles(p.add(1), &KVALUES) }
    }
}
