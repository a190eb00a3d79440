use super::*;
use crate::dtype::DType;

fn sample() -> (GgufWriter, Vec<Vec<u8>>) {
    let mut w = GgufWriter::new();
    w.kv("general.architecture", Value::str("llama"))
        .kv("u8", Value::U8(7))
        .kv("i8", Value::I8(-7))
        .kv("u16", Value::U16(700))
        .kv("i16", Value::I16(-700))
        .kv("u32", Value::U32(70000))
        .kv("i32", Value::I32(-70000))
        .kv("f32", Value::F32(1.5))
        .kv("bool", Value::Bool(true))
        .kv("u64", Value::U64(1 << 40))
        .kv("i64", Value::I64(-(1 << 40)))
        .kv("f64", Value::F64(-2.25))
        .kv("strs", Value::strings(["a", "héllo", "🦀"]))
        .kv(
            "nested",
            Value::Array(
                ValueType::Array,
                vec![Value::i32s([1, 2]), Value::i32s([3])],
            ),
        );
    w.tensor("a", vec![4, 2], DType::F32).unwrap();
    w.tensor("b", vec![32], DType::Q8_0).unwrap();
    let a: Vec<u8> = (0..8).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let b = vec![1u8; 34];
    (w, vec![a, b])
}

#[test]
fn round_trip_every_value_type() {
    let (w, data) = sample();
    let f = GgufFile::from_bytes(w.to_bytes(&data).unwrap()).unwrap();
    assert_eq!(f.version, 3);
    let m = &f.metadata;
    assert_eq!(m.get_str("general.architecture"), Some("llama"));
    assert_eq!(m.get("u8"), Some(&Value::U8(7)));
    assert_eq!(m.get("i8"), Some(&Value::I8(-7)));
    assert_eq!(m.get("u16"), Some(&Value::U16(700)));
    assert_eq!(m.get("i16"), Some(&Value::I16(-700)));
    assert_eq!(m.get_u64("u32"), Some(70000));
    assert_eq!(m.get("i32"), Some(&Value::I32(-70000)));
    assert_eq!(m.get_f64("f32"), Some(1.5));
    assert_eq!(m.get_bool("bool"), Some(true));
    assert_eq!(m.get_u64("u64"), Some(1 << 40));
    assert_eq!(m.get("i64").and_then(Value::as_i64), Some(-(1 << 40)));
    assert_eq!(m.get_f64("f64"), Some(-2.25));
    let strs: Vec<&str> = m
        .get_array("strs")
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(strs, ["a", "héllo", "🦀"]);
    let nested = m.get_array("nested").unwrap();
    assert_eq!(nested[0], Value::i32s([1, 2]));
    assert_eq!(nested[1], Value::i32s([3]));
    let a = f.tensor("a").unwrap();
    assert_eq!(a.shape(), vec![2, 4]);
    assert_eq!(a.offset % f.alignment, 0);
    assert_eq!(f.tensor_data(a), &data[0][..]);
    let b = f.tensor("b").unwrap();
    assert_eq!(b.bytes, 34);
    assert_eq!(f.tensor_data(b), &data[1][..]);
    assert_eq!(f.tensors().len(), 2);
}

#[test]
fn version_2_and_custom_alignment() {
    let (mut w, data) = sample();
    w.kv("general.alignment", Value::U32(64));
    let w = w.version(2);
    let f = GgufFile::from_bytes(w.to_bytes(&data).unwrap()).unwrap();
    assert_eq!(f.version, 2);
    assert_eq!(f.alignment, 64);
    assert_eq!(f.data_offset % 64, 0);
    assert_eq!(f.tensor("b").unwrap().offset % 64, 0);
}

fn err_of(bytes: Vec<u8>) -> String {
    GgufFile::from_bytes(bytes).unwrap_err().to_string()
}

fn header(version: u32, n_tensors: u64, n_kv: u64) -> Vec<u8> {
    let mut v = b"GGUF".to_vec();
    v.extend_from_slice(&version.to_le_bytes());
    v.extend_from_slice(&n_tensors.to_le_bytes());
    v.extend_from_slice(&n_kv.to_le_bytes());
    v
}

fn push_str(v: &mut Vec<u8>, s: &str) {
    v.extend_from_slice(&(s.len() as u64).to_le_bytes());
    v.extend_from_slice(s.as_bytes());
}

fn push_tensor(v: &mut Vec<u8>, name: &str, ne: &[u64], ty: u32, off: u64) {
    push_str(v, name);
    v.extend_from_slice(&(ne.len() as u32).to_le_bytes());
    for d in ne {
        v.extend_from_slice(&d.to_le_bytes());
    }
    v.extend_from_slice(&ty.to_le_bytes());
    v.extend_from_slice(&off.to_le_bytes());
}

