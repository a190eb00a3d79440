//! A small fuzzing harness that works on the stable toolchain: a seeded,
//! structure-aware mutation loop over seed corpora, with a time budget per
//! target (`ATS_FUZZ_SECS`, default [`DEFAULT_SECS`]) and a seed
//! (`ATS_FUZZ_SEED`) so a run can be repeated.
//!
//! This is the stable smoke run; the main fuzzer is coverage-guided
//! libFuzzer in `fuzz/` (nightly `cargo fuzz`), over the same target bodies
//! ([`targets`]). There is no coverage instrumentation here; instead each
//! target reports an *outcome class* for every input (accepted,
//! or the kind of error it was rejected with), and inputs that reach a class
//! not seen before join the corpus. That steers the mutations past the first
//! check a parser makes without any compiler support.
//!
//! A panic inside a target is caught long enough to save the input under
//! `$TMPDIR/ats-fuzz-crashes/` and print how to repeat it, then re-raised so
//! the test fails.

pub mod targets;

use std::collections::HashSet;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Seconds per target when `ATS_FUZZ_SECS` is unset: short enough for CI
/// (seven targets on two cores), long enough for tens of thousands of inputs.
pub const DEFAULT_SECS: f64 = 20.0;

/// An input slower than this (ms), and the slowest so far, is saved as
/// `$TMPDIR/ats-fuzz-crashes/<target>-slowest.bin`.
const SLOW_MS: f64 = 1000.0;

/// Most inputs kept in a corpus (seeds plus discoveries).
const MAX_CORPUS: usize = 512;

/// The time budget per target: `ATS_FUZZ_SECS` or [`DEFAULT_SECS`].
pub fn budget() -> Duration {
    let secs = std::env::var("ATS_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .unwrap_or(DEFAULT_SECS);
    Duration::from_secs_f64(secs)
}

/// The mutation seed: `ATS_FUZZ_SEED` (decimal or 0x-hex) or a fixed default.
pub fn seed() -> u64 {
    let parse = |s: &str| match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    };
    std::env::var("ATS_FUZZ_SEED")
        .ok()
        .and_then(|s| parse(&s))
        .unwrap_or(0x5eed_a75f_0220_2026)
}

/// splitmix64: small, seeded, and good enough to drive mutations.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }

    /// True one time in `n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }
}

/// Integers at the edges parsers get wrong: zero, powers of two and their
/// neighbours, sign boundaries, and the largest values of each width.
pub const BOUNDARY: [u64; 22] = [
    0,
    1,
    2,
    3,
    7,
    8,
    16,
    32,
    64,
    255,
    256,
    0x7fff,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    1 << 32,
    1 << 40,
    1 << 62,
    i64::MAX as u64,
    u64::MAX,
];

/// A length field found in an input: where it is, how wide, which byte order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LengthField {
    /// Byte offset.
    pub pos: usize,
    /// Width in bytes (2, 4 or 8).
    pub width: usize,
    /// Big-endian (PNG, JPEG) rather than little-endian (GGUF, RIFF).
    pub big_endian: bool,
}

impl LengthField {
    fn read(&self, b: &[u8]) -> u64 {
        let s = &b[self.pos..self.pos + self.width];
        let mut v = 0u64;
        for i in 0..self.width {
            let byte = if self.big_endian {
                s[i]
            } else {
                s[self.width - 1 - i]
            };
            v = (v << 8) | u64::from(byte);
        }
        v
    }

    fn write(&self, b: &mut [u8], v: u64) {
        for i in 0..self.width {
            let byte = (v >> (8 * i)) as u8;
            let at = if self.big_endian {
                self.pos + self.width - 1 - i
            } else {
                self.pos + i
            };
            b[at] = byte;
        }
    }
}

