//! The admin page for people (`GET /`), on the app run from its config file: what a backend's `/readyz` body says
//! is shown as text, never as markup; and a real browser (Debian's headless Chromium) renders a
//! page that names every backend and its state, with a screenshot kept under `target/`.
#![allow(clippy::disallowed_types)] // OS threads and child processes, not tokio's clock

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use crate::support::Running;
use crate::support::*;

/// The `/readyz` body of the unready backend: markup that would run if the page did not escape it.
const SCRIPT_BODY: &str = "<script>document.title='owned'</script>[-]etcd failed";

#[test]
fn admin_page_shows_a_script_in_a_readyz_reason_as_text() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (a, file) = lab.fake_and_config(&rt, "script-body.yaml", "");
    a.control
        .readyz_answer
        .store(Some(Arc::new((500, SCRIPT_BODY.to_string()))));
    let p = Running::start(&file);
    rt.block_on(poll("the script body is the last error", || {
        let (_, doc) = blocking_get(p.admin, "/status");
        doc.contains("owned")
    }));
    let (code, page) = blocking_get(p.admin, "/");
    assert_eq!(code, 200, "{page}");
    assert!(!page.contains("<script"), "{page}");
    assert!(
        page.contains(
            "HTTP 500: &lt;script&gt;document.title=&#39;owned&#39;&lt;/script&gt;[-]etcd failed"
        ),
        "{page}"
    );
}

/// Whether Chromium is installed. Without it the test says it is skipped, unless
/// `READYPRISM_REQUIRE_CHROMIUM=1` (set by `.ci/run`), which makes that a failure.
fn chromium_available() -> bool {
    let found = Command::new("chromium")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("READYPRISM_REQUIRE_CHROMIUM").as_deref() != Ok("1"),
            "chromium is not on PATH, and READYPRISM_REQUIRE_CHROMIUM=1 requires it"
        );
        eprintln!(
            "SKIPPED admin page browser test: chromium is not on PATH (Debian package `chromium`)"
        );
    }
    found
}

/// `chromium --headless` with a profile of its own in `profile`, then `args`, the page last.
fn chromium(profile: &Path, args: &[&str], url: &str) -> std::process::Output {
    Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .output()
        .expect("run chromium")
}

/// The target directory (where `cargo test` keeps its artefacts).
fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is target/tmp")
        .to_path_buf()
}

/// The text of a rendered DOM: tags dropped, entities of the page's own escaping decoded.
fn text_of(dom: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in dom.chars() {
        match c {
            '<' => {
                in_tag = true;
                out.push(' ');
            }
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

#[test]
fn a_real_browser_shows_every_backend_with_its_state() {
    if !chromium_available() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lab = Lab::new();
    let (local, remote) =
        rt.block_on(async { (lab.fake("local").await, lab.fake("remote").await) });
    remote
        .control
        .readyz_answer
        .store(Some(Arc::new((500, SCRIPT_BODY.to_string()))));
    let (ready, unready) = (addr(&local), addr(&remote));
    let file = lab.write(
        "browser.yaml",
        &lab.yaml(
            "dc-a",
            &[(ready.clone(), "dc-a"), (unready.clone(), "dc-b")],
            "",
        ),
    );
    let p = Running::start(Path::new(&file));
    rt.block_on(poll("one backend ready, the other unready", || {
        let (_, doc) = blocking_get(p.admin, "/status");
        doc.contains("\"state\":\"ready\"") && doc.contains("\"state\":\"unready\"")
    }));
    let url = format!("http://{}/", p.admin);
    let profile = tempfile::tempdir().expect("profile dir");
    let out = chromium(profile.path(), &["--dump-dom"], &url);
    assert!(out.status.success(), "{}", stderr(&out));
    let dom = String::from_utf8_lossy(&out.stdout).to_string();
    let text = text_of(&dom);
    let words: Vec<&str> = text.split_whitespace().collect();
    let text = words.join(" ");
    for (backend, state) in [(&ready, "ready"), (&unready, "unready")] {
        let at = words
            .iter()
            .position(|w| w == backend)
            .unwrap_or_else(|| panic!("{backend} not on the page: {text}"));
        assert_eq!(words.get(at + 1), Some(&state), "{backend}'s state: {text}");
    }
    assert!(text.contains("Zone: dc-a"), "{text}");
    assert!(text.contains("Mode: normal"), "{text}");
    assert!(text.contains("Last state transitions"), "{text}");
    // The script in the reason stayed text: the browser shows it, and it did not run.
    assert!(
        text.contains("<script>document.title='owned'</script>"),
        "{text}"
    );
    assert!(!dom.contains("<title>owned"), "{dom}");

    let shot = target_dir().join("admin-page.png");
    let _ = std::fs::remove_file(&shot);
    let out = chromium(
        profile.path(),
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1200,800",
        ],
        &url,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let png = std::fs::read(&shot).expect("the screenshot was written");
    assert!(png.starts_with(b"\x89PNG"), "a PNG at {}", shot.display());
    eprintln!("admin page screenshot: {}", shot.display());
}
