//! Token embedding lookup from a table of any supported type.

use ats_core::dtype::DType;
use ats_core::quant::{QuantError, dequantize_row};

/// `out[t] = table[tokens[t]]`, dequantising the rows of a `vocab x cols` table.
pub fn embed(
    table: &[u8],
    dtype: DType,
    cols: usize,
    tokens: &[u32],
    out: &mut [f32],
) -> Result<(), String> {
    let row_bytes = dtype
        .row_bytes(cols)
        .ok_or_else(|| format!("{cols} columns of {dtype} are not whole blocks"))?;
    let vocab = table.len() / row_bytes.max(1);
    for (o, &t) in out.chunks_exact_mut(cols).zip(tokens) {
        let t = t as usize;
        if t >= vocab {
            return Err(format!("token id {t} is outside the vocabulary of {vocab}"));
        }
        dequantize_row(dtype, &table[t * row_bytes..(t + 1) * row_bytes], o)
            .map_err(|e: QuantError| e.to_string())?;
    }
    Ok(())
}
