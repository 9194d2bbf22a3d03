//! The layers of `src/`, enforced: every reference to another module
//! (`use crate::…`, a `crate::…` path, `super::…` reaching the crate root)
//! is checked against the layer table of `src/lib.rs`:
//!
//! - a module imports modules of its own row or of rows below it;
//! - the modules of a row marked *apart* (the planner and the two
//!   backends) import none of each other;
//! - only the runtime imports a backend (`cpu`, `gpu`): ops, the tape,
//!   optimizers, layers and autograd reach kernels through the runtime.
//!
//! `ARCHITECTURE.md` must draw the same table, and every module under
//! `src/` must be in it. Comments are ignored: only code imports. The
//! checker itself is tested on files made to break each rule.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The modules every caller reaches only through the runtime.
const BACKENDS: &[&str] = &["cpu", "gpu"];
/// The one module that imports backends.
const RUNTIME: &str = "runtime";

/// One row of the layer table: its modules and whether they are apart.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Row {
    modules: Vec<String>,
    apart: bool,
}

/// The layer table: rows from the top layer down.
#[derive(Debug)]
struct Layers(Vec<Row>);

impl Layers {
    /// The table headed `| layer | modules | what |` in `text` (lines may
    /// carry a `//! ` prefix): the backticked names of the second column,
    /// `apart` where the first column says so.
    fn parse(text: &str) -> Option<Layers> {
        let lines: Vec<&str> = text
            .lines()
            .map(|l| l.trim_start_matches("//!").trim())
            .collect();
        let start = lines
            .iter()
            .position(|l| l.replace(' ', "") == "|layer|modules|what|")?;
        let rows = lines[start + 2..]
            .iter()
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                let cols: Vec<&str> = l.split('|').map(str::trim).collect();
                Row {
                    modules: cols[2]
                        .split('`')
                        .skip(1)
                        .step_by(2)
                        .map(str::to_string)
                        .collect(),
                    apart: cols[1].contains("apart"),
                }
            })
            .collect();
        Some(Layers(rows))
    }

    /// The row index of `module` (0 is the top).
    fn row_of(&self, module: &str) -> Option<usize> {
        self.0
            .iter()
            .position(|r| r.modules.iter().any(|m| m == module))
    }
}

/// Crate-root names (`crate::Error`, `crate::jit`) and the module each
/// comes from, read from the `pub use` lines and inline modules of lib.rs.
fn root_names(lib: &str, modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let code = strip_comments(lib);
    let mut names = BTreeMap::new();
    for stmt in code.split(';') {
        // Attributes (`#[cfg(…)]`) may precede the statement.
        let Some(at) = stmt.find("pub use ") else {
            continue;
        };
        let rest = stmt[at + "pub use ".len()..].trim();
        let rest = rest.trim_start_matches("crate::");
        let (module, items) = rest.split_once("::").unwrap_or((rest, ""));
        let items = items.trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let name = item.rsplit("::").next().unwrap_or(item);
            let name = name.trim_matches(|c: char| c == '{' || c == '}' || c.is_whitespace());
            names.insert(name.to_string(), module.trim().to_string());
        }
        if items.is_empty() {
            // `pub use runtime::jit;` is the same path, `pub use x;` a
            // module of its own.
            names.insert(module.trim().to_string(), module.trim().to_string());
        }
    }
    // `pub mod cuda { pub use crate::gpu::… }`: the inline module is the
    // one it re-exports.
    for (i, _) in code.match_indices("pub mod ") {
        let head = &code[i + 8..];
        let name: String = head
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let after = &head[name.len()..];
        if let Some(body) = after.trim_start().strip_prefix('{') {
            let body = &body[..body.find('}').unwrap_or(body.len())];
            if let Some(m) = modules
                .iter()
                .find(|m| body.contains(&format!("crate::{m}::")))
            {
                names.insert(name, m.clone());
            }
        }
    }
    names
}

/// `text` without `//` and `/* */` comments (string literals are not
/// parsed: a `//` inside one hides the rest of its line, which can only
/// hide an import, never invent one).
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        let line_c = rest.find("//");
        let block_c = rest.find("/*");
        match (line_c, block_c) {
            (Some(l), b) if b.is_none_or(|b| l < b) => {
                out.push_str(&rest[..l]);
                rest = &rest[l..];
                rest = &rest[rest.find('\n').unwrap_or(rest.len())..];
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                rest = &rest[b..];
                rest = &rest[rest.find("*/").map_or(rest.len(), |e| e + 2)..];
            }
            _ => {
                out.push_str(rest);
                rest = "";
            }
        }
    }
    out
}

