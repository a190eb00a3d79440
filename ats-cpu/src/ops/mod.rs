//! Every graph op on the CPU: argument plumbing here, one kernel per file.

pub mod attention;
pub mod cached_attention;
pub mod cols;
mod decode_attention;
pub mod elementwise;
pub mod embed;
mod exp;
pub mod moe;
pub mod norm;
mod online_softmax;
mod par;
pub mod rope;
mod rope_angles;
pub mod rows;
pub mod vec;

use std::borrow::Cow;
use std::sync::RwLockReadGuard;

use ats_core::device::{DeviceError, NodeArgs, WeightArg, WeightData};
use ats_core::dtype::DType;
use ats_core::graph::{Gating, GeluKind, Op};

use crate::matmul::{Isa, WeightMatrix, matmul};
use crate::storage::cpu_storage;
pub use cached_attention::attention_shape;

/// A weight's bytes: borrowed host memory or a locked CPU buffer.
enum Bytes<'a> {
    Host(&'a [u8]),
    Buffer(RwLockReadGuard<'a, Vec<f32>>),
}

impl Bytes<'_> {
    fn get(&self) -> &[u8] {
        match self {
            Bytes::Host(b) => b,
            Bytes::Buffer(g) => bytemuck::cast_slice(&g[..]),
        }
    }
}

