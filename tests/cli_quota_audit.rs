//! Quotas and the audit log through the real binary: every quota exceeded via `write` and
//! via `import`, with the documented error details and nothing written; audit records with
//! their actor, `--limit` and `--since`.

mod common;

use std::fs;

use common::TestEnv;
use predicates::prelude::*;
use serde_json::{Value, json};

const MIB: u64 = 1024 * 1024;

fn quota(env: &TestEnv) -> Value {
    env.data(&["quota", "show"])
}

fn assert_quota_error(e: &Value, name: &str, limit: u64, attempted: u64) {
    assert_eq!(
        e["details"],
        json!({"quota": name, "limit": limit, "attempted": attempted}),
        "{e:#}"
    );
}

#[test]
fn quota_show_and_set() {
    let env = TestEnv::with_vault("v");
    let none = json!({"max_size_mb": null, "max_files": null, "max_file_size_mb": null});
    assert_eq!(quota(&env), none);
    let q = env.data(&["quota", "set", "--max-size-mb", "10", "--max-files", "100"]);
    assert_eq!(
        q,
        json!({"max_size_mb": 10, "max_files": 100, "max_file_size_mb": null})
    );
    // Setting one limit keeps the others.
    env.data(&["quota", "set", "--max-file-size-mb", "2"]);
    assert_eq!(
        quota(&env),
        json!({"max_size_mb": 10, "max_files": 100, "max_file_size_mb": 2})
    );
    env.avfs(&["quota", "show"])
        .success()
        .stdout(predicate::str::contains("max_files         100"));
    env.data(&["quota", "set", "--max-files", "none"]);
    assert_eq!(quota(&env)["max_files"], json!(null));
    env.err(&["quota", "set", "--max-files", "many"], "invalid_argument");
    env.err(
        &["quota", "set", "--max-size-mb", "1.5"],
        "invalid_argument",
    );
    assert_eq!(
        quota(&env),
        json!({"max_size_mb": 10, "max_files": null, "max_file_size_mb": 2})
    );
    // Quotas are visible in vault info and shared by the vault's forks.
    assert_eq!(env.data(&["vault", "info"])["quota"], quota(&env));
    env.data(&["vault", "fork", "v", "f"]);
    assert_eq!(
        env.data(&["--workspace", "f", "quota", "show"]),
        quota(&env)
    );
    env.data(&[
        "quota",
        "set",
        "--max-size-mb",
        "none",
        "--max-file-size-mb",
        "none",
    ]);
    assert_eq!(quota(&env), none);
}

#[test]
fn max_file_size_via_write() {
    let env = TestEnv::with_vault("v");
    env.write(None, "small", b"ok");
    env.data(&["quota", "set", "--max-file-size-mb", "1"]);
    let before = env.files(None);
    let big = vec![1u8; MIB as usize + 1];
    let e = env.err_in(&["write", "big"], &big, "quota_exceeded");
    assert_quota_error(&e, "max_file_size_mb", MIB, MIB + 1);
    // Growing an existing file past the limit by appending is refused the same way.
    env.data_in(&["write", "grow"], &vec![2u8; MIB as usize - 10]);
    let mid = env.state(None);
    let e = env.err_in(&["write", "-a", "grow"], &[3u8; 11], "quota_exceeded");
    assert_quota_error(&e, "max_file_size_mb", MIB, MIB + 1);
    assert_eq!(env.state(None), mid);
    env.avfs_in(&["write", "big"], &big)
        .code(6)
        .stderr(predicate::str::contains("max_file_size_mb"));
    // Exactly at the limit is allowed.
    env.data_in(&["write", "exact"], &vec![4u8; MIB as usize]);
    env.data(&["rm", "exact", "grow"]);
    assert_eq!(env.files(None), before);
}