/// The module of the crate a file under `src/` belongs to (`None` for
/// lib.rs), and how many `super::` reach the crate root from it.
fn module_of(rel: &Path) -> Option<(String, usize)> {
    let parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts == ["lib.rs"] {
        return None;
    }
    let module = parts[0].trim_end_matches(".rs").to_string();
    // The module path of the file: its folders, then its name unless it
    // is a mod.rs.
    let last = parts.last()?;
    let depth = parts.len() - usize::from(last == "mod.rs");
    Some((module, depth))
}

/// Per line of `code` (comments stripped): how many inline modules
/// (`mod tests { … }`) enclose it. Braces inside string and character
/// literals are skipped.
fn inline_modules(code: &str) -> Vec<usize> {
    let mut per_line = Vec::new();
    let mut level = 0usize;
    // The brace levels at which open inline modules end.
    let mut open: Vec<usize> = Vec::new();
    for line in code.lines() {
        per_line.push(open.len());
        let trimmed = line.trim_start();
        let declares = ["mod ", "pub mod ", "pub(crate) mod "]
            .iter()
            .any(|p| trimmed.starts_with(p))
            && trimmed.trim_end().ends_with('{');
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            match chars[i] {
                '"' => {
                    i += 1;
                    while i < chars.len() && chars[i] != '"' {
                        i += if chars[i] == '\\' { 2 } else { 1 };
                    }
                }
                '\'' if chars.get(i + 1) == Some(&'\\') => {
                    i += 2;
                    while i < chars.len() && chars[i] != '\'' {
                        i += 1;
                    }
                }
                '\'' if chars.get(i + 2) == Some(&'\'') => i += 2,
                '{' => {
                    level += 1;
                    if declares && open.last() != Some(&level) {
                        open.push(level);
                    }
                }
                '}' => {
                    if open.last() == Some(&level) {
                        open.pop();
                    }
                    level = level.saturating_sub(1);
                }
                _ => {}
            }
            i += 1;
        }
    }
    per_line
}

/// The crate modules `code` (comments stripped) refers to, with the line
/// of each reference.
fn references(code: &str, depth: usize, roots: &BTreeMap<String, String>) -> Vec<(usize, String)> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = Vec::new();
    let nested = inline_modules(code);
    for (n, line) in code.lines().enumerate() {
        let mut heads: Vec<&str> = line.split("crate::").skip(1).collect();
        // `super::` repeated as often as modules enclose the line reaches
        // the crate root.
        let supers = "super::".repeat(depth + nested[n]);
        heads.extend(
            line.split(supers.as_str())
                .skip(1)
                .filter(|h| !h.starts_with("super::")),
        );
        for head in heads {
            let names: Vec<String> = match head.strip_prefix('{') {
                // `crate::{a, b::c}`: the first segment of each item
                // (nested braces only ever follow a first segment).
                Some(group) => {
                    let group = &group[..group.find('}').unwrap_or(group.len())];
                    group.split(',').map(|i| ident(i.trim())).collect()
                }
                None => vec![ident(head)],
            };
            for name in names.into_iter().filter(|n| !n.is_empty()) {
                let module = roots.get(&name).cloned().unwrap_or(name);
                found.push((n + 1, module));
            }
        }
    }
    found
}

/// Every violation of the rules in `files` (path relative to `src/`,
/// text) against `layers`, with `roots` the crate-root names.
fn violations(
    files: &[(PathBuf, String)],
    layers: &Layers,
    roots: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut bad = Vec::new();
    for (path, text) in files {
        let Some((module, depth)) = module_of(path) else {
            continue;
        };
        let Some(row) = layers.row_of(&module) else {
            bad.push(format!(
                "src/{}: module `{module}` is not in the layer table",
                path.display()
            ));
            continue;
        };
        let code = strip_comments(text);
        for (line, target) in references(&code, depth, roots) {
            if target == module {
                continue;
            }
            let at = format!(
                "src/{}:{line}: `{module}` imports `{target}`",
                path.display()
            );
            let Some(target_row) = layers.row_of(&target) else {
                bad.push(format!("{at}, which is not in the layer table"));
                continue;
            };
            if target_row < row {
                bad.push(format!("{at}, a layer above it"));
            } else if target_row == row && layers.0[row].apart {
                bad.push(format!("{at}, a sibling it must not import"));
            } else if BACKENDS.contains(&target.as_str()) && module != RUNTIME {
                bad.push(format!("{at}: only the runtime reaches a backend"));
            }
        }
    }
    bad
}

