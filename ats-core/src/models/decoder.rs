//! The building blocks shared by the decoder-only architectures: each method
//! is one step of the reference forward pass, checking the tensors it reads.

use crate::graph::{
    AttnSpec, ExpertAct, Gating, Graph, GraphBuilder, GraphInput, KvCacheInfo, Mask, Op, RopeKind,
    RopeSpec, Rows, SubLayer, ValueId, WeightId,
};
use crate::names::tensor::{self as t, blk};
use crate::spec::{HParams, ModelSpec, NormKind, SpecError};

/// A graph under construction for one text model.
pub(crate) struct Decoder<'a> {
    spec: &'a ModelSpec,
    pub hp: &'a HParams,
    pub b: GraphBuilder,
}

impl<'a> Decoder<'a> {
    pub fn new(spec: &'a ModelSpec) -> Self {
        Decoder {
            spec,
            hp: &spec.hp,
            b: GraphBuilder::new(GraphInput::Tokens),
        }
    }

    /// Registers the tensor `name` (of layer `il`, if given) with GGML dimensions `ne`.
    pub fn weight(
        &mut self,
        il: Option<usize>,
        name: &str,
        ne: &[usize],
    ) -> Result<WeightId, SpecError> {
        let full = match il {
            Some(l) => blk(l, name),
            None => name.to_string(),
        };
        let info = self.spec.weight(&full, ne)?;
        Ok(self.b.weight(info))
    }

    /// Like [`Self::weight`], for a tensor that may be absent.
    pub fn opt_weight(
        &mut self,
        il: Option<usize>,
        name: &str,
        ne: &[usize],
    ) -> Result<Option<WeightId>, SpecError> {
        let full = match il {
            Some(l) => blk(l, name),
            None => name.to_string(),
        };
        if self.spec.has_tensor(&full) {
            self.weight(il, name, ne).map(Some)
        } else {
            Ok(None)
        }
    }

    /// `x = token_embd[tokens]`.
    pub fn embed(&mut self) -> Result<ValueId, SpecError> {
        self.b.at(None, SubLayer::Embed);
        let (d, v) = (self.hp.n_embd, self.hp.n_vocab);
        let w = self.weight(None, t::TOKEN_EMBD, &[d, v])?;
        let input = self.b.input();
        Ok(self
            .b
            .node("token_embd", Op::Embed, &[input], &[w], Rows::Tokens, d))
    }

    /// The model's norm of the hidden state with the layer's `name` weight.
    pub fn norm(
        &mut self,
        x: ValueId,
        il: usize,
        name: &str,
        sub: SubLayer,
    ) -> Result<ValueId, SpecError> {
        self.b.at(Some(il), sub);
        self.norm_as(&blk(il, name), x, Some(il), name)
    }

    /// The node `node`: RMSNorm or LayerNorm (as the architecture
    /// normalises) of `x` with the weight `name` (of layer `il`, if given),
    /// and its bias for LayerNorm.
    fn norm_as(
        &mut self,
        node: &str,
        x: ValueId,
        il: Option<usize>,
        name: &str,
    ) -> Result<ValueId, SpecError> {
        let d = self.hp.n_embd;
        let w = self.weight(il, name, &[d])?;
        Ok(match self.spec.arch.norm_kind() {
            NormKind::Rms => self.b.rms_norm(node, x, w, self.hp.rms_eps, d),
            NormKind::Layer => {
                let bias = name.strip_suffix(".weight").unwrap_or(name).to_string() + ".bias";
                let b = self.weight(il, &bias, &[d])?;
                self.b.layer_norm(node, x, w, b, self.hp.ln_eps)
            }
        })
    }

    /// `q, k, v = h Wq^T (+bq), h Wk^T (+bk), h Wv^T (+bv)`.
    pub fn qkv(
        &mut self,
        h: ValueId,
        il: usize,
        bias: bool,
    ) -> Result<(ValueId, ValueId, ValueId), SpecError> {
        self.b.at(Some(il), SubLayer::AttnQkv);
        let hp = self.hp;
        let (d, dq, dkv) = (
            hp.n_embd,
            hp.n_head * hp.head_dim,
            hp.n_head_kv * hp.head_dim,
        );
        let mut proj = |w: &str, bname: &str, out: usize| -> Result<ValueId, SpecError> {
            let wi = self.weight(Some(il), w, &[d, out])?;
            let bi = if bias {
                Some(self.weight(Some(il), bname, &[out])?)
            } else {
                None
            };
            Ok(self.b.matmul(&blk(il, w), h, wi, bi))
        };
        let q = proj(t::ATTN_Q, t::ATTN_Q_BIAS, dq)?;
        let k = proj(t::ATTN_K, t::ATTN_K_BIAS, dkv)?;
        let v = proj(t::ATTN_V, t::ATTN_V_BIAS, dkv)?;
        Ok((q, k, v))
    }

