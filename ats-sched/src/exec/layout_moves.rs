//! Moving the executor to a new memory layout: resident weights freed or
//! uploaded, KV caches copied between devices with their contents.

use ats_core::ledger::Region;
use ats_core::machine::DeviceId;

use super::{ExecError, Executor, KvPair, WeightHome};

impl Executor {
    /// Frees the GPU copies of weights whose home changes.
    pub(super) fn drop_moved_weights(&mut self, home: &[WeightHome]) {
        let old = &self.plans[0].weight_home;
        for (w, h) in home.iter().enumerate() {
            if *h != old[w] {
                self.resident[w] = None;
            }
        }
    }

    /// Uploads the weights `home` makes resident that are not on the GPU yet.
    pub(super) fn upload_resident(&mut self, home: &[WeightHome]) -> Result<(), ExecError> {
        for (w, h) in home.iter().enumerate() {
            if *h != WeightHome::Resident || self.resident[w].is_some() {
                continue;
            }
            let info = &self.graph.weights[w];
            let dev = self.device(DeviceId::Gpu)?;
            let region = self.cfg.region_for(Region::Resident);
            let buf = dev.alloc(region, info.bytes as usize, &info.name)?;
            dev.write(&buf, 0, self.weight_bytes(w))?;
            self.resident[w] = Some(buf);
        }
        Ok(())
    }

    /// Moves every KV cache whose device changes to `kv` through the host.
    pub(super) fn move_kv(&mut self, kv: &[DeviceId]) -> Result<(), ExecError> {
        let from: Vec<DeviceId> = self.plans[0].kv_device.clone();
        for (c, (&from, &to)) in from.iter().zip(kv).enumerate() {
            if from != to {
                self.move_one_kv(c, from, to)?;
            }
        }
        Ok(())
    }

    fn move_one_kv(&mut self, c: usize, from: DeviceId, to: DeviceId) -> Result<(), ExecError> {
        let layer = self.graph.kv_caches[c].layer;
        let region = self.cfg.region_for(Region::Kv);
        let (src, dst) = (self.device(from)?.clone(), self.device(to)?.clone());
        let mut host_k = vec![0u8; self.kv[c].k.len()];
        let mut host_v = vec![0u8; self.kv[c].v.len()];
        src.read(&self.kv[c].k, 0, &mut host_k)?;
        src.read(&self.kv[c].v, 0, &mut host_v)?;
        // release the old copies before reserving the new ones
        let host = self.machine.host().clone();
        self.kv[c] = KvPair {
            k: host.alloc(region, 0, "kv placeholder")?,
            v: host.alloc(region, 0, "kv placeholder")?,
        };
        let nk = dst.alloc(region, host_k.len(), &format!("kv.{layer}.k"))?;
        dst.write(&nk, 0, &host_k)?;
        let nv = dst.alloc(region, host_v.len(), &format!("kv.{layer}.v"))?;
        dst.write(&nv, 0, &host_v)?;
        self.kv[c] = KvPair { k: nk, v: nv };
        Ok(())
    }
}
