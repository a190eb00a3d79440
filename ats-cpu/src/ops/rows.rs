//! Row selection and reordering.

/// Copies the listed rows of `x` (each `cols` wide) into `out`, in order.
pub fn select_rows(x: &[f32], rows: &[usize], cols: usize, out: &mut [f32]) {
    for (o, &r) in out.chunks_exact_mut(cols).zip(rows) {
        o.copy_from_slice(&x[r * cols..(r + 1) * cols]);
    }
}

/// `out` group `i` = `x` group `perm[i]`, groups of `group` rows of `cols`.
pub fn permute_rows(x: &[f32], perm: &[u32], group: usize, cols: usize, out: &mut [f32]) {
    let g = group * cols;
    for (o, &p) in out.chunks_exact_mut(g).zip(perm) {
        let p = p as usize;
        o.copy_from_slice(&x[p * g..(p + 1) * g]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selects_and_permutes() {
        let x: Vec<f32> = (0..12).map(|i| i as f32).collect();
        let mut out = vec![0.0; 4];
        select_rows(&x, &[5, 1], 2, &mut out);
        assert_eq!(out, [10.0, 11.0, 2.0, 3.0]);
        let mut out = vec![0.0; 12];
        permute_rows(&x, &[2, 0, 1], 2, 2, &mut out);
        assert_eq!(
            out,
            [8.0, 9.0, 10.0, 11.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
        );
    }
}
