//! Tiling and threading of one matmul.
//!
//! The output (`n_tokens x rows`) is cut into rectangular tasks (a range of
//! rows x a range of token tiles) that the current [`crate::team`] runs; each
//! task walks its rectangle in micro-tiles of `MR` rows x `NR` tokens (or
//! `MR` rows x [`NARROW`] tokens where a kernel has a narrow tile and a token
//! tile holds 2 to `NARROW` tokens, or `MRD` rows x 1 token, per token, where
//! a token tile holds too few tokens). Every output element is computed
//! by one tile call whose arithmetic does not depend on the tile shape, so
//! the result is bit-identical whatever the split and the thread count.

use std::ops::Range;

use crate::team;

/// Dimensions of one matmul.
#[derive(Clone, Copy, Debug)]
pub(super) struct Shape {
    /// Output rows (weight rows).
    pub rows: usize,
    /// Tokens (activation rows).
    pub n_tokens: usize,
    /// Bytes per weight row.
    pub row_bytes: usize,
}

/// A micro-tile: dot products of rows `r` with tokens `t0..t0 + NR`, into
/// `out[token][row]`.
pub(super) type TileFn<'a, const MR: usize, const NR: usize> =
    &'a (dyn Fn(&[usize; MR], usize, &mut [[f32; MR]; NR]) + Sync);

/// Weight bytes (times token tiles) below which a task is not worth a fork
/// (a few microseconds of streaming; a region costs about one).
const MIN_TASK_BYTES: usize = 24 << 10;
/// Tasks per thread, for balance when a core is busy with something else.
const TASKS_PER_THREAD: usize = 4;
/// Weight bytes a task re-reads for each of its token tiles: kept within
/// L2 so that only the first pass comes from memory.
const L2_BLOCK_BYTES: usize = 192 << 10;

/// One rectangle of the output.
struct Task<'y> {
    /// Token tiles (tile `i` is tokens `i * NR ..`).
    tiles: Range<usize>,
    /// Weight rows.
    rows: Range<usize>,
    /// For each token of the tiles, its outputs for `rows`.
    out: Vec<&'y mut [f32]>,
}

/// The micro-tiles of one matmul: `tile` (`MR x NR`), `narrow` (`MR x
/// NARROW`, if the kernel has one, for a token tile of 2 to `NARROW` tokens)
/// and `single` (`MRD x 1`, for the tokens of a token tile holding fewer than
/// `wide_min` of them that `narrow` does not take).
pub(super) struct Tiles<'a, const MR: usize, const NR: usize, const MRD: usize> {
    /// The full tile.
    pub tile: TileFn<'a, MR, NR>,
    /// The narrow tile, if any.
    pub narrow: Option<TileFn<'a, MR, NARROW>>,
    /// The one-token tile.
    pub single: TileFn<'a, MRD, 1>,
    /// Fewest tokens worth the full tile.
    pub wide_min: usize,
}

/// Tokens of the narrow tile.
pub(super) const NARROW: usize = 4;

/// Computes every output of `shape` into `y` (`y[t * rows + r]`) with `tiles`.
pub(super) fn drive<const MR: usize, const NR: usize, const MRD: usize>(
    shape: Shape,
    y: &mut [f32],
    tiles: Tiles<'_, MR, NR, MRD>,
) {
    let Shape {
        rows,
        n_tokens,
        row_bytes,
    } = shape;
    if rows == 0 || n_tokens == 0 {
        return;
    }
    debug_assert_eq!(y.len(), rows * n_tokens);
    let n_tiles = n_tokens.div_ceil(NR);
    let threads = team::current_threads();
    let weight_bytes = rows * row_bytes;

    // How many tasks: enough for every thread (a few each), none tiny.
    let want = if threads <= 1 {
        1
    } else {
        (threads * TASKS_PER_THREAD).min((weight_bytes * n_tiles / MIN_TASK_BYTES).max(1))
    };
    // Split tokens first (a token chunk re-reads the weights from cache),
    // then rows; with several token tiles, also keep each task's weights in L2.
    let t_chunks = want.min(n_tiles);
    let mut r_chunks = want.div_ceil(t_chunks);
    if n_tiles > 1 {
        r_chunks = r_chunks.max(weight_bytes.div_ceil(L2_BLOCK_BYTES));
    }
    let align = lcm(MR, MRD);
    let r_size = rows.div_ceil(r_chunks).div_ceil(align) * align;
    let r_chunks = rows.div_ceil(r_size);
    let t_size = n_tiles.div_ceil(t_chunks);
    let t_chunks = n_tiles.div_ceil(t_size);

    let mut tasks: Vec<Task<'_>> = Vec::with_capacity(t_chunks * r_chunks);
    for tc in 0..t_chunks {
        let tiles = tc * t_size..n_tiles.min((tc + 1) * t_size);
        let n_out = (tiles.end * NR).min(n_tokens) - tiles.start * NR;
        for rc in 0..r_chunks {
            let rows = rc * r_size..rows.min((rc + 1) * r_size);
            tasks.push(Task {
                tiles: tiles.clone(),
                rows,
                out: Vec::with_capacity(n_out),
            });
        }
    }
    for (t, mut rest) in y.chunks_mut(rows).enumerate() {
        let tc = t / NR / t_size;
        for task in &mut tasks[tc * r_chunks..(tc + 1) * r_chunks] {
            let (mine, tail) = rest.split_at_mut(task.rows.len());
            task.out.push(mine);
            rest = tail;
        }
    }

    let run = |task: &mut Task<'_>| run_task(task, n_tokens, &tiles);
    if tasks.len() == 1 {
        run(&mut tasks[0]);
    } else {
        team::for_each_mut(&mut tasks, run);
    }
}

