//! The `unsafe` rule, checked on every source file of the workspace: each
//! `unsafe { }` block and `unsafe impl` has a `// SAFETY:` comment just above
//! it (or on its line) stating the invariant, and each `unsafe fn` documents
//! its contract under `# Safety` (a trait method's implementations share the
//! trait's). `docs/reliability.md` lists the tests that exercise them.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let name = e.file_name();
        if p.is_dir() {
            if name != "target" && !name.to_string_lossy().starts_with('.') {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code part of a line (no `//` comment), without string literals.
fn code(line: &str) -> String {
    let mut out = String::new();
    let mut in_str = false;
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        if !in_str && line[i..].starts_with("//") {
            break;
        }
        if c == '"' && prev != '\\' {
            in_str = !in_str;
        } else if !in_str {
            out.push(c);
        }
        prev = c;
    }
    out
}

fn has_word(s: &str, w: &str) -> bool {
    s.match_indices(w).any(|(i, _)| {
        let before = s[..i].chars().next_back();
        let after = s[i + w.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

fn fn_name(s: &str) -> Option<String> {
    let at = s.find("unsafe fn ")? + "unsafe fn ".len();
    Some(
        s[at..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect(),
    )
}

#[test]
fn every_unsafe_states_its_invariant() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for krate in [
        "ats-core",
        "ats-cpu",
        "ats-cuda",
        "ats-sched",
        "ats-vision",
        "ats-cli",
        "tests",
    ] {
        let d = root.join(krate);
        if d.exists() {
            rust_files(&d, &mut files);
        }
    }
    assert!(files.len() > 50, "found only {} source files", files.len());
    let (mut blocks, mut fns, mut impls) = (0, 0, 0);
    let mut missing = Vec::new();
    // unsafe fns whose contract is documented (by name), and those that are not
    let mut documented: HashSet<String> = HashSet::new();
    let mut undocumented: Vec<(String, String)> = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let at = |i: usize| format!("{}:{}", f.display(), i + 1);
        for (i, line) in lines.iter().enumerate() {
            let c = code(line);
            if !has_word(&c, "unsafe") {
                continue;
            }
            let above = |n: usize| lines[i.saturating_sub(n)..=i].join("\n");
            let is_fn = c.contains("unsafe fn ");
            let is_impl = c.contains("unsafe impl");
            let n_blocks = c.matches("unsafe {").count();
            if is_fn {
                fns += 1;
                let name = fn_name(&c).unwrap_or_default();
                if above(14).contains("# Safety") {
                    documented.insert(name);
                } else {
                    undocumented.push((name, at(i)));
                }
            }
            if is_impl {
                impls += 1;
                if !above(4).contains("SAFETY:") {
                    missing.push(at(i));
                }
            }
            if n_blocks > 0 {
                blocks += n_blocks;
                if !above(5).contains("SAFETY:") {
                    missing.push(at(i));
                }
            }
        }
    }
    for (name, place) in undocumented {
        if !documented.contains(&name) {
            missing.push(format!("{place} (unsafe fn {name} without # Safety)"));
        }
    }
    eprintln!("unsafe audit: {blocks} blocks, {fns} unsafe fns, {impls} unsafe impls");
    assert!(
        missing.is_empty(),
        "unsafe without a stated invariant:\n{}",
        missing.join("\n")
    );
    assert!(blocks > 0, "the scan found no unsafe blocks at all");
}
