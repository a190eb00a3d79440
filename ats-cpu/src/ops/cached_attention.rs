//! The attention node on the CPU: each sequence of the round appends its
//! keys and values to its rows of the layer's cache and attends over its own
//! cache (causal within its own rows); attention without a cache (vision)
//! attends over the round's own keys.

use crate::team;
use ats_core::device::{KvArg, KvType};
use ats_core::graph::{AttnSpec, Graph, Mask, Op};
use ats_core::round::{CacheRows, Round, SeqSpan};
use half::f16;
use half::slice::HalfFloatSliceExt;

use super::attention::{self, AttnShape, KeyRange, KvData, KvRows, RowMap};
use crate::storage::CpuStorage;

/// The inputs and output of an attention node.
pub(crate) struct AttnIo<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    /// One sink logit per query head, when the node has them.
    pub sinks: Option<&'a [f32]>,
    pub out: &'a mut [f32],
}

/// Runs attention node `spec` of `round`; `cache` holds the layer's cache
/// buffers when the node has one.
pub(crate) fn attention(
    spec: &AttnSpec,
    round: &Round,
    io: AttnIo<'_>,
    cache: Option<(&KvArg<'_>, &CpuStorage, &CpuStorage)>,
) -> Result<(), String> {
    let Some((kv, ks, vs)) = cache else {
        if spec.cache.is_some() {
            return Err("attention needs its KV cache".into());
        }
        let range = match spec.mask {
            Mask::Causal => causal(round.past, spec.window),
            Mask::Full => KeyRange::Full,
            Mask::Segments => KeyRange::Segments {
                bounds: &round.segments[1.min(round.segments.len())..],
            },
        };
        let shape = shape_of(
            spec,
            io.q.len() / (spec.n_heads * spec.head_dim),
            None,
            round,
        );
        let kv_rows = KvRows::contiguous(KvData::F32 { k: io.k, v: io.v });
        attention::flash_attention_sinks(io.q, kv_rows, range, io.sinks, io.out, shape);
        return Ok(());
    };
    let (q_w, kv_w) = (
        spec.n_heads * spec.head_dim,
        spec.n_kv_heads * spec.head_dim,
    );
    let AttnIo {
        q,
        k,
        v,
        sinks,
        out,
    } = io;
    let spans = round.spans();
    for span in spans.iter() {
        let r = span.rows.clone();
        append(ks, kv, span, &k[r.start * kv_w..r.end * kv_w], kv_w)?;
        append(vs, kv, span, &v[r.start * kv_w..r.end * kv_w], kv_w)?;
    }
    let (kg, vg) = (ks.read(), vs.read());
    let data = match kv.dtype {
        KvType::F32 => KvData::F32 {
            k: &kg[..],
            v: &vg[..],
        },
        KvType::F16 => KvData::F16 {
            k: bytemuck::cast_slice(&kg[..]),
            v: bytemuck::cast_slice(&vg[..]),
        },
    };
    let one = |span: &SeqSpan, o: &mut [f32]| {
        let rows = KvRows {
            data,
            map: row_map(&span.cache, kv.block_tokens),
        };
        let shape = shape_of(spec, span.len(), Some(span), round);
        let range = causal(span.past, spec.window);
        let q = &q[span.rows.start * q_w..span.rows.end * q_w];
        attention::flash_attention_sinks(q, rows, range, sinks, o, shape);
    };
    let mut parts = split_rows(&spans, out, q_w)?;
    if parts.len() > 1 && spans.iter().all(|s| s.len() == 1) {
        // Decode tokens: one region for the whole round, the sequences
        // sharing the threads, rather than a region per sequence.
        team::for_each_mut(&mut parts, |(span, o)| one(span, o));
    } else {
        // A sequence with several tokens fans out over the threads itself
        // (a region inside a task would run on one thread).
        for (span, o) in parts {
            one(span, o);
        }
    }
    Ok(())
}

/// Each span with its rows of `out` (`width` values a row); the spans must
/// cover the rows in order.
fn split_rows<'s, 'o>(
    spans: &'s [SeqSpan],
    mut out: &'o mut [f32],
    width: usize,
) -> Result<Vec<(&'s SeqSpan, &'o mut [f32])>, String> {
    let mut next = 0;
    let mut parts = Vec::with_capacity(spans.len());
    for span in spans {
        if span.rows.start != next || span.len() * width > out.len() {
            return Err(format!(
                "sequence rows {:?} do not follow row {next} of the attention output",
                span.rows
            ));
        }
        let (o, rest) = std::mem::take(&mut out).split_at_mut(span.len() * width);
        parts.push((span, o));
        out = rest;
        next = span.rows.end;
    }
    Ok(parts)
}

/// The causal key range after `past` keys, within a sliding window when the
/// layer has one.
fn causal(past: usize, window: Option<usize>) -> KeyRange<'static> {
    match window {
        Some(window) => KeyRange::Sliding {
            offset: past,
            window,
        },
        None => KeyRange::Causal { offset: past },
    }
}

