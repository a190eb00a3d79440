//! `tojson` as Hugging Face chat templates expect it: Python's
//! `json.dumps(x, ensure_ascii=False)` formatting (`", "` and `": "`
//! separators, no HTML escaping, keys in insertion order), which differs from
//! MiniJinja's built-in filter.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};

/// Nesting deeper than this is an error, not a stack overflow.
const MAX_DEPTH: usize = 128;

struct Opts {
    indent: Option<usize>,
    sort_keys: bool,
    ensure_ascii: bool,
    item_sep: String,
    key_sep: String,
}

/// The `tojson` filter: `indent`, `sort_keys`, `ensure_ascii` and
/// `separators` keyword arguments as in Python.
pub(crate) fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<i64> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let indent = indent.map(|i| i.max(0) as usize);
    let (item_sep, key_sep) = match separators {
        Some(s) if !s.is_none() => {
            let a = s.get_item_by_index(0)?;
            let b = s.get_item_by_index(1)?;
            match (a.as_str(), b.as_str()) {
                (Some(a), Some(b)) => (a.to_string(), b.to_string()),
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be two strings",
                    ));
                }
            }
        }
        // Python's defaults: no space before a newline when indenting.
        _ if indent.is_some() => (",".to_string(), ": ".to_string()),
        _ => (", ".to_string(), ": ".to_string()),
    };
    let opts = Opts {
        indent,
        sort_keys: sort_keys.unwrap_or(false),
        ensure_ascii: ensure_ascii.unwrap_or(false),
        item_sep,
        key_sep,
    };
    let mut out = String::new();
    write_value(value, &opts, 0, &mut out)?;
    Ok(Value::from(out))
}

fn newline(opts: &Opts, depth: usize, out: &mut String) {
    if let Some(n) = opts.indent {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', n * depth));
    }
}

fn write_value(v: &Value, opts: &Opts, depth: usize, out: &mut String) -> Result<(), Error> {
    if depth > MAX_DEPTH {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "tojson: value nested too deeply",
        ));
    }
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => write_number(v, out),
        ValueKind::String => write_str(v.as_str().unwrap_or_default(), opts.ensure_ascii, out),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_sep);
                }
                newline(opts, depth + 1, out);
                write_value(item, opts, depth + 1, out)?;
            }
            newline(opts, depth, out);
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if opts.sort_keys {
                keys.sort_by_key(|k| k.to_string());
            }
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_sep);
                }
                newline(opts, depth + 1, out);
                // JSON keys are strings; Python converts numbers and bools too.
                let key = match k.as_str() {
                    Some(s) => s.to_string(),
                    None => k.to_string(),
                };
                write_str(&key, opts.ensure_ascii, out);
                out.push_str(&opts.key_sep);
                write_value(&v.get_item(k)?, opts, depth + 1, out)?;
            }
            newline(opts, depth, out);
            out.push('}');
        }
        // Bytes, callables, plain objects: their string form, as a JSON string.
        _ => write_str(&v.to_string(), opts.ensure_ascii, out),
    }
    Ok(())
}

fn write_number(v: &Value, out: &mut String) {
    if v.is_integer() {
        let _ = write!(out, "{v}");
        return;
    }
    let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
    if f.is_nan() {
        out.push_str("NaN");
    } else if f.is_infinite() {
        out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
    } else if f.fract() == 0.0 && f.abs() < 1e16 {
        // Python prints integral floats with one decimal: `2.0`.
        let _ = write!(out, "{f:.1}");
    } else {
        let _ = write!(out, "{f}");
    }
}

fn write_str(s: &str, ensure_ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && !c.is_ascii() => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
