//! The validated, memory-mapped GGUF reader.
//!
//! Every count, length and offset read from the file is checked against the
//! bytes that remain before anything is allocated, so a hostile file is an
//! error, never a panic or an out-of-memory abort.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::backing::{Backing, Hold};
use super::error::{GgufError, GgufErrorKind as K};
use super::value::{Value, ValueType};
use crate::dtype::{DType, DTypeError, ggml_layout};

/// `"GGUF"` read as a little-endian u32.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The deepest array nesting accepted.
const MAX_DEPTH: usize = 8;
/// Dimensions per tensor that GGML supports.
const MAX_DIMS: u32 = 4;

/// One tensor's header: name, shape, type and where its bytes lie.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// The tensor's name (`blk.0.attn_q.weight`).
    pub name: String,
    /// GGML dimensions, innermost first: a `[rows, cols]` matrix has `ne = [cols, rows]`.
    pub ne: Vec<u64>,
    /// GGML type id; [`TensorInfo::dtype`] says whether ATS supports it.
    pub ggml_type: u32,
    /// llama.cpp's name of the type (`Q4_K`, `IQ2_XXS`).
    pub type_name: &'static str,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
    /// Absolute offset of the data in the file.
    pub file_offset: u64,
    /// Size of the data in bytes.
    pub bytes: u64,
}

impl TensorInfo {
    /// The element type, or why ATS cannot compute with it (the file itself
    /// may still hold such tensors: they are validated but not usable).
    pub fn dtype(&self) -> Result<DType, DTypeError> {
        DType::from_ggml(self.ggml_type)
    }

    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        self.ne.iter().product()
    }

    /// Shape in row-major order (outermost first), as PyTorch and numpy write it.
    pub fn shape(&self) -> Vec<usize> {
        self.ne.iter().rev().map(|&d| d as usize).collect()
    }

    /// Elements per row (the innermost dimension).
    pub fn row_len(&self) -> usize {
        self.ne.first().copied().unwrap_or(1) as usize
    }

    /// Number of rows (product of the outer dimensions).
    pub fn n_rows(&self) -> usize {
        self.ne.iter().skip(1).product::<u64>() as usize
    }
}

/// The metadata of a GGUF file, in file order with an index by key.
#[derive(Clone, Debug, Default)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    /// Adds an entry; returns false if the key already exists.
    pub fn insert(&mut self, key: String, value: Value) -> bool {
        if self.index.contains_key(&key) {
            return false;
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        true
    }

    /// The value of a key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    /// All entries in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A string value.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }

    /// A non-negative integer value of any width.
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key).and_then(Value::as_u64)
    }

    /// A numeric value as f64.
    pub fn get_f64(&self, key: &str) -> Option<f64> {
        self.get(key).and_then(Value::as_f64)
    }

    /// A bool value.
    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.get(key).and_then(Value::as_bool)
    }

    /// An array value's elements.
    pub fn get_array(&self, key: &str) -> Option<&[Value]> {
        self.get(key).and_then(Value::as_array)
    }
}

/// A parsed, validated GGUF file whose tensors are borrowed slices of its mapping.
pub struct GgufFile {
    path: PathBuf,
    backing: Arc<Backing>,
    /// Format version (2 or 3).
    pub version: u32,
    /// Metadata key/value pairs.
    pub metadata: Metadata,
    tensors: Vec<TensorInfo>,
    by_name: HashMap<String, usize>,
    /// Absolute offset of the data section.
    pub data_offset: u64,
    /// Alignment of tensor data.
    pub alignment: u64,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Maps and parses a GGUF file.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        Self::open_with(path, Hold::Mapped)
    }

    /// Opens and parses a GGUF file, its bytes held as `hold` says.
    pub fn open_with(path: impl AsRef<Path>, hold: Hold) -> Result<GgufFile, GgufError> {
        let path = path.as_ref();
        let err = |e: std::io::Error| GgufError::new(path, K::Io(e));
        let file = std::fs::File::open(path).map_err(err)?;
        let backing = match hold {
            Hold::Mapped => Backing::map(&file),
            Hold::Resident => Backing::read_resident(&file),
        }
        .map_err(err)?;
        Self::from_backing(path.to_path_buf(), backing)
    }

    /// Parses GGUF bytes held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        Self::from_backing(PathBuf::from("<memory>"), Backing::Owned(bytes))
    }

    fn from_backing(path: PathBuf, backing: Backing) -> Result<GgufFile, GgufError> {
        let parsed = parse(backing.bytes()).map_err(|k| GgufError::new(&path, k))?;
        Ok(GgufFile {
            path,
            backing: Arc::new(backing),
            version: parsed.version,
            metadata: parsed.metadata,
            by_name: parsed
                .tensors
                .iter()
                .enumerate()
                .map(|(i, t)| (t.name.clone(), i))
                .collect(),
            tensors: parsed.tensors,
            data_offset: parsed.data_offset,
            alignment: parsed.alignment,
        })
    }

    /// The file's path (`<memory>` for in-memory bytes).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// All tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// A tensor's info by name.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// A tensor's bytes, borrowed from the mapping.
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        // Validated at parse time: the range lies inside the file.
        &self.backing.bytes()[info.file_offset as usize..(info.file_offset + info.bytes) as usize]
    }

    /// The shared backing bytes, for callers that keep tensors alive beyond `&self`.
    pub fn backing(&self) -> &Arc<Backing> {
        &self.backing
    }

    /// Total size of the file in bytes.
    pub fn file_len(&self) -> u64 {
        self.backing.bytes().len() as u64
    }

    /// The model architecture (`general.architecture`), if present.
    pub fn architecture(&self) -> Option<&str> {
        self.metadata.get_str("general.architecture")
    }
}

