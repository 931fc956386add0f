//! The architecture, kept true. The page, `docs/architecture.md`, names every source file: one
//! line per file under `src/`, as a backquoted path from the repository root (`src/pick.rs`). A
//! file added, moved or removed in `src/` fails the first test until the page says so, and the
//! failure lists exactly the lines to add and the paths to drop. And the layer list in
//! `src/lib.rs` holds: no module imports from its own layer or one above (test code aside).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The page, relative to the repository root.
const PAGE: &str = "docs/architecture.md";

#[test]
fn every_source_file_is_named_on_the_architecture_page() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join(PAGE))
        .unwrap_or_else(|e| panic!("cannot read {PAGE}: {e}"));
    let named = named_sources(&page);
    let mut files = BTreeSet::new();
    source_files(root, &root.join("src"), &mut files);
    assert!(!files.is_empty(), "found no .rs file under src/");

    let missing: Vec<&String> = files.difference(&named).collect();
    let stale: Vec<&String> = named.difference(&files).collect();
    let mut report = String::new();
    if !missing.is_empty() {
        report.push_str(
            "\n  in src/ but not named on the page (add a line for each, in its layer):\n",
        );
        for path in &missing {
            report.push_str(&format!("    {path}\n"));
        }
    }
    if !stale.is_empty() {
        report.push_str(
            "\n  named on the page but not in src/ (moved or removed: fix or drop the line):\n",
        );
        for path in &stale {
            report.push_str(&format!("    {path}\n"));
        }
    }
    assert!(
        report.is_empty(),
        "{PAGE} is out of date with src/:\n{report}"
    );
}

/// Every backquoted `src/…rs` path in the page's text, outside fenced code blocks.
fn named_sources(page: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    let mut in_fence = false;
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        // Odd pieces between backquotes are code spans.
        for span in line.split('`').skip(1).step_by(2) {
            if span.starts_with("src/") && span.ends_with(".rs") {
                named.insert(span.to_string());
            }
        }
    }
    named
}

/// Every `.rs` file under `dir`, recursively, as a `/`-separated path relative to `root`.
fn source_files(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
            .path();
        if path.is_dir() {
            source_files(root, &path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            let relative = path
                .strip_prefix(root)
                .expect("a file under src/ is under the repository root");
            let parts: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            out.insert(parts.join("/"));
        }
    }
}

/// The layer list in `src/lib.rs`'s docs: `//! layer N: module module …` → module → N.
fn layers(lib: &str) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for line in lib.lines() {
        let Some(rest) = line.strip_prefix("//! layer ") else {
            continue;
        };
        let (n, modules) = rest.split_once(':').expect("`layer N: modules`");
        let n: u32 = n.trim().parse().expect("a layer number");
        for m in modules.split_whitespace() {
            assert!(
                out.insert(m.to_string(), n).is_none(),
                "{m} is listed twice"
            );
        }
    }
    out
}

/// The top-level modules a file's non-test code names as `crate::m`, each with its line.
fn imports(text: &str) -> Vec<(String, usize)> {
    // Unit tests may reach anywhere: the file's `#[cfg(test)] mod tests` and what follows it.
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    // Comments dropped line by line; groups (`crate::{a, b}`) may span lines.
    let code: String = code
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = code[from..].find("crate::") {
        let at = from + i;
        from = at + "crate::".len();
        let rest = &code[from..];
        let Some(group) = rest.strip_prefix('{') else {
            let word: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push((word, line_of(at)));
            continue;
        };
        // The first segment after `{` or after a `,` at depth 1, each with its own line.
        let (mut depth, mut start, mut word) = (1, true, String::new());
        for (k, c) in group.char_indices() {
            let here = from + 1 + k;
            match c {
                '{' => depth += 1,
                '}' if depth == 1 => break,
                '}' => depth -= 1,
                ',' if depth == 1 => start = true,
                c if start && (c.is_alphanumeric() || c == '_') => word.push(c),
                _ if start && !word.is_empty() => {
                    out.push((std::mem::take(&mut word), line_of(here)));
                    start = false;
                }
                _ => {}
            }
        }
    }
    out
}

/// Every import of a module from its own layer or one above, as `file:line: a imports b (layer
/// x, not below y)`; `files` are `(path under src/, text)`.
fn violations(layers: &BTreeMap<String, u32>, files: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files {
        let top = path
            .split('/')
            .next()
            .unwrap_or("")
            .trim_end_matches(".rs")
            .to_string();
        if top == "lib" || top == "main" {
            continue;
        }
        let Some(&own) = layers.get(&top) else {
            out.push(format!(
                "src/{path}: module {top} is in no layer of src/lib.rs"
            ));
            continue;
        };
        let test_file = path.ends_with("/tests.rs") || path.contains("/tests/");
        if test_file {
            continue;
        }
        for (m, line) in imports(text) {
            match layers.get(&m) {
                Some(&theirs) if m != top && theirs >= own => out.push(format!(
                    "src/{path}:{line}: {top} (layer {own}) imports {m} (layer {theirs})"
                )),
                _ => {}
            }
        }
    }
    out
}

#[test]
fn no_module_imports_its_own_layer_or_one_above() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).expect("src/lib.rs");
    let layers = layers(&lib);
    assert!(
        layers.len() > 10,
        "the layer list in src/lib.rs: {layers:?}"
    );
    let mut paths = BTreeSet::new();
    source_files(&root.join("src"), &root.join("src"), &mut paths);
    let files: Vec<(String, String)> = paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(root.join("src").join(&p)).expect("source");
            (p, text)
        })
        .collect();
    let found = violations(&layers, &files);
    assert!(
        found.is_empty(),
        "the layer order of src/lib.rs is broken:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_layer_check_names_what_breaks_it() {
    let layers = layers("//! layer 0: verdict\n//! layer 1: pick\n//! layer 2: health\n");
    let file = |path: &str, text: &str| (path.to_string(), text.to_string());
    let files = [
        file("pick.rs", "use crate::verdict::State;\nuse crate::{health::Monitor, verdict};\n"),
        file("pick/order.rs", "use crate::{\n    verdict::State,\n    health::{self, Monitor},\n};\n"),
        file("verdict.rs", "// crate::pick in a comment is not an import\n"),
        file("health/mod.rs", "fn f() { crate::pick::order(); }\n#[cfg(test)]\nmod tests {\n    use crate::health::x;\n}\n"),
        file("health/tests.rs", "use crate::health::Monitor;\n"),
        file("extra.rs", "use crate::verdict::State;\n"),
    ];
    assert_eq!(
        violations(&layers, &files),
        [
            "src/pick.rs:2: pick (layer 1) imports health (layer 2)",
            "src/pick/order.rs:3: pick (layer 1) imports health (layer 2)",
            "src/extra.rs: module extra is in no layer of src/lib.rs",
        ]
    );
}