/// A sequence's cache rows as the attention kernels read them.
fn row_map(c: &CacheRows, block_tokens: usize) -> RowMap<'_> {
    match c {
        CacheRows::Contiguous => RowMap::Contiguous,
        CacheRows::Blocks(b) => RowMap::Blocks {
            blocks: b,
            block_tokens,
        },
    }
}

/// Writes a sequence's new key or value rows (`rows`, f32) into its cache
/// rows after its past.
fn append(
    s: &CpuStorage,
    kv: &KvArg<'_>,
    span: &SeqSpan,
    rows: &[f32],
    width: usize,
) -> Result<(), String> {
    if span.keys()
        > span
            .cache
            .holds(kv.block_tokens)
            .unwrap_or(kv.capacity)
            .min(kv.capacity)
    {
        return Err(format!(
            "context of {} tokens exceeds the KV cache of {}",
            span.keys(),
            kv.capacity
        ));
    }
    let map = row_map(&span.cache, kv.block_tokens);
    let mut g = s.write();
    let mut at = 0;
    for (row, n) in map.runs(span.past, span.len()) {
        let (dst, src) = (
            row * width..(row + n) * width,
            &rows[at * width..(at + n) * width],
        );
        match kv.dtype {
            KvType::F32 => g[dst].copy_from_slice(src),
            KvType::F16 => {
                let h: &mut [f16] = bytemuck::cast_slice_mut(&mut g[..]);
                h[dst].convert_from_f32_slice(src);
            }
        }
        at += n;
    }
    Ok(())
}

/// The shape of one attention call: `n_queries` rows of `span` (of the
/// whole round without one), over its past and own keys with a cache.
fn shape_of(spec: &AttnSpec, n_queries: usize, span: Option<&SeqSpan>, round: &Round) -> AttnShape {
    AttnShape {
        n_heads: spec.n_heads,
        n_kv_heads: spec.n_kv_heads,
        head_dim: spec.head_dim,
        scale: spec.scale,
        n_queries,
        n_keys: span.map_or(n_queries, SeqSpan::keys),
        q_block: round.attn_q_block,
    }
}

/// The largest attention call node `node` makes in `round` (the one whose
/// scratch the device reserves): its longest sequence, or the whole round
/// without a cache.
pub fn attention_shape(g: &Graph, node: usize, round: &Round) -> Option<AttnShape> {
    let n = g.nodes.get(node)?;
    let Op::Attention(spec) = &n.op else {
        return None;
    };
    if spec.cache.is_none() {
        let rows = g.values[n.output]
            .rows
            .resolve(round.n_rows, round.output_rows.len());
        return Some(shape_of(spec, rows, None, round));
    }
    round
        .spans()
        .iter()
        .map(|s| shape_of(spec, s.len(), Some(s), round))
        .max_by_key(|s| (s.n_keys, s.n_queries))
}