#[test]
fn hostile_headers_are_named_errors() {
    assert!(err_of(b"GGML\x03\0\0\0".to_vec()).contains("not a GGUF file"));
    assert!(err_of(header(1, 0, 0)).contains("version 1 is not supported"));
    assert!(err_of(b"GGU".to_vec()).contains("truncated while reading the magic"));
    assert!(
        err_of(header(3, 0, u64::MAX)).contains("metadata count 18446744073709551615 cannot fit")
    );
    assert!(err_of(header(3, 1 << 50, 0)).contains("tensor info count"));

    // a string length beyond the file
    let mut v = header(3, 0, 1);
    v.extend_from_slice(&(1u64 << 60).to_le_bytes());
    v.extend_from_slice(&[0; 8]);
    assert!(err_of(v).contains("truncated while reading metadata key #0"));

    // an array count beyond the file
    let mut v = header(3, 0, 1);
    push_str(&mut v, "arr");
    v.extend_from_slice(&9u32.to_le_bytes());
    v.extend_from_slice(&4u32.to_le_bytes());
    v.extend_from_slice(&(1u64 << 61).to_le_bytes());
    assert!(err_of(v).contains("array element of metadata key \"arr\" count"));

    // an unknown value type
    let mut v = header(3, 0, 1);
    push_str(&mut v, "k");
    v.extend_from_slice(&99u32.to_le_bytes());
    v.extend_from_slice(&[0; 16]);
    assert!(err_of(v).contains("metadata key \"k\": unknown value type 99"));

    // duplicate key
    let mut v = header(3, 0, 2);
    for _ in 0..2 {
        push_str(&mut v, "dup");
        v.extend_from_slice(&4u32.to_le_bytes());
        v.extend_from_slice(&1u32.to_le_bytes());
    }
    assert!(err_of(v).contains("duplicate metadata key \"dup\""));

    // invalid UTF-8 key
    let mut v = header(3, 0, 1);
    v.extend_from_slice(&2u64.to_le_bytes());
    v.extend_from_slice(&[0xff, 0xfe]);
    v.extend_from_slice(&[0; 16]);
    assert!(err_of(v).contains("not valid UTF-8"));

    // deeply nested arrays
    let mut v = header(3, 0, 1);
    push_str(&mut v, "deep");
    v.extend_from_slice(&9u32.to_le_bytes());
    for _ in 0..20 {
        v.extend_from_slice(&9u32.to_le_bytes());
        v.extend_from_slice(&1u64.to_le_bytes());
    }
    v.extend_from_slice(&[0; 64]);
    assert!(err_of(v).contains("nested arrays deeper"));
}

fn with_tensor(ne: &[u64], ty: u32, off: u64, data_len: usize) -> Vec<u8> {
    let mut v = header(3, 1, 0);
    push_tensor(&mut v, "blk.0.w", ne, ty, off);
    v.resize(v.len().div_ceil(32) * 32 + data_len, 0);
    v
}

#[test]
fn hostile_tensors_are_named_errors() {
    assert!(GgufFile::from_bytes(with_tensor(&[4, 2], 0, 0, 32)).is_ok());
    let e = err_of(with_tensor(&[4, 2], 0, 0, 31));
    assert!(
        e.contains("tensor \"blk.0.w\"") && e.contains("outside"),
        "{e}"
    );
    let e = err_of(with_tensor(&[1 << 31, 1 << 31, 1 << 31], 0, 0, 32));
    assert!(e.contains("overflow"), "{e}");
    // 2^62 elements: the count fits in u64 but the bytes do not fit the file
    let e = err_of(with_tensor(&[1 << 31, 1 << 31], 1, 0, 32));
    assert!(e.contains("outside"), "{e}");
    let e = err_of(with_tensor(&[4, 2], 0, 3, 64));
    assert!(e.contains("not aligned"), "{e}");
    // IQ2_XXS is a known layout: the file reads, the tensor's type is an explicit error
    let f = GgufFile::from_bytes(with_tensor(&[256, 2], 16, 0, 160)).unwrap();
    let e = f.tensors()[0].dtype().unwrap_err().to_string();
    assert!(e.contains("IQ2_XXS") && e.contains("not supported"), "{e}");
    let e = err_of(with_tensor(&[4, 2], 77, 0, 64));
    assert!(e.contains("unknown tensor type id 77"), "{e}");
    let e = err_of(with_tensor(&[33], 8, 0, 64));
    assert!(e.contains("not a multiple of the Q8_0 block size"), "{e}");
    let e = err_of(with_tensor(&[0, 2], 0, 0, 64));
    assert!(e.contains("zero"), "{e}");
    let e = err_of(with_tensor(&[1, 1, 1, 1, 1], 0, 0, 64));
    assert!(e.contains("5 dimensions"), "{e}");

    let mut v = header(3, 2, 0);
    push_tensor(&mut v, "t", &[8], 0, 0);
    push_tensor(&mut v, "t", &[8], 0, 32);
    v.resize(512, 0);
    assert!(err_of(v).contains("duplicate tensor name \"t\""));

    let mut v = header(3, 2, 0);
    push_tensor(&mut v, "a", &[16], 0, 0);
    push_tensor(&mut v, "b", &[16], 0, 32);
    v.resize(512, 0);
    assert!(err_of(v).contains("overlaps"));
}

