//! Build script: the commit the binary is built from, for `readyprism_build_info{commit}` and the
//! `readyprism started` line. `git rev-parse --short=12 HEAD` when git and a repository are there
//! (CI builds from a clone); `unknown` otherwise (a source tarball, no git): never a failure.

use std::process::Command;

fn main() {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=READYPRISM_COMMIT={commit}");
    // Built again when HEAD moves: HEAD itself (a checkout) and the ref it points at (a commit).
    for path in [
        git(&["rev-parse", "--git-path", "HEAD"]),
        git(&["rev-parse", "--symbolic-full-name", "HEAD"])
            .and_then(|r| git(&["rev-parse", "--git-path", &r])),
    ]
    .into_iter()
    .flatten()
    {
        println!("cargo:rerun-if-changed={path}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
