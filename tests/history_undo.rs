//! The op log through the real binary: `undo`, `redo`, `op restore`, and `prune` of old
//! checkpoints and operations.
//! Every command runs with its own `$AVFS_HOME` and without `$AVFS_WORKSPACE` or
//! `$AVFS_VAULT`; every `--json` document is checked against the committed schema.

mod common;

use std::collections::BTreeSet;

use common::history::Env;
use serde_json::{Value, json};

#[test]
fn undo_redo_walk_the_op_log() {
    let env = Env::new();
    env.create("u");
    env.write("u", "a.txt", b"1\n");
    env.write("u", "b.txt", b"b\n");
    env.write("u", "a.txt", b"2\n");
    let s3 = env.snapshot("u");

    // Undo once: back to a.txt = 1.
    let u1 = env.data("u", &["undo"]);
    assert_eq!(u1["kind"], "undo");
    assert!(u1["target"].is_i64());
    assert_eq!(env.cat("u", "a.txt"), b"1\n");
    assert!(env.exists("u", "b.txt"));
    // Undo twice: b.txt goes too.
    env.data("u", &["undo"]);
    assert!(!env.exists("u", "b.txt"));
    assert_eq!(env.cat("u", "a.txt"), b"1\n");
    let s1 = env.snapshot("u");

    // The log marks what is undone.
    let log = env.data("u", &["op", "log"]);
    let undone: Vec<(String, bool)> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap().to_string(),
                o["undone"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        undone,
        vec![
            ("undo".to_string(), false),
            ("undo".to_string(), false),
            ("write".to_string(), true),
            ("write".to_string(), true),
            ("write".to_string(), false),
        ]
    );

    // Redo re-applies in reverse order of the undos.
    let r1 = env.data("u", &["redo"]);
    assert_eq!(r1["kind"], "redo");
    assert!(env.exists("u", "b.txt"));
    assert_eq!(env.cat("u", "a.txt"), b"1\n");
    env.data("u", &["redo"]);
    assert_eq!(env.snapshot("u"), s3);
    env.fail(Some("u"), &["redo"], 4, "nothing_to_redo");

    // Undo after redo walks back again.
    env.data("u", &["undo"]);
    env.data("u", &["undo"]);
    assert_eq!(env.snapshot("u"), s1);
    // Human output describes the undo.
    let out = env.ok("u", &["undo"]);
    assert!(out.starts_with("undo #1 write"), "{out}");
    assert!(!env.exists("u", "a.txt"));
    env.fail(Some("u"), &["undo"], 4, "nothing_to_undo");
}

#[test]
fn nothing_to_undo_or_redo_in_a_fresh_vault() {
    let env = Env::new();
    env.create("fresh");
    env.fail(Some("fresh"), &["undo"], 4, "nothing_to_undo");
    env.fail(Some("fresh"), &["redo"], 4, "nothing_to_redo");
    // A checkpoint changes no state: still nothing to undo.
    env.ok("fresh", &["checkpoint", "save", "c1"]);
    env.fail(Some("fresh"), &["undo"], 4, "nothing_to_undo");
    let out = env.run(Some("fresh"), &["undo"], None);
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to undo"));
}

#[test]
fn redo_is_invalid_after_a_new_change() {
    let env = Env::new();
    env.create("r");
    env.write("r", "a.txt", b"a\n");
    env.write("r", "b.txt", b"b\n");
    env.data("r", &["undo"]);
    env.write("r", "c.txt", b"c\n");
    env.fail(Some("r"), &["redo"], 4, "nothing_to_redo");
    assert!(!env.exists("r", "b.txt"));
    // Undo now undoes the new change, and redo brings it back.
    env.data("r", &["undo"]);
    assert!(!env.exists("r", "c.txt"));
    env.data("r", &["redo"]);
    assert!(env.exists("r", "c.txt"));
    assert!(!env.exists("r", "b.txt"));
}

#[test]
fn undo_of_checkpoint_restore_brings_the_undone_state_back() {
    let env = Env::new();
    env.create("cr");
    env.write("cr", "a.txt", b"at checkpoint\n");
    env.ok("cr", &["checkpoint", "save", "c1"]);
    env.write("cr", "a.txt", b"work after the checkpoint\n");
    env.write("cr", "b/new.txt", b"new work\n");
    env.ok("cr", &["chmod", "700", "a.txt"]);
    let work = env.snapshot("cr");

    env.ok("cr", &["checkpoint", "restore", "c1"]);
    assert_eq!(env.cat("cr", "a.txt"), b"at checkpoint\n");
    assert!(!env.exists("cr", "b"));

    let u = env.data("cr", &["undo"]);
    assert!(
        u["description"]
            .as_str()
            .unwrap()
            .contains("checkpoint.restore"),
        "{u}"
    );
    assert_eq!(env.snapshot("cr"), work);
    // Redo restores the checkpoint again.
    env.data("cr", &["redo"]);
    assert_eq!(env.cat("cr", "a.txt"), b"at checkpoint\n");
    assert!(!env.exists("cr", "b"));
}

