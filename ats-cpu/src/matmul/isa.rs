//! The SIMD instruction set a matmul runs with, detected at run time.

use std::fmt;

/// An instruction set the matmul kernels can be compiled for.
///
/// Only the sets that have kernels in this build *and* that the CPU supports
/// are [available](Isa::available); the others exist so that callers can name
/// them (profiles, logs, `--isa` flags) and get a clear error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    /// Portable Rust, on every CPU; the reference for the SIMD paths.
    Scalar,
    /// x86-64 AVX2 + FMA + F16C (Haswell, Zen and later).
    Avx2,
    /// The AVX2 kernels, with AVX-512 F/BW's 512-bit registers in the
    /// K-quant row kernels (Q4_K, Q5_K, Q6_K; every round runs row by row).
    Avx512,
    /// [`Isa::Avx512`], with AVX-512 VNNI's int8 dot products: in the
    /// 8-token tiles of the 32-element block formats (256-bit registers,
    /// AVX512VL), their 16-row one-token kernel (Q4_0, Q4_1, Q8_0, IQ4_NL,
    /// MXFP4) and the Q4_K row kernel, one instruction where AVX2 takes
    /// two plus a widening step.
    Avx512Vnni,
    /// AArch64 NEON (no kernels yet).
    Neon,
}

/// Every instruction set ATS knows, best last.
pub const ALL_ISAS: [Isa; 5] = [
    Isa::Scalar,
    Isa::Neon,
    Isa::Avx2,
    Isa::Avx512,
    Isa::Avx512Vnni,
];

impl Isa {
    /// The best available instruction set on this CPU.
    pub fn detect() -> Isa {
        Isa::available().last().copied().unwrap_or(Isa::Scalar)
    }

    /// Every instruction set usable here (kernels built and CPU support), `Scalar` first.
    pub fn available() -> Vec<Isa> {
        ALL_ISAS.into_iter().filter(|i| i.is_available()).collect()
    }

    /// Whether this build has kernels for `self` and the CPU runs them.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            Isa::Avx2 => cpu_has_avx2(),
            Isa::Avx512 => cpu_has_avx2() && cpu_has_avx512(),
            Isa::Avx512Vnni => cpu_has_avx2() && cpu_has_avx512() && cpu_has_vnni(),
            // No kernels yet: never chosen.
            Isa::Neon => false,
        }
    }

    /// Whether the AVX2/FMA/F16C kernels run for `self` (every x86 set
    /// with kernels builds on them).
    pub fn has_avx2(self) -> bool {
        matches!(self, Isa::Avx2 | Isa::Avx512 | Isa::Avx512Vnni)
    }

    /// Whether the 512-bit K-quant row kernels run for `self`.
    pub fn has_avx512(self) -> bool {
        matches!(self, Isa::Avx512 | Isa::Avx512Vnni)
    }

    /// A short lowercase name (`avx2`), for logs and profiles.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Avx512Vnni => "avx512vnni",
            Isa::Neon => "neon",
        }
    }
}

/// A name that is no instruction set ATS knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown instruction set `{0}`: expected one of {names}", names = ALL_ISAS.map(Isa::name).join(", "))]
pub struct UnknownIsa(pub String);

impl std::str::FromStr for Isa {
    type Err = UnknownIsa;

    /// The set [named](Isa::name) `s` (whether or not this CPU has it).
    fn from_str(s: &str) -> Result<Isa, UnknownIsa> {
        ALL_ISAS
            .into_iter()
            .find(|i| i.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownIsa(s.to_string()))
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(target_arch = "x86_64")]
fn cpu_has_avx2() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_has_avx2() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
fn cpu_has_avx512() -> bool {
    is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw")
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_has_avx512() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
fn cpu_has_vnni() -> bool {
    is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl")
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_has_vnni() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_is_always_available_and_first() {
        let a = Isa::available();
        assert_eq!(a[0], Isa::Scalar);
        assert!(a.contains(&Isa::detect()));
        assert!(!Isa::Neon.is_available() || cfg!(target_arch = "aarch64"));
    }

    #[test]
    fn every_name_parses_back_and_others_are_refused() {
        for isa in ALL_ISAS {
            assert_eq!(isa.name().parse::<Isa>(), Ok(isa));
        }
        assert_eq!(" AVX2 ".parse::<Isa>(), Ok(Isa::Avx2));
        let e = "sse4".parse::<Isa>().unwrap_err();
        assert!(e.to_string().contains("`sse4`"), "{e}");
    }
}
