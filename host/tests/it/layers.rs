//! The host library's layering, checked on its source: every `crate::`, `super::` and
//! `self::` path in `host/src` is resolved to the module file it names, and
//! - a top-level module imports only modules on lower lines of ARCHITECTURE.md's
//!   `## Layers` block (never its own line, never above);
//! - inside a module, the files import each other without circles, except the circles
//!   listed in [`KNOWN_CIRCLES`] (which must still exist: a broken one is taken off).
//!
//! Re-exports through a parent (`crate::model::X` from inside `model`) are not edges: a
//! parent's `mod.rs` only names its children.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

/// File-level circles inside one module that are known and left for now, each sorted.
const KNOWN_CIRCLES: &[&[&str]] = &[
    // An error type wraps the failure watch's tally, which formats the errors.
    &[
        "rollout::error",
        "rollout::failures",
        "rollout::orchestra",
        "rollout::team",
    ],
    // The trust errors carry the trust module's reasons, and trust returns them.
    &["plugin::error", "plugin::trust"],
    // The GGUF reader dequantizes through quant, which reads the reader's tensor info.
    &["model::gguf::quant", "model::gguf::reader"],
];

fn host() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// The `## Layers` block of ARCHITECTURE.md: top layer first.
fn layers() -> Vec<Vec<String>> {
    let path = host().join("../ARCHITECTURE.md");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (the layering is defined there)", path.display()));
    let section = text
        .split("\n## Layers\n")
        .nth(1)
        .expect("ARCHITECTURE.md has a `## Layers` section");
    let block = section
        .split("```text\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the Layers section starts with a ```text block");
    block
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// Every library source file by module path (`["model", "lora"]`), without the binary's
/// `main.rs` and `cli/`.
fn library_files() -> BTreeMap<Vec<String>, PathBuf> {
    let src = host().join("src");
    let mut out = BTreeMap::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path != src.join("cli") {
                    stack.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") || path == src.join("main.rs") {
                continue;
            }
            let rel = path.strip_prefix(&src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
                parts.pop();
            }
            out.insert(parts, path);
        }
    }
    out
}

