//! Mixture of experts: the router (logits, softmax or sigmoid scores, top-k
//! on the device) and the routed gated experts (SwiGLU, or gpt-oss's clamped
//! SwiGLU with per-expert biases). The experts never read expert ids on the host:
//! `moe_index` groups the routed (token, slot) pairs by expert on the
//! device, and the grouped matmul `mm_moe_*` runs one tile of tokens per
//! block over the expert they were routed to. Tokens go in chunks so the
//! per-slot buffers fit the scratch area.

use ats_core::device::DeviceError;
use ats_core::graph::{ExpertAct, Gating, Routing};
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
    routing: Routing,
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
    let warps = geometry::ROUTER_WARPS;
    let shared = warps * n_expert * 4;
    if shared > geometry::SHARED_LIMIT {
        return Err(n.err(format!(
            "{n_expert} experts exceed the router's shared memory"
        )));
    }
    if nt == 0 {
        return Ok(());
    }
    let bias = if n.args.weights.len() > 1 {
        let (b, len) = n.weight_f32(1, scratch)?;
        if len < n_expert {
            return Err(n.err(format!("{len} router biases for {n_expert} experts")));
        }
        b
    } else {
        0
    };
    // softmax: the bias is on the logits; sigmoid: it only chooses
    let (logit_bias, select_bias) = match routing.gating {
        Gating::Softmax => (bias, 0),
        Gating::Sigmoid if bias == 0 => {
            return Err(n.err("a sigmoid router without its selection bias"));
        }
        Gating::Sigmoid => (0, bias),
    };
    let logits = scratch.take(nt * n_expert * 4).map_err(|e| n.err(e))?;
    matmul::product(n.dev, &w, x, nt, logits, logit_bias, scratch).map_err(|e| n.cu(e))?;
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
    let (a, e, k) = (nt as i32, n_expert as i32, top_k as i32);
    let nm = i32::from(routing.norm_topk);
    let gating = i32::from(routing.gating == Gating::Sigmoid);
    let scale = routing.scale;
    let mut b = n.dev.streams.compute.launch_builder(&f);
    b.arg(&logits).arg(&o).arg(&select_bias);
    b.arg(&a).arg(&e).arg(&k).arg(&nm).arg(&gating).arg(&scale);
    // SAFETY: logits hold nt x n_expert floats, o nt x 2 top_k, a sigmoid
    // router's select_bias n_expert floats (checked above; unread for
    // softmax); one warp per token with n_expert floats of shared memory each.
    drv("moe_topk", unsafe { b.launch(cfg) }).map_err(|e| n.cu(e))?;
    Ok(())
}

/// What the experts do beyond their three stacked products: how gate and
/// up combine, and whether each product adds its expert's bias.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ExpertKind {
    pub act: ExpertAct,
    pub biases: bool,
}

/// Per-expert biases of gate, up and down on the device (f32).
#[derive(Clone, Copy, Debug)]
struct Biases {
    gate: u64,
    up: u64,
    down: u64,
}

/// The activation and biases the expert products share.
#[derive(Clone, Copy, Debug)]
struct Post {
    act: ExpertAct,
    biases: Option<Biases>,
}

pub(crate) fn experts(
    n: &Node<'_>,
    scratch: &mut Carver,
    n_expert: usize,
    top_k: usize,
    kind: ExpertKind,
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
    let biases = if kind.biases {
        let mut bias = |i: usize, len: usize| -> Result<u64, DeviceError> {
            let (p, got) = n.weight_f32(i, scratch)?;
            if got != len * n_expert {
                return Err(n.err(format!(
                    "expert bias {i} holds {got} values, not {n_expert} x {len}"
                )));
            }
            Ok(p)
        };
        Some(Biases {
            gate: bias(3, f)?,
            up: bias(4, f)?,
            down: bias(5, d)?,
        })
    } else {
        None
    };
    let post = Post {
        act: kind.act,
        biases,
    };
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
            [x, routing, o],
            [nt, d, n_expert, top_k],
            post,
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
            let grp = Grouped {
                meta,
                n_expert,
                slots,
            };
            grp.product(n.dev, &gate, xc, top_k, g)?;
            grp.product(n.dev, &up, xc, top_k, u)?;
            let sh = SlotShape {
                routing: r,
                slots,
                n_expert,
                top_k,
            };
            post.activate(n.dev, &sh, [g, u], f)?;
            grp.product(n.dev, &down, g, 1, y)?;
            post.add_down(n.dev, &sh, y, d)?;
            combine(n.dev, &sh, y, o + (t0 * d * 4) as u64, d)
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
    [x, routing, o]: [u64; 3],
    [nt, d, n_expert, top_k]: [usize; 4],
    post: Post,
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
    let sh = SlotShape {
        routing,
        slots,
        n_expert,
        top_k,
    };
    post.activate(dev, &sh, [g, u], f)?;
    r.product(dev, down, g, 1, y)?;
    post.add_down(dev, &sh, y, d)?;
    combine(dev, &sh, y, o, d)
}