/// Runs one node on the calling thread (kernels fan out over the current [`crate::team`]).
pub(crate) fn run(args: &NodeArgs<'_>, isa: Isa, device: &str) -> Result<(), DeviceError> {
    let node = args.node;
    let err = |message: String| DeviceError::Node {
        device: device.to_string(),
        node: node.name.clone(),
        message,
    };
    let g = args.graph;
    let round = args.round;
    let n_outputs = round.output_rows.len();
    let rows_of = |v: usize| g.values[v].rows.resolve(round.n_rows, n_outputs);
    let len_of = |v: usize| rows_of(v) * g.values[v].cols;

    fn storage<'b>(
        b: &'b ats_core::device::Buffer,
        err: &dyn Fn(String) -> DeviceError,
    ) -> Result<&'b crate::storage::CpuStorage, DeviceError> {
        cpu_storage(b).ok_or_else(|| err(format!("buffer on {} is not CPU memory", b.device())))
    }
    let storage = |b| storage(b, &err);
    if args.inputs.iter().any(|b| b.same(args.output)) {
        return Err(err("output buffer aliases an input".into()));
    }
    let in_guards = args
        .inputs
        .iter()
        .map(|b| storage(b).map(|s| s.read()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut inputs: Vec<&[f32]> = Vec::with_capacity(in_guards.len());
    for (i, gd) in in_guards.iter().enumerate() {
        let v = node
            .inputs
            .get(i)
            .copied()
            .ok_or_else(|| err("more buffers than inputs".into()))?;
        let n = len_of(v);
        if gd.len() < n {
            return Err(err(format!(
                "input {i} buffer holds {} values, needs {n}",
                gd.len()
            )));
        }
        inputs.push(&gd[..n]);
    }
    let w_guards = args
        .weights
        .iter()
        .map(|w| match &w.data {
            WeightData::Host(b) => Ok(Bytes::Host(b)),
            WeightData::Device(b) => storage(b).map(|s| Bytes::Buffer(s.read())),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let wbytes = |i: usize| -> Result<(&[u8], &WeightArg<'_>), DeviceError> {
        let a = args
            .weights
            .get(i)
            .ok_or_else(|| err(format!("missing weight {i}")))?;
        let b = w_guards[i].get();
        if (b.len() as u64) < a.info.bytes {
            return Err(err(format!(
                "weight {} has {} of {} bytes",
                a.info.name,
                b.len(),
                a.info.bytes
            )));
        }
        Ok((&b[..a.info.bytes as usize], a))
    };
    let wf32 = |i: usize| -> Result<Cow<'_, [f32]>, DeviceError> {
        let (b, a) = wbytes(i)?;
        as_f32(b, a.info.dtype).map_err(err)
    };

    let mut out_guard = storage(args.output)?.write();
    let n_out = len_of(node.output);
    if out_guard.len() < n_out {
        return Err(err(format!(
            "output buffer holds {} values, needs {n_out}",
            out_guard.len()
        )));
    }
    let out = &mut out_guard[..n_out];
    let cols = g.values[node.output].cols;
    let input = |i: usize| -> Result<&[f32], DeviceError> {
        inputs
            .get(i)
            .copied()
            .ok_or_else(|| err(format!("missing input {i}")))
    };

    match &node.op {
        Op::Embed => {
            let (table, a) = wbytes(0)?;
            embed::embed(table, a.info.dtype, cols, &round.tokens, out).map_err(err)?;
            if let Some(ov) = &round.embed_override {
                for (k, &r) in ov.rows.iter().enumerate() {
                    let src = ov
                        .data
                        .get(k * cols..(k + 1) * cols)
                        .ok_or_else(|| err("embedding override too short".into()))?;
                    out.get_mut(r * cols..(r + 1) * cols)
                        .ok_or_else(|| {
                            err(format!("embedding override row {r} outside the round"))
                        })?
                        .copy_from_slice(src);
                }
            }
        }
        Op::RmsNorm { eps, group } => par::rms_norm(input(0)?, &wf32(0)?, out, *group, *eps),
        Op::LayerNorm { eps } => norm::layer_norm(input(0)?, &wf32(0)?, &wf32(1)?, out, cols, *eps),
        Op::MatMul => {
            let (w, a) = wbytes(0)?;
            let m = WeightMatrix {
                dtype: a.info.dtype,
                rows: a.info.rows(),
                cols: a.info.cols(),
                data: w,
            };
            let x = input(0)?;
            matmul(&m, x, x.len() / m.cols, out, isa).map_err(|e| err(e.to_string()))?;
            if args.weights.len() > 1 {
                let b = wf32(1)?;
                for row in out.chunks_exact_mut(cols) {
                    for (o, &bb) in row.iter_mut().zip(b.iter()) {
                        *o += bb;
                    }
                }
            }
        }
        Op::Add => elementwise::add(input(0)?, input(1)?, out),
        Op::Mul => elementwise::mul(input(0)?, input(1)?, out),
        Op::SwiGlu => par::swiglu(input(0)?, input(1)?, out),
        Op::Gelu(kind) => {
            let f = match kind {
                GeluKind::Erf => elementwise::gelu_erf,
                GeluKind::Tanh => elementwise::gelu_tanh,
                GeluKind::Quick => elementwise::gelu_quick,
            };
            for (o, &x) in out.iter_mut().zip(input(0)?) {
                *o = f(x);
            }
        }
        Op::ReluSqr => {
            for (o, &x) in out.iter_mut().zip(input(0)?) {
                *o = elementwise::relu_sqr(x);
            }
        }
        Op::Rope(spec) => {
            let x = input(0)?;
            if round.positions.len() < rows_of(node.output) {
                return Err(err(format!(
                    "{} positions for {} rows",
                    round.positions.len(),
                    rows_of(node.output)
                )));
            }
            let factors = if args.weights.is_empty() {
                None
            } else {
                Some(wf32(0)?)
            };
            par::rope(x, out, spec, &round.positions, factors.as_deref());
        }
        Op::Attention(spec) => {
            let cache = match (&spec.cache, &args.kv) {
                (Some(_), Some(kv)) => Some((kv, storage(kv.k)?, storage(kv.v)?)),
                _ => None,
            };
            let sinks = if spec.sinks {
                let sk = wf32(0)?;
                if sk.len() < spec.n_heads {
                    return Err(err(format!(
                        "{} sink logits for {} heads",
                        sk.len(),
                        spec.n_heads
                    )));
                }
                Some(sk)
            } else {
                None
            };
            let io = cached_attention::AttnIo {
                q: input(0)?,
                k: input(1)?,
                v: input(2)?,
                sinks: sinks.as_deref(),
                out,
            };
            cached_attention::attention(spec, round, io, cache).map_err(err)?;
        }
        Op::MoeRouter {
            n_expert,
            top_k,
            routing,
        } => {
            let (w, a) = wbytes(0)?;
            let m = WeightMatrix {
                dtype: a.info.dtype,
                rows: *n_expert,
                cols: a.info.cols(),
                data: w,
            };
            let x = input(0)?;
            let n = x.len() / m.cols;
            let mut logits = vec![0.0; n * n_expert];
            matmul(&m, x, n, &mut logits, isa).map_err(|e| err(e.to_string()))?;
            let bias = if args.weights.len() > 1 {
                let b = wf32(1)?;
                if b.len() < *n_expert {
                    return Err(err(format!(
                        "{} router biases for {n_expert} experts",
                        b.len()
                    )));
                }
                Some(b)
            } else {
                None
            };
            let select = match (routing.gating, &bias) {
                (Gating::Softmax, Some(b)) => {
                    for row in logits.chunks_exact_mut(*n_expert) {
                        for (o, &bb) in row.iter_mut().zip(b.iter()) {
                            *o += bb;
                        }
                    }
                    None
                }
                (Gating::Softmax, None) => None,
                (Gating::Sigmoid, Some(b)) => Some(&b[..]),
                (Gating::Sigmoid, None) => {
                    return Err(err("a sigmoid router without its selection bias".into()));
                }
            };
            moe::route(&logits, (*n_expert, *top_k), *routing, select, out);
        }
        Op::MoeExperts {
            n_expert,
            top_k,
            act,
            biases,
        } => {
            let (gb, ga) = wbytes(0)?;
            let (ub, ua) = wbytes(1)?;
            let (db, da) = wbytes(2)?;
            let (n_embd, n_ff) = (ga.info.cols(), ga.info.rows());
            let bias = if *biases {
                let (g, u, d) = (wf32(3)?, wf32(4)?, wf32(5)?);
                let want = [n_ff * n_expert, n_ff * n_expert, n_embd * n_expert];
                if [g.len(), u.len(), d.len()] != want {
                    return Err(err(format!(
                        "expert biases of {}, {}, {} values, want {want:?}",
                        g.len(),
                        u.len(),
                        d.len()
                    )));
                }
                Some([g, u, d])
            } else {
                None
            };
            let w = moe::Experts {
                gate: (gb, ga.info.dtype),
                up: (ub, ua.info.dtype),
                down: (db, da.info.dtype),
                n_expert: *n_expert,
                n_embd,
                n_ff,
                act: *act,
                biases: bias.as_ref().map(|[g, u, d]| [&g[..], &u[..], &d[..]]),
            };
            moe::experts(input(0)?, input(1)?, *top_k, &w, out, isa)
                .map_err(|e| err(e.to_string()))?;
        }
        Op::SelectRows => {
            if round.output_rows.iter().any(|&r| r >= round.n_rows) {
                return Err(err("an output row lies outside the round".into()));
            }
            rows::select_rows(input(0)?, &round.output_rows, cols, out)
        }
        Op::PermuteRows { group, perm } => rows::permute_rows(input(0)?, perm, *group, cols, out),
        Op::MergeRows { .. } => out.copy_from_slice(input(0)?),
        Op::GatherCols {
            offset,
            len,
            stride,
            blocks,
        } => {
            let in_cols = g.values[node.inputs[0]].cols;
            let b = cols::ColBlocks {
                offset: *offset,
                len: *len,
                stride: *stride,
                blocks: *blocks,
            };
            if !b.fits(in_cols) || b.out_cols() != cols {
                return Err(err(format!(
                    "column blocks {b:?} do not fit {in_cols} input and {cols} output columns"
                )));
            }
            cols::gather_cols(input(0)?, in_cols, &b, out)
        }
    }
    Ok(())
}

/// A weight as f32 values: borrowed when it is aligned F32, dequantised otherwise.
fn as_f32(b: &[u8], dtype: DType) -> Result<Cow<'_, [f32]>, String> {
    if dtype == DType::F32
        && let Ok(s) = bytemuck::try_cast_slice::<u8, f32>(b)
    {
        return Ok(Cow::Borrowed(s));
    }
    let n = b.len() / dtype.type_size() * dtype.block_size();
    ats_core::quant::dequantize(dtype, b, n)
        .map(Cow::Owned)
        .map_err(|e| e.to_string())
}
