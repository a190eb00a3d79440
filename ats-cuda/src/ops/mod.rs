//! Every graph op on the GPU: argument checks and plumbing here, the
//! launches of each op family in its own file.

mod attention;
mod elementwise;
mod embed;
pub mod matmul;
mod moe;
mod norm;
mod rope;
mod rows;

use ats_core::device::{DeviceError, NodeArgs, WeightData};
use ats_core::dtype::DType;
use ats_core::graph::{GeluKind, Op};
use cudarc::driver::PushKernelArg;
use cudarc::driver::sys::CUdeviceptr;

use crate::CudaError;
use crate::device::{CudaDevice, State};
use crate::geometry;
use crate::kernels::Module;
use crate::memory::drv;
use crate::workspace::{Carver, RoundData, round_blob};

/// A weight as a kernel sees it.
#[derive(Clone, Copy, Debug)]
pub struct WeightRef {
    /// Device address of the data.
    pub ptr: CUdeviceptr,
    /// Element type.
    pub dtype: DType,
    /// Rows of one matrix.
    pub rows: usize,
    /// Elements per row.
    pub cols: usize,
    /// Stacked matrices (experts).
    pub mats: usize,
}

impl WeightRef {
    /// Bytes of one row.
    pub fn row_bytes(&self) -> u64 {
        self.dtype.row_bytes(self.cols).unwrap_or(0) as u64
    }
}

/// The kernel-name suffix of a type.
pub fn dtype_suffix(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::Q8_0 => "q8_0",
        DType::Q4_0 => "q4_0",
        DType::Q4_1 => "q4_1",
        DType::Q5_0 => "q5_0",
        DType::Q5_1 => "q5_1",
        DType::Q2K => "q2_k",
        DType::Q3K => "q3_k",
        DType::Q4K => "q4_k",
        DType::Q5K => "q5_k",
        DType::Q6K => "q6_k",
        DType::IQ4NL => "iq4_nl",
        DType::IQ4XS => "iq4_xs",
        DType::MXFP4 => "mxfp4",
    }
}

/// One node being enqueued: its arguments resolved to device addresses.
pub(crate) struct Node<'a> {
    pub dev: &'a CudaDevice,
    pub args: &'a NodeArgs<'a>,
}

