//! The architecture page, `docs/architecture.md`, names every source file: one line per file
//! under `src/`, as a backquoted path from the repository root (`src/pick.rs`). A file added,
//! moved or removed in `src/` fails this test until the page says so, and the failure lists
//! exactly the lines to add and the paths to drop.

use std::collections::BTreeSet;
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