/// Length fields of the formats ATS parses, found by their shape rather than
/// by parsing (so they are still found in damaged inputs): GGUF strings (u64
/// LE length then that many printable bytes) and counts (small u64 LE with
/// zero high half), PNG chunks (u32 BE then a 4-letter type), RIFF/WebP chunks
/// (4-letter type then u32 LE), JPEG segments (0xFF marker then u16 BE).
pub fn length_fields(b: &[u8]) -> Vec<LengthField> {
    let mut out = Vec::new();
    let end = b.len().min(1 << 16);
    let letters = |s: &[u8]| s.iter().all(|c| c.is_ascii_alphanumeric() || *c == b' ');
    for p in 0..end {
        if p + 8 <= b.len() {
            let v = u64::from_le_bytes(b[p..p + 8].try_into().unwrap());
            let string = (1..=256).contains(&v)
                && p + 8 + v as usize <= b.len()
                && b[p + 8..p + 8 + v as usize]
                    .iter()
                    .all(|c| c.is_ascii_graphic() || *c == b' ');
            let count = p % 4 == 0 && (2..=1 << 20).contains(&v) && b[p + 4..p + 8] == [0; 4];
            if string || count {
                out.push(LengthField {
                    pos: p,
                    width: 8,
                    big_endian: false,
                });
            }
        }
        if p + 8 <= b.len() && letters(&b[p + 4..p + 8]) {
            let v = u32::from_be_bytes(b[p..p + 4].try_into().unwrap());
            if v as usize <= b.len() {
                out.push(LengthField {
                    pos: p,
                    width: 4,
                    big_endian: true,
                });
            }
        }
        if p >= 4 && p + 4 <= b.len() && letters(&b[p - 4..p]) {
            let v = u32::from_le_bytes(b[p..p + 4].try_into().unwrap());
            if v as usize <= b.len() {
                out.push(LengthField {
                    pos: p,
                    width: 4,
                    big_endian: false,
                });
            }
        }
        if p >= 2 && b[p - 2] == 0xff && (0xc0..=0xfe).contains(&b[p - 1]) && p + 2 <= b.len() {
            out.push(LengthField {
                pos: p,
                width: 2,
                big_endian: true,
            });
        }
    }
    out
}

/// Makes new inputs from old ones: bit flips, byte sets, inserts, deletes,
/// duplicated ranges, splices with other corpus entries, boundary integers,
/// length-field tampering, dictionary tokens and truncation, stacked 1 to 4
/// at a time.
pub struct Mutator {
    rng: Rng,
    dict: Vec<Vec<u8>>,
    max_len: usize,
}

impl Mutator {
    /// A mutator with a seed, tokens worth inserting (keywords, magic
    /// numbers) and a cap on input length.
    pub fn new(seed: u64, dict: Vec<Vec<u8>>, max_len: usize) -> Mutator {
        Mutator {
            rng: Rng::new(seed),
            dict,
            max_len: max_len.max(1),
        }
    }

    /// The generator, for targets that draw extra choices.
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    /// A mutated copy of `input`; `corpus` supplies splice partners.
    pub fn mutate(&mut self, input: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
        let mut b = input.to_vec();
        for _ in 0..1 + self.rng.below(4) {
            self.once(&mut b, corpus);
        }
        b.truncate(self.max_len);
        b
    }

