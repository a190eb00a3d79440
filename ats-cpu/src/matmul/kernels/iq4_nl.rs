//! IQ4_NL weights: 32 four-bit indices into a fixed table of 16 signed
//! levels and an f16 scale `d` per block (18 bytes), `w = d * KVALUES[q]`,
//! against Q8_0 activations (the levels are signed bytes, like Q8_0's).

use ats_core::quant::iq4_nl::KVALUES;

use super::legacy::{BlockC, LegacyBlock, Values};
use crate::matmul::acts::ActFormat;

/// The IQ4_NL block format.
pub(super) struct Iq4Nl;

impl LegacyBlock for Iq4Nl {
    const BYTES: usize = 18;
    const ACTS: ActFormat = ActFormat::Q8_0;
    const SIGNED: bool = true;
    const C: BlockC = BlockC::None;
    const I16_SUMS: usize = 1;
    const VALUES: Option<Values> = Some(Values::Nibbles {
        at: 2,
        levels: KVALUES,
    });

    fn values(b: &[u8]) -> [i32; 32] {
        std::array::from_fn(|k| {
            let q = if k < 16 {
                b[2 + k] & 0x0f
            } else {
                b[2 + k - 16] >> 4
            };
            i32::from(KVALUES[usize::from(q)])
        })
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack_avx2(p: *const u8) -> std::arch::x86_64::__m256i {
        // SAFETY: 16 bytes of indices follow the scale (caller).
        unsafe { super::simd::table_nibbles(p.add(2), &KVALUES) }
    }
}
