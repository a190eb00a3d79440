//! Attention: append this round's keys and values to the layer's cache (f16
//! or f32) and attend over the cache, or attend over this round's k/v only
//! (vision). Few queries over many keys (decode) split the keys across
//! blocks and merge the splits.

use ats_core::device::{DeviceError, KvType};
use ats_core::graph::{AttnSpec, Mask};
use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::Node;
use crate::device::State;
use crate::geometry::{self, ATTN_THREADS};
use crate::kernels::Module;
use crate::memory::drv;
use crate::workspace::Carver;

pub(crate) fn attention(
    n: &Node<'_>,
    st: &mut State,
    scratch: &mut Carver,
    spec: &AttnSpec,
) -> Result<(), DeviceError> {
    let (q, nq, qc) = n.input(0)?;
    let (k, nk_in, kc) = n.input(1)?;
    let (v, nv_in, vc) = n.input(2)?;
    let (o, ro, co) = n.output()?;
    let (hd, nh, nkv) = (spec.head_dim, spec.n_heads, spec.n_kv_heads);
    let kv_w = nkv * hd;
    if nkv == 0
        || !nh.is_multiple_of(nkv)
        || qc != nh * hd
        || kc != kv_w
        || vc != kv_w
        || (ro, co) != (nq, qc)
        || nk_in != nq
        || nv_in != nq
    {
        return Err(n.err(format!(
            "attention of q {nq}x{qc}, k {nk_in}x{kc}, v {nv_in}x{vc} into {ro}x{co} with {nh} heads, {nkv} KV heads of {hd}"
        )));
    }
    if nq == 0 {
        return Ok(());
    }
    let window = match (spec.window, &spec.mask) {
        (None, _) => 0i32,
        (Some(w), Mask::Causal) if w > 0 => i32::try_from(w).unwrap_or(i32::MAX),
        (Some(w), m) => {
            return Err(n.err(format!(
                "a sliding window of {w} keys needs a causal mask, not {m:?}"
            )));
        }
    };
    let sinks = if spec.sinks {
        let (p, len) = n.weight_f32(0, scratch)?;
        if len < nh {
            return Err(n.err(format!("{len} sink logits for {nh} heads")));
        }
        p
    } else {
        0u64
    };
    let extras = Extras { window, sinks };
    let r = n.args.round;
    let Some(kv) = spec.cache.and(n.args.kv.as_ref()) else {
        if spec.cache.is_some() {
            return Err(n.err("attention needs its KV cache"));
        }
        let (mask, offset) = match spec.mask {
            Mask::Causal => (0i32, r.past),
            Mask::Full => (1, 0),
            Mask::Segments => (2, 0),
        };
        let rd = if spec.mask == Mask::Segments {
            Some(n.round(st)?.clone())
        } else {
            None
        };
        let (bounds, n_bounds) = rd.as_ref().map_or((0u64, 0i32), |d| (d.bounds, d.n_bounds));
        let call = Call {
            keys: Keys { q, k, v, o },
            n_q: nq,
            n_keys: nq,
            mask,
            offset,
            bounds: (bounds, n_bounds),
            blocks: (0, 0),
            f16: false,
        };
        return attend(n, scratch, spec, &call, &extras);
    };
    let es = kv.dtype.size();
    let kp = n.dev.ptr_of(kv.k, 0, kv.capacity * kv_w * es)?;
    let vp = n.dev.ptr_of(kv.v, 0, kv.capacity * kv_w * es)?;
    let shift = block_shift(kv.block_tokens).map_err(|e| n.err(e))?;
    let tables = n.round(st)?.blocks.clone();
    let (q_row, kv_row) = ((nh * hd * 4) as u64, (kv_w * 4) as u64);
    for (i, span) in r.spans().iter().enumerate() {
        let holds = span.cache.holds(kv.block_tokens).unwrap_or(kv.capacity);
        if span.keys() > holds.min(kv.capacity) {
            return Err(n.err(format!(
                "context of {} tokens exceeds the KV cache of {}",
                span.keys(),
                kv.capacity
            )));
        }
        let table = tables.get(i).copied().flatten().unwrap_or(0);
        let row0 = span.rows.start as u64;
        let append_to = Append {
            past: span.past as u64,
            width: kv_w as u64,
            n: (span.len() * kv_w) as u64,
            blocks: (table, shift),
            f16: kv.dtype == KvType::F16,
        };
        append(n, k + row0 * kv_row, kp, &append_to)?;
        append(n, v + row0 * kv_row, vp, &append_to)?;
        let call = Call {
            keys: Keys {
                q: q + row0 * q_row,
                k: kp,
                v: vp,
                o: o + row0 * q_row,
            },
            n_q: span.len(),
            n_keys: span.keys(),
            mask: 0,
            offset: span.past,
            bounds: (0, 0),
            blocks: (table, shift),
            f16: kv.dtype == KvType::F16,
        };
        attend(n, scratch, spec, &call, &extras)?;
    }
    Ok(())
}