/// Routed slots (token `s / top_k`, choice `s % top_k`) and their routing.
struct SlotShape {
    routing: u64,
    slots: usize,
    n_expert: usize,
    top_k: usize,
}

impl Post {
    /// `g = act(g + b_gate, u + b_up)` over `slots x f` products.
    fn activate(
        &self,
        dev: &CudaDevice,
        sh: &SlotShape,
        [g, u]: [u64; 2],
        f: usize,
    ) -> Result<(), CudaError> {
        if let Some(b) = self.biases {
            bias(dev, sh, g, b.gate, f)?;
            bias(dev, sh, u, b.up, f)?;
        }
        let n = (sh.slots * f) as u64;
        match self.act {
            ExpertAct::SwiGlu => launch_n(dev, Module::Elementwise, "swiglu_f32", &[g, u, g], n),
            ExpertAct::SwiGluOai { alpha, limit } => {
                let func = dev
                    .kernels
                    .function(Module::Elementwise, "swiglu_oai_f32")?;
                let mut b = dev.streams.compute.launch_builder(&func);
                b.arg(&g).arg(&u).arg(&g).arg(&n).arg(&alpha).arg(&limit);
                // SAFETY: g and u hold n floats (slots x f); out aliases gate
                // element for element, each read before it is written.
                drv("swiglu_oai_f32", unsafe {
                    b.launch(geometry::elementwise(n, dev.sm_count))
                })?;
                Ok(())
            }
        }
    }

    /// `y += b_down` of each slot's expert, over `slots x d` outputs.
    fn add_down(
        &self,
        dev: &CudaDevice,
        sh: &SlotShape,
        y: u64,
        d: usize,
    ) -> Result<(), CudaError> {
        match self.biases {
            Some(b) => bias(dev, sh, y, b.down, d),
            None => Ok(()),
        }
    }
}

/// `moe_bias`: each slot's row of `y` (`cols` wide) plus its expert's bias row.
fn bias(dev: &CudaDevice, sh: &SlotShape, y: u64, b: u64, cols: usize) -> Result<(), CudaError> {
    let f = dev.kernels.function(Module::Moe, "moe_bias")?;
    let cfg = geometry::elementwise((sh.slots * cols) as u64, dev.sm_count);
    let (s, c, e, k) = (
        sh.slots as i32,
        cols as i32,
        sh.n_expert as i32,
        sh.top_k as i32,
    );
    let mut lb = dev.streams.compute.launch_builder(&f);
    lb.arg(&y)
        .arg(&b)
        .arg(&sh.routing)
        .arg(&s)
        .arg(&c)
        .arg(&e)
        .arg(&k);
    // SAFETY: y holds slots x cols floats, b n_expert x cols (checked by
    // `experts`), the routing a row of 2 top_k floats per token of the
    // slots; ids past the experts add nothing.
    drv("moe_bias", unsafe { lb.launch(cfg) })?;
    Ok(())
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

/// The routed slots of a chunk grouped by expert: `moe_index`'s lists in `meta`.
struct Grouped {
    meta: u64,
    n_expert: usize,
    slots: usize,
}

impl Grouped {
    /// `y[slot] = W_e x[slot / x_div]` for every routed slot (`mm_moe_*`).
    fn product(
        &self,
        dev: &CudaDevice,
        w: &WeightRef,
        x: u64,
        x_div: usize,
        y: u64,
    ) -> Result<(), CudaError> {
        let name = format!("mm_moe_{}", dtype_suffix(w.dtype));
        let f = dev.kernels.function(Module::Matmul, &name)?;
        let tiles = geometry::moe_tiles_bound(self.slots, self.n_expert);
        let cfg = geometry::matmul(w.rows, tiles);
        let rb = w.row_bytes();
        let eb = rb * w.rows as u64;
        let (r, c) = (w.rows as i32, w.cols as i32);
        let (e, xd) = (self.n_expert as i32, x_div as i32);
        let mut b = dev.streams.compute.launch_builder(&f);
        b.arg(&w.ptr)
            .arg(&rb)
            .arg(&eb)
            .arg(&r)
            .arg(&c)
            .arg(&x)
            .arg(&y)
            .arg(&self.meta)
            .arg(&e)
            .arg(&xd);
        // SAFETY: w holds n_expert matrices of rows x cols; the list in meta
        // holds slot indices below `slots`, so x rows slot / x_div and y rows
        // slot lie inside their buffers; blocks past the last tile return.
        drv(&name, unsafe { b.launch(cfg) })?;
        Ok(())
    }
}

/// `out[t] = sum over token t's slots of weight * y[slot]` (`moe_combine`),
/// rows of `d` columns.
fn combine(dev: &CudaDevice, sh: &SlotShape, y: u64, out: u64, d: usize) -> Result<(), CudaError> {
    let tc = sh.slots / sh.top_k;
    let f = dev.kernels.function(Module::Moe, "moe_combine")?;
    let cfg = geometry::elementwise((tc * d) as u64, dev.sm_count);
    let (a, e, k, c) = (tc as i32, sh.n_expert as i32, sh.top_k as i32, d as i32);
    let mut b = dev.streams.compute.launch_builder(&f);
    b.arg(&sh.routing)
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
