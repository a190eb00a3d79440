//! `ats-sched`: scheduling weight tensors between CPU and GPU.
//!
//! The [`exec`] module runs a placement across devices.

pub mod exec;
