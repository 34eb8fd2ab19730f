//! The docs name code that exists: every `module::item` path in backticks
//! in README.md and docs/*.md (architecture.md and design.md name the most)
//! is defined in `src/` (the module's file exists and defines the item with `fn`,
//! `struct`, `enum`, `trait`, `const`, `static`, `type` or `mod`; a
//! `Type::method` is a `fn` in a file that has an `impl` of the type), and
//! every `.rs` file they name is in the repository. Reads files only.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The documents checked: the README and every page in docs/.
fn docs() -> Vec<PathBuf> {
    let dir = root().join("docs");
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    let mut pages: Vec<PathBuf> = entries
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    pages.insert(0, root().join("README.md"));
    pages
}

/// First segments of paths that are other crates' (not checked).
const EXTERNAL: [&str; 10] =
    ["std", "core", "alloc", "tokio", "tonic", "libc", "nix", "serde", "serde_json", "cgroups_rs"];

const KEYWORDS: [&str; 9] = ["fn", "struct", "enum", "trait", "const", "static", "type", "mod", "macro_rules!"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The library's modules by path (`stage1::exec`), with their source text.
fn modules() -> BTreeMap<String, String> {
    fn walk(dir: &Path, src: &Path, out: &mut BTreeMap<String, String>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                walk(&path, src, out);
                continue;
            }
            let Some(rel) = path.strip_prefix(src).ok().and_then(|r| r.to_str()) else { continue };
            let Some(rel) = rel.strip_suffix(".rs") else { continue };
            let module = match rel {
                "main" => continue,
                "lib" => String::new(),
                _ => rel.strip_suffix("/mod").unwrap_or(rel).replace('/', "::"),
            };
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            out.insert(module, text);
        }
    }
    let src = root().join("src");
    let mut out = BTreeMap::new();
    walk(&src, &src, &mut out);
    // the workspace's library crates, under their own names
    for krate in ["logwriter", "rkt"] {
        let src = root().join(krate).join("src");
        let mut inner = BTreeMap::new();
        walk(&src, &src, &mut inner);
        for (module, text) in inner {
            let name = if module.is_empty() { krate.to_string() } else { format!("{krate}::{module}") };
            out.insert(name, text);
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `text` defines `name` as an item (`fn name`, `struct name`, ...).
fn defines(text: &str, name: &str) -> bool {
    // a `pub use` (or `pub(crate) use`) names what another module defines as this one's
    let reexported = ["pub use ", "pub(crate) use "].iter().any(|re_export| {
        text.match_indices(re_export).any(|(i, _)| {
            let statement = text[i..].split(';').next().unwrap_or("");
            statement.split(|c: char| !is_ident(c)).any(|word| word == name)
        })
    });
    reexported
        || KEYWORDS.iter().any(|kw| {
            let pattern = format!("{kw} {name}");
            text.match_indices(&pattern).any(|(i, _)| {
                let before = text[..i].chars().next_back().is_none_or(|c| !is_ident(c));
                let after = text[i + pattern.len()..].chars().next().is_none_or(|c| !is_ident(c));
                before && after
            })
        })
}

/// The sources that have an `impl` block of `ty` (inherent or of a trait).
fn impls<'a>(modules: &'a BTreeMap<String, String>, ty: &str) -> Vec<&'a str> {
    modules
        .values()
        .filter(|text| {
            text.lines().any(|line| {
                let line = line.trim_start();
                line.starts_with("impl") && line.split(|c: char| !is_ident(c)).any(|word| word == ty)
            })
        })
        .map(String::as_str)
        .collect()
}

/// Methods `names` are `fn`s in some `impl` of `ty`.
fn methods_exist(modules: &BTreeMap<String, String>, ty: &str, names: &[&str]) -> bool {
    let sources = impls(modules, ty);
    names.iter().all(|name| sources.iter().any(|text| defines(text, name)))
}

