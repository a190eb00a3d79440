//! `y = x W^T (+ bias)` for every weight type.
//!
//! - Up to [`MV_MAX_TOKENS`] tokens (decode): `matvec_*`, which reads each
//!   weight row once and dequantises it in registers; for Q4_K, Q5_K, Q6_K,
//!   Q8_0, IQ4_NL, IQ4_XS and MXFP4 `matvec_wide_*`, with 16-byte loads and
//!   two rows per warp.
//! - More tokens with cuBLAS: F32 weights go to an f32 GEMM in place (no
//!   TF32); F16 weights to an f16 GEMM with the activations converted to f16;
//!   BF16 weights are dequantised to f32 tiles; quantised weights are
//!   dequantised to f16 tiles that cuBLAS multiplies with f16 activations,
//!   accumulating in f32. Expected accuracy of the f16 path: activations
//!   rounded to 11 significant bits, about 5e-4 relative per product (the CPU
//!   path quantises activations to 8-bit blocks, which is coarser).
//! - Without cuBLAS: `mm_*`, a tiled f32 kernel dequantising 64 x 32 weight
//!   tiles into shared memory (exact f32 arithmetic).

use ats_core::device::DeviceError;
use ats_core::dtype::DType;
use cudarc::driver::PushKernelArg;
use cudarc::driver::sys::CUdeviceptr;

use super::{Node, WeightRef, dtype_suffix, launch_n};
use crate::CudaError;
use crate::blas::{Blas, Gemm, GemmType};
use crate::device::CudaDevice;
use crate::geometry::{self, MM_BT, MV_MAX_TOKENS};
use crate::kernels::Module;
use crate::memory::drv;
use crate::workspace::Carver;

pub(crate) fn node(n: &Node<'_>, scratch: &mut Carver) -> Result<(), DeviceError> {
    let (x, nx, cx) = n.input(0)?;
    let (o, ro, co) = n.output()?;
    let w = n.weight(0)?;
    if cx != w.cols || co != w.rows || ro != nx || w.mats != 1 {
        return Err(n.err(format!(
            "{nx}x{cx} times a {}x{} weight into {ro}x{co}",
            w.rows, w.cols
        )));
    }
    let bias = if n.args.weights.len() > 1 {
        let (b, len) = n.weight_f32(1, scratch)?;
        if len < w.rows {
            return Err(n.err(format!("{len} biases for {} outputs", w.rows)));
        }
        b
    } else {
        0
    };
    product(n.dev, &w, x, nx, o, bias, scratch).map_err(|e| n.cu(e))
}

/// The type suffix of the wide decode kernels (`matvec_wide_*`,
/// `matvec_wide_moe_*`) for `w`, when there are some for its type: Q4_K and
/// Q5_K (16-byte loads: the weight 16-byte aligned), Q6_K, Q8_0, IQ4_NL and
/// IQ4_XS (2-byte aligned blocks, read through aligned words), MXFP4 (any
/// alignment); the activations 16-byte aligned. Every matrix of a stacked
/// (expert) weight is aligned as its first is: their sizes are whole 16-byte
/// multiples (Q4_K, Q5_K) or even (MXFP4 needs nothing).
pub(crate) fn wide_suffix(w: &WeightRef, x: CUdeviceptr) -> Option<&'static str> {
    if !x.is_multiple_of(16) {
        return None;
    }
    let k_quant = w.cols.is_multiple_of(256);
    match w.dtype {
        DType::Q4K if k_quant && w.ptr.is_multiple_of(16) => Some("q4_k"),
        DType::Q5K if k_quant && w.ptr.is_multiple_of(16) => Some("q5_k"),
        DType::Q6K if k_quant && w.ptr.is_multiple_of(4) => Some("q6_k"),
        DType::Q8_0 if w.cols.is_multiple_of(32) && w.ptr.is_multiple_of(4) => Some("q8_0"),
        DType::IQ4NL if w.cols.is_multiple_of(32) && w.ptr.is_multiple_of(4) => Some("iq4_nl"),
        DType::IQ4XS if k_quant && w.ptr.is_multiple_of(4) => Some("iq4_xs"),
        DType::MXFP4 if w.cols.is_multiple_of(32) => Some("mxfp4"),
        _ => None,
    }
}

fn launch_err(e: String) -> CudaError {
    CudaError::Launch(e)
}

