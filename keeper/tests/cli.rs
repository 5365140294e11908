//! The command line names the problem in bad input, without a cluster: a malformed address, an
//! unreachable cluster (said once, without log noise).

use std::process::Command;

fn keeper(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_keeper"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run keeper");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn a_malformed_address_is_named() {
    let (ok, text) = keeper(&["-u", "http://127.0.0.1:1", "task", "status", "NotAKey"]);
    assert!(!ok);
    assert!(
        text.contains("\"NotAKey\" is not a base58 address"),
        "{text}"
    );
    assert!(!text.contains("wrong size"), "{text}");
}

#[test]
fn an_unreachable_cluster_is_said_once() {
    let dir = tempfile::tempdir().unwrap();
    let kp = dir.path().join("id.json");
    std::fs::write(&kp, format!("{:?}", [7u8; 64].to_vec())).unwrap();
    let (ok, text) = keeper(&[
        "-u",
        "http://127.0.0.1:1",
        "-k",
        kp.to_str().unwrap(),
        "task",
        "list",
    ]);
    assert!(!ok);
    assert!(
        text.contains("cannot reach the cluster at http://127.0.0.1:1"),
        "{text}"
    );
    assert_eq!(text.matches("cannot reach").count(), 1, "said once: {text}");
    assert!(
        !text.contains("WARN") && !text.contains('\u{1b}'),
        "no log noise: {text}"
    );
}