/// The source without comments (line comments, doc comments, and string literals are
/// left: a path inside a string does not start with `crate::` in this code base).
fn strip_comments(src: &str) -> String {
    src.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_path(s: &str) -> String {
    let mut end = 0;
    let b = s.as_bytes();
    while end < b.len()
        && (b[end].is_ascii_alphanumeric()
            || b[end] == b'_'
            || (b[end] == b':' && b.get(end + 1) == Some(&b':')))
    {
        end += if b[end] == b':' { 2 } else { 1 };
    }
    s[..end].trim_end_matches(':').to_string()
}

/// The paths a `use` group `{a::b, c::{d, e}}` starts with at its top level.
fn group_heads(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, true);
    let mut i = 0;
    let b = s.as_bytes();
    while i < b.len() {
        match b[i] {
            b'{' => {
                depth += 1;
                start = depth == 1;
            }
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            b',' if depth == 1 => start = true,
            c if start && depth == 1 && (c.is_ascii_alphabetic() || c == b'_') => {
                let p = ident_path(&s[i..]);
                i += p.len();
                out.push(p);
                start = false;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Every path the file names through `crate::`, `super::` or `self::`, resolved to an
/// absolute module path (segments).
fn named_paths(module: &[String], src: &str) -> Vec<Vec<String>> {
    let src = strip_comments(src);
    let mut out = Vec::new();
    for head in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(pos) = src[from..].find(head) {
            let at = from + pos;
            from = at + head.len();
            let before = src[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue; // `super::super::` is read from its first `super`
            }
            let mut base: Vec<String> = match head {
                "crate::" => Vec::new(),
                "self::" => module.to_vec(),
                _ => module[..module.len().saturating_sub(1)].to_vec(),
            };
            let mut rest = &src[from..];
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
            let tails = if rest.starts_with('{') {
                group_heads(rest)
            } else {
                vec![ident_path(rest)]
            };
            for t in tails {
                let mut p = base.clone();
                p.extend(t.split("::").filter(|s| !s.is_empty()).map(str::to_string));
                out.push(p);
            }
        }
    }
    out
}

/// The file-level import graph: module path → the module files it names.
fn graph() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let files = library_files();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (module, path) in &files {
        let src = std::fs::read_to_string(path).unwrap();
        let targets = edges.entry(module.clone()).or_default();
        for named in named_paths(module, &src) {
            // The longest prefix that is a file of its own.
            let Some(target) = (1..=named.len())
                .rev()
                .map(|n| named[..n].to_vec())
                .find(|p| files.contains_key(p))
            else {
                continue;
            };
            let is_ancestor = target.len() < module.len() && module.starts_with(&target);
            if target != *module && !is_ancestor {
                targets.insert(target);
            }
        }
    }
    edges
}

#[test]
fn no_module_imports_its_own_layer_or_one_above() {
    let layers = layers();
    let rank: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, line)| line.iter().map(move |m| (m.as_str(), i)))
        .collect();
    let lib = std::fs::read_to_string(host().join("src/lib.rs")).unwrap();
    let declared: Vec<&str> = lib
        .lines()
        .filter_map(|l| {
            l.strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("mod "))
        })
        .map(|l| l.trim_end_matches(';'))
        .collect();
    for m in &declared {
        assert!(
            rank.contains_key(m),
            "module `{m}` of host/src/lib.rs has no line in ARCHITECTURE.md's Layers block"
        );
    }
    assert!(
        rank.contains_key("cli"),
        "the binary's `cli` is the top layer"
    );
    let mut wrong = Vec::new();
    for (from, targets) in graph() {
        let Some(top) = from.first() else { continue };
        for to in targets {
            let (a, b) = (top.as_str(), to[0].as_str());
            // Line 0 is the top layer: an import must go to a larger line number.
            if a != b && rank[a] >= rank[b] {
                wrong.push(format!("{} -> {}", from.join("::"), to.join("::")));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that run up or sideways:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_files_of_a_module_import_each_other_without_circles() {
    let edges = graph();
    // Strongly connected components (Tarjan), each a circle when it has 2+ files.
    struct Tarjan<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<Vec<String>, usize>,
        low: BTreeMap<Vec<String>, usize>,
        stack: Vec<Vec<String>>,
        circles: Vec<Vec<String>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: &Vec<String>) {
            let i = self.index.len();
            self.index.insert(v.clone(), i);
            self.low.insert(v.clone(), i);
            self.stack.push(v.clone());
            for w in self.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let l = self.low[v].min(self.low[w]);
                    self.low.insert(v.clone(), l);
                } else if self.stack.contains(w) {
                    let l = self.low[v].min(self.index[w]);
                    self.low.insert(v.clone(), l);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                loop {
                    let w = self.stack.pop().unwrap();
                    let done = w == *v;
                    comp.push(w.join("::"));
                    if done {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.circles.push(comp);
                }
            }
        }
    }
    let mut t = Tarjan {
        edges: &edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        circles: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    let mut found: Vec<Vec<String>> = t.circles;
    found.sort();
    let mut known: Vec<Vec<String>> = KNOWN_CIRCLES
        .iter()
        .map(|c| c.iter().map(|s| s.to_string()).collect())
        .collect();
    known.sort();
    assert_eq!(
        found, known,
        "file-level circles inside modules (left: found; right: the known ones — a new circle is a defect, a broken one comes off the list)"
    );
}

#[test]
fn the_resolver_reads_groups_supers_and_selves() {
    let module: Vec<String> = ["model", "lora"].iter().map(|s| s.to_string()).collect();
    let src = "use super::{error::{ModelError, Result}, tensor_file};\n\
               use crate::{output, pool::{self, x}};\n\
               // crate::ignored::in_comment\n\
               let a = super::super::train::Trainer;\n\
               let b = self::inner::f();\n";
    let got: Vec<String> = named_paths(&module, src)
        .into_iter()
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(
        got,
        [
            "output",
            "pool",
            "model::error",
            "model::tensor_file",
            "train::Trainer",
            "model::lora::inner::f",
        ]
    );
}