struct Parsed {
    version: u32,
    metadata: Metadata,
    tensors: Vec<TensorInfo>,
    data_offset: u64,
    alignment: u64,
}

/// A bounds-checked little-endian cursor.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8], K> {
        if n > self.remaining() {
            return Err(K::Truncated {
                what: what(),
                offset: self.pos as u64,
                need: n,
                len: self.buf.len() as u64,
            });
        }
        let s = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N], K> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, K> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, K> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, K> {
        let len = self.u64(what)?;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| K::BadUtf8 { what: what() })
    }

    /// Fails unless `count` items of at least `min_size` bytes each can still fit.
    fn check_count(&self, count: u64, min_size: usize, what: &dyn Fn() -> String) -> Result<(), K> {
        let need = count.checked_mul(min_size as u64);
        if need.is_none_or(|n| n > self.remaining()) {
            return Err(K::CountTooLarge {
                what: what(),
                count,
                remaining: self.remaining(),
            });
        }
        Ok(())
    }
}

fn parse(buf: &[u8]) -> Result<Parsed, K> {
    let mut c = Cursor { buf, pos: 0 };
    let magic: [u8; 4] = c.array(&|| "the magic".into())?;
    if magic != GGUF_MAGIC {
        return Err(K::BadMagic(magic));
    }
    let version = c.u32(&|| "the version".into())?;
    if version != 2 && version != 3 {
        return Err(K::UnsupportedVersion(version));
    }
    let n_tensors = c.u64(&|| "the tensor count".into())?;
    let n_kv = c.u64(&|| "the metadata count".into())?;

    // A key/value pair takes at least a key length, a type tag and one byte.
    c.check_count(n_kv, 8 + 4 + 1, &|| "metadata".into())?;
    let mut metadata = Metadata::default();
    for i in 0..n_kv {
        let key = c.string(&|| format!("metadata key #{i}"))?;
        let tag = c.u32(&|| format!("the type of metadata key {key:?}"))?;
        let ty = ValueType::from_tag(tag).ok_or_else(|| K::BadValueType {
            key: key.clone(),
            tag,
        })?;
        let value = read_value(&mut c, ty, &key, 0)?;
        if !metadata.insert(key.clone(), value) {
            return Err(K::DuplicateKey(key));
        }
    }

    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) if *a > 0 && a.is_power_of_two() => *a as u64,
        Some(v) => {
            return Err(K::BadKey {
                key: "general.alignment".into(),
                problem: format!("must be a power-of-two u32, found {v}"),
            });
        }
    };

    // A tensor info takes at least a name length, n_dims, a type and an offset.
    c.check_count(n_tensors, 8 + 4 + 4 + 8, &|| "tensor info".into())?;
    let mut raw = Vec::with_capacity(n_tensors as usize);
    let mut names = std::collections::HashSet::new();
    for i in 0..n_tensors {
        let name = c.string(&|| format!("the name of tensor #{i}"))?;
        let what = |w: &str| {
            let n = name.clone();
            let w = w.to_string();
            move || format!("{w} of tensor {n:?}")
        };
        let n_dims = c.u32(&what("the dimension count"))?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(K::BadTensor {
                name,
                problem: format!("{n_dims} dimensions (1 to {MAX_DIMS} supported)"),
            });
        }
        let mut ne = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            ne.push(c.u64(&what("a dimension"))?);
        }
        let type_id = c.u32(&what("the type"))?;
        let offset = c.u64(&what("the data offset"))?;
        if !names.insert(name.clone()) {
            return Err(K::DuplicateTensor(name));
        }
        raw.push((name, ne, type_id, offset));
    }

    let header_end = c.pos as u64;
    let data_offset = header_end.div_ceil(alignment) * alignment;
    let file_len = buf.len() as u64;

    let mut tensors = Vec::with_capacity(raw.len());
    for (name, ne, type_id, offset) in raw {
        let bad = |problem: String| K::BadTensor {
            name: name.clone(),
            problem,
        };
        let layout = ggml_layout(type_id).ok_or_else(|| K::TensorType {
            name: name.clone(),
            source: DTypeError::Unknown(type_id),
        })?;
        let n_elements = ne
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| bad(format!("dimensions {ne:?} overflow")))?;
        if ne.contains(&0) {
            return Err(bad(format!("dimensions {ne:?} contain a zero")));
        }
        let (bs, ts) = (layout.block_size as u64, layout.type_size as u64);
        if ne[0] % bs != 0 {
            return Err(bad(format!(
                "row length {} is not a multiple of the {} block size {bs}",
                ne[0], layout.name
            )));
        }
        let bytes = (n_elements / bs)
            .checked_mul(ts)
            .ok_or_else(|| bad(format!("{n_elements} elements of {} overflow", layout.name)))?;
        if offset % alignment != 0 {
            return Err(bad(format!(
                "data offset {offset} is not aligned to {alignment}"
            )));
        }
        let file_offset = data_offset
            .checked_add(offset)
            .ok_or_else(|| bad(format!("data offset {offset} overflows")))?;
        let end = file_offset.checked_add(bytes).ok_or_else(|| {
            bad(format!(
                "data end overflows (offset {offset}, {bytes} bytes)"
            ))
        })?;
        if end > file_len {
            return Err(bad(format!(
                "data [{file_offset}, {end}) lies outside the {file_len}-byte file ({bytes} bytes of {} for shape {ne:?})",
                layout.name
            )));
        }
        tensors.push(TensorInfo {
            name,
            ne,
            ggml_type: type_id,
            type_name: layout.name,
            offset,
            file_offset,
            bytes,
        });
    }

    // Tensor data must not overlap: sort by offset and compare neighbours.
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by_key(|&i| tensors[i].offset);
    for w in order.windows(2) {
        let (a, b) = (&tensors[w[0]], &tensors[w[1]]);
        if a.offset + a.bytes > b.offset {
            return Err(K::BadTensor {
                name: b.name.clone(),
                problem: format!("data overlaps tensor {:?}", a.name),
            });
        }
    }

    Ok(Parsed {
        version,
        metadata,
        tensors,
        data_offset,
        alignment,
    })
}

