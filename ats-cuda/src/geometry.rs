//! Launch geometry: grid and block sizes, attention tiles and key splits,
//! how prefill matmuls and routed experts are cut to fit the scratch area.
//! Pure arithmetic, so it is tested on machines without a GPU; the constants
//! mirror the `#define`s of the kernel sources.

use cudarc::driver::LaunchConfig;

/// Threads per block of the element-wise kernels.
pub const EW_THREADS: u32 = 256;
/// Output rows per block of `matvec_*` (`MV_ROWS`) and its warp size.
pub const MV_ROWS: u32 = 4;
/// Tokens one `matvec_*` launch handles (`MV_MAX_TOKENS`).
pub const MV_MAX_TOKENS: usize = 8;
/// Tile of `mm_*`: weight rows (`MM_BO`), tokens (`MM_BT`), threads.
pub const MM_BO: u32 = 64;
/// Tokens per `mm_*` tile.
pub const MM_BT: u32 = 64;
/// Threads of `mm_*`.
pub const MM_THREADS: u32 = 256;
/// Threads of the attention kernels (`ATTN_THREADS`) and the accumulators
/// each thread holds (`ATTN_MAX_ACC`).
pub const ATTN_THREADS: usize = 128;
/// Output elements per attention thread.
pub const ATTN_MAX_ACC: usize = 32;
/// Rotation pairs the RoPE table holds (`ROPE_MAX_PAIRS`).
pub const ROPE_MAX_PAIRS: usize = 128;
/// Threads of the norm kernels (`NORM_THREADS`).
pub const NORM_THREADS: u32 = 256;
/// Largest top-k of the MoE kernels (`MOE_MAX_TOPK`).
pub const MOE_MAX_TOPK: usize = 32;
/// Warps per block of the router's top-k kernel (one token a warp).
pub const ROUTER_WARPS: usize = 4;
/// Static shared memory every CUDA device gives a block without opt-in.
pub const SHARED_LIMIT: usize = 48 * 1024;