#[test]
fn op_restore_returns_to_the_state_after_an_operation() {
    let env = Env::new();
    env.create("o");
    env.write("o", "a.txt", b"1\n");
    env.write("o", "b.txt", b"b\n");
    let after_b = env.snapshot("o");
    env.write("o", "a.txt", b"2\n");
    env.ok("o", &["rm", "b.txt"]);
    env.ok("o", &["mkdir", "dir"]);

    let log = env.data("o", &["op", "log"]);
    let ops = log.as_array().unwrap();
    assert_eq!(ops.len(), 5);
    assert_eq!(ops[0]["kind"], "mkdir");
    assert_eq!(ops[4]["kind"], "write");
    let ids: Vec<i64> = ops.iter().map(|o| o["id"].as_i64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");
    for o in ops {
        assert_ne!(o["root_before"], o["root_after"], "{o}");
    }
    let b_id = ops[3]["id"].as_i64().unwrap();
    assert_eq!(ops[3]["description"], "/b.txt");

    let r = env.data("o", &["op", "restore", &b_id.to_string()]);
    assert_eq!(r["kind"], "op.restore");
    assert_eq!(r["root_after"], ops[3]["root_after"]);
    assert_eq!(env.snapshot("o"), after_b);
    // The restore is itself undoable.
    env.data("o", &["undo"]);
    assert!(env.exists("o", "dir"));
    assert!(!env.exists("o", "b.txt"));
    // `--limit` caps the log.
    assert_eq!(
        env.data("o", &["op", "log", "--limit", "2"])
            .as_array()
            .unwrap()
            .len(),
        2
    );
    // Unknown ids.
    let e = env.fail(
        Some("o"),
        &["op", "restore", "9999"],
        3,
        "operation_not_found",
    );
    assert_eq!(e["details"]["id"], 9999);
}

// ---------------------------------------------------------------------------------------
// prune

#[test]
fn prune_keep_last_reports_sizes_and_keeps_the_rest_readable() {
    let env = Env::new();
    env.create("pr");
    // Each checkpoint holds a big file of its own that later disappears from the live tree,
    // so pruning the old checkpoints (and ops) leaves garbage for gc.
    let big = |i: usize| -> Vec<u8> {
        (0..300_000u32)
            .map(|j| (j.wrapping_mul(2_654_435_761).wrapping_add(i as u32 * 97) >> 13) as u8)
            .collect()
    };
    for i in 0..6 {
        env.write("pr", "big.bin", &big(i));
        env.write(
            "pr",
            &format!("keep/{i}.txt"),
            format!("file {i}\n").as_bytes(),
        );
        env.ok("pr", &["checkpoint", "save", &format!("c{i}")]);
    }
    env.ok("pr", &["rm", "big.bin"]);
    let live = env.snapshot("pr");

    let r = env.data("pr", &["prune", "--keep-last", "2"]);
    let removed: BTreeSet<&str> = r["pruned"]["checkpoints_removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(removed, BTreeSet::from(["c0", "c1", "c2", "c3"]));
    assert!(r["pruned"]["operations_removed"].as_u64().unwrap() > 0);
    let gc = &r["gc"];
    assert_eq!(gc["dry_run"], false);
    assert!(gc["objects_removed"].as_u64().unwrap() > 0, "{r}");
    assert!(gc["bytes_removed"].as_u64().unwrap() > 3 * 250_000, "{r}");
    let (before, after) = (
        r["disk_bytes_before"].as_u64().unwrap(),
        r["disk_bytes_after"].as_u64().unwrap(),
    );
    assert!(before > 0, "{r}");
    // SQLite and LMDB give the space back (or reuse it in place); sled writes the deletions
    // as new log records and reclaims its segments later, so its directory may grow here;
    // PostgreSQL's VACUUM marks the space free for reuse in the table without shrinking it
    // (and adds its free-space map), as a shared vault must not be locked for VACUUM FULL.
    if !["sled", "postgres"].contains(&common::skip::engine().as_str()) {
        assert!(after <= before, "{r}");
    }
    assert_eq!(
        env.data("pr", &["op", "log"]).as_array().unwrap().len(),
        2,
        "only the newest 2 operations are kept"
    );

    // Everything left is intact and readable.
    let check = env.data("pr", &["vault", "check"]);
    assert_eq!(check["ok"], true, "{check}");
    assert_eq!(check["problems"], json!([]));
    let cps: Vec<String> = env
        .data("pr", &["checkpoint", "list"])
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(cps, vec!["c4", "c5"]);
    for i in [4usize, 5] {
        let cp = format!("c{i}");
        let out = env.run(Some("pr"), &["cat", "big.bin", "--at", &cp], None);
        assert!(out.status.success());
        assert_eq!(out.stdout, big(i), "big.bin at {cp}");
        for j in 0..=i {
            let out = env.run(
                Some("pr"),
                &["cat", &format!("keep/{j}.txt"), "--at", &cp],
                None,
            );
            assert_eq!(out.stdout, format!("file {j}\n").as_bytes());
        }
    }
    assert_eq!(env.snapshot("pr"), live);
    // A later gc finds nothing more; restoring a kept checkpoint works, and so does undo.
    assert_eq!(env.data("pr", &["gc"])["objects_removed"], 0);
    env.ok("pr", &["checkpoint", "restore", "c4"]);
    assert_eq!(env.cat("pr", "big.bin"), big(4));
    env.data("pr", &["undo"]);
    assert_eq!(env.snapshot("pr"), live);
    assert_eq!(env.data("pr", &["vault", "check"])["ok"], true);
}

#[test]
fn prune_older_than_and_bad_arguments() {
    let env = Env::new();
    env.create("po");
    env.write("po", "a.txt", b"a\n");
    env.ok("po", &["checkpoint", "save", "c1"]);
    // Nothing is older than an hour.
    let r = env.data("po", &["prune", "--older-than", "1h"]);
    assert_eq!(r["pruned"]["checkpoints_removed"], json!([]));
    assert_eq!(r["pruned"]["operations_removed"], 0);
    assert_eq!(
        env.data("po", &["checkpoint", "list"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    env.fail(Some("po"), &["prune"], 5, "invalid_argument");
    env.fail(
        Some("po"),
        &["prune", "--older-than", "soon"],
        5,
        "invalid_argument",
    );
    // Everything is older than 1ms once the clock has passed c1's time by 1ms: wait for
    // that, not for a guessed interval.
    let c1_ns = env.data("po", &["checkpoint", "list"])[0]["created_at"]
        .as_i64()
        .unwrap();
    common::wait::until_true("the clock to pass c1 by 1ms", || {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i64;
        now > c1_ns + 1_000_000
    });
    let r = env.data("po", &["prune", "--older-than", "1ms"]);
    assert_eq!(r["pruned"]["checkpoints_removed"], json!(["c1"]));
    assert_eq!(env.cat("po", "a.txt"), b"a\n");
    assert_eq!(env.data("po", &["vault", "check"])["ok"], true);
}

/// The workspace's newest operation, as `op log` shows it (0: none).
fn head(env: &Env, ws: &str) -> i64 {
    env.data(ws, &["op", "log", "--limit", "1"])[0]["id"]
        .as_i64()
        .unwrap_or(0)
}

#[test]
fn if_head_makes_a_change_a_compare_and_swap_on_the_history() {
    let env = Env::new();
    env.create("c");
    assert_eq!(head(&env, "c"), 0);
    env.data("c", &["--if-head", "0", "write", "a.txt", "one"]);
    let h1 = head(&env, "c");
    assert!(h1 > 0);
    // A stale head: refused, typed, and nothing changes (the file, the op log).
    let e = env.fail(
        Some("c"),
        &["--if-head", "0", "write", "a.txt", "two"],
        4,
        "head_moved",
    );
    assert_eq!(
        e["details"],
        json!({ "workspace": "main", "expected": 0, "head": h1 })
    );
    assert_eq!(env.cat("c", "a.txt"), b"one");
    assert_eq!(head(&env, "c"), h1);
    // The current head: applied. Checkpoints, undo and rm are conditional the same way.
    env.data(
        "c",
        &["--if-head", &h1.to_string(), "write", "a.txt", "two"],
    );
    let h2 = head(&env, "c");
    env.fail(
        Some("c"),
        &["--if-head", &h1.to_string(), "checkpoint", "save", "cp"],
        4,
        "head_moved",
    );
    env.data(
        "c",
        &["--if-head", &h2.to_string(), "checkpoint", "save", "cp"],
    );
    let h3 = head(&env, "c");
    env.fail(
        Some("c"),
        &["--if-head", &h2.to_string(), "undo"],
        4,
        "head_moved",
    );
    env.fail(
        Some("c"),
        &["--if-head", &h2.to_string(), "rm", "a.txt"],
        4,
        "head_moved",
    );
    assert!(env.exists("c", "a.txt"));
    env.data("c", &["--if-head", &h3.to_string(), "undo"]);
    // Bad input: typed errors, nothing changed.
    let before = head(&env, "c");
    env.fail(
        Some("c"),
        &["--if-head", "-1", "write", "a.txt", "x"],
        2,
        "usage",
    );
    env.fail(
        Some("c"),
        &["--if-head", "18446744073709551615", "write", "a.txt", "x"],
        2,
        "usage",
    );
    env.fail(
        Some("c"),
        &["--if-head", "1y", "write", "a.txt", "x"],
        2,
        "usage",
    );
    env.fail(Some("c"), &["--if-head", "1", "ls"], 5, "invalid_argument");
    // A streaming exec says so in its `finished` event, as it answers every refusal.
    let args = [
        "--json",
        "--if-head",
        "1",
        "proxy",
        "exec",
        "--stream",
        "--",
        "true",
    ];
    let out = env.run(Some("c"), &args, None);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["event"], "finished", "{doc}");
    assert_eq!(doc["error"]["kind"], "invalid_argument", "{doc}");
    assert_eq!(out.status.code(), Some(5));
    env.fail(
        Some("c"),
        &[
            "--if-head",
            &before.to_string(),
            "checkpoint",
            "retention",
            "--keep-auto",
            "3",
        ],
        5,
        "invalid_argument",
    );
    assert_eq!(head(&env, "c"), before);
    // Prune keeps the head: an id it names is never handed out again for another state.
    env.data("c", &["prune", "--keep-last", "0"]);
    assert_eq!(head(&env, "c"), before);
    env.data("c", &["write", "a.txt", "later"]);
    assert!(head(&env, "c") > before);
    env.fail(
        Some("c"),
        &["--if-head", &before.to_string(), "write", "a.txt", "stale"],
        4,
        "head_moved",
    );
    // A failed conditional import takes its own first batch back (its own entries move
    // the expectation on; nobody else's do).
    let src = env.host("bad-import");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..5 {
        std::fs::write(src.join(format!("f{i}")), "x").unwrap();
    }
    use std::os::unix::ffi::OsStrExt;
    std::fs::write(src.join(std::ffi::OsStr::from_bytes(b"\xff")), "x").unwrap();
    let h = head(&env, "c").to_string();
    let args = ["--if-head", &h, "import", src.to_str().unwrap(), "sub"];
    env.fail(Some("c"), &args, 5, "invalid_path");
    assert!(!env.exists("c", "sub"));
    // In the shell, each line's --if-head holds the same way.
    let now = head(&env, "c").to_string();
    let script = format!("write --if-head 0 a.txt stale\nwrite --if-head {now} a.txt fresh\n");
    let out = env.run(Some("c"), &["--json", "shell"], Some(script.as_bytes()));
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["error"]["kind"], "head_moved", "{lines:?}");
    assert_eq!(lines[1]["ok"], true, "{lines:?}");
    assert_eq!(env.cat("c", "a.txt"), b"fresh");
}

#[test]
fn a_head_read_from_a_deleted_fork_does_not_match_the_fork_made_again_under_its_name() {
    let env = Env::new();
    env.create("aba");
    env.write("aba", "base.txt", b"base");
    env.fork("aba", "task");
    env.write("task", "work.txt", b"first life");
    env.write("task", "more.txt", b"first life");
    // What an agent of the first fork read; then the fork is deleted and made again.
    let stale = head(&env, "task");
    env.ok("aba", &["vault", "delete", "task", "--yes"]);
    env.fork("aba", "task");
    env.write("task", "other.txt", b"second life");
    assert_ne!(head(&env, "task"), stale, "an op id was handed out twice");
    let e = env.fail(
        Some("task"),
        &[
            "--if-head",
            &stale.to_string(),
            "write",
            "work.txt",
            "stale",
        ],
        4,
        "head_moved",
    );
    assert_eq!(e["details"]["expected"], json!(stale), "{e}");
    assert_eq!(env.cat("task", "other.txt"), b"second life");
}

#[test]
fn writers_racing_one_head_exactly_one_wins_and_the_rest_get_head_moved() {
    let env = Env::new();
    env.create("r");
    env.write("r", "race.txt", b"start");
    for round in 0..2 {
        let expected = head(&env, "r").to_string();
        let outcomes: Vec<(String, Value)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|w| {
                    let (env, expected) = (&env, &expected);
                    s.spawn(move || {
                        let content = format!("round {round} writer {w}");
                        let (doc, _) = env.json(
                            Some("r"),
                            &["--if-head", expected, "write", "race.txt", &content],
                        );
                        (content, doc)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let won: Vec<&String> = outcomes
            .iter()
            .filter(|(_, d)| d["ok"] == json!(true))
            .map(|(c, _)| c)
            .collect();
        assert_eq!(won.len(), 1, "{outcomes:?}");
        let now = head(&env, "r");
        for (_, d) in outcomes.iter().filter(|(_, d)| d["ok"] != json!(true)) {
            assert_eq!(d["error"]["kind"], "head_moved", "{d}");
            assert_eq!(d["error"]["details"]["head"], json!(now), "{d}");
        }
        assert_eq!(env.cat("r", "race.txt"), won[0].as_bytes());
    }
}
