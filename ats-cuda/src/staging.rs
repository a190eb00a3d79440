//! The staging ring: pinned, device-mapped host memory cut into slots that
//! activation copies pass through. A write copies host bytes into a slot and
//! launches an SM copy kernel on the compute stream from the slot to device
//! memory; a read does the reverse and waits. Each slot remembers the event
//! of the last kernel that used it and is reused only after that event.

use cudarc::driver::CudaEvent;

use crate::CudaError;
use crate::memory::{MappedHost, drv};

/// A ring of slots over one mapped allocation.
#[derive(Debug)]
pub struct Staging {
    mem: MappedHost,
    slot_bytes: usize,
    busy: Vec<Option<CudaEvent>>,
    next: usize,
}

/// One slot handed out for a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Slot index.
    pub index: usize,
    /// Byte offset in the allocation.
    pub offset: usize,
}

impl Staging {
    /// A ring of `slots` slots of `slot_bytes` over `mem`.
    pub fn new(mem: MappedHost, slots: usize) -> Staging {
        let slot_bytes = mem.len() / slots.max(1);
        Staging {
            mem,
            slot_bytes,
            busy: (0..slots.max(1)).map(|_| None).collect(),
            next: 0,
        }
    }

    /// Bytes per slot (the largest piece one copy moves).
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// The next slot, after the last kernel that used it has finished.
    pub fn take(&mut self) -> Result<Slot, CudaError> {
        let index = self.next;
        self.next = (self.next + 1) % self.busy.len();
        if let Some(ev) = self.busy[index].take() {
            drv("waiting for a staging slot", ev.synchronize())?;
        }
        Ok(Slot {
            index,
            offset: index * self.slot_bytes,
        })
    }

    /// Marks `slot` in use until `done` completes.
    pub fn release_after(&mut self, slot: Slot, done: CudaEvent) {
        self.busy[slot.index] = Some(done);
    }

    /// The mapped memory.
    pub fn mem(&self) -> &MappedHost {
        &self.mem
    }

    /// The mapped memory, for host writes into a taken slot.
    pub fn mem_mut(&mut self) -> &mut MappedHost {
        &mut self.mem
    }
}

/// Pieces `(offset, len)` of a `len`-byte copy through slots of `slot` bytes.
pub fn pieces(len: usize, slot: usize) -> impl Iterator<Item = (usize, usize)> {
    let slot = slot.max(1);
    (0..len.div_ceil(slot)).map(move |i| (i * slot, slot.min(len - i * slot)))
}

#[cfg(test)]
mod tests {
    use super::pieces;

    #[test]
    fn pieces_cover_the_copy_exactly() {
        let p: Vec<_> = pieces(10, 4).collect();
        assert_eq!(p, [(0, 4), (4, 4), (8, 2)]);
        assert_eq!(pieces(0, 4).count(), 0);
        assert_eq!(pieces(8, 4).collect::<Vec<_>>(), [(0, 4), (4, 4)]);
    }
}
