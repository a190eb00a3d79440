//! Model files changed on the fly, for tests of what a bad or unusual file
//! does: metadata replaced or removed, tensors dropped.

use std::path::Path;
use std::sync::Arc;

use ats_core::gguf::{GgufFile, GgufWriter, Value};
use ats_core::spec::ModelSpec;

/// The model file at `path` with metadata changed by `edit` (`None` removes
/// the key) and without the tensors `drop` names, read as a model (its
/// error as text).
pub fn edited_spec(
    path: &Path,
    edit: &[(&str, Option<Value>)],
    drop: &[&str],
) -> Result<ModelSpec, String> {
    let src = GgufFile::open(path).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata.iter() {
        if !edit.iter().any(|(e, _)| *e == k) {
            w.kv(k, v.clone());
        }
    }
    for (k, v) in edit {
        if let Some(v) = v {
            w.kv(*k, v.clone());
        }
    }
    let mut data = Vec::new();
    for t in src
        .tensors()
        .iter()
        .filter(|t| !drop.contains(&t.name.as_str()))
    {
        w.tensor(&t.name, t.ne.clone(), t.dtype().unwrap()).unwrap();
        data.push(src.tensor_data(t).to_vec());
    }
    let f = GgufFile::from_bytes(w.to_bytes(&data).unwrap()).unwrap();
    ModelSpec::from_gguf(Arc::new(f)).map_err(|e| e.to_string())
}