/// `y[n_tok, rows] = x[n_tok, cols] W^T (+ bias)`; `bias` 0 for none.
pub(crate) fn product(
    dev: &CudaDevice,
    w: &WeightRef,
    x: CUdeviceptr,
    n_tok: usize,
    y: CUdeviceptr,
    bias: CUdeviceptr,
    scratch: &mut Carver,
) -> Result<(), CudaError> {
    if n_tok == 0 || w.rows == 0 {
        return Ok(());
    }
    let tail = !w.cols.is_multiple_of(32);
    if tail && w.dtype.is_quantized() {
        return Err(launch_err(format!(
            "{} rows of {} columns",
            w.dtype, w.cols
        )));
    }
    let sfx = dtype_suffix(w.dtype);
    let (rows, cols, rb) = (w.rows as i32, w.cols as i32, w.row_bytes());
    if n_tok <= MV_MAX_TOKENS {
        // every matrix-vector kernel reads x as float4
        if !x.is_multiple_of(16) {
            return Err(launch_err(format!(
                "activations at {x:#x} are not 16-byte aligned"
            )));
        }
        // the wide kernels where the type has one (one token: the
        // instantiation whose registers are sized for one), else the chunked
        let (name, cfg) = match wide_suffix(w, x) {
            Some(wide) => {
                let one = if n_tok == 1 { "1" } else { "" };
                (
                    format!("matvec_wide{one}_{wide}"),
                    geometry::matvec_wide(w.rows),
                )
            }
            None if tail => (format!("matvec_tail_{sfx}"), geometry::matvec(w.rows)),
            None => (format!("matvec_{sfx}"), geometry::matvec(w.rows)),
        };
        let f = dev.kernels.function(Module::Matvec, &name)?;
        let nt = n_tok as i32;
        let mut b = dev.streams.compute.launch_builder(&f);
        b.arg(&w.ptr)
            .arg(&rb)
            .arg(&rows)
            .arg(&cols)
            .arg(&x)
            .arg(&nt)
            .arg(&y)
            .arg(&bias);
        // SAFETY: w holds rows x cols of its type (checked by Node::weight),
        // x n_tok x cols floats, y n_tok x rows floats, bias rows floats or
        // 0; x is 16-byte aligned (checked above) and for the wide kernels
        // wide_suffix checked the weight alignment their vector loads need.
        drv(&name, unsafe { b.launch(cfg) })?;
        return Ok(());
    }
    if let Some(blas) = &dev.blas
        && !(tail && w.dtype == DType::BF16)
    {
        let io = Operands { x, n_tok, y, bias };
        return cublas(dev, blas, w, io, scratch);
    }
    let name = if tail {
        format!("mm_tail_{sfx}")
    } else {
        format!("mm_{sfx}")
    };
    let f = dev.kernels.function(Module::Matmul, &name)?;
    let tiles = u32::try_from(n_tok.div_ceil(MM_BT as usize))
        .map_err(|_| launch_err(format!("{n_tok} tokens")))?;
    let nt = n_tok as i32;
    let mut b = dev.streams.compute.launch_builder(&f);
    b.arg(&w.ptr)
        .arg(&rb)
        .arg(&rows)
        .arg(&cols)
        .arg(&x)
        .arg(&nt)
        .arg(&y)
        .arg(&bias);
    // SAFETY: as for matvec; the grid covers rows x n_tok in 64 x 64 tiles.
    drv(&name, unsafe { b.launch(geometry::matmul(w.rows, tiles)) })?;
    Ok(())
}

/// The activations, outputs and bias of `y[n_tok, rows] = x[n_tok, cols] W^T
/// (+ bias)`, the weight aside; `bias` 0 for none.
#[derive(Clone, Copy, Debug)]
struct Operands {
    x: CUdeviceptr,
    n_tok: usize,
    y: CUdeviceptr,
    bias: CUdeviceptr,
}

