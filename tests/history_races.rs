//! History never loses acknowledged work, through the real binary: undo racing concurrent
//! writers, undo and rollback of an operation that is no longer the newest, a mount's
//! batch of changes interleaved with the CLI's, a mount daemon killed with -9, and an
//! import stopped part-way.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::TestEnv;
use common::mount::{avfs_in, ok, require_fuse};
use serde_json::Value;

fn json(out: std::process::Output) -> Value {
    common::one_document(&out)
}

fn file_names(env: &TestEnv) -> BTreeSet<String> {
    env.files(None).into_keys().collect()
}

#[test]
fn undo_racing_writers_undoes_exactly_one_change_each() {
    const WRITERS: usize = 3;
    const EACH: usize = 40;
    let env = TestEnv::with_vault("race");
    let written = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let written = written.clone();
            let (home, work) = (env.home.clone(), env.work.clone());
            std::thread::spawn(move || {
                for i in 0..EACH {
                    let out = Command::new(common::BIN)
                        .env("AVFS_HOME", &home)
                        .env_remove("AVFS_WORKSPACE")
                        .env_remove("AVFS_VAULT")
                        .current_dir(&work)
                        .args(["--json", "write", &format!("/w{w}-{i}.txt"), "x"])
                        .output()
                        .unwrap();
                    assert!(out.status.success(), "{:?}", json(out));
                    written.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    let mut undone = Vec::new();
    for k in 0..6 {
        // Spread the undos over the writers' run.
        while written.load(Ordering::SeqCst) < (k + 1) * WRITERS * EACH / 8 {
            std::thread::yield_now();
        }
        let doc = json(env.std_cmd().args(["--json", "undo"]).output().unwrap());
        assert_eq!(doc["ok"], true, "{doc}");
        assert!(
            doc["data"]["description"]
                .as_str()
                .unwrap()
                .ends_with(" write"),
            "{doc}"
        );
        undone.push(doc["data"]["target"].as_i64().unwrap());
    }
    for w in writers {
        w.join().unwrap();
    }
    let names = file_names(&env);
    assert_eq!(
        names.len(),
        WRITERS * EACH - undone.len(),
        "each undo takes back exactly one write, and no writer's work is lost"
    );
    // The ops undone are distinct writes, and exactly their files are gone.
    let ops = env.data(&["op", "log", "--limit", "1000"]);
    let mut missing = BTreeSet::new();
    for op in ops.as_array().unwrap() {
        if undone.contains(&op["id"].as_i64().unwrap()) {
            assert_eq!(op["kind"], "write");
            assert_eq!(op["undone"], true);
            missing.insert(op["description"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(missing.len(), undone.len(), "{undone:?}");
    for m in &missing {
        assert!(!names.contains(m), "{m} was undone but is still there");
    }
    env.data(&["vault", "check"]);
}

#[test]
fn an_import_stopped_part_way_changes_nothing() {
    let env = TestEnv::with_vault("imp");
    env.write(None, "/before.txt", b"kept");
    let host = env.dir.path().join("tree");
    fs::create_dir_all(&host).unwrap();
    // More files than one import batch, and a quota the second batch crosses.
    for i in 0..5000 {
        fs::write(host.join(format!("f{i:05}")), b"x").unwrap();
    }
    env.data(&["quota", "set", "--max-files", "4500"]);
    let before = env
        .data(&["op", "log", "--limit", "1000"])
        .as_array()
        .unwrap()
        .len();
    env.err(
        &["import", host.to_str().unwrap(), "/imported"],
        "quota_exceeded",
    );
    assert_eq!(
        file_names(&env),
        BTreeSet::from(["/before.txt".to_string()])
    );
    let log = env.data(&["op", "log", "--limit", "1000"]);
    let log = log.as_array().unwrap();
    // The part that got in is in history, and reverted by an entry of its own.
    assert_eq!(log.len(), before + 2, "{log:#?}");
    assert_eq!(log[0]["kind"], "rollback");
    assert_eq!(log[1]["kind"], "import");
    assert_eq!(log[0]["target"], log[1]["id"]);
    env.data(&["vault", "check"]);
}

/// A change made by another writer while an import runs stays when the import fails, and
/// every part of the import goes (the other writer's logged change split it in two).
#[test]
fn a_failed_import_takes_back_only_its_own_parts() {
    let env = TestEnv::with_vault("imp2");
    let host = env.dir.path().join("tree");
    fs::create_dir_all(&host).unwrap();
    for i in 0..20000 {
        fs::write(host.join(format!("f{i:05}")), b"x").unwrap();
    }
    // Sorted last, and over the per-file limit: the import fails at its very end.
    fs::write(host.join("zz-big"), vec![1u8; 2 << 20]).unwrap();
    env.data(&["quota", "set", "--max-file-size-mb", "1"]);
    let mut import = env
        .std_cmd()
        .args(["--json", "import", host.to_str().unwrap(), "/imported"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once some of it is in, another writer logs a change.
    loop {
        let out = env
            .std_cmd()
            .args(["--json", "ls", "/imported"])
            .output()
            .unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        if doc["ok"] == true && !doc["data"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(
            import.try_wait().unwrap().is_none(),
            "the import ended too soon"
        );
    }
    env.data(&["write", "/other.txt", "mine"]);
    let out = import.wait_with_output().unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["kind"], "quota_exceeded", "{doc}");
    assert_eq!(file_names(&env), BTreeSet::from(["/other.txt".to_string()]));
    assert_eq!(env.cat(None, "/other.txt"), b"mine");
    env.data(&["vault", "check"]);
}

/// A vault with the FUSE mount at `<home>/mnt`; returns (home, mount dir).
fn mounted(vault: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    assert!(require_fuse(), "FUSE is required for this test");
    let home = tempfile::tempdir().unwrap();
    ok(avfs_in(home.path(), &["vault", "create", vault]));
    let dir = home.path().join("mnt");
    fs::create_dir(&dir).unwrap();
    ok(avfs_in(
        home.path(),
        &["mount", vault, dir.to_str().unwrap()],
    ));
    (home, dir)
}

fn daemon_pid(home: &std::path::Path) -> u32 {
    let v = json(avfs_in(home, &["--json", "mounts"]));
    v["data"][0]["pid"].as_u64().unwrap() as u32
}

fn live_files(home: &std::path::Path) -> BTreeSet<String> {
    let v = json(avfs_in(home, &["--json", "find", "*", "--type", "f"]));
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect()
}

/// `avfs undo`, which must take back a mount's entry.
fn undo_a_mount(home: &std::path::Path) {
    let undo = json(avfs_in(home, &["--json", "undo"]));
    assert_eq!(undo["ok"], true, "{undo}");
    let description = undo["data"]["description"].as_str().unwrap();
    assert!(description.ends_with(" mount"), "{undo}");
}

#[test]
fn undoing_a_mount_session_keeps_what_the_cli_wrote_meanwhile() {
    if !require_fuse() {
        return;
    }
    let (home, dir) = mounted("ms");
    let h = home.path();
    ok(avfs_in(h, &["write", "cli.txt", "from the cli"]));
    fs::write(dir.join("m.txt"), b"from the mount").unwrap();
    ok(avfs_in(h, &["unmount", dir.to_str().unwrap()]));
    undo_a_mount(h);
    assert_eq!(live_files(h), BTreeSet::from(["/cli.txt".to_string()]));
    ok(avfs_in(h, &["vault", "check"]));
}

#[test]
fn a_killed_mount_daemon_leaves_its_acknowledged_writes_in_history() {
    if !require_fuse() {
        return;
    }
    let (home, dir) = mounted("k9");
    let h = home.path();
    ok(avfs_in(h, &["write", "base.txt", "before the mount"]));
    for i in 0..50 {
        let mut f = fs::File::create(dir.join(format!("acked-{i}"))).unwrap();
        f.write_all(format!("payload {i}").as_bytes()).unwrap();
        f.sync_all().unwrap();
    }
    let pid = daemon_pid(h);
    assert!(
        Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    // The stale mount is cleaned up; the daemon recorded nothing itself.
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        std::thread::yield_now();
    }
    ok(avfs_in(h, &["unmount", dir.to_str().unwrap()]));
    assert_eq!(live_files(h).len(), 51);
    // The acknowledged writes are one operation in history: undo takes them back...
    undo_a_mount(h);
    assert_eq!(live_files(h), BTreeSet::from(["/base.txt".to_string()]));
    // ...and redo brings every one of them back.
    ok(avfs_in(h, &["redo"]));
    let files = live_files(h);
    assert_eq!(files.len(), 51);
    for i in 0..50 {
        assert_eq!(
            ok(avfs_in(h, &["cat", &format!("acked-{i}")])),
            format!("payload {i}")
        );
    }
    ok(avfs_in(h, &["vault", "check"]));
}

#[test]
fn rollback_of_an_older_command_reverts_only_its_own_changes() {
    if !require_fuse() {
        return;
    }
    let env = TestEnv::with_vault("rb");
    let exec = |shell: &str| -> Value {
        let doc = json(
            env.std_cmd()
                .args(["--json", "proxy", "exec", "--shell", shell])
                .output()
                .unwrap(),
        );
        assert_eq!(doc["data"]["exit_code"], 0, "{doc}");
        doc["data"].clone()
    };
    let first = exec("echo a > a.txt && echo shared > shared.txt");
    let _second = exec("echo b > b.txt");
    let id = first["exec_id"].as_i64().unwrap().to_string();
    // b.txt came later and stays; a.txt and shared.txt were the first command's.
    env.data(&["rollback", &id]);
    assert_eq!(file_names(&env), BTreeSet::from(["/b.txt".to_string()]));
    // Undo the rollback, then change what the first command wrote: reverting it again
    // would lose that change, so it is refused with the paths, and nothing is applied.
    env.data(&["undo"]);
    exec("echo changed > shared.txt");
    let before = env.files(None);
    let e = env.err(&["rollback", &id], "revert_conflict");
    assert_eq!(e["details"]["conflicts"][0]["path"], "/shared.txt", "{e}");
    assert_eq!(env.files(None), before);
}

/// Two mounts of one fork: when the first ends, the second's later writes are still in
/// history (undo takes them back), not lost from it.
#[test]
fn a_second_mount_of_a_fork_keeps_its_writes_in_history() {
    if !require_fuse() {
        return;
    }
    let (home, m1) = mounted("two");
    let h = home.path();
    let m2 = h.join("mnt2");
    fs::create_dir(&m2).unwrap();
    ok(avfs_in(h, &["mount", "two", m2.to_str().unwrap()]));
    fs::write(m1.join("a"), b"from m1").unwrap();
    ok(avfs_in(h, &["unmount", m1.to_str().unwrap()]));
    fs::write(m2.join("b"), b"from m2").unwrap();
    ok(avfs_in(h, &["unmount", m2.to_str().unwrap()]));
    assert_eq!(
        live_files(h),
        BTreeSet::from(["/a".to_string(), "/b".to_string()])
    );
    let undo = json(avfs_in(h, &["--json", "undo"]));
    assert_eq!(undo["ok"], true, "{undo}");
    assert_eq!(live_files(h), BTreeSet::from(["/a".to_string()]));
    ok(avfs_in(h, &["vault", "check"]));
}
