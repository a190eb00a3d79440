//! Token embedding lookup, then the round's embedding overrides (image
//! embeddings) replace their rows.

use ats_core::device::DeviceError;
use cudarc::driver::PushKernelArg;

use super::{Node, dtype_suffix};
use crate::device::State;
use crate::geometry;
use crate::kernels::Module;
use crate::memory::drv;

pub(crate) fn embed(n: &Node<'_>, st: &mut State) -> Result<(), DeviceError> {
    let (o, rows, cols) = n.output()?;
    let w = n.weight(0)?;
    let r = n.args.round;
    if w.cols != cols || !cols.is_multiple_of(32) {
        return Err(n.err(format!(
            "an embedding table of {} columns for {cols}-column rows (a multiple of 32 is needed)",
            w.cols
        )));
    }
    if r.tokens.len() < rows {
        return Err(n.err(format!("{} tokens for {rows} rows", r.tokens.len())));
    }
    let vocab = w.rows * w.mats;
    if let Some(&t) = r.tokens[..rows].iter().find(|&&t| t as usize >= vocab) {
        return Err(n.err(format!("token id {t} is outside the vocabulary of {vocab}")));
    }
    if rows > 0 {
        let tokens = n.round(st)?.tokens;
        let f = n
            .dev
            .kernels
            .function(Module::Embed, &format!("embed_{}", dtype_suffix(w.dtype)))
            .map_err(|e| n.cu(e))?;
        let cfg = geometry::per_item((rows * cols / 32) as u64).map_err(|e| n.err(e))?;
        let (rb, c, nt) = (w.row_bytes(), cols as i32, rows as i32);
        let mut b = n.dev.streams.compute.launch_builder(&f);
        b.arg(&w.ptr).arg(&rb).arg(&c).arg(&tokens).arg(&nt).arg(&o);
        // SAFETY: every token id was checked against the table's rows; o
        // holds rows*cols floats; one thread per 32-column chunk.
        drv("embed", unsafe { b.launch(cfg) }).map_err(|e| n.cu(e))?;
    }
    if let Some(ov) = &r.embed_override {
        if ov.data.len() < ov.rows.len() * cols {
            return Err(n.err("embedding override too short"));
        }
        if let Some(&bad) = ov.rows.iter().find(|&&i| i >= rows) {
            return Err(n.err(format!("embedding override row {bad} outside the round")));
        }
        // consecutive rows go in one copy
        let mut k = 0;
        while k < ov.rows.len() {
            let mut end = k + 1;
            while end < ov.rows.len() && ov.rows[end] == ov.rows[end - 1] + 1 {
                end += 1;
            }
            let src: &[f32] = &ov.data[k * cols..end * cols];
            let bytes: Vec<u8> = src.iter().flat_map(|v| v.to_le_bytes()).collect();
            let dst = o + (ov.rows[k] * cols * 4) as u64;
            n.dev.stage_in(st, dst, &bytes).map_err(|e| n.cu(e))?;
            k = end;
        }
    }
    Ok(())
}