    /// Per-head RMSNorm of q and k (Qwen3).
    pub fn head_norms(
        &mut self,
        q: ValueId,
        k: ValueId,
        il: usize,
    ) -> Result<(ValueId, ValueId), SpecError> {
        self.b.at(Some(il), SubLayer::AttnQkv);
        let hd = self.hp.head_dim;
        let wq = self.weight(Some(il), t::ATTN_Q_NORM, &[hd])?;
        let wk = self.weight(Some(il), t::ATTN_K_NORM, &[hd])?;
        let q = self
            .b
            .rms_norm(&blk(il, t::ATTN_Q_NORM), q, wq, self.hp.rms_eps, hd);
        let k = self
            .b
            .rms_norm(&blk(il, t::ATTN_K_NORM), k, wk, self.hp.rms_eps, hd);
        Ok((q, k))
    }

    /// [`Self::head_norms`] when the file has them for layer `il`.
    pub fn opt_head_norms(
        &mut self,
        q: ValueId,
        k: ValueId,
        il: usize,
    ) -> Result<(ValueId, ValueId), SpecError> {
        if self.spec.has_tensor(&blk(il, t::ATTN_Q_NORM)) {
            self.head_norms(q, k, il)
        } else {
            Ok((q, k))
        }
    }

    /// RoPE on q and k, with optional frequency factors.
    pub fn rope(
        &mut self,
        q: ValueId,
        k: ValueId,
        il: usize,
        kind: RopeKind,
        freqs: Option<WeightId>,
    ) -> (ValueId, ValueId) {
        self.b.at(Some(il), SubLayer::AttnQkv);
        let hp = self.hp;
        let spec = |n_heads| RopeSpec {
            kind,
            n_heads,
            head_dim: hp.head_dim,
            rot_dim: hp.rope_dim,
            theta: hp.rope_theta,
            yarn: hp.yarn,
        };
        let q = self
            .b
            .rope(&format!("blk.{il}.rope_q"), q, spec(hp.n_head), freqs);
        let k = self
            .b
            .rope(&format!("blk.{il}.rope_k"), k, spec(hp.n_head_kv), freqs);
        (q, k)
    }

    /// Causal attention over the layer's KV cache, then the output projection.
    pub fn attention(
        &mut self,
        q: ValueId,
        k: ValueId,
        v: ValueId,
        il: usize,
    ) -> Result<ValueId, SpecError> {
        self.attention_with(q, k, v, il, AttnExtras::default())
    }

    /// [`Self::attention`] with the layer's sliding window, sink logits
    /// and output bias as `x` asks.
    pub fn attention_with(
        &mut self,
        q: ValueId,
        k: ValueId,
        v: ValueId,
        il: usize,
        x: AttnExtras,
    ) -> Result<ValueId, SpecError> {
        let hp = self.hp;
        self.b.at(Some(il), SubLayer::Attention);
        let cache = self.b.kv_cache(KvCacheInfo {
            layer: il,
            n_kv_heads: hp.n_head_kv,
            head_dim: hp.head_dim,
        });
        let window =
            (x.window && hp.swa_layers.get(il) == Some(&true) && hp.n_swa > 0).then_some(hp.n_swa);
        let spec = AttnSpec {
            cache: Some(cache),
            n_heads: hp.n_head,
            n_kv_heads: hp.n_head_kv,
            head_dim: hp.head_dim,
            scale: 1.0 / (hp.head_dim as f32).sqrt(),
            mask: Mask::Causal,
            window,
            sinks: x.sinks,
        };
        let sinks = if x.sinks {
            Some(self.weight(Some(il), t::ATTN_SINKS, &[hp.n_head])?)
        } else {
            None
        };
        let a = self
            .b
            .attention(&format!("blk.{il}.attn"), [q, k, v], spec, sinks);
        self.b.at(Some(il), SubLayer::AttnOut);
        let wo = self.weight(Some(il), t::ATTN_OUT, &[hp.n_head * hp.head_dim, hp.n_embd])?;
        let bo = if x.out_bias {
            Some(self.weight(Some(il), t::ATTN_OUT_BIAS, &[hp.n_embd])?)
        } else {
            None
        };
        Ok(self.b.matmul(&blk(il, t::ATTN_OUT), a, wo, bo))
    }

