//! An audit log people can read, through the real binary: one record per proxied command
//! and per mount commit, each with the paths it changed; every step (a mount's file
//! operations, a command's checkpoint and ingest) only with `audit --detail`; a format-3
//! vault's mount records become steps when it is migrated.

mod common;

use std::fs;

use common::history::Env;
use common::skip::{require_fuse, require_sandbox};
use serde_json::{Value, json};

fn ops(records: &Value) -> Vec<(String, Vec<String>, bool)> {
    records
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let paths = r["paths"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().to_string())
                .collect();
            (
                r["operation"].as_str().unwrap().to_string(),
                paths,
                r["step"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn one_record_per_command_and_per_mount_commit_with_the_detail_on_request() {
    if !require_sandbox() || !require_fuse() {
        return;
    }
    let env = Env::new();
    env.create("a");
    let v = env.data(
        "a",
        &[
            "proxy",
            "exec",
            "--shell",
            "mkdir d && echo 1 > d/f1 && echo 2 > d/f2",
        ],
    );
    assert_eq!(v["exit_code"], 0, "{v}");
    let v = env.data(
        "a",
        &[
            "proxy",
            "exec",
            "--mode",
            "fuse",
            "--shell",
            "echo x > g; rm d/f1",
        ],
    );
    assert_eq!(v["exit_code"], 0, "{v}");
    let mnt = env.host("mnt");
    fs::create_dir_all(&mnt).unwrap();
    env.ok("a", &["mount", "a", mnt.to_str().unwrap()]);
    for i in 1..=20 {
        fs::write(mnt.join(format!("m{i:02}")), format!("{i}\n")).unwrap();
    }
    env.ok("a", &["unmount", mnt.to_str().unwrap()]);

    let summary = env.data("a", &["audit"]);
    let mounted: Vec<String> = (1..=20).map(|i| format!("/m{i:02}")).collect();
    assert_eq!(
        ops(&summary),
        vec![
            ("mount".to_string(), mounted, false),
            ("proxy.exec".into(), strings(&["/d/f1", "/g"]), false),
            (
                "proxy.exec".into(),
                strings(&["/d", "/d/f1", "/d/f2"]),
                false
            ),
        ],
        "{summary:#}"
    );
    let mount = &summary[0];
    let detail: Value = serde_json::from_str(mount["detail"].as_str().unwrap()).unwrap();
    assert_eq!(detail["changes"], 20, "{detail}");
    let exec: Value = serde_json::from_str(summary[1]["detail"].as_str().unwrap()).unwrap();
    assert_eq!(exec["changes"], 2);
    assert_eq!(exec["exec_id"], v["exec_id"]);
    assert_eq!(summary[1]["result"], "exit 0");

    // --detail has every step, marked as one.
    let all = env.data("a", &["audit", "--detail", "--limit", "1000"]);
    let all = ops(&all);
    let steps: Vec<&(String, Vec<String>, bool)> = all.iter().filter(|o| o.2).collect();
    assert!(
        steps
            .iter()
            .any(|o| o.0 == "mount.create" && o.1 == ["/m01"]),
        "{all:?}"
    );
    assert!(
        steps
            .iter()
            .any(|o| o.0 == "mount.unlink" && o.1 == ["/d/f1"]),
        "{all:?}"
    );
    assert!(steps.iter().any(|o| o.0 == "checkpoint.save"), "{all:?}");
    assert_eq!(all.iter().filter(|o| !o.2).count(), 3, "{all:?}");
    assert!(all.len() > 40, "{all:?}");
    // --limit counts what is shown.
    assert_eq!(
        env.data("a", &["audit", "--limit", "1"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn a_format_3_vault_keeps_its_records_and_its_mount_operations_become_steps() {
    if !common::skip::only_engine("sqlite") {
        return;
    }
    let env = Env::new();
    env.create("old");
    env.write("old", "a.txt", b"a\n");
    let path = env.data("old", &["vault", "info"])["path"]
        .as_str()
        .unwrap()
        .to_string();
    // Back to format 3, with a record as a version-3 mount wrote it.
    common::history::downgrade_to_format_3(
        &path,
        "INSERT INTO audit(at, actor, source, workspace, operation, paths, result, detail)
             VALUES (1, 'me', 'mount', 'main', 'mount.write', '[\"/a.txt\"]', 'ok', NULL);",
    );
    let summary = env.data("old", &["audit"]);
    assert!(
        ops(&summary).iter().all(|o| o.0 != "mount.write"),
        "{summary:#}"
    );
    let all = env.data("old", &["audit", "--detail"]);
    let write = all
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["operation"] == "mount.write")
        .unwrap();
    assert_eq!(write["step"], json!(true));
    assert_eq!(write["paths"], json!(["/a.txt"]));
    // The log is still append-only after the migration.
    let db = rusqlite::Connection::open(&path).unwrap();
    let err = db
        .execute("UPDATE audit SET result = 'forged'", [])
        .unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");
}
