//! Test access to the kernels' own block decoding, scalar and SIMD, so that
//! tests can compare it bit for bit with the dequantisation references.

use ats_core::DType;

use super::float::FloatElem;
use super::kquant::{Canon, SuperBlock};
use super::legacy::LegacyBlock;
use super::{
    bf16, f16, f32, iq4_nl, iq4_xs, mxfp4, q2_k, q3_k, q4_0, q4_1, q4_k, q5_0, q5_1, q5_k, q6_k,
    q8_0,
};
use crate::matmul::Isa;

/// One row of `dtype` dequantised through the kernels' decoding for `isa`
/// (`w = d * q + c` for blocks, the canonical form for K-quants).
pub(in crate::matmul) fn decode_row(dtype: DType, row: &[u8], isa: Isa) -> Vec<f32> {
    match dtype {
        DType::F32 => float::<f32::F32>(row, isa),
        DType::F16 => float::<f16::F16>(row, isa),
        DType::BF16 => float::<bf16::Bf16>(row, isa),
        DType::Q8_0 => legacy::<q8_0::Q8_0>(row, isa),
        DType::Q4_0 => legacy::<q4_0::Q4_0>(row, isa),
        DType::Q4_1 => legacy::<q4_1::Q4_1>(row, isa),
        DType::Q5_0 => legacy::<q5_0::Q5_0>(row, isa),
        DType::Q5_1 => legacy::<q5_1::Q5_1>(row, isa),
        DType::Q2K => kquant::<q2_k::Q2K>(row, isa, None),
        DType::Q3K => kquant::<q3_k::Q3K>(row, isa, Some(4)),
        DType::Q4K => kquant::<q4_k::Q4K>(row, isa, None),
        DType::Q5K => kquant::<q5_k::Q5K>(row, isa, None),
        DType::Q6K => kquant::<q6_k::Q6K>(row, isa, Some(32)),
        DType::IQ4NL => legacy::<iq4_nl::Iq4Nl>(row, isa),
        DType::IQ4XS => kquant::<iq4_xs::Iq4Xs>(row, isa, None),
        DType::MXFP4 => legacy::<mxfp4::Mxfp4>(row, isa),
    }
}

fn float<E: FloatElem>(row: &[u8], isa: Isa) -> Vec<f32> {
    let n = row.len() / E::BYTES;
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        let mut out = vec![0f32; n / 8 * 8];
        for (k, o) in out.chunks_exact_mut(8).enumerate() {
            // SAFETY: tests pass an available isa; 8 elements at 8k are in the row.
            let v = unsafe { E::load8_avx2(row.as_ptr().add(8 * k * E::BYTES)) };
            // SAFETY: `o` holds 8 floats.
            unsafe { std::arch::x86_64::_mm256_storeu_ps(o.as_mut_ptr(), v) };
        }
        out.extend((n / 8 * 8..n).map(|k| E::get(row, k)));
        return out;
    }
    let _ = isa;
    (0..n).map(|k| E::get(row, k)).collect()
}

fn legacy<B: LegacyBlock>(row: &[u8], isa: Isa) -> Vec<f32> {
    let mut out = Vec::new();
    for b in row.chunks_exact(B::BYTES) {
        let ((d, c), q): ((f32, f32), [i32; 32]) = match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::Avx512 | Isa::Avx512Vnni => {
                let mut bytes = [0u8; 32];
                // SAFETY: tests pass an available isa; `b` is a whole block; 32 bytes out.
                let sc = unsafe {
                    let v = B::unpack_avx2(b.as_ptr());
                    std::arch::x86_64::_mm256_storeu_si256(bytes.as_mut_ptr() as *mut _, v);
                    let (d, c) = super::legacy::scales4_avx2::<B>([b.as_ptr(); 4]);
                    use std::arch::x86_64::_mm_cvtss_f32;
                    (_mm_cvtss_f32(d), _mm_cvtss_f32(c))
                };
                (
                    sc,
                    bytes.map(|v| if B::SIGNED { v as i8 as i32 } else { v as i32 }),
                )
            }
            _ => (super::legacy::scales::<B>(b), B::values(b)),
        };
        out.extend(q.iter().map(|&q| d * q as f32 + c));
    }
    out
}

fn kquant<K: SuperBlock>(row: &[u8], isa: Isa, sym_offset: Option<i32>) -> Vec<f32> {
    let mut out = Vec::new();
    let mut c = Canon::default();
    for b in row.chunks_exact(K::BYTES) {
        match isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: tests pass an available isa; `b` is a whole super-block.
            Isa::Avx2 | Isa::Avx512 | Isa::Avx512Vnni => unsafe {
                K::unpack_avx2(b.as_ptr(), &mut c)
            },
            _ => K::unpack(b, &mut c),
        }
        if let Some(off) = sym_offset {
            // The canonical min must be the offset times the scale.
            for g in 0..16 {
                assert_eq!(c.mn[g], off as i16 * c.sc(g));
            }
            assert_eq!(c.d.to_bits(), c.dmin.to_bits());
        }
        out.extend(c.dequantize(sym_offset, K::SIGNED));
    }
    out
}
