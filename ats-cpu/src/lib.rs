//! `ats-cpu`: the CPU backend of ATS.
//!
//! [`matmul`]: quantised matrix multiplication with run-time SIMD dispatch.

pub mod matmul;