    fn once(&mut self, b: &mut Vec<u8>, corpus: &[Vec<u8>]) {
        let r = &mut self.rng;
        if b.is_empty() {
            let n = 1 + r.below(16);
            b.extend((0..n).map(|_| r.next_u64() as u8));
            return;
        }
        let len = b.len();
        match r.below(11) {
            0 => {
                let p = r.below(len);
                b[p] ^= 1 << r.below(8);
            }
            1 => {
                let p = r.below(len);
                b[p] = r.next_u64() as u8;
            }
            2 => {
                let p = r.below(len + 1);
                let n = 1 + r.below(16);
                let chunk: Vec<u8> = (0..n).map(|_| r.next_u64() as u8).collect();
                b.splice(p..p, chunk);
            }
            3 => {
                let p = r.below(len);
                let n = 1 + r.below((len - p).min(64));
                b.drain(p..p + n);
            }
            4 => {
                // repeat a range elsewhere (repeated chunks, nested structures)
                let p = r.below(len);
                let n = 1 + r.below((len - p).min(256));
                let chunk = b[p..p + n].to_vec();
                let at = r.below(len + 1);
                b.splice(at..at, chunk);
            }
            5 if !corpus.is_empty() => {
                // crossover: our prefix, another input's suffix
                let other = &corpus[r.below(corpus.len())];
                let cut = r.below(len + 1);
                let from = r.below(other.len() + 1);
                b.truncate(cut);
                b.extend_from_slice(&other[from..]);
            }
            6 => {
                let width = [1, 2, 4, 8][r.below(4)];
                if len >= width {
                    let p = r.below(len - width + 1);
                    let v = BOUNDARY[r.below(BOUNDARY.len())];
                    let v = if r.one_in(4) { v.wrapping_sub(1) } else { v };
                    let (le, be) = (v.to_le_bytes(), v.to_be_bytes());
                    let bytes = if r.one_in(2) {
                        &le[..width]
                    } else {
                        &be[8 - width..]
                    };
                    b[p..p + width].copy_from_slice(bytes);
                }
            }
            7 => {
                let fields = length_fields(b);
                if fields.is_empty() {
                    return;
                }
                let f = fields[r.below(fields.len())];
                let v = f.read(b);
                let max = if f.width == 8 {
                    u64::MAX
                } else {
                    (1u64 << (8 * f.width)) - 1
                };
                let nv = match r.below(6) {
                    0 => v.wrapping_add(1),
                    1 => v.wrapping_sub(1),
                    2 => 0,
                    3 => v.wrapping_mul(2),
                    4 => max,
                    _ => BOUNDARY[r.below(BOUNDARY.len())],
                } & max;
                f.write(b, nv);
            }
            8 if !self.dict.is_empty() => {
                let tok = self.dict[r.below(self.dict.len())].clone();
                let p = r.below(len + 1);
                if r.one_in(2) || p + tok.len() > len {
                    b.splice(p..p, tok);
                } else {
                    b[p..p + tok.len()].copy_from_slice(&tok);
                }
            }
            9 => b.truncate(r.below(len)),
            _ => {
                // swap two ranges' bytes (reordered fields)
                let (p, q) = (r.below(len), r.below(len));
                b.swap(p, q);
            }
        }
    }
}

/// What one run of a target did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Target name.
    pub target: String,
    /// Inputs run.
    pub execs: u64,
    /// Inputs the target accepted (parsed, rendered, decoded).
    pub accepted: u64,
    /// Distinct outcome classes reached.
    pub classes: usize,
    /// Final corpus size (seeds plus discoveries).
    pub corpus: usize,
    /// Wall time, seconds.
    pub secs: f64,
    /// The slowest single input, milliseconds.
    pub slowest_ms: f64,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "fuzz {}: {} execs in {:.1} s ({:.0}/s), {} accepted, {} outcome classes, corpus {}, slowest input {:.1} ms",
            self.target,
            self.execs,
            self.secs,
            self.execs as f64 / self.secs.max(1e-9),
            self.accepted,
            self.classes,
            self.corpus,
            self.slowest_ms
        )
    }
}

/// A short summary of an error message with quoted text (which echoes the
/// input) and numbers removed: the outcome class that decides whether an
/// input joins the corpus.
pub fn class_of(msg: &str) -> String {
    let mut out = String::new();
    let mut quote: Option<char> = None;
    for c in msg.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if matches!(c, '"' | '`' | '\'') => quote = Some(c),
            None if !c.is_ascii_digit() => out.push(c),
            None => {}
        }
        if out.len() >= 40 {
            break;
        }
    }
    out
}

