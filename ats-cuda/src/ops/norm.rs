//! RMSNorm (per group of columns) and LayerNorm (per row).

use ats_core::device::DeviceError;
use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::Node;
use crate::geometry::NORM_THREADS;
use crate::kernels::Module;
use crate::memory::drv;
use crate::workspace::Carver;

fn blocks(n: &Node<'_>, groups: usize) -> Result<LaunchConfig, DeviceError> {
    let g =
        u32::try_from(groups).map_err(|_| n.err(format!("{groups} norm groups exceed a grid")))?;
    Ok(LaunchConfig {
        grid_dim: (g.max(1), 1, 1),
        block_dim: (NORM_THREADS, 1, 1),
        shared_mem_bytes: 0,
    })
}

pub(crate) fn rms_norm(
    n: &Node<'_>,
    scratch: &mut Carver,
    eps: f32,
    group: usize,
) -> Result<(), DeviceError> {
    let (x, rows, cols) = n.input(0)?;
    let (o, ro, co) = n.output()?;
    let (w, wn) = n.weight_f32(0, scratch)?;
    if group == 0 || !cols.is_multiple_of(group) || (ro, co) != (rows, cols) || wn < group {
        return Err(n.err(format!(
            "RMSNorm of {rows}x{cols} in groups of {group} with {wn} weights into {ro}x{co}"
        )));
    }
    if rows == 0 {
        return Ok(());
    }
    let f = n
        .dev
        .kernels
        .function(Module::Norm, "rms_norm_f32")
        .map_err(|e| n.cu(e))?;
    let cfg = blocks(n, rows * cols / group)?;
    let g = group as i32;
    let mut b = n.dev.streams.compute.launch_builder(&f);
    b.arg(&x).arg(&w).arg(&o).arg(&g).arg(&eps);
    // SAFETY: x and o hold rows*cols floats (checked by input/output), w
    // holds `group` floats; one block per group.
    drv("rms_norm_f32", unsafe { b.launch(cfg) }).map_err(|e| n.cu(e))?;
    Ok(())
}

pub(crate) fn layer_norm(n: &Node<'_>, scratch: &mut Carver, eps: f32) -> Result<(), DeviceError> {
    let (x, rows, cols) = n.input(0)?;
    let (o, ro, co) = n.output()?;
    let (w, wn) = n.weight_f32(0, scratch)?;
    let (bias, bn) = n.weight_f32(1, scratch)?;
    if (ro, co) != (rows, cols) || wn < cols || bn < cols {
        return Err(n.err(format!(
            "LayerNorm of {rows}x{cols} with {wn} weights and {bn} biases into {ro}x{co}"
        )));
    }
    if rows == 0 {
        return Ok(());
    }
    let f = n
        .dev
        .kernels
        .function(Module::Norm, "layer_norm_f32")
        .map_err(|e| n.cu(e))?;
    let cfg = blocks(n, rows)?;
    let c = cols as i32;
    let mut b = n.dev.streams.compute.launch_builder(&f);
    b.arg(&x).arg(&w).arg(&bias).arg(&o).arg(&c).arg(&eps);
    // SAFETY: x and o hold rows*cols floats, w and bias `cols` each; one
    // block per row.
    drv("layer_norm_f32", unsafe { b.launch(cfg) }).map_err(|e| n.cu(e))?;
    Ok(())
}
