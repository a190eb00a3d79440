//! Element and block types of weight tensors, as GGUF stores them.

use std::fmt;

/// A tensor element type: plain floats or a llama.cpp quantisation block format.
///
/// Quantised types pack `block_size()` elements into `type_size()` bytes.
/// The discriminants are GGML's type ids as written in GGUF tensor infos.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    /// IQ4_NL: 32 non-linear 4-bit levels and an f16 scale per block.
    IQ4NL,
    /// IQ4_XS: IQ4_NL's levels in 256-element super-blocks with 6-bit sub-block scales.
    IQ4XS,
    /// MXFP4 (OCP microscaling): 32 FP4 (E2M1) values and a power-of-two E8M0 scale.
    MXFP4,
}

/// Every supported type, in GGML id order.
pub const ALL_DTYPES: [DType; 16] = [
    DType::F32,
    DType::F16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q8_0,
    DType::Q2K,
    DType::Q3K,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
    DType::IQ4NL,
    DType::IQ4XS,
    DType::BF16,
    DType::MXFP4,
];

/// Elements per super-block of the K-quant formats.
pub const QK_K: usize = 256;

/// Why a GGML type id cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DTypeError {
    /// A GGML type that exists but that ATS does not run (yet).
    #[error("tensor type {name} (ggml id {id}) is not supported")]
    Unsupported { id: u32, name: &'static str },
    /// An id no GGML version defines.
    #[error("unknown tensor type id {0}")]
    Unknown(u32),
}

/// Block layout of any GGML type id, supported or not, so that a file holding
/// a tensor of an unsupported type can still be read and validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GgmlLayout {
    /// llama.cpp's name of the type.
    pub name: &'static str,
    /// Elements per block.
    pub block_size: usize,
    /// Bytes per block.
    pub type_size: usize,
}

/// The layout of a GGML type id, or `None` for ids no GGML version defines.
pub fn ggml_layout(id: u32) -> Option<GgmlLayout> {
    if let Some(d) = DType::supported(id) {
        return Some(GgmlLayout {
            name: d.name(),
            block_size: d.block_size(),
            type_size: d.type_size(),
        });
    }
    let (name, block_size, type_size) = match id {
        9 => ("Q8_1", 32, 36),
        15 => ("Q8_K", 256, 292),
        16 => ("IQ2_XXS", 256, 66),
        17 => ("IQ2_XS", 256, 74),
        18 => ("IQ3_XXS", 256, 98),
        19 => ("IQ1_S", 256, 50),
        21 => ("IQ3_S", 256, 110),
        22 => ("IQ2_S", 256, 82),
        24 => ("I8", 1, 1),
        25 => ("I16", 1, 2),
        26 => ("I32", 1, 4),
        27 => ("I64", 1, 8),
        28 => ("F64", 1, 8),
        29 => ("IQ1_M", 256, 56),
        34 => ("TQ1_0", 256, 54),
        35 => ("TQ2_0", 256, 66),
        40 => ("NVFP4", 64, 36),
        41 => ("Q1_0", 128, 18),
        42 => ("Q2_0", 64, 18),
        _ => return None,
    };
    Some(GgmlLayout {
        name,
        block_size,
        type_size,
    })
}

impl DType {
    /// The type for a GGML type id.
    pub fn from_ggml(id: u32) -> Result<DType, DTypeError> {
        DType::supported(id).ok_or_else(|| match ggml_layout(id) {
            Some(l) => DTypeError::Unsupported { id, name: l.name },
            None => DTypeError::Unknown(id),
        })
    }

    fn supported(id: u32) -> Option<DType> {
        Some(match id {
            0 => DType::F32,
            1 => DType::F16,
            2 => DType::Q4_0,
            3 => DType::Q4_1,
            6 => DType::Q5_0,
            7 => DType::Q5_1,
            8 => DType::Q8_0,
            10 => DType::Q2K,
            11 => DType::Q3K,
            12 => DType::Q4K,
            13 => DType::Q5K,
            14 => DType::Q6K,
            20 => DType::IQ4NL,
            23 => DType::IQ4XS,
            30 => DType::BF16,
            39 => DType::MXFP4,
            _ => return None,
        })
    }

