//! Element-wise ops: `out = f(a, b)` and `out = f(x)` over whole values.

use ats_core::device::DeviceError;

use super::{Node, launch_n};
use crate::kernels::Module;

/// Add, Mul, SwiGLU: two inputs of the output's shape.
pub(crate) fn binary(n: &Node<'_>, kernel: &str) -> Result<(), DeviceError> {
    let (a, ra, ca) = n.input(0)?;
    let (b, rb, cb) = n.input(1)?;
    let (o, ro, co) = n.output()?;
    if (ra * ca, rb * cb) != (ro * co, ro * co) {
        return Err(n.err(format!(
            "{ra}x{ca} and {rb}x{cb} inputs for a {ro}x{co} output"
        )));
    }
    launch_n(
        n.dev,
        Module::Elementwise,
        kernel,
        &[a, b, o],
        (ro * co) as u64,
    )
    .map_err(|e| n.cu(e))
}

/// GELU variants: one input of the output's shape.
pub(crate) fn unary(n: &Node<'_>, kernel: &str) -> Result<(), DeviceError> {
    let (x, rx, cx) = n.input(0)?;
    let (o, ro, co) = n.output()?;
    if rx * cx != ro * co {
        return Err(n.err(format!("a {rx}x{cx} input for a {ro}x{co} output")));
    }
    launch_n(
        n.dev,
        Module::Elementwise,
        kernel,
        &[x, o],
        (ro * co) as u64,
    )
    .map_err(|e| n.cu(e))
}