/// Runs `target` over mutations of `seeds` for [`budget`] (at least every
/// seed once). `target` returns `Ok(class)` when it accepts an input and
/// `Err(class)` when it rejects it cleanly (the class names how far it got or
/// why it stopped); it asserts its own invariants.
pub fn fuzz(
    name: &str,
    seeds: Vec<Vec<u8>>,
    dict: Vec<Vec<u8>>,
    max_len: usize,
    mut target: impl FnMut(&[u8]) -> Result<String, String>,
) -> Report {
    assert!(!seeds.is_empty(), "{name}: no seeds");
    let budget = budget();
    let seed = seed() ^ fnv(name.as_bytes());
    let mut m = Mutator::new(seed, dict, max_len);
    let mut corpus = seeds.clone();
    let mut seen: HashSet<String> = HashSet::new();
    let mut report = Report {
        target: name.into(),
        ..Report::default()
    };
    let t0 = Instant::now();
    let mut i = 0u64;
    loop {
        let from_seed = (i as usize) < seeds.len();
        if !from_seed && t0.elapsed() >= budget {
            break;
        }
        let input = if from_seed {
            seeds[i as usize].clone()
        } else {
            let k = m.rng().below(corpus.len());
            m.mutate(&corpus[k], &corpus)
        };
        let ti = Instant::now();
        let out = match catch_unwind(AssertUnwindSafe(|| target(&input))) {
            Ok(o) => o,
            Err(panic) => {
                let path = save_input(name, &format!("{:016x}", fnv(&input)), &input);
                eprintln!(
                    "fuzz {name}: PANIC on input {i} (ATS_FUZZ_SEED={:#x}); input saved to {}",
                    crate::fuzz::seed(),
                    path.display()
                );
                resume_unwind(panic);
            }
        };
        let ms = ti.elapsed().as_secs_f64() * 1e3;
        if ms > report.slowest_ms.max(SLOW_MS) {
            // kept so a slow input can be repeated, like a crash
            let path = save_input(name, "slowest", &input);
            eprintln!(
                "fuzz {name}: input {i} took {ms:.0} ms; saved to {}",
                path.display()
            );
        }
        report.slowest_ms = report.slowest_ms.max(ms);
        report.execs += 1;
        let class = match out {
            Ok(c) => {
                report.accepted += 1;
                format!("accepted: {c}")
            }
            Err(c) => c,
        };
        if seen.insert(class) && !from_seed {
            if corpus.len() < MAX_CORPUS {
                corpus.push(input);
            } else {
                let k = seeds.len() + m.rng().below(MAX_CORPUS - seeds.len());
                corpus[k] = input;
            }
        }
        i += 1;
    }
    report.secs = t0.elapsed().as_secs_f64();
    report.classes = seen.len();
    report.corpus = corpus.len();
    eprintln!("{report}");
    report
}

pub(crate) fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| {
        (h ^ u64::from(c)).wrapping_mul(0x100_0000_01b3)
    })
}

fn save_input(name: &str, tag: &str, input: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join("ats-fuzz-crashes");
    let path = dir.join(format!("{name}-{tag}.bin"));
    if std::fs::create_dir_all(&dir).is_ok() && std::fs::write(&path, input).is_ok() {
        path
    } else {
        PathBuf::from("(could not save)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_length_fields_of_each_format() {
        // GGUF string: u64 LE length then text
        let mut g = 5u64.to_le_bytes().to_vec();
        g.extend_from_slice(b"hello");
        assert!(length_fields(&g).contains(&LengthField {
            pos: 0,
            width: 8,
            big_endian: false
        }));
        // PNG chunk: u32 BE length then type
        let mut p = 13u32.to_be_bytes().to_vec();
        p.extend_from_slice(b"IHDR");
        p.extend_from_slice(&[0; 13]);
        let f = LengthField {
            pos: 0,
            width: 4,
            big_endian: true,
        };
        assert!(length_fields(&p).contains(&f));
        assert_eq!(f.read(&p), 13);
        let mut q = p.clone();
        f.write(&mut q, 0x0102_0304);
        assert_eq!(&q[..4], &[1, 2, 3, 4]);
        // JPEG segment: marker then u16 BE
        let j = [0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10];
        assert!(length_fields(&j).iter().any(|f| f.pos == 4 && f.width == 2));
    }

    #[test]
    fn mutation_is_reproducible_and_bounded() {
        let seed = b"GGUF\x03\0\0\0 some bytes to mutate".to_vec();
        let run = |s| {
            let mut m = Mutator::new(s, vec![b"{%".to_vec()], 64);
            (0..200)
                .map(|_| m.mutate(&seed, std::slice::from_ref(&seed)))
                .collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7), "same seed, same inputs");
        assert_ne!(a, run(8));
        assert!(a.iter().all(|x| x.len() <= 64));
        assert!(a.iter().any(|x| x != &seed));
    }
}
