//! `ats-cpu`: the CPU backend of ATS.
//!
//! [`CpuDevice`] implements `ats_core::device::Device` with kernels for every
//! graph op: quantised matrix multiplication with run-time SIMD dispatch
//! ([`matmul`]), flash attention over an f16 or f32 KV cache, RoPE variants,
//! norms, activations and MoE routing ([`ops`]), on a spinning fork-join
//! [`team::Team`] of threads.

pub mod device;
pub mod matmul;
pub mod ops;
pub mod storage;
pub mod team;

pub use device::{CpuDevice, CpuError};
