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

/// Issue 49's bad-input list, each refused with a message that names the fix, before any
/// cluster is asked (the cluster here is a closed port: a message about it would mean the
/// input was not checked first), except the last, which is the unreachable cluster itself.
#[test]
fn bad_input_to_task_post_is_named_with_its_fix_before_the_cluster_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let kp = dir.path().join("id.json");
    let key = solana_keypair::Keypair::new().to_bytes().to_vec();
    std::fs::write(&kp, format!("{key:?}")).unwrap();
    let texts = dir.path().join("texts.txt");
    std::fs::write(&texts, b"one\ntwo\nth\xffree\n").unwrap();
    let digits = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../models/digits-mlp.safetensors"
    );
    let minilm = compute_market_keeper::compute::encoder::minilm_path();
    let post = |extra: &[&str]| {
        let mut args = vec![
            "-u",
            "http://127.0.0.1:1",
            "-k",
            kp.to_str().unwrap(),
            "task",
            "post",
        ];
        args.extend_from_slice(extra);
        keeper(&args)
    };
    let gen = ["--kind", "matmul", "--dims", "64,64,64"];
    let with = |a: &[&'static str], b: &[&'static str]| -> Vec<&'static str> {
        a.iter().chain(b).copied().collect()
    };
    let mut cases: Vec<(Vec<&str>, &str)> = vec![
        (
            with(&gen, &["--reward", "-5"]),
            "--reward: the amount \"-5\" is negative: give a number of tokens",
        ),
        (
            with(&gen, &["--reward", "five"]),
            "the amount \"five\" is not a number of tokens (digits, at most one '.', e.g. 1000 or 0.5)",
        ),
        (
            with(&gen, &["--base-units", "--reward", "0.5"]),
            "--base-units takes digits only",
        ),
        (
            vec!["--kind", "matmul", "--dims", "64,64,100000", "--reward", "1"],
            "--dims: n = 100000 is out of range for --kind matmul: 1 to 8192",
        ),
        (
            with(&gen, &["--reward", "1", "--rows-per-tile", "65"]),
            "65 is not in 1..=64",
        ),
        (
            vec!["--model", digits, "--texts", texts.to_str().unwrap(), "--reward", "1"],
            "this is an Mlp model (a classifier over rows): post it with --batch ROWS.safetensors, not an Encoder model",
        ),
    ];
    let batch = dir.path().join("rows.safetensors");
    std::fs::write(&batch, b"not read: the model is checked first").unwrap();
    let minilm_s = minilm.to_string_lossy().to_string();
    if minilm.exists() {
        cases.push((
            vec!["--model", minilm_s.as_str(), "--batch", batch.to_str().unwrap(), "--reward", "1"],
            "this is an Encoder model (MiniLM: embeddings of texts): post it with --texts FILE, not an Mlp model",
        ));
        cases.push((
            vec!["--model", minilm_s.as_str(), "--texts", texts.to_str().unwrap(), "--reward", "1"],
            "text 3 is not UTF-8 (byte 3 of its line): save the file as UTF-8 text, one text a line",
        ));
    }
    for (args, says) in &cases {
        let (ok, text) = post(args);
        assert!(!ok, "{args:?} was accepted: {text}");
        assert!(text.contains(says), "{args:?}: {text}");
        assert!(
            !text.contains("cannot reach the cluster"),
            "{args:?} asked the cluster before checking its input: {text}"
        );
    }
    // well-formed input: the cluster is named as unreachable, with what to start, once
    let (ok, text) = post(&with(&gen, &["--reward", "1"]));
    assert!(!ok);
    assert!(
        text.contains("cannot reach the cluster at http://127.0.0.1:1")
            && text.contains("is a validator running there?"),
        "{text}"
    );
    assert_eq!(text.matches("cannot reach").count(), 1, "said once: {text}");
    assert!(!text.contains("AccountNotFound"), "{text}");
}

/// `--quorum`'s help names one default, not two.
#[test]
fn the_quorum_flag_has_one_default_in_its_help() {
    let (ok, text) = keeper(&["task", "post", "--help"]);
    assert!(ok, "{text}");
    let quorum = text
        .split("--quorum")
        .nth(1)
        .and_then(|t| t.split("\n      --").next())
        .unwrap_or_default();
    assert_eq!(quorum.matches("default").count(), 1, "{quorum}");
}