fn src_files(dir: &Path, root: &Path, out: &mut Vec<(PathBuf, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            src_files(&p, root, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&p).unwrap();
            out.push((p.strip_prefix(root).unwrap().to_path_buf(), text));
        }
    }
}

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The table, the root names and the files of this crate.
fn this_crate() -> (Layers, BTreeMap<String, String>, Vec<(PathBuf, String)>) {
    let src = crate_dir().join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let layers = Layers::parse(&lib).expect("src/lib.rs has a `| layer | modules | what |` table");
    let modules: BTreeSet<String> = layers.0.iter().flat_map(|r| r.modules.clone()).collect();
    let roots = root_names(&lib, &modules);
    let mut files = Vec::new();
    src_files(&src, &src, &mut files);
    (layers, roots, files)
}

#[test]
fn every_import_respects_the_layers() {
    let (layers, roots, files) = this_crate();
    assert!(files.len() > 100, "{} files read", files.len());
    let bad = violations(&files, &layers, &roots);
    assert!(
        bad.is_empty(),
        "{} imports break the layers of src/lib.rs:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn architecture_md_draws_the_same_layers() {
    let (layers, _, files) = this_crate();
    let doc = std::fs::read_to_string(crate_dir().join("ARCHITECTURE.md")).unwrap();
    let drawn =
        Layers::parse(&doc).expect("ARCHITECTURE.md has a `| layer | modules | what |` table");
    assert_eq!(drawn.0, layers.0, "ARCHITECTURE.md and src/lib.rs disagree");
    // Every module with a folder or file under src/ is in the table.
    let modules: BTreeSet<String> = files
        .iter()
        .filter_map(|(p, _)| module_of(p))
        .map(|m| m.0)
        .collect();
    for m in modules {
        assert!(
            layers.row_of(&m).is_some(),
            "`{m}` is missing from the layer table"
        );
    }
}

/// The checker on files made to break each rule: it must find exactly the
/// broken ones.
#[test]
fn the_check_catches_each_kind_of_violation() {
    let (layers, roots, _) = this_crate();
    let file = |path: &str, text: &str| (PathBuf::from(path), text.to_string());
    let cases = [
        // A backend importing its sibling, and the planner.
        (file("gpu/driver.rs", "use crate::cpu::CPU;\n"), 1),
        (file("cpu/backend.rs", "use crate::planner::route_for;\n"), 1),
        (file("planner/route.rs", "fn f() { crate::cpu::num_threads(); }\n"), 1),
        // Callers above the runtime reaching a backend.
        (file("ops/mod.rs", "use crate::cpu::set_num_threads;\n"), 1),
        (file("optim/mod.rs", "use crate::{cpu, Error};\n"), 1),
        (file("nn/linear.rs", "use crate::gpu::driver::gpu;\n"), 1),
        (file("autograd/graph.rs", "let k = crate::cpu::CPU;\n"), 1),
        // A lower layer importing a higher one, through a root name too.
        (file("kernel/route.rs", "use crate::runtime::Storage;\n"), 1),
        (file("alloc/pool.rs", "use crate::Tensor;\n"), 1),
        (file("symbolic/eval.rs", "fn f() -> crate::jit::JitStats { todo!() }\n"), 1),
        // super:: reaching the crate root from a top-level folder.
        (file("runtime/mod.rs", "use super::ops::apply;\n"), 1),
        // super:: from inside an inline module.
        (
            file(
                "cpu/vmath.rs",
                "mod tests {\n    use super::super::codegen::compile;\n    use super::super::super::runtime::Storage;\n}\nfn f() { let s = \"{\"; }\n",
            ),
            1,
        ),
        // A module nobody put in the table.
        (file("serving/mod.rs", "use crate::Error;\n"), 1),
        // Allowed: downward imports, the runtime importing a backend,
        // same-row imports in the user layer, comments, in-module super.
        (file("runtime/exec.rs", "use crate::cpu::CPU;\nuse super::storage::Storage;\n"), 0),
        (file("ops/mod.rs", "use crate::runtime::exec;\nuse crate::{DType, Error};\n"), 0),
        (file("safetensors.rs", "use crate::nn::Module;\n"), 0),
        (file("gpu/ptx/mod.rs", "// see crate::cpu::simd\n/// crate::planner::passes\n"), 0),
        (file("trace/memory_plan/mod.rs", "use super::super::planner::Source;\nuse super::Node;\n"), 0),
    ];
    for (f, expected) in &cases {
        let found = violations(std::slice::from_ref(f), &layers, &roots);
        assert_eq!(found.len(), *expected, "{}: {found:?}", f.0.display());
    }
}