/// The sliding window (0: none) and the sink logits' address (0: none),
/// the same for every call of a node.
struct Extras {
    window: i32,
    sinks: u64,
}

/// `log2(block_tokens)`: the kernels address blocks by shifts.
fn block_shift(block_tokens: usize) -> Result<i32, String> {
    if block_tokens.is_power_of_two() {
        Ok(block_tokens.trailing_zeros() as i32)
    } else {
        Err(format!(
            "KV blocks of {block_tokens} rows: the GPU needs a power of two"
        ))
    }
}

/// One attention call: addresses, shape, mask, and where the keys are.
struct Call {
    keys: Keys,
    n_q: usize,
    n_keys: usize,
    mask: i32,
    offset: usize,
    /// Segment ends and their count (segment masks).
    bounds: (u64, i32),
    /// The block table (0: keys in consecutive rows) and log2 of its block rows.
    blocks: (u64, i32),
    f16: bool,
}

/// Attends `call`'s queries over its keys: the decode kernel for few
/// queries over many keys, the general tiled kernel otherwise.
fn attend(
    n: &Node<'_>,
    scratch: &mut Carver,
    spec: &AttnSpec,
    call: &Call,
    x: &Extras,
) -> Result<(), DeviceError> {
    let (hd, nh, nkv) = (spec.head_dim, spec.n_heads, spec.n_kv_heads);
    let dims = geometry::AttnDims {
        n_q: call.n_q,
        n_heads: nh,
        n_kv: nkv,
        d: hd,
        n_keys: call.n_keys,
    };
    let budget = geometry::SplitBudget {
        sm_count: n.dev.sm_count as usize,
        scratch_floats: scratch.free_for(2) / 4, // part_o and part_ml below
    };
    if spec.mask != Mask::Segments
        && let Some(l) = geometry::decode_launch(&dims, call.f16, budget)
    {
        return decode(n, scratch, spec, call, &l, x);
    }
    let (nq, n_keys) = (call.n_q, call.n_keys);
    let Keys { q, k: kp, v: vp, o } = call.keys;
    let group = nh / nkv;
    let tiles = geometry::attn_tiles(hd, group).map_err(|e| n.err(e))?;
    let q_tiles = nq.div_ceil(tiles.rows(group));
    let (splits, split_keys) = geometry::attn_splits(&dims, q_tiles, budget);
    let (part_o, part_ml) = if splits > 1 {
        let slots = splits * nq * nh;
        (
            scratch.take(slots * hd * 4).map_err(|e| n.err(e))?,
            scratch.take(slots * 2 * 4).map_err(|e| n.err(e))?,
        )
    } else {
        (0u64, 0u64)
    };
    let name = if call.f16 { "attn_f16kv" } else { "attn_f32kv" };
    let f = n
        .dev
        .kernels
        .function(Module::Attention, name)
        .map_err(|e| n.cu(e))?;
    let cfg = LaunchConfig {
        grid_dim: (q_tiles as u32, nkv as u32, splits as u32),
        block_dim: (ATTN_THREADS as u32, 1, 1),
        shared_mem_bytes: tiles.shared_bytes as u32,
    };
    let ints = [nq as i32, n_keys as i32, nh as i32, nkv as i32, hd as i32];
    let (offset, r_, bk, sk) = (
        call.offset as i32,
        tiles.r as i32,
        tiles.bk as i32,
        split_keys as i32,
    );
    let (bounds, n_bounds) = call.bounds;
    let (table, shift) = call.blocks;
    let mut b = n.dev.streams.compute.launch_builder(&f);
    b.arg(&q)
        .arg(&kp)
        .arg(&vp)
        .arg(&o)
        .arg(&part_o)
        .arg(&part_ml);
    for i in &ints {
        b.arg(i);
    }
    b.arg(&spec.scale)
        .arg(&call.mask)
        .arg(&offset)
        .arg(&bounds)
        .arg(&n_bounds)
        .arg(&r_)
        .arg(&bk)
        .arg(&sk)
        .arg(&table)
        .arg(&shift)
        .arg(&x.window)
        .arg(&x.sinks);
    // SAFETY: q and o hold nq rows of nh*hd floats; k and v hold the rows of
    // n_keys keys of nkv*hd (cache, through the block table, or inputs,
    // checked by the caller); the shared memory matches the tiles; partial
    // buffers hold splits*nq*nh slots when splitting; sinks, when not null,
    // hold nh floats (checked by the caller).
    drv(name, unsafe { b.launch(cfg) }).map_err(|e| n.cu(e))?;
    if splits > 1 {
        combine(n, part_o, part_ml, o, [nq, nh, hd, splits], x.sinks)?;
    }
    Ok(())
}

/// Device addresses of the query, the keys and values attended over, and the output.
struct Keys {
    q: u64,
    k: u64,
    v: u64,
    o: u64,
}

