//! Mixture of experts: the router (logits, then top-k on the device) and the
//! routed SwiGLU experts. The experts never read expert ids on the host:
//! `moe_index` groups the routed (token, slot) pairs by expert on the
//! device, and the grouped matmul `mm_moe_*` runs one tile of tokens per
//! block over the expert they were routed to. Tokens go in chunks so the
//! per-slot buffers fit the scratch area.

use ats_core::device::DeviceError;
use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::{Node, WeightRef, dtype_suffix, launch_n, matmul};
use crate::CudaError;
use crate::device::CudaDevice;
use crate::geometry::{self, MM_BT, MOE_MAX_TOPK, MV_MAX_TOKENS};
use crate::kernels::Module;
use crate::memory::drv;
use crate::workspace::Carver;

pub(crate) fn router(
    n: &Node<'_>,
    scratch: &mut Carver,
    n_expert: usize,
    top_k: usize,
    norm: bool,
) -> Result<(), DeviceError> {
    let (x, nt, d) = n.input(0)?;
    let (o, ro, co) = n.output()?;
    let w = n.weight(0)?;
    if w.rows != n_expert
        || w.cols != d
        || ro != nt
        || co != 2 * top_k
        || top_k == 0
        || top_k > n_expert
        || top_k > MOE_MAX_TOPK
    {
        return Err(n.err(format!(
            "router of {nt}x{d} over a {}x{} gate for {n_expert} experts, top {top_k}, into {ro}x{co}",
            w.rows, w.cols
        )));
    }
    let warps = 4usize;
    let shared = warps * n_expert * 4;
    if shared > geometry::SHARED_LIMIT {
        return Err(n.err(format!(
            "{n_expert} experts exceed the router's shared memory"
        )));
    }
    if nt == 0 {
        return Ok(());
    }
    let logits = scratch.take(nt * n_expert * 4).map_err(|e| n.err(e))?;
    matmul::product(n.dev, &w, x, nt, logits, 0, scratch).map_err(|e| n.cu(e))?;
    let f = n
        .dev
        .kernels
        .function(Module::Moe, "moe_topk")
        .map_err(|e| n.cu(e))?;
    let cfg = LaunchConfig {
        grid_dim: (nt.div_ceil(warps) as u32, 1, 1),
        block_dim: ((warps * 32) as u32, 1, 1),
        shared_mem_bytes: shared as u32,
    };
    let (a, e, k, nm) = (nt as i32, n_expert as i32, top_k as i32, i32::from(norm));
    let mut b = n.dev.streams.compute.launch_builder(&f);
    b.arg(&logits).arg(&o).arg(&a).arg(&e).arg(&k).arg(&nm);
    // SAFETY: logits hold nt x n_expert floats, o nt x 2 top_k; one warp per
    // token with n_expert floats of shared memory each.
    drv("moe_topk", unsafe { b.launch(cfg) }).map_err(|e| n.cu(e))?;
    Ok(())
}

