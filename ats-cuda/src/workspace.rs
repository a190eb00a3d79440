//! The device's own memory (reserved in the ledger as `workspace` when it
//! opens): the scratch area ops carve their temporaries from, the ring of
//! small kernel-argument tables, and the per-round inputs (tokens, positions,
//! output rows, segment bounds) uploaded once per round.
//!
//! Everything here is used by the compute stream only, in order, so a range
//! can be reused as soon as the next use is enqueued after the last reader.

use std::sync::Arc;

use ats_core::device::Buffer;
use ats_core::round::Round;
use cudarc::driver::sys::CUdeviceptr;

use crate::memory::device_ptr;

/// Alignment of every carved range (what cuBLAS and vector loads like).
pub const ALIGN: usize = 256;

/// Rounds `n` up to [`ALIGN`].
pub fn align_up(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

/// The device's scratch and argument memory.
#[derive(Debug)]
pub struct Workspace {
    scratch: Buffer,
    args: Buffer,
    args_next: usize,
    /// Keeps the cuBLAS workspace allocated (and reserved) while cuBLAS lives.
    _blas: Option<Buffer>,
    /// The per-round input buffer, kept and grown across rounds.
    pub round_buf: Option<Buffer>,
}

impl Workspace {
    /// Wraps the buffers reserved at open.
    pub fn new(scratch: Buffer, args: Buffer, blas: Option<Buffer>) -> Workspace {
        Workspace {
            scratch,
            args,
            args_next: 0,
            _blas: blas,
            round_buf: None,
        }
    }

    /// A fresh carver over the whole scratch area (one op's temporaries).
    pub fn scratch(&self) -> Carver {
        Carver {
            base: device_ptr(&self.scratch).unwrap_or(0),
            len: self.scratch.len(),
            used: 0,
        }
    }

    /// The next `bytes` of the argument ring (wrapping around).
    pub fn args_range(&mut self, bytes: usize) -> Result<CUdeviceptr, String> {
        let bytes = align_up(bytes.max(1));
        if bytes > self.args.len() {
            return Err(format!(
                "a {bytes}-byte kernel table exceeds the {}-byte argument ring",
                self.args.len()
            ));
        }
        if self.args_next + bytes > self.args.len() {
            self.args_next = 0;
        }
        let p = device_ptr(&self.args).unwrap_or(0) + self.args_next as u64;
        self.args_next += bytes;
        Ok(p)
    }
}

/// Bump allocation of aligned ranges from one area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Carver {
    base: CUdeviceptr,
    len: usize,
    used: usize,
}

impl Carver {
    /// A carver over `len` bytes at `base`.
    pub fn new(base: CUdeviceptr, len: usize) -> Carver {
        Carver { base, len, used: 0 }
    }

    /// Bytes still free.
    pub fn free(&self) -> usize {
        self.len - self.used
    }

    /// Bytes that `takes` separate takes can hold in all: each take is
    /// rounded up to [`ALIGN`], so sizing from [`Carver::free`] alone can
    /// come up short by up to `ALIGN - 1` bytes a take.
    pub fn free_for(&self, takes: usize) -> usize {
        self.free().saturating_sub(takes * (ALIGN - 1))
    }

    /// The next `bytes`, aligned, or why they do not fit.
    pub fn take(&mut self, bytes: usize) -> Result<CUdeviceptr, String> {
        let need = align_up(bytes);
        if need > self.free() {
            return Err(format!(
                "{bytes} bytes of scratch needed, {} of {} free",
                self.free(),
                self.len
            ));
        }
        let p = self.base + self.used as u64;
        self.used += need;
        Ok(p)
    }
}

/// Where a round's inputs lie in the round buffer.
#[derive(Clone, Debug)]
pub struct RoundData {
    /// The round (kept so its address cannot be reused while cached).
    pub round: Arc<Round>,
    /// Token ids (u32).
    pub tokens: CUdeviceptr,
    /// Positions (i32, `components` per row).
    pub positions: CUdeviceptr,
    /// Integers per row of `positions`.
    pub components: i32,
    /// Output rows (i32).
    pub output_rows: CUdeviceptr,
    /// Segment ends `segments[1..]` (i32).
    pub bounds: CUdeviceptr,
    /// Entries of `bounds`.
    pub n_bounds: i32,
    /// Per sequence of the round: its KV block table (u32), or `None` for
    /// contiguous cache rows.
    pub blocks: Vec<Option<CUdeviceptr>>,
}