fn read_value(c: &mut Cursor<'_>, ty: ValueType, key: &str, depth: usize) -> Result<Value, K> {
    let what = || format!("the value of metadata key {key:?}");
    Ok(match ty {
        ValueType::U8 => Value::U8(c.array::<1>(&what)?[0]),
        ValueType::I8 => Value::I8(c.array::<1>(&what)?[0] as i8),
        ValueType::U16 => Value::U16(u16::from_le_bytes(c.array(&what)?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(c.array(&what)?)),
        ValueType::U32 => Value::U32(u32::from_le_bytes(c.array(&what)?)),
        ValueType::I32 => Value::I32(i32::from_le_bytes(c.array(&what)?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(c.array(&what)?)),
        ValueType::U64 => Value::U64(u64::from_le_bytes(c.array(&what)?)),
        ValueType::I64 => Value::I64(i64::from_le_bytes(c.array(&what)?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(c.array(&what)?)),
        ValueType::Bool => match c.array::<1>(&what)?[0] {
            0 => Value::Bool(false),
            1 => Value::Bool(true),
            b => {
                return Err(K::BadKey {
                    key: key.into(),
                    problem: format!("bool byte {b} is neither 0 nor 1"),
                });
            }
        },
        ValueType::String => Value::String(c.string(&what)?),
        ValueType::Array => {
            if depth >= MAX_DEPTH {
                return Err(K::TooDeep {
                    key: key.into(),
                    max: MAX_DEPTH,
                });
            }
            let tag = c.u32(&what)?;
            let elem = ValueType::from_tag(tag).ok_or_else(|| K::BadValueType {
                key: key.into(),
                tag,
            })?;
            let count = c.u64(&what)?;
            c.check_count(count, elem.min_encoded_size(), &|| {
                format!("array element of metadata key {key:?}")
            })?;
            let mut items = Vec::with_capacity(count as usize);
            for _ in 0..count {
                items.push(read_value(c, elem, key, depth + 1)?);
            }
            Value::Array(elem, items)
        }
    })
}