pub(crate) fn experts(
    n: &Node<'_>,
    scratch: &mut Carver,
    n_expert: usize,
    top_k: usize,
) -> Result<(), DeviceError> {
    let (x, nt, d) = n.input(0)?;
    let (routing, rr, rc) = n.input(1)?;
    let (o, ro, co) = n.output()?;
    let (gate, up, down) = (n.weight(0)?, n.weight(1)?, n.weight(2)?);
    let f = gate.rows;
    let shapes_ok = gate.cols == d
        && (up.rows, up.cols) == (f, d)
        && (down.rows, down.cols) == (d, f)
        && [gate.mats, up.mats, down.mats] == [n_expert; 3]
        && rr == nt
        && rc == 2 * top_k
        && (ro, co) == (nt, d)
        && top_k > 0
        && top_k <= MOE_MAX_TOPK
        && d.is_multiple_of(32)
        && f.is_multiple_of(32);
    if !shapes_ok {
        return Err(n.err(format!(
            "experts of {nt}x{d} with routing {rr}x{rc}, gate {}x{}x{}, up {}x{}x{}, down {}x{}x{} into {ro}x{co}, {n_expert} experts, top {top_k}",
            gate.mats, gate.rows, gate.cols, up.mats, up.rows, up.cols, down.mats, down.rows, down.cols
        )));
    }
    if 2 * n_expert * 4 > geometry::SHARED_LIMIT {
        return Err(n.err(format!(
            "{n_expert} experts exceed the index's shared memory"
        )));
    }
    if nt == 0 {
        return Ok(());
    }
    if nt <= MV_MAX_TOKENS
        && [&gate, &up, &down]
            .iter()
            .all(|w| matmul::wide_suffix(w, x).is_some())
    {
        let mut c = *scratch;
        return routed_matvecs(
            n.dev,
            &mut c,
            [&gate, &up, &down],
            x,
            routing,
            o,
            [nt, d, n_expert, top_k],
        )
        .map_err(|e| n.cu(e));
    }
    let chunk =
        geometry::moe_chunk(nt, top_k, f, d, n_expert, scratch.free()).map_err(|e| n.err(e))?;
    let base = *scratch;
    for t0 in (0..nt).step_by(chunk) {
        let tc = chunk.min(nt - t0);
        let mut c = base;
        let run = |c: &mut Carver| -> Result<(), CudaError> {
            let slots = tc * top_k;
            let le = |e: String| CudaError::Launch(e);
            let meta = c.take((2 * (n_expert + 1) + slots) * 4).map_err(le)?;
            let g = c.take(slots * f * 4).map_err(le)?;
            let u = c.take(slots * f * 4).map_err(le)?;
            let y = c.take(slots * d * 4).map_err(le)?;
            let r = routing + (t0 * 2 * top_k * 4) as u64;
            index(n.dev, r, meta, tc, n_expert, top_k)?;
            let xc = x + (t0 * d * 4) as u64;
            grouped(n.dev, &gate, xc, g, meta, n_expert, top_k, slots)?;
            grouped(n.dev, &up, xc, u, meta, n_expert, top_k, slots)?;
            launch_n(
                n.dev,
                Module::Elementwise,
                "swiglu_f32",
                &[g, u, g],
                (slots * f) as u64,
            )?;
            grouped(n.dev, &down, g, y, meta, n_expert, 1, slots)?;
            combine(n.dev, r, y, o + (t0 * d * 4) as u64, tc, n_expert, top_k, d)
        };
        run(&mut c).map_err(|e| n.cu(e))?;
    }
    Ok(())
}

/// The experts of a decode round: each routed slot's gate, up and down
/// products read only its expert's rows (`matvec_wide_moe_*`), with no
/// grouping of tokens by expert.
fn routed_matvecs(
    dev: &CudaDevice,
    c: &mut Carver,
    [gate, up, down]: [&WeightRef; 3],
    x: u64,
    routing: u64,
    o: u64,
    [nt, d, n_expert, top_k]: [usize; 4],
) -> Result<(), CudaError> {
    let (slots, f) = (nt * top_k, gate.rows);
    let le = |e: String| CudaError::Launch(e);
    let g = c.take(slots * f * 4).map_err(le)?;
    let u = c.take(slots * f * 4).map_err(le)?;
    let y = c.take(slots * d * 4).map_err(le)?;
    let r = Routed {
        routing,
        slots,
        top_k,
        n_expert,
    };
    r.product(dev, gate, x, top_k, g)?;
    r.product(dev, up, x, top_k, u)?;
    launch_n(
        dev,
        Module::Elementwise,
        "swiglu_f32",
        &[g, u, g],
        (slots * f) as u64,
    )?;
    r.product(dev, down, g, 1, y)?;
    combine(dev, routing, y, o, nt, n_expert, top_k, d)
}

/// The routing of a decode round's slots.
struct Routed {
    routing: u64,
    slots: usize,
    top_k: usize,
    n_expert: usize,
}

