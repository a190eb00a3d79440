//! A GGUF writer: metadata and tensor headers first, then aligned tensor data,
//! streamed so that multi-gigabyte files never sit in memory.

use std::io::{self, Write};

use super::reader::{DEFAULT_ALIGNMENT, GGUF_MAGIC};
use super::value::{Value, ValueType};
use crate::dtype::DType;

/// A tensor header to be written: name, GGML dimensions (innermost first), type.
#[derive(Clone, Debug)]
pub struct TensorSpec {
    /// Tensor name.
    pub name: String,
    /// GGML dimensions, innermost first.
    pub ne: Vec<u64>,
    /// Element type.
    pub dtype: DType,
}

impl TensorSpec {
    /// Bytes of data this tensor needs; an error naming the tensor when its
    /// rows are not whole blocks of its type.
    pub fn bytes(&self) -> io::Result<u64> {
        let row = self.ne.first().copied().unwrap_or(1);
        if row % self.dtype.block_size() as u64 != 0 {
            return Err(self.bad(&format!(
                "rows of {row} are not whole blocks of {} ({} values)",
                self.dtype.name(),
                self.dtype.block_size()
            )));
        }
        let n = self
            .ne
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .ok_or_else(|| self.bad("its element count overflows"))?;
        self.dtype.bytes_for(n).ok_or_else(|| {
            self.bad(&format!(
                "{n} elements are not whole blocks of {}",
                self.dtype.name()
            ))
        })
    }

    fn bad(&self, why: &str) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("tensor {:?} {:?}: {why}", self.name, self.ne),
        )
    }
}

/// Builds a GGUF file: add metadata and tensor headers, then write.
#[derive(Clone, Debug, Default)]
pub struct GgufWriter {
    kv: Vec<(String, Value)>,
    tensors: Vec<TensorSpec>,
    alignment: u64,
    version: u32,
}

impl GgufWriter {
    /// An empty GGUF v3 file with the default alignment.
    pub fn new() -> Self {
        GgufWriter {
            kv: Vec::new(),
            tensors: Vec::new(),
            alignment: DEFAULT_ALIGNMENT,
            version: 3,
        }
    }

    /// Writes the given format version (2 or 3; they differ only in meaning, not layout).
    pub fn version(mut self, v: u32) -> Self {
        self.version = v;
        self
    }

    /// Adds a metadata entry. `general.alignment` also sets the data alignment.
    pub fn kv(&mut self, key: impl Into<String>, value: Value) -> &mut Self {
        let key = key.into();
        if key == "general.alignment"
            && let Value::U32(a) = value
        {
            self.alignment = a as u64;
        }
        self.kv.push((key, value));
        self
    }

    /// Adds a tensor header; its data must be supplied in the same order
    /// when writing. A shape that is not whole blocks of `dtype` is an error.
    pub fn tensor(
        &mut self,
        name: impl Into<String>,
        ne: Vec<u64>,
        dtype: DType,
    ) -> io::Result<&mut Self> {
        let t = TensorSpec {
            name: name.into(),
            ne,
            dtype,
        };
        t.bytes()?;
        self.tensors.push(t);
        Ok(self)
    }

    /// The tensors added so far.
    pub fn tensors(&self) -> &[TensorSpec] {
        &self.tensors
    }

    /// Writes the header, then asks `data` for each tensor's bytes in order
    /// (it writes exactly `spec.bytes()` bytes into the writer it is given).
    pub fn write<W: Write>(
        &self,
        mut w: W,
        mut data: impl FnMut(usize, &TensorSpec, &mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut pos = 0u64;
        let put = |w: &mut W, pos: &mut u64, b: &[u8]| -> io::Result<()> {
            *pos += b.len() as u64;
            w.write_all(b)
        };
        put(&mut w, &mut pos, &GGUF_MAGIC)?;
        put(&mut w, &mut pos, &self.version.to_le_bytes())?;
        put(&mut w, &mut pos, &(self.tensors.len() as u64).to_le_bytes())?;
        put(&mut w, &mut pos, &(self.kv.len() as u64).to_le_bytes())?;
        let mut buf = Vec::new();
        for (k, v) in &self.kv {
            buf.clear();
            encode_str(&mut buf, k);
            buf.extend_from_slice(&v.value_type().tag().to_le_bytes());
            encode_value(&mut buf, v);
            put(&mut w, &mut pos, &buf)?;
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            buf.clear();
            encode_str(&mut buf, &t.name);
            buf.extend_from_slice(&(t.ne.len() as u32).to_le_bytes());
            for d in &t.ne {
                buf.extend_from_slice(&d.to_le_bytes());
            }
            buf.extend_from_slice(&t.dtype.ggml_id().to_le_bytes());
            buf.extend_from_slice(&offset.to_le_bytes());
            put(&mut w, &mut pos, &buf)?;
            offset = (offset + t.bytes()?).div_ceil(self.alignment) * self.alignment;
        }
        let pad = |p: u64| (p.div_ceil(self.alignment) * self.alignment - p) as usize;
        let zeros = vec![0u8; self.alignment as usize];
        let p = pad(pos);
        put(&mut w, &mut pos, &zeros[..p])?;
        for (i, t) in self.tensors.iter().enumerate() {
            let mut counted = CountingWriter {
                inner: &mut w,
                n: 0,
            };
            data(i, t, &mut counted)?;
            let n = counted.n;
            let want = t.bytes()?;
            if n != want {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("tensor {:?}: wrote {n} bytes, expected {want}", t.name),
                ));
            }
            if i + 1 < self.tensors.len() {
                w.write_all(&zeros[..pad(n)])?;
            }
        }
        w.flush()
    }

    /// Writes the whole file into memory, with tensor data from `data[i]`.
    pub fn to_bytes(&self, data: &[Vec<u8>]) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        self.write(&mut out, |i, _, w| w.write_all(&data[i]))?;
        Ok(out)
    }
}

struct CountingWriter<'a, W: Write> {
    inner: &'a mut W,
    n: u64,
}

impl<W: Write> Write for CountingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn encode_str(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
    buf.extend_from_slice(s.as_bytes());
}

/// Appends a value's encoding (without its type tag).
pub fn encode_value(buf: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => buf.push(*x),
        Value::I8(x) => buf.push(*x as u8),
        Value::U16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => buf.push(*x as u8),
        Value::String(s) => encode_str(buf, s),
        Value::Array(t, items) => {
            buf.extend_from_slice(&t.tag().to_le_bytes());
            buf.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for it in items {
                encode_value(buf, it);
            }
        }
        Value::U64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => buf.extend_from_slice(&x.to_le_bytes()),
    }
}

/// Convenience constructors for array values.
impl Value {
    /// An array of strings.
    pub fn strings<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> Value {
        Value::Array(
            ValueType::String,
            items
                .into_iter()
                .map(|s| Value::String(s.as_ref().to_string()))
                .collect(),
        )
    }

    /// An array of f32.
    pub fn f32s(items: impl IntoIterator<Item = f32>) -> Value {
        Value::Array(ValueType::F32, items.into_iter().map(Value::F32).collect())
    }

    /// An array of i32.
    pub fn i32s(items: impl IntoIterator<Item = i32>) -> Value {
        Value::Array(ValueType::I32, items.into_iter().map(Value::I32).collect())
    }

    /// A string value.
    pub fn str(s: impl Into<String>) -> Value {
        Value::String(s.into())
    }
}
