//! Image embeddings kept between requests, keyed by the image's bytes and
//! the preprocessing they went through: a chat that sends the same picture
//! again (every turn of an OpenAI-style conversation does) skips decoding
//! and encoding it, and its rows then match the KV pool's cached ones.
//! Least recently used entries go first when the byte budget is passed.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::encoder::ImageEmbedding;
use crate::preprocess::PreprocessConfig;

/// What identifies an image's embedding: a hash of its file bytes and of
/// the settings that shape its pixels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ImageKey(u64);

impl ImageKey {
    /// The key of `bytes` preprocessed with `cfg`.
    pub fn of(bytes: &[u8], cfg: &PreprocessConfig) -> ImageKey {
        // SipHash with fixed keys: the same bytes give the same key in
        // every process, and crafted collisions are not cheap
        let mut h = std::collections::hash_map::DefaultHasher::new();
        bytes.hash(&mut h);
        (
            cfg.min_pixels,
            cfg.max_pixels,
            cfg.patch_size,
            cfg.merge_size,
        )
            .hash(&mut h);
        for v in cfg.mean.iter().chain(&cfg.std) {
            v.to_bits().hash(&mut h);
        }
        ImageKey(h.finish())
    }
}

/// Embeddings by key, within a byte budget.
#[derive(Debug)]
pub struct EmbeddingCache {
    max_bytes: usize,
    bytes: usize,
    entries: HashMap<ImageKey, (Arc<ImageEmbedding>, u64)>,
    clock: u64,
    hits: u64,
    misses: u64,
}

/// Counters of a cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheStats {
    /// Embeddings held.
    pub entries: usize,
    /// Their bytes.
    pub bytes: usize,
    /// Look-ups that found one.
    pub hits: u64,
    /// Look-ups that did not.
    pub misses: u64,
}

impl EmbeddingCache {
    /// A cache of at most `max_bytes` of embeddings (0: keeps nothing).
    pub fn new(max_bytes: usize) -> EmbeddingCache {
        EmbeddingCache {
            max_bytes,
            bytes: 0,
            entries: HashMap::new(),
            clock: 0,
            hits: 0,
            misses: 0,
        }
    }

    /// The embedding of `key`, if kept (it becomes the most recently used).
    pub fn get(&mut self, key: ImageKey) -> Option<Arc<ImageEmbedding>> {
        self.clock += 1;
        match self.entries.get_mut(&key) {
            Some((e, used)) => {
                *used = self.clock;
                self.hits += 1;
                Some(e.clone())
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    /// Keeps `e` under `key`, dropping the least recently used entries
    /// until it fits; one larger than the whole budget is not kept.
    pub fn insert(&mut self, key: ImageKey, e: Arc<ImageEmbedding>) {
        let size = size_of(&e);
        if size > self.max_bytes {
            return;
        }
        if let Some((old, _)) = self.entries.remove(&key) {
            self.bytes -= size_of(&old);
        }
        while self.bytes + size > self.max_bytes {
            let Some((&oldest, _)) = self.entries.iter().min_by_key(|(_, (_, used))| *used) else {
                break;
            };
            if let Some((old, _)) = self.entries.remove(&oldest) {
                self.bytes -= size_of(&old);
            }
        }
        self.clock += 1;
        self.bytes += size;
        self.entries.insert(key, (e, self.clock));
    }

    /// The counters now.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            entries: self.entries.len(),
            bytes: self.bytes,
            hits: self.hits,
            misses: self.misses,
        }
    }
}

/// Bytes an embedding's values take.
fn size_of(e: &ImageEmbedding) -> usize {
    e.data.len() * std::mem::size_of::<f32>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn embedding(n: usize, v: f32) -> Arc<ImageEmbedding> {
        Arc::new(ImageEmbedding {
            data: vec![v; n],
            n_tokens: 1,
            n_embd: n,
            grid: [1, 1, 1],
            stats: Default::default(),
        })
    }

    #[test]
    fn keys_follow_bytes_and_settings() {
        let cfg = PreprocessConfig::default();
        let a = ImageKey::of(b"png bytes", &cfg);
        assert_eq!(a, ImageKey::of(b"png bytes", &cfg));
        assert_ne!(a, ImageKey::of(b"png bytez", &cfg));
        let small = PreprocessConfig {
            max_pixels: 200_704,
            ..cfg
        };
        assert_ne!(a, ImageKey::of(b"png bytes", &small));
    }

    #[test]
    fn least_recently_used_go_first_within_the_budget() {
        let cfg = PreprocessConfig::default();
        let key = |s: &str| ImageKey::of(s.as_bytes(), &cfg);
        // room for two embeddings of 100 values
        let mut c = EmbeddingCache::new(800);
        c.insert(key("a"), embedding(100, 1.0));
        c.insert(key("b"), embedding(100, 2.0));
        assert_eq!(c.get(key("a")).unwrap().data[0], 1.0);
        c.insert(key("c"), embedding(100, 3.0));
        assert!(c.get(key("b")).is_none(), "b was the least recently used");
        assert!(c.get(key("a")).is_some() && c.get(key("c")).is_some());
        assert_eq!(c.stats().bytes, 800);
        assert_eq!((c.stats().hits, c.stats().misses), (3, 1));
        // larger than the budget: not kept, nothing evicted
        c.insert(key("huge"), embedding(1000, 4.0));
        assert!(c.get(key("huge")).is_none());
        assert_eq!(c.stats().entries, 2);
    }
}