    /// The GGML type id.
    pub fn ggml_id(self) -> u32 {
        match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::Q4_0 => 2,
            DType::Q4_1 => 3,
            DType::Q5_0 => 6,
            DType::Q5_1 => 7,
            DType::Q8_0 => 8,
            DType::Q2K => 10,
            DType::Q3K => 11,
            DType::Q4K => 12,
            DType::Q5K => 13,
            DType::Q6K => 14,
            DType::IQ4NL => 20,
            DType::IQ4XS => 23,
            DType::BF16 => 30,
            DType::MXFP4 => 39,
        }
    }

    /// Elements per block (1 for plain floats).
    pub fn block_size(self) -> usize {
        match self {
            DType::F32 | DType::F16 | DType::BF16 => 1,
            DType::Q8_0 | DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1 => 32,
            DType::IQ4NL | DType::MXFP4 => 32,
            DType::Q2K | DType::Q3K | DType::Q4K | DType::Q5K | DType::Q6K | DType::IQ4XS => QK_K,
        }
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Q8_0 => 34,
            DType::Q4_0 => 18,
            DType::Q4_1 => 20,
            DType::Q5_0 => 22,
            DType::Q5_1 => 24,
            DType::Q2K => 84,
            DType::Q3K => 110,
            DType::Q4K => 144,
            DType::Q5K => 176,
            DType::Q6K => 210,
            DType::IQ4NL => 18,
            DType::IQ4XS => 136,
            DType::MXFP4 => 17,
        }
    }

    /// Whether this is a block-quantised type.
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Bytes taken by `n` elements, or `None` if `n` is not a whole number
    /// of blocks or the size overflows.
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        let bs = self.block_size() as u64;
        if !n.is_multiple_of(bs) {
            return None;
        }
        (n / bs).checked_mul(self.type_size() as u64)
    }

    /// Bytes of one row of `n` elements; panics never, returns `None` on a
    /// partial block.
    pub fn row_bytes(self, n: usize) -> Option<usize> {
        self.bytes_for(n as u64)
            .and_then(|b| usize::try_from(b).ok())
    }

    /// Average bits per weight (storage cost), for reports.
    pub fn bits_per_weight(self) -> f64 {
        self.type_size() as f64 * 8.0 / self.block_size() as f64
    }

    /// The name llama.cpp prints for this type.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::Q8_0 => "Q8_0",
            DType::Q4_0 => "Q4_0",
            DType::Q4_1 => "Q4_1",
            DType::Q5_0 => "Q5_0",
            DType::Q5_1 => "Q5_1",
            DType::Q2K => "Q2_K",
            DType::Q3K => "Q3_K",
            DType::Q4K => "Q4_K",
            DType::Q5K => "Q5_K",
            DType::Q6K => "Q6_K",
            DType::IQ4NL => "IQ4_NL",
            DType::IQ4XS => "IQ4_XS",
            DType::MXFP4 => "MXFP4",
        }
    }

    /// Parses a llama.cpp type name (`Q4_K`, `q4_k`, `F16`, ...).
    pub fn from_name(s: &str) -> Option<DType> {
        ALL_DTYPES
            .iter()
            .copied()
            .find(|d| d.name().eq_ignore_ascii_case(s))
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for DType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for d in ALL_DTYPES {
            assert_eq!(DType::from_ggml(d.ggml_id()), Ok(d));
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
    }

    #[test]
    fn iq2_xxs_is_an_explicit_unsupported_type() {
        let e = DType::from_ggml(16).unwrap_err();
        assert_eq!(
            e.to_string(),
            "tensor type IQ2_XXS (ggml id 16) is not supported"
        );
        assert_eq!(DType::from_ggml(1000), Err(DTypeError::Unknown(1000)));
    }

    #[test]
    fn sizes_match_ggml() {
        // bits per weight as llama.cpp documents them
        assert_eq!(DType::Q4_0.bits_per_weight(), 4.5);
        assert_eq!(DType::Q4K.bits_per_weight(), 4.5);
        assert_eq!(DType::Q6K.bits_per_weight(), 6.5625);
        assert_eq!(DType::IQ4NL.bits_per_weight(), 4.5);
        assert_eq!(DType::IQ4XS.bits_per_weight(), 4.25);
        assert_eq!(DType::MXFP4.bits_per_weight(), 4.25);
        assert_eq!(DType::Q8_0.bytes_for(64), Some(68));
        assert_eq!(DType::Q8_0.bytes_for(33), None);
        assert_eq!(DType::F32.bytes_for(u64::MAX), None);
    }
}