/// A 1-D grid-stride launch over `n` elements: enough blocks to fill the
/// device a few times over, never more than the elements need.
pub fn elementwise(n: u64, sm_count: u32) -> LaunchConfig {
    let need = n.div_ceil(u64::from(EW_THREADS)).max(1);
    let cap = u64::from(sm_count.max(1)) * 16;
    LaunchConfig {
        grid_dim: (need.min(cap) as u32, 1, 1),
        block_dim: (EW_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The launch of `copy_routed_experts` for `n_expert` experts of
/// `per_expert` bytes: a row of blocks per expert (grid y), each row wide
/// enough that the experts a decode round chooses (a few) fill the SMs.
pub fn routed_copy(
    per_expert: u64,
    n_expert: usize,
    sm_count: u32,
) -> Result<LaunchConfig, String> {
    let rows = u32::try_from(n_expert)
        .ok()
        .filter(|&n| (1..=65535).contains(&n))
        .ok_or_else(|| format!("{n_expert} experts do not fit one grid (1 to 65535)"))?;
    let words = per_expert
        .div_ceil(16)
        .div_ceil(u64::from(EW_THREADS))
        .max(1);
    let wide = u64::from(sm_count.max(1)) * 2;
    Ok(LaunchConfig {
        grid_dim: (words.min(wide) as u32, rows, 1),
        block_dim: (EW_THREADS, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// One thread per item (no grid-stride loop): `n` items in blocks of 256.
pub fn per_item(n: u64) -> Result<LaunchConfig, String> {
    let blocks = n.div_ceil(u64::from(EW_THREADS)).max(1);
    let blocks = u32::try_from(blocks).map_err(|_| format!("{n} items exceed one grid"))?;
    Ok(LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (EW_THREADS, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// `matvec_*` over `rows` output rows.
pub fn matvec(rows: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((rows as u32).div_ceil(MV_ROWS), 1, 1),
        block_dim: (MV_ROWS * 32, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Warps per block of `matvec_wide_*` (`MVW_WARPS`).
pub const MVW_WARPS: u32 = 4;
/// Rows per warp of `matvec_wide_*` (`MVW_ROWS`).
pub const MVW_ROWS: u32 = 2;

/// `matvec_wide_*` over `rows` output rows.
pub fn matvec_wide(rows: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((rows as u32).div_ceil(MVW_WARPS * MVW_ROWS), 1, 1),
        block_dim: (MVW_WARPS * 32, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// `matvec_wide_moe_*` over `rows` output rows of each of `slots` routed slots.
pub fn matvec_wide_moe(rows: usize, slots: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (
            (rows as u32).div_ceil(MVW_WARPS * MVW_ROWS),
            slots as u32,
            1,
        ),
        block_dim: (MVW_WARPS * 32, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// `mm_*` over `rows` weight rows and `n_tok` tokens (or tile rows).
pub fn matmul(rows: usize, tiles_y: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((rows as u32).div_ceil(MM_BO), tiles_y.max(1), 1),
        block_dim: (MM_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Attention tiles: `r` query vectors (rows x heads of one KV group) and
/// `bk` keys per step, and the dynamic shared memory they take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnTiles {
    /// Query vectors per block (a multiple of the group size).
    pub r: usize,
    /// Keys per step.
    pub bk: usize,
    /// Dynamic shared memory in bytes.
    pub shared_bytes: usize,
}

impl AttnTiles {
    /// Query rows per block.
    pub fn rows(&self, group: usize) -> usize {
        self.r / group
    }
}

/// Shared bytes of attention tiles (see the layout in attention.cu).
pub fn attn_shared_bytes(r: usize, bk: usize, d: usize) -> usize {
    let floats = r * d + bk * (d + 1) + bk * d + r * (bk + 1) + 3 * r;
    floats * 4 + 2 * r * 4
}

/// Chooses attention tiles for head size `d` and `group` query heads per
/// KV head: as many query vectors as the per-thread accumulators allow, then
/// the largest key step that fits the shared-memory limit.
pub fn attn_tiles(d: usize, group: usize) -> Result<AttnTiles, String> {
    if d == 0 || group == 0 {
        return Err("attention with an empty head or group".into());
    }
    let cap = ATTN_THREADS * ATTN_MAX_ACC / d;
    let r = cap / group * group;
    if r == 0 {
        return Err(format!(
            "attention with head size {d} and {group} query heads per KV head exceeds one block"
        ));
    }
    for bk in [32, 16, 8, 4] {
        let s = attn_shared_bytes(r, bk, d);
        if s <= SHARED_LIMIT {
            return Ok(AttnTiles {
                r,
                bk,
                shared_bytes: s,
            });
        }
    }
    Err(format!(
        "attention with head size {d} does not fit in shared memory"
    ))
}

/// The shape of an attention call, as its launch sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnDims {
    /// Query rows.
    pub n_q: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads.
    pub n_kv: usize,
    /// Head size.
    pub d: usize,
    /// Keys attended over.
    pub n_keys: usize,
}

/// What splitting the keys may use: the SMs to fill and the floats of
/// scratch the partial results may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitBudget {
    /// Streaming multiprocessors of the device.
    pub sm_count: usize,
    /// Scratch floats for the splits' partial results.
    pub scratch_floats: usize,
}

/// How the keys are split across blocks when `q_tiles` query tiles per KV
/// head are too few to fill the device (decode): `(splits, keys per split)`.
/// Each split needs `n_q * n_heads * (d + 2)` floats of scratch, within the
/// budget's.
pub fn attn_splits(dims: &AttnDims, q_tiles: usize, budget: SplitBudget) -> (usize, usize) {
    const MIN_KEYS_PER_SPLIT: usize = 256;
    let AttnDims {
        n_q,
        n_heads,
        n_kv,
        d,
        n_keys,
    } = *dims;
    let SplitBudget {
        sm_count,
        scratch_floats,
    } = budget;
    let blocks = q_tiles * n_kv;
    let want = (2 * sm_count).div_ceil(blocks.max(1));
    let by_keys = n_keys.div_ceil(MIN_KEYS_PER_SPLIT);
    let per_split = n_q * n_heads * (d + 2);
    let by_scratch = scratch_floats / per_split.max(1);
    let splits = want.min(by_keys).min(by_scratch).clamp(1, 64);
    if splits <= 1 {
        return (1, n_keys.max(1));
    }
    let keys = n_keys.div_ceil(splits);
    (n_keys.div_ceil(keys), keys)
}

/// Threads of `attn_decode_*` (`DEC_THREADS`): four warps.
pub const DEC_THREADS: usize = 128;
/// Query vectors (`n_q * group`) one `attn_decode_*` block holds (`DEC_MAX_VECS`).
pub const DEC_MAX_VECS: usize = 8;

/// The launch of the decode attention kernel (`attn_decode_*`): which
/// instantiation, the grid of (KV heads, key splits), the keys per split and
/// the dynamic shared memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeLaunch {
    /// Kernel name suffix after `attn_decode_`, e.g. `f16kv_d128`.
    pub suffix: String,
    /// Key splits (`grid.y`); more than one needs `attn_combine`.
    pub splits: usize,
    /// Keys per split, a multiple of 32 (a warp's tile).
    pub split_keys: usize,
    /// Dynamic shared memory in bytes.
    pub shared_bytes: usize,
}

/// The decode kernel's launch for `n_q` query rows of `n_heads` heads of size
/// `d` over `n_keys` cached keys of `n_kv` heads (f16 or f32), or `None` when
/// the shape is not one it takes (head sizes 64, 128 and 256, at most
/// [`DEC_MAX_VECS`] query vectors per KV head); the general kernel takes the
/// rest. Keys are split so that about two blocks per SM run, at least 128
/// keys (one tile per warp) per split, within the budget's scratch.
pub fn decode_launch(dims: &AttnDims, f16_kv: bool, budget: SplitBudget) -> Option<DecodeLaunch> {
    const MIN_KEYS_PER_SPLIT: usize = DEC_THREADS;
    let AttnDims {
        n_q,
        n_heads,
        n_kv,
        d,
        n_keys,
    } = *dims;
    let SplitBudget {
        sm_count,
        scratch_floats,
    } = budget;
    if n_kv == 0 || n_q == 0 || !n_heads.is_multiple_of(n_kv) {
        return None;
    }
    if n_q * (n_heads / n_kv) > DEC_MAX_VECS || !matches!(d, 64 | 128 | 256) {
        return None;
    }
    let want = (2 * sm_count).div_ceil(n_kv);
    let by_keys = n_keys.div_ceil(MIN_KEYS_PER_SPLIT);
    let by_scratch = scratch_floats / (n_q * n_heads * (d + 2));
    let splits = want.min(by_keys).min(by_scratch).clamp(1, 64);
    let split_keys = n_keys.div_ceil(splits).next_multiple_of(32).max(32);
    let splits = n_keys.div_ceil(split_keys).max(1);
    let warps = DEC_THREADS / 32;
    let floats = DEC_MAX_VECS * d + 2 * warps * DEC_MAX_VECS + warps * DEC_MAX_VECS * d;
    Some(DecodeLaunch {
        suffix: format!("{}kv_d{d}", if f16_kv { "f16" } else { "f32" }),
        splits,
        split_keys,
        shared_bytes: floats * 4,
    })
}

/// How a cuBLAS product is cut to fit the scratch area: weight rows per
/// dequantised tile and tokens per converted activation chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmCut {
    /// Weight rows per tile.
    pub rows: usize,
    /// Tokens per chunk.
    pub tokens: usize,
}

/// Splits `scratch` bytes between a weight tile (`w_elem` bytes per element,
/// 0 when the weights are used in place) and an activation chunk (`x_elem`
/// bytes per element, 0 when used in place).
pub fn gemm_cut(
    rows: usize,
    cols: usize,
    n_tok: usize,
    w_elem: usize,
    x_elem: usize,
    scratch: usize,
) -> Result<GemmCut, String> {
    let x_need = n_tok * cols * x_elem;
    let w_need = rows * cols * w_elem;
    if x_need + w_need <= scratch {
        return Ok(GemmCut {
            rows,
            tokens: n_tok,
        });
    }
    // activations first (reused by every tile), at most half the scratch
    let x_share = if x_elem == 0 {
        0
    } else {
        x_need.min(scratch / 2)
    };
    let tokens = if x_elem == 0 {
        n_tok
    } else {
        (x_share / (cols * x_elem)).min(n_tok)
    };
    let w_rows = if w_elem == 0 {
        rows
    } else {
        ((scratch - tokens * cols * x_elem) / (cols * w_elem)).min(rows)
    };
    // whole warps of rows keep the tiles aligned
    let w_rows = if w_rows < rows {
        w_rows / 32 * 32
    } else {
        w_rows
    };
    if tokens == 0 || w_rows == 0 {
        return Err(format!(
            "a {rows}x{cols} product does not fit the {scratch}-byte scratch area"
        ));
    }
    Ok(GemmCut {
        rows: w_rows,
        tokens,
    })
}

/// Tokens per pass of the routed experts so that the per-slot buffers (gate,
/// up, down outputs) and the routing index fit in `scratch` bytes.
pub fn moe_chunk(
    n_tok: usize,
    top_k: usize,
    n_ff: usize,
    n_embd: usize,
    n_expert: usize,
    scratch: usize,
) -> Result<usize, String> {
    let fixed = (2 * (n_expert + 1)) * 4;
    let per_tok = top_k * ((2 * n_ff + n_embd) * 4 + 4);
    let fit = scratch.saturating_sub(fixed) / per_tok.max(1);
    if fit == 0 {
        return Err(format!(
            "one token of {top_k} experts ({n_ff} x {n_embd}) does not fit the {scratch}-byte scratch area"
        ));
    }
    Ok(fit.min(n_tok))
}

/// Blocks of the MoE grouped matmul: an upper bound on the tiles of
/// `slots` routed slots over `n_expert` experts (each expert's last tile
/// may be partial).
pub fn moe_tiles_bound(slots: usize, n_expert: usize) -> u32 {
    (slots.div_ceil(MM_BT as usize) + n_expert.min(slots)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n_q` query rows of `n_heads` heads of size `d` over `n_keys` keys of `n_kv` heads.
    fn dims(n_q: usize, n_heads: usize, n_kv: usize, d: usize, n_keys: usize) -> AttnDims {
        AttnDims {
            n_q,
            n_heads,
            n_kv,
            d,
            n_keys,
        }
    }

    /// `sm_count` SMs and `scratch_floats` floats of scratch.
    fn budget(sm_count: usize, scratch_floats: usize) -> SplitBudget {
        SplitBudget {
            sm_count,
            scratch_floats,
        }
    }

    #[test]
    fn decode_launch_fills_the_device_and_fits_shared_memory() {
        // Llama-3-8B decode at 2048 keys on 132 SMs: 16 splits of 128 keys
        let l = decode_launch(&dims(1, 32, 8, 128, 2048), true, budget(132, 1 << 20)).unwrap();
        assert_eq!(
            (l.splits, l.split_keys, l.suffix.as_str()),
            (16, 128, "f16kv_d128")
        );
        for d in [64, 128, 256] {
            let l = decode_launch(&dims(1, 8, 1, d, 100), false, budget(132, 1 << 20)).unwrap();
            assert!(l.shared_bytes <= SHARED_LIMIT, "{d}: {}", l.shared_bytes);
            assert_eq!((l.splits, l.split_keys), (1, 128));
        }
        // every key is in exactly one split
        for n_keys in [1, 31, 32, 33, 127, 129, 5000] {
            let l = decode_launch(&dims(2, 8, 2, 64, n_keys), true, budget(80, 1 << 20)).unwrap();
            assert!(l.splits * l.split_keys >= n_keys);
            assert!((l.splits - 1) * l.split_keys < n_keys);
            assert_eq!(l.split_keys % 32, 0);
        }
        // scratch for one split only: no partials
        assert_eq!(
            decode_launch(&dims(1, 32, 8, 128, 4096), true, budget(132, 0))
                .unwrap()
                .splits,
            1
        );
    }

    #[test]
    fn decode_launch_leaves_other_shapes_to_the_general_kernel() {
        assert!(decode_launch(&dims(1, 32, 8, 80, 64), true, budget(132, 1 << 20)).is_none());
        assert!(decode_launch(&dims(3, 32, 8, 128, 64), true, budget(132, 1 << 20)).is_none());
        assert!(decode_launch(&dims(1, 16, 1, 128, 64), true, budget(132, 1 << 20)).is_none());
        assert!(decode_launch(&dims(1, 30, 8, 128, 64), true, budget(132, 1 << 20)).is_none());
        assert!(decode_launch(&dims(1, 8, 8, 128, 64), true, budget(132, 1 << 20)).is_some());
    }

    #[test]
    fn elementwise_grids_cover_and_cap() {
        let c = elementwise(1000, 100);
        assert_eq!(c.grid_dim.0, 4);
        let c = elementwise(1 << 30, 100);
        assert_eq!(c.grid_dim.0, 1600);
        assert_eq!(elementwise(0, 100).grid_dim.0, 1);
        assert_eq!(per_item(257).unwrap().grid_dim.0, 2);
        assert!(per_item(u64::MAX / 2).is_err());
    }

    #[test]
    fn attention_tiles_fit_and_hold_whole_groups() {
        for d in [32, 64, 80, 96, 128, 256] {
            for group in [1, 2, 4, 7, 8, 16] {
                let Ok(t) = attn_tiles(d, group) else {
                    assert!(
                        ATTN_THREADS * ATTN_MAX_ACC / d < group,
                        "d {d} group {group}"
                    );
                    continue;
                };
                assert!(t.r.is_multiple_of(group));
                assert!(t.r * d <= ATTN_THREADS * ATTN_MAX_ACC);
                assert!(t.shared_bytes <= SHARED_LIMIT);
                assert_eq!(t.shared_bytes, attn_shared_bytes(t.r, t.bk, d));
            }
        }
        // llama-8B: head 128, group 4 -> 32 vectors (8 rows), 16-key steps
        let t = attn_tiles(128, 4).unwrap();
        assert_eq!((t.r, t.rows(4), t.bk), (32, 8, 16));
        assert!(attn_tiles(256, 32).is_err());
    }

    #[test]
    fn decode_splits_keys_and_prefill_does_not() {
        // one query, 8 KV heads, 4096 keys, 132 SMs: split, within scratch
        let (s, k) = attn_splits(&dims(1, 32, 8, 128, 4096), 1, budget(132, 1 << 20));
        assert!(s > 1 && s * k >= 4096 && (s - 1) * k < 4096, "{s} x {k}");
        // many query tiles: no split
        assert_eq!(
            attn_splits(&dims(2048, 32, 8, 128, 2048), 256, budget(132, 1 << 20)),
            (1, 2048)
        );
        // short contexts are not split below 256 keys a split
        let (s, _) = attn_splits(&dims(1, 32, 8, 128, 300), 1, budget(132, 1 << 20));
        assert_eq!(s, 2);
        // no scratch: no split
        assert_eq!(
            attn_splits(&dims(1, 32, 8, 128, 4096), 1, budget(132, 0)).0,
            1
        );
    }

    #[test]
    fn gemm_cuts_fit_the_scratch() {
        // everything fits
        assert_eq!(
            gemm_cut(4096, 4096, 16, 2, 2, 64 << 20).unwrap(),
            GemmCut {
                rows: 4096,
                tokens: 16
            }
        );
        // llama-8B down projection at 2048 tokens in 48 MiB
        let (rows, cols, n) = (4096, 14336, 2048);
        let c = gemm_cut(rows, cols, n, 2, 2, 48 << 20).unwrap();
        assert!(c.rows.is_multiple_of(32) && c.rows > 0 && c.tokens > 0);
        assert!(c.rows * cols * 2 + c.tokens * cols * 2 <= 48 << 20);
        // f32 weights in place: only activations take scratch
        let c = gemm_cut(rows, cols, n, 0, 0, 1 << 20).unwrap();
        assert_eq!((c.rows, c.tokens), (rows, n));
        assert!(gemm_cut(4096, 1 << 20, 1, 2, 2, 1 << 10).is_err());
    }

    #[test]
    fn moe_chunks_fit_the_scratch() {
        // qwen3-30b-a3b: 128 experts, top 8, ff 768, embd 2048
        let scratch = 48 << 20;
        let n = moe_chunk(2048, 8, 768, 2048, 128, scratch).unwrap();
        assert!(n > 0 && n < 2048);
        assert!(2 * 129 * 4 + n * 8 * ((2 * 768 + 2048) * 4 + 4) <= scratch);
        assert_eq!(moe_chunk(1, 8, 768, 2048, 128, scratch).unwrap(), 1);
        assert!(moe_chunk(1, 8, 768, 2048, 128, 1000).is_err());
        assert_eq!(moe_tiles_bound(16, 128), 1 + 16);
        assert_eq!(moe_tiles_bound(1000, 8), 16 + 8);
    }
}
