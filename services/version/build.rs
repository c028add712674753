//! Finds the commit the binaries are built from: `TALLY_GIT_SHA` when set
//! (the image build and `.ci/release` set it), else, in a release build
//! of a git checkout, `git rev-parse HEAD`; otherwise `unknown`. Debug
//! builds do not ask git, so a commit does not rebuild every binary during
//! development.

use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=TALLY_GIT_SHA");
    let given = std::env::var("TALLY_GIT_SHA")
        .ok()
        .filter(|s| !s.is_empty() && s != "unknown");
    let release = std::env::var("PROFILE").as_deref() == Ok("release");
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let dir = Path::new(&dir);
    let sha = given.or_else(|| {
        if !release {
            return None;
        }
        let sha = git(dir, &["rev-parse", "HEAD"])?;
        // Built again when HEAD moves: a commit, a checkout.
        for path in ["HEAD", "packed-refs"] {
            if let Some(p) = git(
                dir,
                &["rev-parse", "--path-format=absolute", "--git-path", path],
            ) {
                println!("cargo:rerun-if-changed={p}");
            }
        }
        if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"])
            && let Some(p) = git(
                dir,
                &["rev-parse", "--path-format=absolute", "--git-path", &branch],
            )
        {
            println!("cargo:rerun-if-changed={p}");
        }
        Some(sha)
    });
    println!(
        "cargo:rustc-env=TALLY_COMMIT={}",
        sha.as_deref().unwrap_or("unknown")
    );
}