    /// `x + y`, recorded in the current sub-layer.
    pub fn residual(&mut self, x: ValueId, y: ValueId, name: String) -> ValueId {
        self.b.add(&name, x, y)
    }

    /// SwiGLU FFN: `down(silu(gate h) * up h)`.
    pub fn ffn(&mut self, h: ValueId, il: usize) -> Result<ValueId, SpecError> {
        let names = [t::FFN_GATE, t::FFN_UP, t::FFN_DOWN];
        self.swiglu_ffn(h, il, names, self.hp.n_ff, "ffn_swiglu")
    }

    /// The shared expert beside routed ones: a SwiGLU FFN `n_expert_shared`
    /// expert FFNs wide (`None` when the model has none).
    pub fn shared_expert(&mut self, h: ValueId, il: usize) -> Result<Option<ValueId>, SpecError> {
        let hp = self.hp;
        if hp.n_expert_shared == 0 {
            return Ok(None);
        }
        let names = [t::FFN_GATE_SHEXP, t::FFN_UP_SHEXP, t::FFN_DOWN_SHEXP];
        let f = hp
            .n_expert_shared
            .checked_mul(hp.n_ff_expert)
            .ok_or_else(|| SpecError::BadKey {
                key: format!(
                    "{}.{}",
                    self.spec.arch.name(),
                    crate::names::hp::EXPERT_SHARED_COUNT
                ),
                problem: format!("{} shared experts overflow", hp.n_expert_shared),
            })?;
        self.swiglu_ffn(h, il, names, f, "ffn_swiglu_shexp")
            .map(Some)
    }

    /// `down(silu(gate h) * up h)` with the `[gate, up, down]` tensors
    /// `names` of width `f`.
    fn swiglu_ffn(
        &mut self,
        h: ValueId,
        il: usize,
        names: [&str; 3],
        f: usize,
        act: &str,
    ) -> Result<ValueId, SpecError> {
        let d = self.hp.n_embd;
        let [gate, up, down] = names;
        self.b.at(Some(il), SubLayer::FfnUp);
        let wg = self.weight(Some(il), gate, &[d, f])?;
        let wu = self.weight(Some(il), up, &[d, f])?;
        let g = self.b.matmul(&blk(il, gate), h, wg, None);
        let u = self.b.matmul(&blk(il, up), h, wu, None);
        let a = self.b.swiglu(&format!("blk.{il}.{act}"), g, u);
        self.b.at(Some(il), SubLayer::FfnDown);
        let wd = self.weight(Some(il), down, &[f, d])?;
        Ok(self.b.matmul(&blk(il, down), a, wd, None))
    }

    /// SwiGLU FFN whose gate and up rows are one matrix (`ffn_up` of
    /// `2 n_ff` rows, gate first): `down(silu(g) * u)` with `g, u` the two
    /// halves of `h W_up^T` (GLM-4).
    pub fn ffn_fused_up(&mut self, h: ValueId, il: usize) -> Result<ValueId, SpecError> {
        let (d, f) = (self.hp.n_embd, self.hp.n_ff);
        self.b.at(Some(il), SubLayer::FfnUp);
        let wu = self.weight(Some(il), t::FFN_UP, &[d, 2 * f])?;
        let gu = self.b.matmul(&blk(il, t::FFN_UP), h, wu, None);
        let g = self
            .b
            .gather_cols(&format!("blk.{il}.ffn_gate_half"), gu, 0, f, 2 * f, 1);
        let u = self
            .b
            .gather_cols(&format!("blk.{il}.ffn_up_half"), gu, f, f, 2 * f, 1);
        let a = self.b.swiglu(&format!("blk.{il}.ffn_swiglu"), g, u);
        self.b.at(Some(il), SubLayer::FfnDown);
        let wd = self.weight(Some(il), t::FFN_DOWN, &[f, d])?;
        Ok(self.b.matmul(&blk(il, t::FFN_DOWN), a, wd, None))
    }