impl Node<'_> {
    /// A node error naming the device and the node.
    pub fn err(&self, message: impl Into<String>) -> DeviceError {
        DeviceError::Node {
            device: self.dev.info_name().to_string(),
            node: self.args.node.name.clone(),
            message: message.into(),
        }
    }

    /// A backend failure as a node error.
    pub fn cu(&self, e: CudaError) -> DeviceError {
        self.err(e.to_string())
    }

    /// Rows of value `v` in this round.
    pub fn rows_of(&self, v: usize) -> usize {
        let r = self.args.round;
        self.args.graph.values[v]
            .rows
            .resolve(r.n_rows, r.output_rows.len())
    }

    /// Columns of value `v`.
    pub fn cols_of(&self, v: usize) -> usize {
        self.args.graph.values[v].cols
    }

    /// Input `i`: `(address, rows, cols)`, checked to hold the value.
    pub fn input(&self, i: usize) -> Result<(CUdeviceptr, usize, usize), DeviceError> {
        let v = *self
            .args
            .node
            .inputs
            .get(i)
            .ok_or_else(|| self.err(format!("missing input {i}")))?;
        let b = self
            .args
            .inputs
            .get(i)
            .ok_or_else(|| self.err(format!("no buffer for input {i}")))?;
        let (rows, cols) = (self.rows_of(v), self.cols_of(v));
        let p = self.dev.ptr_of(b, 0, rows * cols * 4)?;
        Ok((p, rows, cols))
    }

    /// The output: `(address, rows, cols)`, checked to hold the value.
    pub fn output(&self) -> Result<(CUdeviceptr, usize, usize), DeviceError> {
        let v = self.args.node.output;
        let (rows, cols) = (self.rows_of(v), self.cols_of(v));
        let p = self.dev.ptr_of(self.args.output, 0, rows * cols * 4)?;
        Ok((p, rows, cols))
    }

    /// Weight `i` on this device.
    pub fn weight(&self, i: usize) -> Result<WeightRef, DeviceError> {
        let a = self
            .args
            .weights
            .get(i)
            .ok_or_else(|| self.err(format!("missing weight {i}")))?;
        let b = match &a.data {
            WeightData::Device(b) => *b,
            WeightData::Host(_) => {
                return Err(self.err(format!(
                    "weight {} is in host memory; a GPU needs it copied first",
                    a.info.name
                )));
            }
        };
        let ptr = self.dev.ptr_of(b, 0, a.info.bytes as usize)?;
        let w = WeightRef {
            ptr,
            dtype: a.info.dtype,
            rows: a.info.rows(),
            cols: a.info.cols(),
            mats: a.info.n_mats(),
        };
        let need = w.row_bytes() * (w.rows * w.mats) as u64;
        if w.dtype.row_bytes(w.cols).is_none() || need > a.info.bytes {
            return Err(self.err(format!(
                "weight {} ({} x {} of {}) does not match its {} bytes",
                a.info.name, w.rows, w.cols, w.dtype, a.info.bytes
            )));
        }
        Ok(w)
    }

    /// Weight `i` as f32 values (norm weights, biases, RoPE factors):
    /// in place when it is F32, else dequantised into scratch.
    pub fn weight_f32(
        &self,
        i: usize,
        scratch: &mut Carver,
    ) -> Result<(CUdeviceptr, usize), DeviceError> {
        let w = self.weight(i)?;
        let n = w.rows * w.cols * w.mats;
        if w.dtype == DType::F32 {
            return Ok((w.ptr, n));
        }
        let flat = WeightRef {
            rows: n / w.cols,
            mats: 1,
            ..w
        };
        let out = scratch.take(n * 4).map_err(|e| self.err(e))?;
        matmul::dequantize(self.dev, &flat, out, false).map_err(|e| self.cu(e))?;
        Ok((out, n))
    }

    /// The round's inputs on the device, uploaded at the first node of a round.
    pub fn round<'s>(&self, st: &'s mut State) -> Result<&'s RoundData, DeviceError> {
        let r = self.args.round;
        let fresh = st
            .round
            .as_ref()
            .is_none_or(|d| !std::sync::Arc::ptr_eq(&d.round, r));
        if fresh {
            let (blob, offs) = round_blob(r);
            let need = blob.len().max(1);
            if st.work.round_buf.as_ref().is_none_or(|b| b.len() < need) {
                st.work.round_buf = None;
                let b = ats_core::device::Device::alloc(
                    self.dev,
                    ats_core::ledger::Region::Workspace,
                    need,
                    "round inputs",
                )?;
                st.work.round_buf = Some(b);
            }
            let base = self.dev.ptr_of(
                st.work.round_buf.as_ref().expect("just made"),
                0,
                blob.len(),
            )?;
            self.dev.stage_in(st, base, &blob).map_err(|e| self.cu(e))?;
            let bounds = &r.segments[1.min(r.segments.len())..];
            st.round = Some(RoundData {
                round: r.clone(),
                tokens: base + offs[0] as u64,
                positions: base + offs[1] as u64,
                components: r.positions.components as i32,
                output_rows: base + offs[2] as u64,
                bounds: base + offs[3] as u64,
                n_bounds: bounds.len() as i32,
                blocks: block_tables(r, base + offs[4] as u64),
            });
        }
        Ok(st.round.as_ref().expect("set above"))
    }

    /// Uploads a small table into the argument ring.
    pub fn upload(&self, st: &mut State, bytes: &[u8]) -> Result<CUdeviceptr, DeviceError> {
        let p = st.work.args_range(bytes.len()).map_err(|e| self.err(e))?;
        self.dev.stage_in(st, p, bytes).map_err(|e| self.cu(e))?;
        Ok(p)
    }
}

