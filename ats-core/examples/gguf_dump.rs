//! Prints the metadata keys and tensors of a GGUF file (a debugging aid).
fn main() {
    let path = std::env::args().nth(1).expect("usage: gguf_dump FILE");
    let f = ats_core::gguf::GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
    for (k, v) in f.metadata.iter() {
        println!("{k} = {v}");
    }
    for t in f.tensors() {
        println!("{} {:?} {} @{}", t.name, t.shape(), t.type_name, t.offset);
    }
}