/// Few query vectors over a cache: `attn_decode_*` over (KV heads, key
/// splits), then the merge of the splits.
fn decode(
    n: &Node<'_>,
    scratch: &mut Carver,
    spec: &AttnSpec,
    call: &Call,
    l: &geometry::DecodeLaunch,
    x: &Extras,
) -> Result<(), DeviceError> {
    let (hd, nh, nkv) = (spec.head_dim, spec.n_heads, spec.n_kv_heads);
    let (nq, n_keys) = (call.n_q, call.n_keys);
    let t = &call.keys;
    let (part_o, part_ml) = if l.splits > 1 {
        let slots = l.splits * nq * nh;
        (
            scratch.take(slots * hd * 4).map_err(|e| n.err(e))?,
            scratch.take(slots * 2 * 4).map_err(|e| n.err(e))?,
        )
    } else {
        (0u64, 0u64)
    };
    let name = format!("attn_decode_{}", l.suffix);
    let f = n
        .dev
        .kernels
        .function(Module::Attention, &name)
        .map_err(|e| n.cu(e))?;
    let cfg = LaunchConfig {
        grid_dim: (nkv as u32, l.splits as u32, 1),
        block_dim: (geometry::DEC_THREADS as u32, 1, 1),
        shared_mem_bytes: l.shared_bytes as u32,
    };
    let ints = [nq as i32, n_keys as i32, nh as i32, nkv as i32];
    let (offset, sk) = (call.offset as i32, l.split_keys as i32);
    let (table, shift) = call.blocks;
    let mut b = n.dev.streams.compute.launch_builder(&f);
    b.arg(&t.q)
        .arg(&t.k)
        .arg(&t.v)
        .arg(&t.o)
        .arg(&part_o)
        .arg(&part_ml);
    for i in &ints {
        b.arg(i);
    }
    b.arg(&spec.scale)
        .arg(&call.mask)
        .arg(&offset)
        .arg(&sk)
        .arg(&table)
        .arg(&shift)
        .arg(&x.window)
        .arg(&x.sinks);
    // SAFETY: q and o hold nq rows of nh*hd floats, k and v the rows of
    // n_keys keys of nkv*hd cache elements through the block table (checked
    // by the caller); the head size is the kernel's (decode_launch picks the
    // instantiation); the shared memory matches its layout; the partial
    // buffers hold splits*nq*nh slots; sinks, when not null, nh floats.
    drv(&name, unsafe { b.launch(cfg) }).map_err(|e| n.cu(e))?;
    if l.splits > 1 {
        combine(n, part_o, part_ml, t.o, [nq, nh, hd, l.splits], x.sinks)?;
    }
    Ok(())
}

/// `attn_combine`: merges the key splits' partial results into `o`.
fn combine(
    n: &Node<'_>,
    part_o: u64,
    part_ml: u64,
    o: u64,
    [nq, nh, hd, splits]: [usize; 4],
    sinks: u64,
) -> Result<(), DeviceError> {
    let f = n
        .dev
        .kernels
        .function(Module::Attention, "attn_combine")
        .map_err(|e| n.cu(e))?;
    let cfg = LaunchConfig {
        grid_dim: ((nq * nh) as u32, 1, 1),
        block_dim: (hd.min(256) as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    let (a, h, d, s) = (nq as i32, nh as i32, hd as i32, splits as i32);
    let mut b = n.dev.streams.compute.launch_builder(&f);
    b.arg(&part_o)
        .arg(&part_ml)
        .arg(&o)
        .arg(&a)
        .arg(&h)
        .arg(&d)
        .arg(&s)
        .arg(&sinks);
    // SAFETY: the partial buffers were written for every (split, row, head);
    // o holds nq*nh*hd floats; sinks, when not null, nh floats.
    drv("attn_combine", unsafe { b.launch(cfg) }).map_err(|e| n.cu(e))?;
    Ok(())
}

/// Where an append writes: a sequence's tokens `past..` of `width`
/// elements each, `n` elements in all, through its block table.
struct Append {
    past: u64,
    width: u64,
    n: u64,
    blocks: (u64, i32),
    f16: bool,
}

/// `kv_append_rows_*`: `a.n` floats at `src` into the cache at `cache`.
fn append(n: &Node<'_>, src: u64, cache: u64, a: &Append) -> Result<(), DeviceError> {
    let name = if a.f16 {
        "kv_append_rows_f16"
    } else {
        "kv_append_rows_f32"
    };
    let f = n
        .dev
        .kernels
        .function(Module::Copy, name)
        .map_err(|e| n.cu(e))?;
    let cfg = geometry::elementwise(a.n, n.dev.sm_count);
    let (table, shift) = a.blocks;
    let mut b = n.dev.streams.compute.launch_builder(&f);
    b.arg(&src)
        .arg(&cache)
        .arg(&table)
        .arg(&shift)
        .arg(&a.past)
        .arg(&a.width)
        .arg(&a.n);
    // SAFETY: src holds `n` floats; the cache holds the rows the sequence's
    // block table names for tokens past.. (checked against the cache's
    // capacity and the table's length by the caller and the round check).
    drv(name, unsafe { b.launch(cfg) }).map_err(|e| n.cu(e))?;
    Ok(())
}