/// [`product`] through cuBLAS, dequantising or converting to f16 in pieces
/// that fit the scratch area.
fn cublas(
    dev: &CudaDevice,
    blas: &Blas,
    w: &WeightRef,
    io: Operands,
    scratch: &mut Carver,
) -> Result<(), CudaError> {
    let Operands { x, n_tok, y, bias } = io;
    let (rows, cols) = (w.rows, w.cols);
    let free = scratch.free();
    // the product as a whole; the pieces below replace what they cut (a
    // weight tile, an activation chunk, the part of y they write)
    let whole = Gemm {
        ty: GemmType::F32,
        w: w.ptr,
        rows,
        cols,
        x,
        n: n_tok,
        y,
        ldy: rows,
    };
    match w.dtype {
        DType::F32 => {
            // SAFETY: w, x, y hold the matrices described (checked by callers).
            unsafe { blas.gemm(&whole)? };
        }
        DType::F16 => {
            let cut = geometry::gemm_cut(rows, cols, n_tok, 0, 2, free).map_err(launch_err)?;
            let xh = scratch.take(cut.tokens * cols * 2).map_err(launch_err)?;
            for t0 in (0..n_tok).step_by(cut.tokens) {
                let tc = cut.tokens.min(n_tok - t0);
                to_f16(dev, x + (t0 * cols * 4) as u64, xh, tc * cols)?;
                let g = Gemm {
                    ty: GemmType::F16,
                    x: xh,
                    n: tc,
                    y: y + (t0 * rows * 4) as u64,
                    ..whole
                };
                // SAFETY: xh holds tc x cols halves; y rows t0.. hold tc x rows floats.
                unsafe { blas.gemm(&g)? };
            }
        }
        DType::BF16 => {
            let cut = geometry::gemm_cut(rows, cols, n_tok, 4, 0, free).map_err(launch_err)?;
            let wt = scratch.take(cut.rows * cols * 4).map_err(launch_err)?;
            for r0 in (0..rows).step_by(cut.rows) {
                let rc = cut.rows.min(rows - r0);
                let tile = WeightRef {
                    ptr: w.ptr + r0 as u64 * w.row_bytes(),
                    rows: rc,
                    ..*w
                };
                dequantize(dev, &tile, wt, false)?;
                let g = Gemm {
                    w: wt,
                    rows: rc,
                    y: y + (r0 * 4) as u64,
                    ..whole
                };
                // SAFETY: wt holds rc x cols floats; C starts at column r0 of y.
                unsafe { blas.gemm(&g)? };
            }
        }
        _ => {
            let cut = geometry::gemm_cut(rows, cols, n_tok, 2, 2, free).map_err(launch_err)?;
            let xh = scratch.take(cut.tokens * cols * 2).map_err(launch_err)?;
            let wt = scratch.take(cut.rows * cols * 2).map_err(launch_err)?;
            let once = cut.tokens >= n_tok;
            if once {
                to_f16(dev, x, xh, n_tok * cols)?;
            }
            for r0 in (0..rows).step_by(cut.rows) {
                let rc = cut.rows.min(rows - r0);
                let tile = WeightRef {
                    ptr: w.ptr + r0 as u64 * w.row_bytes(),
                    rows: rc,
                    ..*w
                };
                dequantize(dev, &tile, wt, true)?;
                for t0 in (0..n_tok).step_by(cut.tokens) {
                    let tc = cut.tokens.min(n_tok - t0);
                    if !once {
                        to_f16(dev, x + (t0 * cols * 4) as u64, xh, tc * cols)?;
                    }
                    let g = Gemm {
                        ty: GemmType::F16,
                        w: wt,
                        rows: rc,
                        x: xh,
                        n: tc,
                        y: y + ((t0 * rows + r0) * 4) as u64,
                        ..whole
                    };
                    // SAFETY: wt holds rc x cols halves, xh tc x cols halves;
                    // C is the (r0.., t0..) block of y with leading dim rows.
                    unsafe { blas.gemm(&g)? };
                }
            }
        }
    }
    if bias != 0 {
        let (r, total) = (rows as u64, (n_tok * rows) as u64);
        let f = dev.kernels.function(Module::Elementwise, "bias_add_f32")?;
        let mut b = dev.streams.compute.launch_builder(&f);
        b.arg(&y).arg(&bias).arg(&r).arg(&total);
        // SAFETY: y holds n_tok x rows floats, bias rows floats.
        drv("bias_add_f32", unsafe {
            b.launch(geometry::elementwise(total, dev.sm_count))
        })?;
    }
    Ok(())
}

fn to_f16(dev: &CudaDevice, x: CUdeviceptr, xh: CUdeviceptr, n: usize) -> Result<(), CudaError> {
    launch_n(dev, Module::Copy, "f32_to_f16", &[x, xh], n as u64)
}

/// Dequantises all rows of `w` into `out` as f16 (`half`) or f32 values.
pub(crate) fn dequantize(
    dev: &CudaDevice,
    w: &WeightRef,
    out: CUdeviceptr,
    half: bool,
) -> Result<(), CudaError> {
    if !w.cols.is_multiple_of(32) {
        return Err(launch_err(format!(
            "dequantising rows of {} columns (a multiple of 32 is needed)",
            w.cols
        )));
    }
    let rows = w.rows * w.mats;
    let name = format!(
        "dequant_{}_{}",
        if half { "f16" } else { "f32" },
        dtype_suffix(w.dtype)
    );
    let f = dev.kernels.function(Module::Matmul, &name)?;
    let cfg = geometry::per_item((rows * w.cols / 32) as u64).map_err(launch_err)?;
    let (rb, r, c) = (w.row_bytes(), rows as i32, w.cols as i32);
    let mut b = dev.streams.compute.launch_builder(&f);
    b.arg(&w.ptr).arg(&rb).arg(&r).arg(&c).arg(&out);
    // SAFETY: w holds `rows` rows; out holds rows x cols elements.
    drv(&name, unsafe { b.launch(cfg) })?;
    Ok(())
}
