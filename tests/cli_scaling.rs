//! Structural cost of fork and checkpoint: the rows and objects they write to the vault's
//! SQLite file are the same whether the vault holds 100 or 10,000 files. Counted in the
//! real file, table by table, before and after each command; no timing involved.

mod common;

use std::collections::BTreeMap;
use std::fs;

use common::TestEnv;

/// Rows of every table of the vault file.
fn rows(env: &TestEnv, vault: &str) -> BTreeMap<String, i64> {
    let db = rusqlite::Connection::open_with_flags(
        env.vault_file(vault),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let tables: Vec<String> = db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    tables
        .into_iter()
        .map(|t| {
            let n: i64 = db
                .query_row(&format!("SELECT count(*) FROM \"{t}\""), [], |r| r.get(0))
                .unwrap();
            (t, n)
        })
        .collect()
}

/// Rows added (or removed) per table between two counts.
fn delta(before: &BTreeMap<String, i64>, after: &BTreeMap<String, i64>) -> BTreeMap<String, i64> {
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>()
    );
    before
        .iter()
        .map(|(t, n)| (t.clone(), after[t] - n))
        .collect()
}

/// Rows changed per table by a fork, by a one-file change plus its checkpoint, and by that
/// checkpoint alone, in a vault of `files` files spread over directories of 100 files.
struct Costs {
    fork: BTreeMap<String, i64>,
    change_and_checkpoint: BTreeMap<String, i64>,
    checkpoint: BTreeMap<String, i64>,
}

fn costs(files: usize) -> Costs {
    let env = TestEnv::with_vault("v");
    let tree = env.host("tree");
    for i in 0..files {
        let dir = tree.join(format!("d{:03}", i / 100));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(format!("f{i:05}.txt")), format!("file {i}\n")).unwrap();
    }
    env.data(&["import", tree.to_str().unwrap(), "/"]);
    env.data(&["checkpoint", "save", "base"]);
    assert_eq!(env.stats(None)["live_files"], files);

    let before = rows(&env, "v");
    env.data(&["vault", "fork", "v", "f"]);
    let fork = delta(&before, &rows(&env, "v"));

    let unchanged = rows(&env, "v");
    env.write(None, "d000/f00000.txt", b"changed\n");
    let before = rows(&env, "v");
    env.data(&["checkpoint", "save", "one-change"]);
    let after = rows(&env, "v");
    Costs {
        fork,
        change_and_checkpoint: delta(&unchanged, &after),
        checkpoint: delta(&before, &after),
    }
}

#[test]
fn fork_and_checkpoint_write_the_same_rows_at_100_and_10000_files() {
    if !common::skip::only_engine("sqlite") {
        return;
    }
    let small = costs(100);
    let large = costs(10_000);
    assert_eq!(
        large.fork, small.fork,
        "a fork writes rows in proportion to the vault's size"
    );
    assert_eq!(
        large.checkpoint, small.checkpoint,
        "a checkpoint of one change writes rows in proportion to the vault's size"
    );
    assert_eq!(
        large.change_and_checkpoint, small.change_and_checkpoint,
        "a one-file change and its checkpoint write objects in proportion to the vault's size"
    );
    // And they write something: the fork its workspace, the checkpoint its record, the
    // change its content and the directories above it.
    assert_eq!(small.fork["workspaces"], 1, "{:?}", small.fork);
    assert_eq!(small.checkpoint["checkpoints"], 1, "{:?}", small.checkpoint);
    assert!(
        small.change_and_checkpoint["objects"] > 0,
        "{:?}",
        small.change_and_checkpoint
    );
}
