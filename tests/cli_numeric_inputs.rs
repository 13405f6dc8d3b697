//! Extreme numbers fed to every numeric option of every command, through the real binary:
//! 0, -1, u64::MAX, i64::MAX+1, 1e30 and "1000y". Each is either accepted with its plain
//! meaning or refused with a typed error (one JSON document under `--json`); nothing panics,
//! nothing wraps, and a refused value changes nothing.

mod common;

use common::TestEnv;
use serde_json::Value;

const EXTREMES: [&str; 8] = [
    "0",
    "-1",
    "18446744073709551615",
    "9223372036854775808",
    "1e30",
    "1000y",
    "18446744073709551615s",
    "1000000000d",
];

/// Every numeric option, as (argv before the value, argv after it). The value goes between.
fn numeric_options() -> Vec<(Vec<&'static str>, Vec<&'static str>)> {
    vec![
        (vec!["quota", "set", "--max-size-mb"], vec![]),
        (vec!["quota", "set", "--max-files"], vec![]),
        (vec!["quota", "set", "--max-file-size-mb"], vec![]),
        (vec!["audit", "--limit"], vec![]),
        (vec!["audit", "--since"], vec![]),
        (vec!["op", "log", "--limit"], vec![]),
        (vec!["op", "restore"], vec![]),
        (vec!["prune", "--keep-last"], vec![]),
        (vec!["prune", "--older-than"], vec![]),
        (vec!["proxy", "exec", "--timeout"], vec!["--", "true"]),
        (vec!["proxy", "exec", "--max-output"], vec!["--", "true"]),
        (vec!["rollback"], vec![]),
        (vec!["tree", "-L"], vec![]),
        (vec!["find", "/", "--size"], vec![]),
        (vec!["chmod"], vec!["/keep.txt"]),
        (vec!["mkdir", "--mode"], vec!["/newdir"]),
        (vec!["write", "--mode"], vec!["/new.txt", "x"]),
        (vec!["policy", "test", "--examples"], vec![]),
    ]
}

#[test]
fn every_numeric_option_takes_extremes_without_panic_or_wrap() {
    let env = TestEnv::with_vault("v");
    env.write(None, "/keep.txt", b"precious");
    env.data(&["checkpoint", "save", "keep"]);
    let before_cps = env.checkpoint_names(None);
    let mut seen = 0;
    for (head, tail) in numeric_options() {
        for value in EXTREMES {
            let mut args = vec!["--json"];
            args.extend(&head);
            args.push(value);
            args.extend(&tail);
            let out = env.std_cmd().args(&args).output().expect("run avfs");
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let code = out.status.code();
            assert_ne!(code, Some(101), "{args:?} panicked: {stderr}");
            assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
            let lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
            assert_eq!(
                lines.len(),
                1,
                "{args:?} must print one JSON document: {stdout}"
            );
            let doc: Value = serde_json::from_str(lines[0]).expect("stdout is JSON");
            if doc["ok"] == Value::Bool(false) {
                let kind = doc["error"]["kind"].as_str().unwrap_or("");
                assert!(!kind.is_empty(), "{args:?}: untyped error {doc}");
                assert_ne!(kind, "storage_error", "{args:?}: {doc}");
                assert_ne!(
                    doc["command"],
                    Value::String(String::new()),
                    "{args:?}: error names no command: {doc}"
                );
            }
            seen += 1;
        }
        // Whatever was accepted or refused, the data and its history are still there:
        // no value meant "everything" by wrapping around.
        assert_eq!(env.cat(None, "/keep.txt"), b"precious", "after {head:?}");
        let cps = env.checkpoint_names(None);
        if head[0] == "prune" {
            // `--keep-last 0` and `--older-than 0` (older than now) mean what they say;
            // the huge ages are checked on their own below. Save the checkpoint again.
            if !cps.contains(&"keep".to_string()) {
                env.data(&["checkpoint", "save", "keep"]);
            }
        } else {
            assert_eq!(cps, before_cps, "checkpoints changed by {head:?}");
        }
    }
    assert_eq!(seen, numeric_options().len() * EXTREMES.len());
}

#[test]
fn modes_are_octal_digits_only() {
    let env = TestEnv::with_vault("v");
    env.write(None, "/f", b"x");
    for bad in ["+5", "-5", "8", "0o", "", "77777", "7 55"] {
        let out = env
            .std_cmd()
            .args(["--json", "chmod", bad, "/f"])
            .output()
            .unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["ok"], false, "chmod {bad:?}: {doc}");
    }
    env.data(&["chmod", "0o750", "/f"]);
    assert_eq!(env.data(&["stat", "/f"])["mode"], 0o750);
}

#[test]
fn prune_older_than_a_huge_age_keeps_everything() {
    let env = TestEnv::with_vault("v");
    env.write(None, "/a.txt", b"a");
    env.data(&["checkpoint", "save", "fresh"]);
    let ops_before = env.data(&["op", "log"]).as_array().unwrap().len();
    for age in ["1000y", "1000000000d", "18446744073709551615s"] {
        let out = env.data(&["prune", "--older-than", age]);
        assert_eq!(
            out["pruned"]["checkpoints_removed"],
            serde_json::json!([]),
            "{age}"
        );
        assert_eq!(out["pruned"]["operations_removed"], 0, "{age}");
    }
    assert_eq!(env.checkpoint_names(None), vec!["fresh".to_string()]);
    assert_eq!(
        env.data(&["op", "log"]).as_array().unwrap().len(),
        ops_before
    );
}

#[test]
fn audit_since_a_huge_age_returns_everything() {
    let env = TestEnv::with_vault("v");
    env.write(None, "/a.txt", b"a");
    let all = env.data(&["audit", "--limit", "1000"]);
    let since = env.data(&[
        "audit",
        "--limit",
        "1000",
        "--since",
        "18446744073709551615s",
    ]);
    assert!(!all.as_array().unwrap().is_empty());
    assert_eq!(
        since, all,
        "an age past the epoch means since the beginning"
    );
}

#[test]
fn quota_sizes_that_would_wrap_are_refused_and_change_nothing() {
    let env = TestEnv::with_vault("v");
    env.data(&["quota", "set", "--max-size-mb", "10"]);
    for v in ["17592186044416", "17592186044417", "18446744073709551615"] {
        let e = env.err(&["quota", "set", "--max-size-mb", v], "invalid_argument");
        assert_eq!(e["details"]["option"], "--max-size-mb", "{e}");
        assert!(
            e["details"]["limit"]
                .as_str()
                .unwrap()
                .contains("8796093022207")
        );
    }
    assert_eq!(env.data(&["quota", "show"])["max_size_mb"], 10);
    // The largest accepted value is no limit in practice, not a 0-byte one.
    env.data(&["quota", "set", "--max-size-mb", "8796093022207"]);
    env.write(None, "/big.txt", &[7u8; 4096]);
}

#[test]
fn a_timeout_past_the_limit_is_refused_before_anything_runs() {
    let env = TestEnv::with_vault("v");
    let ops_before = env.data(&["op", "log"]).as_array().unwrap().len();
    for t in ["18446744073709551615s", "1000y", "0s"] {
        let e = env.err(
            &["proxy", "exec", "--timeout", t, "--", "touch", "ran"],
            "invalid_argument",
        );
        assert_eq!(e["details"]["option"], "--timeout", "{e}");
    }
    assert_eq!(
        env.data(&["op", "log"]).as_array().unwrap().len(),
        ops_before
    );
    assert!(env.files(None).is_empty(), "nothing ran");
}