/// Launches an element-wise kernel `name(ptrs..., n)` of `module`.
pub(crate) fn launch_n(
    dev: &CudaDevice,
    module: Module,
    name: &str,
    ptrs: &[CUdeviceptr],
    n: u64,
) -> Result<(), CudaError> {
    let f = dev.kernels.function(module, name)?;
    let cfg = geometry::elementwise(n, dev.sm_count);
    let mut b = dev.streams.compute.launch_builder(&f);
    for p in ptrs {
        b.arg(p);
    }
    b.arg(&n);
    // SAFETY: the kernels of this shape index `n` elements of each pointer,
    // which the callers checked hold that many.
    drv(name, unsafe { b.launch(cfg) }).map(|_| ())
}

/// Enqueues one node on the compute stream.
pub(crate) fn run(
    dev: &CudaDevice,
    st: &mut State,
    args: &NodeArgs<'_>,
) -> Result<(), DeviceError> {
    let n = Node { dev, args };
    if args.inputs.iter().any(|b| b.same(args.output)) {
        return Err(n.err("output buffer aliases an input"));
    }
    let mut scratch = st.work.scratch();
    match &args.node.op {
        Op::Embed => embed::embed(&n, st),
        Op::RmsNorm { eps, group } => norm::rms_norm(&n, &mut scratch, *eps, *group),
        Op::LayerNorm { eps } => norm::layer_norm(&n, &mut scratch, *eps),
        Op::MatMul => matmul::node(&n, &mut scratch),
        Op::Add => elementwise::binary(&n, "add_f32"),
        Op::Mul => elementwise::binary(&n, "mul_f32"),
        Op::SwiGlu => elementwise::binary(&n, "swiglu_f32"),
        Op::Gelu(kind) => elementwise::unary(
            &n,
            match kind {
                GeluKind::Erf => "gelu_erf_f32",
                GeluKind::Tanh => "gelu_tanh_f32",
                GeluKind::Quick => "gelu_quick_f32",
            },
        ),
        Op::ReluSqr => elementwise::unary(&n, "relu_sqr_f32"),
        Op::Rope(spec) => rope::rope(&n, st, &mut scratch, spec),
        Op::Attention(spec) => attention::attention(&n, st, &mut scratch, spec),
        Op::MoeRouter {
            n_expert,
            top_k,
            routing,
        } => moe::router(&n, &mut scratch, *n_expert, *top_k, *routing),
        Op::MoeExperts {
            n_expert,
            top_k,
            act,
            biases,
        } => {
            let kind = moe::ExpertKind {
                act: *act,
                biases: *biases,
            };
            moe::experts(&n, &mut scratch, *n_expert, *top_k, kind)
        }
        Op::SelectRows => rows::select(&n, st),
        Op::PermuteRows { group, perm } => rows::permute(&n, st, *group, perm),
        Op::MergeRows { .. } => rows::merge(&n),
        Op::GatherCols {
            offset,
            len,
            stride,
            blocks,
        } => rows::gather_cols(&n, *offset, *len, *stride, *blocks),
    }
}

/// Each sequence's block table's address in the uploaded round, in the
/// order of [`ats_core::round::Round::seqs`] (tables laid one after another
/// from `base`).
fn block_tables(r: &ats_core::round::Round, base: CUdeviceptr) -> Vec<Option<CUdeviceptr>> {
    let mut at = base;
    r.seqs
        .iter()
        .map(|s| match &s.cache {
            ats_core::round::CacheRows::Blocks(b) => {
                let p = at;
                at += 4 * b.len() as u64;
                Some(p)
            }
            ats_core::round::CacheRows::Contiguous => None,
        })
        .collect()
}