    /// Non-gated FFN with squared ReLU: `down(relu(up h)^2)`, with the
    /// up and down biases the file has (Nemotron).
    pub fn ffn_relu_sqr(&mut self, h: ValueId, il: usize) -> Result<ValueId, SpecError> {
        let (d, f) = (self.hp.n_embd, self.hp.n_ff);
        self.b.at(Some(il), SubLayer::FfnUp);
        let wu = self.weight(Some(il), t::FFN_UP, &[d, f])?;
        let bu = self.opt_weight(Some(il), t::FFN_UP_BIAS, &[f])?;
        let u = self.b.matmul(&blk(il, t::FFN_UP), h, wu, bu);
        let a = self.b.relu_sqr(&format!("blk.{il}.ffn_relu_sqr"), u);
        self.b.at(Some(il), SubLayer::FfnDown);
        let wd = self.weight(Some(il), t::FFN_DOWN, &[f, d])?;
        let bd = self.opt_weight(Some(il), t::FFN_DOWN_BIAS, &[d])?;
        Ok(self.b.matmul(&blk(il, t::FFN_DOWN), a, wd, bd))
    }

    /// Routed SwiGLU experts, routed as the model's `routing` says.
    pub fn moe(&mut self, h: ValueId, il: usize) -> Result<ValueId, SpecError> {
        self.moe_with(h, il, ExpertAct::SwiGlu, false)
    }

    /// Routed experts combining gate and up by `act`, with biases on the
    /// (softmax) router and every expert product when `biases`.
    pub fn moe_with(
        &mut self,
        h: ValueId,
        il: usize,
        act: ExpertAct,
        biases: bool,
    ) -> Result<ValueId, SpecError> {
        let hp = self.hp;
        let (d, e, k, f) = (hp.n_embd, hp.n_expert, hp.n_expert_used, hp.n_ff_expert);
        self.b.at(Some(il), SubLayer::MoeRouter);
        let mut wr = vec![self.weight(Some(il), t::FFN_GATE_INP, &[d, e])?];
        match hp.routing.gating {
            Gating::Softmax if biases => {
                wr.push(self.weight(Some(il), t::FFN_GATE_INP_BIAS, &[e])?)
            }
            Gating::Softmax => {}
            Gating::Sigmoid => wr.push(self.weight(Some(il), t::FFN_EXP_PROBS_B, &[e])?),
        }
        let op = Op::MoeRouter {
            n_expert: e,
            top_k: k,
            routing: hp.routing,
        };
        let routing = self.b.node(
            format!("blk.{il}.moe_router"),
            op,
            &[h],
            &wr,
            Rows::Tokens,
            2 * k,
        );
        self.b.at(Some(il), SubLayer::MoeExperts);
        let mut ws = vec![
            self.weight(Some(il), t::FFN_GATE_EXPS, &[d, f, e])?,
            self.weight(Some(il), t::FFN_UP_EXPS, &[d, f, e])?,
            self.weight(Some(il), t::FFN_DOWN_EXPS, &[f, d, e])?,
        ];
        if biases {
            ws.push(self.weight(Some(il), t::FFN_GATE_EXPS_BIAS, &[f, e])?);
            ws.push(self.weight(Some(il), t::FFN_UP_EXPS_BIAS, &[f, e])?);
            ws.push(self.weight(Some(il), t::FFN_DOWN_EXPS_BIAS, &[d, e])?);
        }
        let op = Op::MoeExperts {
            n_expert: e,
            top_k: k,
            act,
            biases,
        };
        Ok(self.b.node(
            format!("blk.{il}.moe_experts"),
            op,
            &[h, routing],
            &ws,
            Rows::Tokens,
            d,
        ))
    }

    /// Final norm, the rows whose logits are wanted, and the output projection
    /// (the embedding table when the file has no `output.weight`).
    pub fn output(mut self, x: ValueId) -> Result<Graph, SpecError> {
        let (d, v) = (self.hp.n_embd, self.hp.n_vocab);
        self.b.at(None, SubLayer::Output);
        let rows = self.b.node(
            "select_outputs",
            Op::SelectRows,
            &[x],
            &[],
            Rows::Outputs,
            d,
        );
        let h = self.norm_as("output_norm", rows, None, t::OUTPUT_NORM)?;
        let wo = match self.opt_weight(None, t::OUTPUT, &[d, v])? {
            Some(w) => w,
            // tied embeddings: the table is consumed a second time; its heavy
            // use (and so its placement item) is the output projection
            None => {
                let w = self.weight(None, t::TOKEN_EMBD, &[d, v])?;
                self.b.retag_weight(w);
                w
            }
        };
        let logits = self.b.matmul("output", h, wo, None);
        Ok(self.b.finish(logits))
    }
}

/// What an attention layer has beyond plain causal attention.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AttnExtras {
    /// Use the sliding window on the layers the model's pattern names.
    pub window: bool,
    /// Per-head sink logits (`attn_sinks`).
    pub sinks: bool,
    /// A bias on the output projection.
    pub out_bias: bool,
}
