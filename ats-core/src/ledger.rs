//! The memory ledger: every device allocation is reserved here first, against
//! the budget, by region. Exceeding the budget is an error before it is an
//! allocation, and the peaks per region are what `plan` promises and tests check.

use std::fmt;
use std::sync::{Arc, Mutex};

/// What a block of device memory is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Region {
    /// Weights that live on the device for the whole run.
    Resident,
    /// Slots that streamed weights are copied into, reused by lifetime.
    Temp,
    /// Key/value caches.
    Kv,
    /// Activations and scratch of a forward round.
    Compute,
    /// Everything the vision encoder allocates (weights slots, activations, scratch).
    Vision,
    /// Library workspaces (cuBLAS) and staging buffers.
    Workspace,
}

impl Region {
    /// Every region, in report order.
    pub const ALL: [Region; 6] = [
        Region::Resident,
        Region::Temp,
        Region::Kv,
        Region::Compute,
        Region::Vision,
        Region::Workspace,
    ];

    fn index(self) -> usize {
        self as usize
    }

    /// Lower-case name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Region::Resident => "resident",
            Region::Temp => "temp",
            Region::Kv => "kv",
            Region::Compute => "compute",
            Region::Vision => "vision",
            Region::Workspace => "workspace",
        }
    }
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Bytes per region: what a plan reserves in each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegionBytes([u64; 6]);

impl RegionBytes {
    /// The sum over regions.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// `(region, bytes)` in report order.
    pub fn iter(&self) -> impl Iterator<Item = (Region, u64)> + '_ {
        Region::ALL.into_iter().map(|r| (r, self.0[r.index()]))
    }
}

impl std::ops::Index<Region> for RegionBytes {
    type Output = u64;
    fn index(&self, r: Region) -> &u64 {
        &self.0[r.index()]
    }
}

impl std::ops::IndexMut<Region> for RegionBytes {
    fn index_mut(&mut self, r: Region) -> &mut u64 {
        &mut self.0[r.index()]
    }
}

impl serde::Serialize for RegionBytes {
    /// A map from region name to bytes.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(Region::ALL.len()))?;
        for (r, b) in self.iter() {
            m.serialize_entry(r.name(), &b)?;
        }
        m.end()
    }
}

/// An allocation the budget cannot take.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{device}: allocating {requested} bytes for {label} ({region}) would exceed the budget: {used} of {budget} bytes in use"
)]
pub struct OverBudget {
    /// The ledger's device name.
    pub device: String,
    /// What the allocation was for.
    pub label: String,
    /// Its region.
    pub region: Region,
    /// Bytes asked for.
    pub requested: u64,
    /// Bytes in use before the request.
    pub used: u64,
    /// The budget.
    pub budget: u64,
}

#[derive(Clone, Debug, Default)]
struct State {
    used: [u64; 6],
    peak: [u64; 6],
    total: u64,
    peak_total: u64,
    allocations: u64,
}

/// A point-in-time view of a ledger.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LedgerSnapshot {
    /// The device the ledger belongs to.
    pub device: String,
    /// The budget, if any.
    pub budget: Option<u64>,
    /// Bytes in use now.
    pub used: u64,
    /// The highest `used` ever reached (since the last peak reset).
    pub peak: u64,
    /// Bytes in use now, per region.
    pub used_by_region: Vec<(Region, u64)>,
    /// Peak per region (each region's own high-water mark).
    pub peak_by_region: Vec<(Region, u64)>,
    /// Number of reservations made.
    pub allocations: u64,
}

/// Tracks reserved bytes by region against an optional budget.
#[derive(Debug)]
pub struct Ledger {
    device: String,
    budget: Option<u64>,
    state: Mutex<State>,
}