/// [`drive`] with one dot product per output (the portable kernels).
pub(super) fn drive_dots(shape: Shape, y: &mut [f32], dot: TileFn<'_, 1, 1>) {
    let tiles = Tiles {
        tile: dot,
        narrow: None,
        single: dot,
        wide_min: 2,
    };
    drive(shape, y, tiles)
}

/// Walks one task: token tiles outer (their activations stay in L1), row
/// tiles inner (the task's weights stay in L2).
fn run_task<const MR: usize, const NR: usize, const MRD: usize>(
    task: &mut Task<'_>,
    n_tokens: usize,
    tiles: &Tiles<'_, MR, NR, MRD>,
) {
    let (r0, r1) = (task.rows.start, task.rows.end);
    let t_first = task.tiles.start * NR;
    for ti in task.tiles.clone() {
        let t0 = ti * NR;
        let width = NR.min(n_tokens - t0);
        let narrow = tiles.narrow.filter(|_| (2..=NARROW).contains(&width));
        if let Some(narrow) = narrow {
            run_rows(task, r0..r1, t0 - t_first, width, |rows, o| {
                narrow(rows, t0, o)
            });
        } else if width < tiles.wide_min.max(2) {
            let single = tiles.single;
            for t in t0..t0 + width {
                run_rows(task, r0..r1, t - t_first, 1, |rows, o| single(rows, t, o));
            }
        } else {
            let tile = tiles.tile;
            run_rows(task, r0..r1, t0 - t_first, width, |rows, o| {
                tile(rows, t0, o)
            });
        }
    }
}

/// Runs a tile of `N` tokens (the first `width` of them real, from the
/// task's output `at`) over the task's rows, `MR` at a time.
fn run_rows<const MR: usize, const N: usize>(
    task: &mut Task<'_>,
    rows: Range<usize>,
    at: usize,
    width: usize,
    tile: impl Fn(&[usize; MR], &mut [[f32; MR]; N]),
) {
    let (r0, r1) = (rows.start, rows.end);
    // One buffer for the task's row tiles: every tile writes each result
    // that is stored (zeroing 16 x 8 of them per tile was a `memset` call,
    // 1% of a decode round's samples on each thread).
    let mut o = [[0f32; MR]; N];
    for r in rows.step_by(MR) {
        // Past the end, repeat the last row; its results are dropped.
        let rows = std::array::from_fn(|i| (r + i).min(r1 - 1));
        tile(&rows, &mut o);
        for (out, o) in task.out[at..at + width].iter_mut().zip(&o) {
            store(&mut out[r - r0..], o);
        }
    }
}

/// Copies the leading results of `o` into `out` (all of them, with a length
/// known at compile time, unless `out` ends first).
#[inline(always)]
fn store<const N: usize>(out: &mut [f32], o: &[f32; N]) {
    if out.len() >= N {
        out[..N].copy_from_slice(o);
    } else {
        store_part(out, o);
    }
}

/// [`store`] where `out` ends first: apart, so that LLVM does not merge the
/// two copies into one `memcpy` call of either length (with 16-row tiles
/// that call took about 6% of a SmolLM2 prompt's samples).
#[cold]
#[inline(never)]
fn store_part(out: &mut [f32], o: &[f32]) {
    let n = out.len();
    out.copy_from_slice(&o[..n]);
}

fn lcm(a: usize, b: usize) -> usize {
    fn gcd(a: usize, b: usize) -> usize {
        if b == 0 { a } else { gcd(b, a % b) }
    }
    a / gcd(a, b) * b
}
