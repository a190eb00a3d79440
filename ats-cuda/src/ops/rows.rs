//! Row moves: keep the output rows, permute window groups, merge rows;
//! and strided column blocks (one frame of Conv3d patch rows).

use ats_core::device::DeviceError;
use cudarc::driver::PushKernelArg;

use super::Node;
use crate::device::State;
use crate::kernels::Module;

/// `out = x[output_rows]`.
pub(crate) fn select(n: &Node<'_>, st: &mut State) -> Result<(), DeviceError> {
    let (x, rows, cols) = n.input(0)?;
    let (o, ro, co) = n.output()?;
    let r = n.args.round;
    if r.output_rows.iter().any(|&i| i >= rows) {
        return Err(n.err("an output row lies outside the round"));
    }
    if co != cols || ro > r.output_rows.len() {
        return Err(n.err(format!("selecting {ro} rows of {cols} into {co} columns")));
    }
    let rd = n.round(st)?.clone();
    gather(n, x, rd.output_rows, o, ro, cols)
}

/// Group `i` of the output is group `perm[i]` of the input.
pub(crate) fn permute(
    n: &Node<'_>,
    st: &mut State,
    group: usize,
    perm: &[u32],
) -> Result<(), DeviceError> {
    let (x, rows, cols) = n.input(0)?;
    let (o, ro, co) = n.output()?;
    if co != cols || ro != rows || perm.len() * group > ro {
        return Err(n.err(format!(
            "permuting {} groups of {group} rows of a {rows}x{cols} value into {ro}x{co}",
            perm.len()
        )));
    }
    if perm.iter().any(|&p| (p as usize + 1) * group > rows) {
        return Err(n.err("a permutation entry lies outside the value"));
    }
    let src: Vec<u8> = perm
        .iter()
        .flat_map(|&p| (0..group).map(move |r| (p as usize * group + r) as i32))
        .flat_map(|r| r.to_le_bytes())
        .collect();
    let table = n.upload(st, &src)?;
    gather(n, x, table, o, perm.len() * group, cols)
}

/// `[rows, cols]` as `[rows / f, cols * f]`: the same bytes.
pub(crate) fn merge(n: &Node<'_>) -> Result<(), DeviceError> {
    let (x, rows, cols) = n.input(0)?;
    let (o, ro, co) = n.output()?;
    if rows * cols != ro * co {
        return Err(n.err(format!("merging {rows}x{cols} into {ro}x{co}")));
    }
    n.dev.sm_copy(x, o, rows * cols * 4).map_err(|e| n.cu(e))
}

/// `out[r, b * len + j] = x[r, offset + b * stride + j]` for `b < blocks`.
pub(crate) fn gather_cols(
    n: &Node<'_>,
    offset: usize,
    len: usize,
    stride: usize,
    blocks: usize,
) -> Result<(), DeviceError> {
    let (x, rows, cols) = n.input(0)?;
    let (o, ro, co) = n.output()?;
    let end = blocks.checked_sub(1).map(|b| {
        b.checked_mul(stride)
            .and_then(|s| s.checked_add(offset + len))
    });
    let fits = match end {
        None => true,
        Some(e) => e.is_some_and(|e| e <= cols),
    };
    if !fits || ro != rows || co != blocks * len || len == 0 {
        return Err(n.err(format!(
            "{blocks} column blocks of {len} (offset {offset}, stride {stride}) from {rows}x{cols} into {ro}x{co}"
        )));
    }
    if rows == 0 || co == 0 {
        return Ok(());
    }
    let f = n
        .dev
        .kernels
        .function(Module::Elementwise, "gather_cols_f32")
        .map_err(|e| n.cu(e))?;
    let (ic, oc, off, l, s) = (
        cols as u64,
        co as u64,
        offset as u64,
        len as u64,
        stride as u64,
    );
    let total = (rows * co) as u64;
    let cfg = crate::geometry::elementwise(total, n.dev.sm_count);
    let mut b = n.dev.streams.compute.launch_builder(&f);
    b.arg(&x)
        .arg(&o)
        .arg(&ic)
        .arg(&oc)
        .arg(&off)
        .arg(&l)
        .arg(&s)
        .arg(&total);
    // SAFETY: every block was checked to lie inside rows of `cols` floats of x,
    // and o holds rows * co floats.
    crate::memory::drv("gather_cols_f32", unsafe { b.launch(cfg) }).map_err(|e| n.cu(e))?;
    Ok(())
}

fn gather(
    n: &Node<'_>,
    x: u64,
    table: u64,
    o: u64,
    rows: usize,
    cols: usize,
) -> Result<(), DeviceError> {
    if rows == 0 {
        return Ok(());
    }
    let c = cols as u64;
    let f = n
        .dev
        .kernels
        .function(Module::Elementwise, "gather_rows_f32")
        .map_err(|e| n.cu(e))?;
    let total = (rows * cols) as u64;
    let cfg = crate::geometry::elementwise(total, n.dev.sm_count);
    let mut b = n.dev.streams.compute.launch_builder(&f);
    b.arg(&x).arg(&table).arg(&o).arg(&c).arg(&total);
    // SAFETY: `table` holds `rows` row indices, each checked to lie inside x;
    // o holds rows*cols floats.
    crate::memory::drv("gather_rows_f32", unsafe { b.launch(cfg) }).map_err(|e| n.cu(e))?;
    Ok(())
}
