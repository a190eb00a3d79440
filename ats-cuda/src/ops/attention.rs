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
    let r = n.args.round;
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
    // where the keys and values come from, and how many there are
    let (kp, vp, n_keys, f16) = match (&spec.cache, &n.args.kv) {
        (None, _) => (k, v, nq, false),
        (Some(_), Some(kv)) => {
            let total = r.past + nq;
            if total > kv.capacity {
                return Err(n.err(format!(
                    "context of {total} tokens exceeds the KV cache of {}",
                    kv.capacity
                )));
            }
            let es = kv.dtype.size();
            let kp = n.dev.ptr_of(kv.k, 0, total * kv_w * es)?;
            let vp = n.dev.ptr_of(kv.v, 0, total * kv_w * es)?;
            let (name, f16) = match kv.dtype {
                KvType::F16 => ("kv_append_f16", true),
                KvType::F32 => ("kv_append_f32", false),
            };
            let off = (r.past * kv_w) as u64;
            let len = (nq * kv_w) as u64;
            for (src, dst) in [(k, kp), (v, vp)] {
                append(n, name, src, dst, off, len)?;
            }
            (kp, vp, total, f16)
        }
        (Some(_), None) => return Err(n.err("attention needs its KV cache")),
    };
    if spec.mask != Mask::Segments
        && let Some(l) = geometry::decode_launch(
            nq,
            nh,
            nkv,
            hd,
            n_keys,
            f16,
            n.dev.sm_count as usize,
            scratch.free_for(2) / 4, // part_o and part_ml below
        )
    {
        let keys = Keys { q, k: kp, v: vp, o };
        return decode(
            n,
            scratch,
            spec,
            &keys,
            &l,
            [nq, n_keys, nh, nkv],
            mask,
            offset,
        );
    }
    let group = nh / nkv;
    let tiles = geometry::attn_tiles(hd, group).map_err(|e| n.err(e))?;
    let q_tiles = nq.div_ceil(tiles.rows(group));
    let (splits, split_keys) = geometry::attn_splits(
        q_tiles,
        nkv,
        n_keys,
        n.dev.sm_count as usize,
        nq,
        nh,
        hd,
        scratch.free_for(2) / 4, // part_o and part_ml below
    );
    let (part_o, part_ml) = if splits > 1 {
        let slots = splits * nq * nh;
        (
            scratch.take(slots * hd * 4).map_err(|e| n.err(e))?,
            scratch.take(slots * 2 * 4).map_err(|e| n.err(e))?,
        )
    } else {
        (0u64, 0u64)
    };
    let name = if f16 { "attn_f16kv" } else { "attn_f32kv" };
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
        offset as i32,
        tiles.r as i32,
        tiles.bk as i32,
        split_keys as i32,
    );
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
        .arg(&mask)
        .arg(&offset)
        .arg(&bounds)
        .arg(&n_bounds)
        .arg(&r_)
        .arg(&bk)
        .arg(&sk);
    // SAFETY: q and o hold nq rows of nh*hd floats; k and v hold n_keys rows
    // of nkv*hd (cache or inputs, checked above); the shared memory matches
    // the tiles; partial buffers hold splits*nq*nh slots when splitting.
    drv(name, unsafe { b.launch(cfg) }).map_err(|e| n.cu(e))?;
    if splits > 1 {
        combine(n, part_o, part_ml, o, [nq, nh, hd, splits])?;
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
#[allow(clippy::too_many_arguments)]
fn decode(
    n: &Node<'_>,
    scratch: &mut Carver,
    spec: &AttnSpec,
    t: &Keys,
    l: &geometry::DecodeLaunch,
    [nq, n_keys, nh, nkv]: [usize; 4],
    mask: i32,
    offset: usize,
) -> Result<(), DeviceError> {
    let hd = spec.head_dim;
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
    let (offset, sk) = (offset as i32, l.split_keys as i32);
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
    b.arg(&spec.scale).arg(&mask).arg(&offset).arg(&sk);
    // SAFETY: q and o hold nq rows of nh*hd floats, k and v n_keys rows of
    // nkv*hd cache elements (checked by the caller); the head size is the
    // kernel's (decode_launch picks the instantiation); the shared memory
    // matches its layout; the partial buffers hold splits*nq*nh slots.
    drv(&name, unsafe { b.launch(cfg) }).map_err(|e| n.cu(e))?;
    if l.splits > 1 {
        combine(n, part_o, part_ml, t.o, [nq, nh, hd, l.splits])?;
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
        .arg(&s);
    // SAFETY: the partial buffers were written for every (split, row, head);
    // o holds nq*nh*hd floats.
    drv("attn_combine", unsafe { b.launch(cfg) }).map_err(|e| n.cu(e))?;
    Ok(())
}

fn append(
    n: &Node<'_>,
    name: &str,
    src: u64,
    cache: u64,
    offset: u64,
    len: u64,
) -> Result<(), DeviceError> {
    // kv_append_*(x, cache, offset, n)
    let f = n
        .dev
        .kernels
        .function(Module::Copy, name)
        .map_err(|e| n.cu(e))?;
    let cfg = geometry::elementwise(len, n.dev.sm_count);
    let mut b = n.dev.streams.compute.launch_builder(&f);
    b.arg(&src).arg(&cache).arg(&offset).arg(&len);
    // SAFETY: src holds `len` floats; the cache holds offset + len elements
    // (checked against the round's total).
    drv(name, unsafe { b.launch(cfg) }).map_err(|e| n.cu(e))?;
    Ok(())
}
