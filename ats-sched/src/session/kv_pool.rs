//! The KV pool: every layer's cache is one buffer of `blocks x block_tokens`
//! rows, shared by the sequences of a session. A sequence holds blocks as it
//! grows and gives them back when it ends. A full block is indexed by the
//! chain hash of every token key up to its end, so a later sequence whose
//! prompt starts with the same tokens (a system prompt, the previous turn of
//! a chat, the same image) takes those blocks read-only instead of
//! computing them again: blocks are reference-counted, and a sequence only
//! ever writes into blocks of its own. Blocks no sequence holds keep their
//! content and index entry until a new block is needed (least recently
//! released first), so the pool doubles as the prompt cache.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use ats_core::round::CacheRows;

/// Rows per KV block. Chosen by measurement (`docs/benchmarks.md`, "KV
/// blocks"): CPU decode attention at depth 2048 over blocks of this many
/// rows runs as fast as over contiguous rows, while prefix sharing and the
/// space a sequence wastes at its end grow with the block.
pub const KV_BLOCK_TOKENS: usize = 32;

/// Why the pool cannot take a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the KV pool is full: {needed} more blocks of {block_tokens} tokens are needed, {available} are free"
)]
pub struct PoolFull {
    /// Blocks asked for.
    pub needed: usize,
    /// Blocks free (or held only by the prompt cache).
    pub available: usize,
    /// Tokens per block.
    pub block_tokens: usize,
}

/// A cached full block: where it is and what the sequence's next position
/// was at its end (M-RoPE positions after an image are not token counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cached {
    block: u32,
    next_pos: i64,
}

/// The blocks of one sequence.
#[derive(Clone, Debug, Default)]
pub struct SeqBlocks {
    blocks: Vec<u32>,
    /// Tokens written.
    tokens: usize,
    /// The chain hash at the end of each full block.
    chain: Vec<u64>,
}

impl SeqBlocks {
    /// Tokens the sequence has in the cache.
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// The blocks, in token order.
    pub fn blocks(&self) -> &[u32] {
        &self.blocks
    }

    /// Where its tokens are, for a round.
    pub fn cache_rows(&self) -> CacheRows {
        CacheRows::Blocks(Arc::from(self.blocks.as_slice()))
    }
}

/// Counts of the pool's use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    /// Blocks in all.
    pub blocks: usize,
    /// Blocks some sequence holds.
    pub held: usize,
    /// Blocks no sequence holds that keep a cached prefix.
    pub cached: usize,
    /// Tokens taken from cached blocks instead of computed, so far.
    pub reused_tokens: u64,
}

/// The session's KV blocks.
#[derive(Debug)]
pub struct KvPool {
    block_tokens: usize,
    /// Per block: sequences holding it.
    refs: Vec<u32>,
    /// Blocks with nothing worth keeping.
    free: Vec<u32>,
    /// Blocks no sequence holds but whose prefix is indexed, oldest first.
    lru: VecDeque<u32>,
    /// Per block: its index key, if it is indexed.
    key_of: Vec<Option<u64>>,
    index: HashMap<u64, Cached>,
    reused_tokens: u64,
}

/// The chain hash after `prev` and one block's token keys.
fn chain_hash(prev: u64, keys: &[u64]) -> u64 {
    // DefaultHasher::new() has fixed keys: the same tokens hash alike in
    // every run, which the cache needs (it is not exposed to adversaries:
    // only this session's own tokens are ever hashed)
    let mut h = std::collections::hash_map::DefaultHasher::new();
    prev.hash(&mut h);
    keys.hash(&mut h);
    h.finish()
}

impl KvPool {
    /// A pool of `rows` cache rows in blocks of `block_tokens`.
    pub fn new(rows: usize, block_tokens: usize) -> KvPool {
        let bt = block_tokens.max(1);
        let n = rows / bt;
        KvPool {
            block_tokens: bt,
            refs: vec![0; n],
            // popped from the end: blocks are handed out in order 0, 1, ...
            free: (0..n as u32).rev().collect(),
            lru: VecDeque::new(),
            key_of: vec![None; n],
            index: HashMap::new(),
            reused_tokens: 0,
        }
    }

    /// Rows per block.
    pub fn block_tokens(&self) -> usize {
        self.block_tokens
    }

    /// Blocks a sequence could still take (free, or only cached).
    pub fn available(&self) -> usize {
        self.free.len() + self.lru.len()
    }