#[test]
fn max_files_via_write() {
    let env = TestEnv::with_vault("v");
    env.data(&["quota", "set", "--max-files", "3"]);
    for f in ["a", "b", "c"] {
        env.write(None, f, f.as_bytes());
    }
    let before = env.state(None);
    let e = env.err(&["write", "d", "x"], "quota_exceeded");
    assert_quota_error(&e, "max_files", 3, 4);
    env.err(&["cp", "a", "e"], "quota_exceeded");
    assert_eq!(env.state(None), before);
    // Replacing an existing file does not count as a new one; a freed slot can be reused.
    env.write(None, "a", b"rewritten");
    env.data(&["rm", "b"]);
    env.write(None, "d", b"d");
    assert_eq!(env.stats(None)["live_files"], 3);
    // Directories and symlinks are not files.
    env.data(&["mkdir", "dir"]);
    env.data(&["ln", "-s", "a", "link"]);
    // Copying a directory tree is counted as a whole.
    env.data(&["quota", "set", "--max-files", "5"]);
    env.data(&["mv", "d", "dir/d"]);
    env.write(None, "dir/e", b"e");
    let before = env.state(None);
    let e = env.err(&["cp", "-r", "dir", "dir2"], "quota_exceeded");
    assert_quota_error(&e, "max_files", 5, 6);
    assert_eq!(env.state(None), before);
}

#[test]
fn max_size_via_write() {
    let env = TestEnv::with_vault("v");
    env.data(&["quota", "set", "--max-size-mb", "1"]);
    let half = vec![9u8; 600 * 1024];
    env.data_in(&["write", "first"], &half);
    let before = env.state(None);
    let e = env.err_in(&["write", "second"], &half, "quota_exceeded");
    assert_quota_error(&e, "max_size_mb", MIB, 2 * 600 * 1024);
    assert_eq!(env.state(None), before);
    // Shrinking is always allowed, and then the write fits.
    env.data(&["write", "first", "tiny"]);
    env.data_in(&["write", "second"], &half);
    assert_eq!(env.stats(None)["logical_bytes"], 600 * 1024 + 4);
}

fn host_dir(env: &TestEnv, name: &str, files: &[(&str, usize)]) -> String {
    let dir = env.host(name);
    for (i, (p, len)) in files.iter().enumerate() {
        let path = dir.join(p);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, common::random_bytes(i as u64 + 100, *len)).unwrap();
    }
    dir.to_str().unwrap().to_string()
}

#[test]
fn quotas_via_import_write_nothing() {
    let env = TestEnv::with_vault("v");
    env.write(None, "existing.txt", b"here before");

    // max_files: 4 files into a workspace allowed 3 (1 already there).
    env.data(&["quota", "set", "--max-files", "3"]);
    let many = host_dir(
        &env,
        "many",
        &[("a", 10), ("b", 10), ("sub/c", 10), ("sub/d", 10)],
    );
    let before = env.state(None);
    let e = env.err(&["import", &many], "quota_exceeded");
    assert_eq!(e["details"]["quota"], "max_files");
    assert_eq!(e["details"]["limit"], 3);
    assert_eq!(e["details"]["attempted"], 4);
    env.avfs(&["import", &many]).code(6);
    assert_eq!(
        env.state(None),
        before,
        "a failed import left entries behind"
    );
    env.data(&["quota", "set", "--max-files", "none"]);

    // max_file_size_mb: one file over the limit among small ones.
    env.data(&["quota", "set", "--max-file-size-mb", "1"]);
    let one_big = host_dir(
        &env,
        "one-big",
        &[
            ("a-small", 100),
            ("m-big", MIB as usize + 5),
            ("z-small", 100),
        ],
    );
    let e = env.err(&["import", &one_big], "quota_exceeded");
    assert_quota_error(&e, "max_file_size_mb", MIB, MIB + 5);
    assert_eq!(env.state(None), before);
    env.data(&["quota", "set", "--max-file-size-mb", "none"]);

    // max_size_mb: the files fit one by one but not together.
    env.data(&["quota", "set", "--max-size-mb", "1"]);
    let total = host_dir(
        &env,
        "total",
        &[("p1", 400 * 1024), ("p2", 400 * 1024), ("p3", 400 * 1024)],
    );
    let e = env.err(&["import", &total], "quota_exceeded");
    assert_eq!(e["details"]["quota"], "max_size_mb");
    assert_eq!(e["details"]["limit"], MIB);
    assert!(e["details"]["attempted"].as_u64().unwrap() > MIB);
    assert_eq!(env.state(None), before);
    // Even into a subdirectory the refused import leaves nothing it imported.
    env.err(&["import", &total, "/imported"], "quota_exceeded");
    let files: Vec<String> = env.files(None).keys().cloned().collect();
    assert_eq!(files, vec!["/existing.txt"]);

    // With room, the same import succeeds.
    env.data(&["quota", "set", "--max-size-mb", "2"]);
    env.data(&["import", &total, "/fits"]);
    assert_eq!(env.stats(None)["live_files"], 4);
}

