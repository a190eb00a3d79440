//! Moving the executor to a new memory layout: resident weights freed or
//! uploaded, KV caches copied between devices with their contents.

use ats_core::device::Buffer;
use ats_core::ledger::Region;
use ats_core::machine::DeviceId;

use super::{ExecError, Executor, KvPair, WeightHome};

impl Executor {
    /// Frees the GPU copies of weights `home` does not keep resident.
    pub(super) fn drop_moved_weights(&mut self, home: &[WeightHome]) {
        for (r, h) in self.resident.iter_mut().zip(home) {
            if *h != WeightHome::Resident {
                *r = None;
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

    /// Moves every KV cache not on its device in `kv` there, through the
    /// host: those leaving the GPU first, so that its budget sees the
    /// space they free before others arrive.
    pub(super) fn move_kv(&mut self, kv: &[DeviceId]) -> Result<(), ExecError> {
        for to_host in [true, false] {
            for (c, &to) in kv.iter().enumerate() {
                if self.kv[c].dev != to && (to == DeviceId::Host) == to_host {
                    self.move_one_kv(c, to)?;
                }
            }
        }
        Ok(())
    }

    /// Copies cache `c` to `to`, then frees the old copy: a refused
    /// allocation leaves the cache where it was, whole.
    fn move_one_kv(&mut self, c: usize, to: DeviceId) -> Result<(), ExecError> {
        let layer = self.graph.kv_caches[c].layer;
        let region = self.cfg.region_for(Region::Kv);
        let (src, dst) = (
            self.device(self.kv[c].dev)?.clone(),
            self.device(to)?.clone(),
        );
        let copy = |name: &str, buf: &Buffer| -> Result<Buffer, ExecError> {
            let mut bytes = vec![0u8; buf.len()];
            src.read(buf, 0, &mut bytes)?;
            let nb = dst.alloc(region, bytes.len(), &format!("kv.{layer}.{name}"))?;
            dst.write(&nb, 0, &bytes)?;
            Ok(nb)
        };
        let k = copy("k", &self.kv[c].k)?;
        let v = copy("v", &self.kv[c].v)?;
        self.kv[c] = KvPair { k, v, dev: to };
        Ok(())
    }
}