impl Ledger {
    /// A ledger for `device` with an optional budget in bytes.
    pub fn new(device: impl Into<String>, budget: Option<u64>) -> Arc<Ledger> {
        Arc::new(Ledger {
            device: device.into(),
            budget,
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the counters torn
        // (each update is a few integer ops), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The budget in bytes, if any.
    pub fn budget(&self) -> Option<u64> {
        self.budget
    }

    /// The device name.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// Reserves `bytes` in `region`; fails without reserving if the budget would be exceeded.
    pub fn reserve(
        self: &Arc<Self>,
        region: Region,
        bytes: u64,
        label: &str,
    ) -> Result<Lease, OverBudget> {
        let mut s = self.lock();
        if let Some(budget) = self.budget
            && s.total.checked_add(bytes).is_none_or(|t| t > budget)
        {
            return Err(OverBudget {
                device: self.device.clone(),
                label: label.to_string(),
                region,
                requested: bytes,
                used: s.total,
                budget,
            });
        }
        let i = region.index();
        s.used[i] += bytes;
        s.peak[i] = s.peak[i].max(s.used[i]);
        s.total += bytes;
        s.peak_total = s.peak_total.max(s.total);
        s.allocations += 1;
        Ok(Lease {
            ledger: self.clone(),
            region,
            bytes,
        })
    }

    /// Bytes that a reservation could still take (`u64::MAX` without a budget).
    pub fn available(&self) -> u64 {
        let s = self.lock();
        self.budget.map_or(u64::MAX, |b| b.saturating_sub(s.total))
    }

    /// Bytes in use now.
    pub fn used(&self) -> u64 {
        self.lock().total
    }

    /// Bytes in use now in one region.
    pub fn used_in(&self, region: Region) -> u64 {
        self.lock().used[region.index()]
    }

    /// The highest total reached.
    pub fn peak(&self) -> u64 {
        self.lock().peak_total
    }

    /// The highest use reached in one region.
    pub fn peak_in(&self, region: Region) -> u64 {
        self.lock().peak[region.index()]
    }

    /// Restarts peak tracking from the current use (to measure one phase).
    pub fn reset_peak(&self) {
        let mut s = self.lock();
        s.peak_total = s.total;
        s.peak = s.used;
    }

    /// Restarts the total's peak tracking from the current use but keeps each
    /// region's high-water mark (phases that follow one another, such as the
    /// vision encoder and then the language model, each get their own total
    /// while the per-region peaks still show both).
    pub fn reset_total_peak(&self) {
        let mut s = self.lock();
        s.peak_total = s.total;
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> LedgerSnapshot {
        let s = self.lock();
        LedgerSnapshot {
            device: self.device.clone(),
            budget: self.budget,
            used: s.total,
            peak: s.peak_total,
            used_by_region: Region::ALL
                .iter()
                .map(|r| (*r, s.used[r.index()]))
                .collect(),
            peak_by_region: Region::ALL
                .iter()
                .map(|r| (*r, s.peak[r.index()]))
                .collect(),
            allocations: s.allocations,
        }
    }

    fn release(&self, region: Region, bytes: u64) {
        let mut s = self.lock();
        s.used[region.index()] -= bytes;
        s.total -= bytes;
    }
}

/// Bytes reserved in a ledger; released when dropped.
#[derive(Debug)]
pub struct Lease {
    ledger: Arc<Ledger>,
    region: Region,
    bytes: u64,
}

impl Lease {
    /// Reserved bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The region.
    pub fn region(&self) -> Region {
        self.region
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.ledger.release(self.region, self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_is_checked_before_reserving() {
        let l = Ledger::new("gpu0", Some(100));
        let a = l.reserve(Region::Resident, 60, "w").unwrap();
        let e = l.reserve(Region::Kv, 41, "kv").unwrap_err();
        assert_eq!(e.used, 60);
        assert!(e.to_string().contains("41 bytes for kv (kv)"));
        assert_eq!(l.used(), 60);
        let b = l.reserve(Region::Kv, 40, "kv").unwrap();
        assert_eq!(l.available(), 0);
        drop(a);
        assert_eq!(l.used(), 40);
        assert_eq!(l.peak(), 100);
        assert_eq!(l.peak_in(Region::Resident), 60);
        l.reset_total_peak();
        assert_eq!((l.peak(), l.peak_in(Region::Resident)), (40, 60));
        l.reset_peak();
        assert_eq!(l.peak(), 40);
        assert_eq!(l.peak_in(Region::Resident), 0);
        drop(b);
        assert_eq!(l.used(), 0);
        assert!(l.reserve(Region::Temp, u64::MAX, "huge").is_err());
    }

    #[test]
    fn unbudgeted_ledger_tracks_peaks() {
        let l = Ledger::new("cpu", None);
        let _a = l.reserve(Region::Compute, 1 << 40, "x").unwrap();
        assert_eq!(l.available(), u64::MAX);
        let s = l.snapshot();
        assert_eq!(s.used, 1 << 40);
        assert_eq!(s.peak_by_region[3], (Region::Compute, 1 << 40));
    }
}