#[test]
fn audit_records_actor_limit_and_since() {
    let env = TestEnv::with_vault("v");
    env.data_env(&["write", "by-alice", "a"], &[("AVFS_ACTOR", "alice")]);
    env.data_env(&["mkdir", "by-bob"], &[("AVFS_ACTOR", "bob")]);
    env.err_env(
        &["rm", "nope"],
        &[("AVFS_ACTOR", "mallory")],
        "path_not_found",
    );
    env.data(&["checkpoint", "save", "cp"]);

    let all = env.audit(None, 50);
    let ops: Vec<(String, String, String)> = all
        .iter()
        .map(|r| {
            (
                r["actor"].as_str().unwrap().to_string(),
                r["operation"].as_str().unwrap().to_string(),
                r["result"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    // Newest first.
    assert_eq!(
        ops,
        vec![
            ("test-agent".into(), "checkpoint.save".into(), "ok".into()),
            ("mallory".into(), "rm".into(), "path_not_found".into()),
            ("bob".into(), "mkdir".into(), "ok".into()),
            ("alice".into(), "write".into(), "ok".into()),
        ]
    );
    assert!(
        all.iter()
            .all(|r| r["source"] == "cli" && r["workspace"] == "main")
    );
    assert_eq!(all[3]["paths"], json!(["/by-alice"]));
    assert!(all[1]["detail"].as_str().unwrap().contains("/nope"));
    let ids: Vec<i64> = all.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "{ids:?}");

    let two = env.data(&["audit", "--limit", "2"]);
    assert_eq!(two.as_array().unwrap().len(), 2);
    assert_eq!(two[0], all[0]);
    assert_eq!(two[1], all[1]);

    assert_eq!(env.data(&["audit", "--since", "1h"]), json!(all));
    assert_eq!(
        env.data(&["audit", "--since", "1h", "--limit", "1"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        env.data(&["audit", "--since", "2100-01-01T00:00:00Z"]),
        json!([])
    );
    assert_eq!(
        env.data(&["audit", "--since", "2000-01-01T00:00:00Z"]),
        json!(all)
    );
    // Before 1970, and before the earliest time nanoseconds reach (1677): everything.
    for old in [
        "1969-12-31T23:59:59Z",
        "1066-10-14T09:00:00Z",
        "0001-01-01T00:00:00Z",
    ] {
        assert_eq!(env.data(&["audit", "--since", old]), json!(all), "{old}");
    }
    env.err(&["audit", "--since", "yesterday-ish"], "invalid_argument");
    env.avfs(&["audit"])
        .success()
        .stdout(predicate::str::contains("alice/cli").and(predicate::str::contains("mallory")));

    // Forks are audited under their own name, in the same vault log.
    env.data(&["vault", "fork", "v", "f"]);
    env.data_env(
        &["--workspace", "f", "write", "x", "y"],
        &[("AVFS_ACTOR", "carol")],
    );
    let latest = &env.audit(None, 1)[0];
    assert_eq!(latest["workspace"], "f");
    assert_eq!(latest["actor"], "carol");
}
