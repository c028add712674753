//! Secrets stay out of `--help` and out of startup errors (issue 17,
//! item 6), checked on the real binary.

use std::process::Command;

const PASSWORD: &str = "hunter2-db-password";

fn server() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tally-server"))
}

#[test]
fn help_does_not_print_secret_environment_values() {
    // Invariant: with secrets in the environment, `tally-server --help`
    // names their variables but prints none of their values.
    let out = server()
        .arg("--help")
        .env(
            "DATABASE_URL",
            format!("postgres://tally:{PASSWORD}@db/tally"),
        )
        .env(
            "TALLY_TOKENS",
            r#"{"tokens": [], "note": "hunter2-tokens"}"#,
        )
        .env(
            "TALLY_ALERT_SECRET",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        )
        .env(
            "TALLY_WEBHOOK_SECRETS",
            "whsec_BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=",
        )
        .output()
        .expect("tally-server runs");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("DATABASE_URL"), "{help}");
    for secret in [PASSWORD, "hunter2-tokens", "MfKQ9r8G", "BwcHBwcH"] {
        assert!(!help.contains(secret), "--help shows {secret}: {help}");
    }
}

#[test]
fn a_database_error_redacts_both_password_forms() {
    // Invariant: when the database cannot be reached, the error names the
    // server but shows neither a `user:pass@` password nor a `?password=`.
    for url in [
        format!("postgres://tally:{PASSWORD}@127.0.0.1:1/tally?connect_timeout=2"),
        format!("postgres://tally@127.0.0.1:1/tally?sslmode=disable&password={PASSWORD}"),
    ] {
        let out = server()
            .args(["migrate", "--database-url", &url])
            .env("TALLY_LOG", "info")
            .output()
            .expect("tally-server runs");
        assert!(!out.status.success());
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("could not connect to"), "{text}");
        assert!(text.contains("127.0.0.1:1/tally"), "{text}");
        assert!(!text.contains(PASSWORD), "{text}");
    }
}