    /// Counts of the pool's use.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            blocks: self.refs.len(),
            held: self.refs.iter().filter(|&&r| r > 0).count(),
            cached: self.lru.len(),
            reused_tokens: self.reused_tokens,
        }
    }

    /// Blocks `tokens` tokens take.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_tokens)
    }

    /// A new sequence starting with the longest cached prefix of `keys`
    /// (the cache keys of its prompt), in whole blocks, leaving at least
    /// `keep` tokens of the prompt to compute (the last prompt token must run
    /// to give logits). Returns the sequence and the position after its
    /// prefix (`None`: nothing was shared).
    pub fn start(&mut self, keys: &[u64], keep: usize) -> (SeqBlocks, Option<i64>) {
        let mut seq = SeqBlocks::default();
        let mut next_pos = None;
        let bt = self.block_tokens;
        let limit = keys.len().saturating_sub(keep) / bt;
        let mut prev = 0u64;
        for b in 0..limit {
            let h = chain_hash(prev, &keys[b * bt..(b + 1) * bt]);
            let Some(&c) = self.index.get(&h) else { break };
            self.take(c.block);
            seq.blocks.push(c.block);
            seq.chain.push(h);
            seq.tokens += bt;
            next_pos = Some(c.next_pos);
            prev = h;
        }
        self.reused_tokens += seq.tokens as u64;
        (seq, next_pos)
    }

    /// Tokens [`KvPool::start`] would take from the cache for `keys`, with
    /// nothing taken.
    pub fn cached_tokens(&self, keys: &[u64], keep: usize) -> usize {
        let bt = self.block_tokens;
        let limit = keys.len().saturating_sub(keep) / bt;
        let mut prev = 0u64;
        let mut n = 0;
        for b in 0..limit {
            let h = chain_hash(prev, &keys[b * bt..(b + 1) * bt]);
            if !self.index.contains_key(&h) {
                break;
            }
            n += bt;
            prev = h;
        }
        n
    }

    /// Gives `seq` blocks for `tokens` tokens in all (evicting the oldest
    /// cached prefixes when no block is free).
    pub fn reserve(&mut self, seq: &mut SeqBlocks, tokens: usize) -> Result<(), PoolFull> {
        let need = self.blocks_for(tokens).saturating_sub(seq.blocks.len());
        if need > self.available() {
            return Err(PoolFull {
                needed: need,
                available: self.available(),
                block_tokens: self.block_tokens,
            });
        }
        for _ in 0..need {
            let b = self.fresh_block();
            self.refs[b as usize] = 1;
            seq.blocks.push(b);
        }
        Ok(())
    }

    /// A block to write into: a free one, else the least recently released
    /// cached one (its prefix is forgotten).
    fn fresh_block(&mut self) -> u32 {
        if let Some(b) = self.free.pop() {
            return b;
        }
        let b = self
            .lru
            .pop_front()
            .expect("reserve checked that a block is available");
        if let Some(k) = self.key_of[b as usize].take() {
            self.index.remove(&k);
        }
        b
    }

    /// Takes a reference to a cached block.
    fn take(&mut self, b: u32) {
        let r = &mut self.refs[b as usize];
        if *r == 0 {
            self.lru.retain(|&x| x != b);
        }
        *r += 1;
    }

    /// Records that `seq` now has `keys.len()` tokens in the cache: `keys`
    /// are the cache keys of all its tokens, `next_pos[t]` the position the
    /// token after token `t` takes. Blocks they fill are indexed for later
    /// sequences.
    pub fn commit(&mut self, seq: &mut SeqBlocks, keys: &[u64], next_pos: &[i64]) {
        let bt = self.block_tokens;
        seq.tokens = keys.len();
        let full = seq.tokens / bt;
        while seq.chain.len() < full {
            let b = seq.chain.len();
            let prev = seq.chain.last().copied().unwrap_or(0);
            let h = chain_hash(prev, &keys[b * bt..(b + 1) * bt]);
            seq.chain.push(h);
            let block = seq.blocks[b];
            if self.index.contains_key(&h) || self.key_of[block as usize].is_some() {
                continue; // an identical prefix is cached already
            }
            let pos = next_pos[(b + 1) * bt - 1];
            self.index.insert(
                h,
                Cached {
                    block,
                    next_pos: pos,
                },
            );
            self.key_of[block as usize] = Some(h);
        }
    }

    /// Gives back every block of `seq`.
    pub fn release(&mut self, seq: SeqBlocks) {
        for b in seq.blocks {
            let r = &mut self.refs[b as usize];
            *r = r.saturating_sub(1);
            if *r == 0 {
                if self.key_of[b as usize].is_some() {
                    self.lru.push_back(b);
                } else {
                    self.free.push(b);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sequence of `keys.len()` tokens written at once: reserved, committed
    /// (positions are the token count).
    fn written(pool: &mut KvPool, keys: &[u64]) -> SeqBlocks {
        let mut s = SeqBlocks::default();
        pool.reserve(&mut s, keys.len()).unwrap();
        let pos: Vec<i64> = (1..=keys.len() as i64).collect();
        pool.commit(&mut s, keys, &pos);
        s
    }

    #[test]
    fn blocks_are_handed_out_in_order_and_a_full_pool_says_so() {
        let mut pool = KvPool::new(4 * 8, 8);
        let mut a = SeqBlocks::default();
        pool.reserve(&mut a, 9).unwrap();
        assert_eq!(a.blocks(), &[0, 1]);
        let mut b = SeqBlocks::default();
        pool.reserve(&mut b, 16).unwrap();
        assert_eq!(b.blocks(), &[2, 3]);
        let e = pool.reserve(&mut a, 17).unwrap_err();
        assert_eq!(
            e,
            PoolFull {
                needed: 1,
                available: 0,
                block_tokens: 8
            }
        );
        assert_eq!(a.blocks().len(), 2, "a refused reservation takes nothing");
        // without an index entry a released block is simply free again
        pool.release(b);
        assert_eq!(pool.available(), 2);
        pool.reserve(&mut a, 17).unwrap();
        assert_eq!(a.blocks().len(), 3);
    }

    #[test]
    fn a_common_prefix_is_stored_once_and_shared_in_whole_blocks() {
        let mut pool = KvPool::new(16 * 4, 4);
        let prompt: Vec<u64> = (100..111).collect(); // 11 tokens: 2 full blocks and 3
        let a = written(&mut pool, &prompt);
        assert_eq!(pool.stats().held, 3);
        // the same prompt again: the two full blocks are shared, the rest computed
        let (b, pos) = pool.start(&prompt, 1);
        assert_eq!(b.blocks(), &a.blocks()[..2]);
        assert_eq!((b.tokens(), pos), (8, Some(8)));
        assert_eq!(
            pool.stats().held,
            3,
            "nothing new is held for the shared part"
        );
        // at least `keep` tokens are left to compute: a prompt of exactly two
        // blocks shares one
        let (c, _) = pool.start(&prompt[..8], 1);
        assert_eq!(c.tokens(), 4);
        // another prompt shares nothing
        let other: Vec<u64> = (200..211).collect();
        assert_eq!(pool.start(&other, 1).0.tokens(), 0);
        // a block shared by two stays held until both are done, then cached
        pool.release(a);
        assert_eq!(
            pool.stats().held,
            2,
            "the shared blocks, not the partial one"
        );
        pool.release(b);
        pool.release(c);
        let st = pool.stats();
        assert_eq!((st.held, st.cached), (0, 2));
        assert_eq!(st.reused_tokens, 12);
        // and a later sequence still finds them
        let (d, _) = pool.start(&prompt, 1);
        assert_eq!(d.tokens(), 8);
    }

    #[test]
    fn cached_prefixes_give_way_to_new_blocks_oldest_first() {
        let mut pool = KvPool::new(3 * 4, 4);
        let first: Vec<u64> = (0..4).collect();
        let second: Vec<u64> = (10..14).collect();
        let a = written(&mut pool, &first);
        let b = written(&mut pool, &second);
        pool.release(a);
        pool.release(b);
        assert_eq!(pool.stats().cached, 2);
        // two fresh blocks: the free one, then the oldest cached (the first prompt)
        let mut c = SeqBlocks::default();
        pool.reserve(&mut c, 8).unwrap();
        assert_eq!(pool.stats().cached, 1);
        let again = |pool: &mut KvPool, keys: &[u64]| {
            let mut k = keys.to_vec();
            k.push(99);
            pool.start(&k, 1).0.tokens()
        };
        assert_eq!(again(&mut pool, &first), 0, "evicted");
        assert_eq!(again(&mut pool, &second), 4, "still cached");
    }

    #[test]
    fn a_prefix_after_an_image_restores_its_position() {
        let mut pool = KvPool::new(8 * 4, 4);
        let keys: Vec<u64> = (0..9).collect();
        // M-RoPE: the text after an image is not at the token count
        let pos: Vec<i64> = vec![1, 2, 3, 3, 3, 3, 4, 5, 6];
        let mut s = SeqBlocks::default();
        pool.reserve(&mut s, 9).unwrap();
        pool.commit(&mut s, &keys, &pos);
        let (t, p) = pool.start(&keys, 1);
        assert_eq!((t.tokens(), p), (8, Some(5)));
    }
}