/// The bytes uploaded for a round and the offsets of its five arrays
/// (tokens, positions, output rows, bounds, block tables), each aligned.
pub fn round_blob(r: &Round) -> (Vec<u8>, [usize; 5]) {
    let bounds = &r.segments[1.min(r.segments.len())..];
    let tables: Vec<u8> = r
        .seqs
        .iter()
        .flat_map(|s| match &s.cache {
            ats_core::round::CacheRows::Blocks(b) => b.to_vec(),
            ats_core::round::CacheRows::Contiguous => Vec::new(),
        })
        .flat_map(|b| b.to_le_bytes())
        .collect();
    let parts: [Vec<u8>; 5] = [
        r.tokens.iter().flat_map(|t| t.to_le_bytes()).collect(),
        r.positions
            .data
            .iter()
            .flat_map(|p| p.to_le_bytes())
            .collect(),
        r.output_rows
            .iter()
            .flat_map(|&o| (o as i32).to_le_bytes())
            .collect(),
        bounds
            .iter()
            .flat_map(|&b| (b as i32).to_le_bytes())
            .collect(),
        tables,
    ];
    let mut blob = Vec::new();
    let mut offs = [0usize; 5];
    for (i, p) in parts.iter().enumerate() {
        offs[i] = blob.len();
        blob.extend_from_slice(p);
        blob.resize(align_up(blob.len()), 0);
    }
    (blob, offs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ats_core::round::Positions;

    #[test]
    fn carving_aligns_and_refuses_overflow() {
        let mut c = Carver::new(1 << 20, 1000);
        assert_eq!(c.take(10).unwrap(), 1 << 20);
        assert_eq!(c.take(300).unwrap(), (1 << 20) + 256);
        assert_eq!(c.free(), 1000 - 768);
        assert!(c.take(300).is_err());
        assert!(c.take(200).is_err());
        assert_eq!(c.take(0).unwrap(), (1 << 20) + 768);
    }

    #[test]
    fn sizes_within_free_for_always_fit_their_takes() {
        // two takes sized from free_for(2) fit whatever their rounding
        for len in [600, 1000, 4096, 10_000] {
            for a in (1..len).step_by(37) {
                let c = Carver::new(0, len);
                let Some(b) = c.free_for(2).checked_sub(a) else {
                    continue;
                };
                let mut c = c;
                assert!(c.take(a).is_ok() && c.take(b).is_ok(), "{len}: {a} + {b}");
            }
        }
        // and free() alone does not promise that
        let mut c = Carver::new(0, 1000);
        assert!(c.take(1).is_ok() && c.take(999 - 256).is_err());
    }

    #[test]
    fn round_blob_lays_out_the_five_arrays() {
        use ats_core::round::{CacheRows, SeqSpan};
        let span = |rows, blocks: &[u32]| SeqSpan {
            rows,
            past: 0,
            cache: CacheRows::Blocks(blocks.into()),
        };
        let r = Round {
            tokens: vec![7, 8],
            n_rows: 2,
            positions: Positions::mrope_text(3, 2),
            output_rows: vec![1],
            segments: vec![0, 1, 2],
            seqs: vec![span(0..1, &[5]), span(1..2, &[9, 2])],
            ..Round::default()
        };
        let (blob, offs) = round_blob(&r);
        assert_eq!(offs, [0, 256, 512, 768, 1024]);
        assert_eq!(blob.len(), 1280);
        // the block tables one after another
        let u = |o: usize| u32::from_le_bytes(blob[o..o + 4].try_into().unwrap());
        assert_eq!((u(1024), u(1028), u(1032)), (5, 9, 2));
        let at = |o: usize| i32::from_le_bytes(blob[o..o + 4].try_into().unwrap());
        assert_eq!((at(0), at(4)), (7, 8));
        // positions: 3,3,3,0 then 4,4,4,0
        assert_eq!((at(256), at(256 + 12), at(256 + 16)), (3, 0, 4));
        assert_eq!(at(512), 1);
        // bounds skip the leading 0
        assert_eq!((at(768), at(772)), (1, 2));
    }
}