/// A tiny xorshift so the mutation test needs no dependency and is reproducible.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[test]
fn thousands_of_mutated_files_never_panic() {
    let (w, data) = sample();
    let good = w.to_bytes(&data).unwrap();
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let mut ok = 0;
    for i in 0..5000 {
        let mut b = good.clone();
        match i % 4 {
            0 => b.truncate(rng.below(good.len())),
            1 => {
                for _ in 0..1 + rng.below(8) {
                    let p = rng.below(b.len());
                    b[p] = rng.next() as u8;
                }
            }
            2 => {
                // overwrite a u64 with a huge value: counts and lengths
                let p = rng.below(b.len() - 8);
                let big = [u64::MAX, 1 << 62, 1 << 40, 0x7fff_ffff][rng.below(4)];
                b[p..p + 8].copy_from_slice(&big.to_le_bytes());
            }
            _ => {
                let p = rng.below(b.len());
                let n = rng.below(64);
                let chunk: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                b.splice(p..p, chunk);
            }
        }
        if let Ok(f) = GgufFile::from_bytes(b) {
            ok += 1;
            for t in f.tensors() {
                assert_eq!(f.tensor_data(t).len() as u64, t.bytes);
            }
        }
    }
    // some mutations land in tensor data and keep the file valid
    assert!(ok > 0);
}

#[test]
fn a_shape_that_is_not_whole_blocks_is_a_named_error() {
    let mut w = GgufWriter::new();
    let e = w.tensor("odd", vec![33], DType::Q8_0).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("\"odd\""), "{e}");
    assert!(w.tensors().is_empty(), "the bad tensor was not added");
    let overflow = TensorSpec {
        name: "huge".into(),
        ne: vec![u64::MAX, 2],
        dtype: DType::F32,
    };
    assert!(overflow.bytes().unwrap_err().to_string().contains("huge"));
    // a spec built by hand with a bad shape stops the writer, not the process
    let spec = crate::synth::SynthSpec {
        n_embd: 100,
        main_type: DType::Q4K,
        ..crate::synth::SynthSpec::preset("tiny").unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let err = spec.write(&dir.path().join("x.gguf"), 1).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
}

#[test]
fn a_resident_file_reads_as_its_mapping() {
    let (mut w, mut data) = sample();
    // a tensor of several huge pages, so the advice has whole pages to take
    w.tensor("big", vec![5 << 20], DType::F32).unwrap();
    data.push(
        (0..5u32 << 20)
            .flat_map(|i| (i as f32).to_le_bytes())
            .collect(),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sample.gguf");
    std::fs::write(&path, w.to_bytes(&data).unwrap()).unwrap();

    let mapped = GgufFile::open(&path).unwrap();
    let resident = GgufFile::open_with(&path, Hold::Resident).unwrap();
    assert!(matches!(**mapped.backing(), Backing::Mmap(_)));
    assert!(matches!(**resident.backing(), Backing::Resident { .. }));
    assert_eq!(resident.file_len(), mapped.file_len());
    assert_eq!(resident.backing().bytes(), mapped.backing().bytes());
    assert_eq!(resident.metadata.len(), mapped.metadata.len());
    assert_eq!(resident.tensors(), mapped.tensors());
    for (t, want) in resident.tensors().iter().zip(&data) {
        assert_eq!(resident.tensor_data(t), &want[..], "{}", t.name);
    }
    assert!(!mapped.backing().huge_pages());
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
    if cfg!(target_os = "linux") && thp.is_ok_and(|s| !s.contains("[never]")) {
        assert!(resident.backing().huge_pages(), "the advice was refused");
    }
}

#[test]
fn an_empty_or_missing_file_is_a_named_error_either_way() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.gguf");
    std::fs::write(&empty, []).unwrap();
    for hold in [Hold::Mapped, Hold::Resident] {
        let e = GgufFile::open_with(&empty, hold).unwrap_err().to_string();
        assert!(e.contains("empty.gguf"), "{hold:?}: {e}");
        let e = GgufFile::open_with(dir.path().join("none.gguf"), hold)
            .unwrap_err()
            .to_string();
        assert!(e.contains("none.gguf"), "{hold:?}: {e}");
    }
}