impl Routed {
    /// `out[slot] = W_e x[slot / x_div]` for every routed slot (`matvec_wide_moe_*`).
    fn product(
        &self,
        dev: &CudaDevice,
        w: &WeightRef,
        x: u64,
        x_div: usize,
        out: u64,
    ) -> Result<(), CudaError> {
        let sfx = matmul::wide_suffix(w, x)
            .ok_or_else(|| CudaError::Launch(format!("no routed decode kernel for {}", w.dtype)))?;
        let name = format!("matvec_wide_moe_{sfx}");
        let func = dev.kernels.function(Module::Matvec, &name)?;
        let rb = w.row_bytes();
        let eb = rb * w.rows as u64;
        let (rows, cols, xd) = (w.rows as i32, w.cols as i32, x_div as i32);
        let (k, e) = (self.top_k as i32, self.n_expert as i32);
        let mut b = dev.streams.compute.launch_builder(&func);
        b.arg(&w.ptr)
            .arg(&rb)
            .arg(&eb)
            .arg(&rows)
            .arg(&cols)
            .arg(&x)
            .arg(&xd)
            .arg(&out)
            .arg(&self.routing)
            .arg(&k)
            .arg(&e);
        // SAFETY: w holds n_expert matrices of rows x cols (checked by
        // `experts`), aligned as wide_suffix requires; x holds slots / x_div
        // rows of cols floats, out slots rows of rows floats; the routing
        // holds a row of 2 top_k floats per token and ids past the experts
        // are skipped.
        drv(&name, unsafe {
            b.launch(geometry::matvec_wide_moe(w.rows, self.slots))
        })?;
        Ok(())
    }
}

fn index(
    dev: &CudaDevice,
    routing: u64,
    meta: u64,
    tc: usize,
    n_expert: usize,
    top_k: usize,
) -> Result<(), CudaError> {
    let f = dev.kernels.function(Module::Moe, "moe_index")?;
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (1024, 1, 1),
        shared_mem_bytes: (2 * n_expert * 4) as u32,
    };
    let (a, e, k, t) = (tc as i32, n_expert as i32, top_k as i32, MM_BT as i32);
    let mut b = dev.streams.compute.launch_builder(&f);
    b.arg(&routing).arg(&meta).arg(&a).arg(&e).arg(&k).arg(&t);
    // SAFETY: routing holds tc x 2 top_k floats; meta holds 2 (E + 1) + tc
    // top_k ints.
    drv("moe_index", unsafe { b.launch(cfg) })?;
    Ok(())
}

/// `y[slot] = W_e x[slot / x_div]` for every routed slot.
#[allow(clippy::too_many_arguments)]
fn grouped(
    dev: &CudaDevice,
    w: &WeightRef,
    x: u64,
    y: u64,
    meta: u64,
    n_expert: usize,
    x_div: usize,
    slots: usize,
) -> Result<(), CudaError> {
    let name = format!("mm_moe_{}", dtype_suffix(w.dtype));
    let f = dev.kernels.function(Module::Matmul, &name)?;
    let cfg = geometry::matmul(w.rows, geometry::moe_tiles_bound(slots, n_expert));
    let rb = w.row_bytes();
    let eb = rb * w.rows as u64;
    let (r, c, e, xd) = (w.rows as i32, w.cols as i32, n_expert as i32, x_div as i32);
    let mut b = dev.streams.compute.launch_builder(&f);
    b.arg(&w.ptr)
        .arg(&rb)
        .arg(&eb)
        .arg(&r)
        .arg(&c)
        .arg(&x)
        .arg(&y)
        .arg(&meta)
        .arg(&e)
        .arg(&xd);
    // SAFETY: w holds n_expert matrices of rows x cols; the list in meta
    // holds slot indices below `slots`, so x rows slot / x_div and y rows
    // slot lie inside their buffers; blocks past the last tile return.
    drv(&name, unsafe { b.launch(cfg) })?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn combine(
    dev: &CudaDevice,
    routing: u64,
    y: u64,
    out: u64,
    tc: usize,
    n_expert: usize,
    top_k: usize,
    d: usize,
) -> Result<(), CudaError> {
    let f = dev.kernels.function(Module::Moe, "moe_combine")?;
    let cfg = geometry::elementwise((tc * d) as u64, dev.sm_count);
    let (a, e, k, c) = (tc as i32, n_expert as i32, top_k as i32, d as i32);
    let mut b = dev.streams.compute.launch_builder(&f);
    b.arg(&routing)
        .arg(&y)
        .arg(&out)
        .arg(&a)
        .arg(&e)
        .arg(&k)
        .arg(&c);
    // SAFETY: routing holds tc x 2 top_k floats, y tc top_k x d, out tc x d.
    drv("moe_combine", unsafe { b.launch(cfg) })?;
    Ok(())
}
