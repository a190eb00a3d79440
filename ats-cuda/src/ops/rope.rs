//! Rotary embeddings: the per-pair table is built here exactly as the CPU
//! reference computes it (inverse frequency in f32, the position component
//! each pair takes), and passed to the kernel by value.

use ats_core::device::DeviceError;
use ats_core::graph::{RopeKind, RopeSpec};
use cudarc::driver::{DeviceRepr, PushKernelArg};

use super::Node;
use crate::device::State;
use crate::geometry::{self, ROPE_MAX_PAIRS};
use crate::kernels::Module;
use crate::memory::drv;
use crate::workspace::Carver;

/// The kernel's `RopeTable` (rope.cu), passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RopeTable {
    /// Inverse frequency of each pair.
    pub inv_freq: [f32; ROPE_MAX_PAIRS],
    /// Position component of each pair.
    pub component: [i32; ROPE_MAX_PAIRS],
    /// Frequency-factor index of each pair.
    pub factor_index: [i32; ROPE_MAX_PAIRS],
    /// Scale of cos and sin ([`RopeSpec::mscale`]).
    pub mscale: f32,
}

// SAFETY: plain old data with the C layout of the kernel's struct.
unsafe impl DeviceRepr for RopeTable {}

/// The rotation pairs of a head and the table for positions with
/// `components` integers per row; `Err` when the head has too many pairs.
pub fn table(spec: &RopeSpec, components: usize) -> Result<(usize, RopeTable), String> {
    let n_pairs = match spec.kind {
        RopeKind::Vision2d => spec.head_dim / 2,
        _ => spec.rot_dim / 2,
    };
    if n_pairs > ROPE_MAX_PAIRS || 2 * n_pairs > spec.head_dim {
        return Err(format!(
            "RoPE over {n_pairs} pairs of a {}-wide head (at most {ROPE_MAX_PAIRS} pairs)",
            spec.head_dim
        ));
    }
    let mut t = RopeTable {
        inv_freq: [0.0; ROPE_MAX_PAIRS],
        component: [0; ROPE_MAX_PAIRS],
        factor_index: [0; ROPE_MAX_PAIRS],
        mscale: spec.mscale(),
    };
    for i in 0..n_pairs {
        let (c, j) = spec.pair_source(i);
        t.inv_freq[i] = spec.inv_freq(j);
        // text rounds of an M-RoPE model may carry one component only
        t.component[i] = if components > c { c as i32 } else { 0 };
        t.factor_index[i] = j as i32;
    }
    Ok((n_pairs, t))
}

pub(crate) fn rope(
    n: &Node<'_>,
    st: &mut State,
    scratch: &mut Carver,
    spec: &RopeSpec,
) -> Result<(), DeviceError> {
    let (x, rows, cols) = n.input(0)?;
    let (o, ro, co) = n.output()?;
    let r = n.args.round;
    if (ro, co) != (rows, cols) || cols != spec.n_heads * spec.head_dim {
        return Err(n.err(format!(
            "RoPE of {rows}x{cols} ({} heads of {}) into {ro}x{co}",
            spec.n_heads, spec.head_dim
        )));
    }
    if r.positions.len() < rows {
        return Err(n.err(format!("{} positions for {rows} rows", r.positions.len())));
    }
    let (n_pairs, tab) = table(spec, r.positions.components).map_err(|e| n.err(e))?;
    let factors = if n.args.weights.is_empty() {
        0u64
    } else {
        let (p, len) = n.weight_f32(0, scratch)?;
        if (0..n_pairs).any(|i| tab.factor_index[i] as usize >= len) {
            return Err(n.err(format!("{len} frequency factors for {n_pairs} pairs")));
        }
        p
    };
    if rows == 0 {
        return Ok(());
    }
    let rd = n.round(st)?.clone();
    let f = n
        .dev
        .kernels
        .function(Module::Rope, "rope_f32")
        .map_err(|e| n.cu(e))?;
    let cfg = geometry::elementwise((rows * cols) as u64, n.dev.sm_count);
    let mode: i32 = if spec.kind == RopeKind::Normal { 0 } else { 1 };
    let (nr, nh, hd, np) = (
        rows as i32,
        spec.n_heads as i32,
        spec.head_dim as i32,
        n_pairs as i32,
    );
    let mut b = n.dev.streams.compute.launch_builder(&f);
    b.arg(&x)
        .arg(&o)
        .arg(&rd.positions)
        .arg(&rd.components)
        .arg(&nr)
        .arg(&nh)
        .arg(&hd)
        .arg(&np)
        .arg(&mode)
        .arg(&factors)
        .arg(&tab);
    // SAFETY: x and o hold rows*cols floats; positions hold `components`
    // ints for at least `rows` rows (checked); the table's components index
    // within a row and its factor indices within the factors (checked).
    drv("rope_f32", unsafe { b.launch(cfg) }).map_err(|e| n.cu(e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: RopeKind, head_dim: usize, rot_dim: usize) -> RopeSpec {
        RopeSpec {
            kind,
            n_heads: 2,
            head_dim,
            rot_dim,
            theta: 10000.0,
            yarn: None,
        }
    }

    #[test]
    fn tables_follow_the_cpu_pairing() {
        let s = spec(
            RopeKind::MRope {
                sections: [2, 1, 1, 0],
            },
            8,
            8,
        );
        let (np, t) = table(&s, 4).unwrap();
        assert_eq!(np, 4);
        assert_eq!(&t.component[..4], &[0, 0, 1, 2]);
        assert_eq!(t.inv_freq[2], s.inv_freq(2));
        // a one-component text round uses component 0 for every pair
        let (_, t1) = table(&s, 1).unwrap();
        assert_eq!(&t1.component[..4], &[0, 0, 0, 0]);
        let v = spec(RopeKind::Vision2d, 8, 8);
        let (np, t) = table(&v, 2).unwrap();
        assert_eq!(np, 4);
        assert_eq!(&t.component[..4], &[0, 0, 1, 1]);
        assert_eq!(&t.factor_index[..4], &[0, 1, 0, 1]);
        assert_eq!(t.inv_freq[2], v.inv_freq(0));
        // partial rotation: only rot_dim / 2 pairs
        let (np, _) = table(&spec(RopeKind::Neox, 128, 64), 1).unwrap();
        assert_eq!(np, 32);
        assert!(table(&spec(RopeKind::Neox, 512, 512), 1).is_err());
    }

    #[test]
    fn the_table_has_the_kernel_layout() {
        // three per-pair arrays of 4-byte values, then the cos/sin scale
        assert_eq!(std::mem::size_of::<RopeTable>(), 12 * ROPE_MAX_PAIRS + 4);
        let t = RopeTable {
            inv_freq: [0.0; ROPE_MAX_PAIRS],
            component: [0; ROPE_MAX_PAIRS],
            factor_index: [0; ROPE_MAX_PAIRS],
            mscale: 1.0,
        };
        let base = &t as *const RopeTable as usize;
        assert_eq!(&t.mscale as *const f32 as usize - base, 12 * ROPE_MAX_PAIRS);
    }
}