/// Why `path` names nothing in `src/`, or `None` when it does.
fn missing(modules: &BTreeMap<String, String>, path: &str) -> Option<String> {
    let segments: Vec<&str> = path.trim_start_matches("crate::").split("::").collect();
    if EXTERNAL.contains(&segments[0]) {
        return None;
    }
    // the longest leading segments that name a module (in full or as the end of one)
    for k in (1..segments.len()).rev() {
        let module = segments[..k].join("::");
        let suffix = format!("::{module}");
        let found: Vec<&String> = modules.keys().filter(|m| **m == module || m.ends_with(&suffix)).collect();
        if found.is_empty() {
            continue;
        }
        let (item, methods) = (segments[k], &segments[k + 1..]);
        if found.iter().any(|m| defines(&modules[*m], item)) && methods_exist(modules, item, methods) {
            return None;
        }
        return Some(format!("{path}: module {module} ({found:?}) does not define {}", segments[k..].join("::")));
    }
    let ty = segments[0];
    if !ty.starts_with(|c: char| c.is_ascii_uppercase()) {
        return Some(format!("{path}: no module {ty} in src/"));
    }
    if !modules.values().any(|text| defines(text, ty)) {
        return Some(format!("{path}: no type {ty} in src/"));
    }
    if !methods_exist(modules, ty, &segments[1..]) {
        return Some(format!("{path}: no impl of {ty} defines {}", segments[1..].join("::")));
    }
    None
}

/// `a::b::C` (identifiers joined by `::`, at least two).
fn is_code_path(span: &str) -> bool {
    let segments: Vec<&str> = span.split("::").collect();
    segments.len() >= 2
        && segments
            .iter()
            .all(|s| s.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') && s.chars().all(is_ident))
}

/// The inline code spans of a Markdown text, fenced blocks left out.
fn code_spans(text: &str) -> Vec<String> {
    let mut prose = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    prose.split('`').skip(1).step_by(2).map(|s| s.split_whitespace().collect::<Vec<_>>().join(" ")).collect()
}

#[test]
fn every_code_path_the_docs_name_exists() {
    let modules = modules();
    assert!(modules.contains_key("stage1::exec") && modules.contains_key(""), "src/ was not read");
    let mut problems = Vec::new();
    let mut checked = 0;
    let docs = docs();
    assert!(docs.iter().any(|d| d.ends_with("docs/architecture.md")), "{docs:?}");
    for path in &docs {
        let doc = path.strip_prefix(root()).unwrap_or(path).display().to_string();
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {doc}: {e}"));
        for span in code_spans(&text) {
            if is_code_path(&span) {
                checked += 1;
                if let Some(why) = missing(&modules, &span) {
                    problems.push(format!("{doc}: {why}"));
                }
            } else if span.ends_with(".rs") && !span.contains(' ') {
                checked += 1;
                if !root().join(&span).is_file() && !root().join("src").join(&span).is_file() {
                    problems.push(format!("{doc}: no file {span} (from the repository's root or src/)"));
                }
            }
        }
    }
    // the architecture page names dozens; a parser that finds none is broken
    assert!(checked > 50, "only {checked} code paths found in {docs:?}");
    assert!(problems.is_empty(), "the docs name code that does not exist:\n{}", problems.join("\n"));
}

#[test]
fn the_checker_tells_real_paths_from_invented_ones() {
    let modules = modules();
    for real in ["stage1::appexec::host_app_pid", "pod::table::PodTable", "Runtime::reconcile", "launch::start"] {
        assert_eq!(missing(&modules, real), None, "{real}");
    }
    for invented in [
        "stage1::appexec::no_such_fn",
        "cri::no_such_module::PodTable",
        "Runtime::no_such_method",
        "NoSuchType::new",
        "nosuchmodule::item",
    ] {
        assert!(missing(&modules, invented).is_some(), "{invented} passed");
    }
    assert_eq!(code_spans("a `x::y` b\n```\n`z::w`\n```\n`p::\nq`"), ["x::y", "p:: q"]);
    assert!(is_code_path("stage1::exec::spawn") && !is_code_path("Type=notify") && !is_code_path("x::"));
}
