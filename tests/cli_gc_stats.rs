//! gc, compact and stats through the real binary: gc never removes what a workspace, fork
//! or checkpoint still needs, does remove garbage, and stats add up.

mod common;

use std::collections::BTreeMap;

use common::TestEnv;
use serde_json::json;

/// Expected contents: (vault selector, checkpoint or live) -> path -> bytes.
type Expect = BTreeMap<(String, Option<String>), BTreeMap<String, Vec<u8>>>;

fn expect(map: &mut Expect, vault: &str, at: Option<&str>, files: &[(&str, &[u8])]) {
    map.insert(
        (vault.to_string(), at.map(str::to_string)),
        files
            .iter()
            .map(|(p, c)| (p.to_string(), c.to_vec()))
            .collect(),
    );
}

fn verify(env: &TestEnv, expected: &Expect) {
    for ((vault, at), files) in expected {
        let v = Some(vault.as_str());
        match at {
            None => {
                assert_eq!(&env.files(v), files, "live state of {vault}");
            }
            Some(cp) => {
                let found = env.data(&["--workspace", vault, "ls", "--at", cp]);
                assert!(found.is_array());
                for (p, content) in files {
                    assert_eq!(
                        &env.cat_at(v, p, cp),
                        content,
                        "{vault} {p} at checkpoint {cp}"
                    );
                }
                // And nothing else: export the checkpoint and compare the file set.
                let tmp = tempfile::tempdir_in(&env.work).unwrap();
                let out = tmp.path().join("out");
                env.data(&[
                    "--workspace",
                    vault,
                    "export",
                    "/",
                    out.to_str().unwrap(),
                    "--at",
                    cp,
                ]);
                let exported: BTreeMap<String, Vec<u8>> = common::host_tree(&out, false)
                    .into_iter()
                    .filter_map(|(k, e)| match e {
                        common::HostEntry::File { data, .. } => Some((format!("/{k}"), data)),
                        _ => None,
                    })
                    .collect();
                assert_eq!(&exported, files, "{vault} at checkpoint {cp}");
            }
        }
    }
}

#[test]
fn gc_keeps_everything_a_fork_or_checkpoint_needs() {
    let env = TestEnv::with_vault("main");
    let big_v1 = common::random_bytes(11, 600 * 1024); // multi-chunk
    env.data_in(&["write", "big.bin"], &big_v1);
    env.write(None, "a.txt", b"a1");
    env.write(None, "dir/b.txt", b"b1");
    env.data(&["checkpoint", "save", "c1"]);

    // Overwrite in main; fork one at c1 and one at the live state.
    env.write(None, "a.txt", b"a2-live-only");
    env.data(&["vault", "fork", "main", "old", "--at", "c1"]);
    env.data(&["vault", "fork", "main", "live"]);

    // The old fork moves on; its checkpoint keeps an intermediate state.
    env.write(Some("old"), "a.txt", b"old-a");
    env.data(&["--workspace", "old", "checkpoint", "save", "old-c"]);
    env.write(Some("old"), "dir/b.txt", b"old-b-uncheckpointed");

    // main drops c1 (the old fork still stands on it) and rewrites everything.
    env.data(&["checkpoint", "delete", "c1"]);
    env.write(None, "a.txt", b"a3");
    env.data(&["rm", "-r", "dir"]);
    env.data_in(&["write", "big.bin"], &common::random_bytes(12, 300 * 1024));
    let big_v3 = common::random_bytes(13, 5000);
    env.data_in(&["write", "big.bin"], &big_v3);
    env.data(&["checkpoint", "save", "c2"]);

    // The live fork: delete a checkpoint of its own after changing things.
    env.write(Some("live"), "dir/b.txt", b"live-b");
    env.data(&["--workspace", "live", "checkpoint", "save", "tmp"]);
    env.data(&["--workspace", "live", "checkpoint", "delete", "tmp"]);

    let mut expected = Expect::new();
    expect(
        &mut expected,
        "main",
        None,
        &[("/a.txt", b"a3"), ("/big.bin", &big_v3)],
    );
    expect(
        &mut expected,
        "main",
        Some("c2"),
        &[("/a.txt", b"a3"), ("/big.bin", &big_v3)],
    );
    expect(
        &mut expected,
        "old",
        None,
        &[
            ("/a.txt", b"old-a"),
            ("/big.bin", &big_v1),
            ("/dir/b.txt", b"old-b-uncheckpointed"),
        ],
    );
    expect(
        &mut expected,
        "old",
        Some("old-c"),
        &[
            ("/a.txt", b"old-a"),
            ("/big.bin", &big_v1),
            ("/dir/b.txt", b"b1"),
        ],
    );
    expect(
        &mut expected,
        "live",
        None,
        &[
            ("/a.txt", b"a2-live-only"),
            ("/big.bin", &big_v1),
            ("/dir/b.txt", b"live-b"),
        ],
    );
    verify(&env, &expected);

    let dry = env.data(&["gc", "--dry-run"]);
    assert_eq!(dry["dry_run"], true);
    let objects_before = env.stats(None)["objects"].clone();
    assert_eq!(dry["objects_before"], objects_before);
    let gc = env.data(&["gc"]);
    assert_eq!(gc["dry_run"], false);
    assert_eq!(gc["objects_removed"], dry["objects_removed"]);
    verify(&env, &expected);
    let check = env.data(&["vault", "check"]);
    assert_eq!(check["ok"], true);
    assert_eq!(check["problems"], json!([]));

    // A second gc finds nothing, and everything still reads after compact too.
    assert_eq!(env.data(&["gc"])["objects_removed"], 0);
    env.data(&["compact"]);
    verify(&env, &expected);
    // Deleting a fork then makes its unique content collectable, without harming others.
    env.data(&["vault", "delete", "old", "--yes"]);
    expected.retain(|(v, _), _| v != "old");
    let gc = env.data(&["gc"]);
    assert!(gc["objects_removed"].as_u64().unwrap() > 0, "{gc}");
    verify(&env, &expected);
    assert_eq!(env.data(&["vault", "check"])["ok"], true);
}

/// Overwritten content stays while the op log can still undo to it; once nothing
/// references it (its fork deleted, or the history pruned) gc removes it.
#[test]
fn gc_removes_garbage_but_keeps_what_undo_needs() {
    let env = TestEnv::with_vault("v");
    env.write(None, "keep.txt", b"kept");
    env.data(&["checkpoint", "save", "base"]);
    let version = |i: u64| common::random_bytes(100 + i, 50_000);

    // Scratch work in a fork: five versions of one file, none checkpointed.
    env.data(&["vault", "fork", "v", "scratch"]);
    let s = Some("scratch");
    for i in 0..5 {
        env.data_in(
            &["--workspace", "scratch", "write", "scratch.bin"],
            &version(i),
        );
    }
    // gc keeps what undo needs.
    env.data(&["gc"]);
    env.data(&["--workspace", "scratch", "undo"]);
    assert_eq!(env.cat(s, "scratch.bin"), version(3));
    env.data(&["--workspace", "scratch", "redo"]);
    assert_eq!(env.cat(s, "scratch.bin"), version(4));
    assert_eq!(env.data(&["vault", "check"])["ok"], true);

    // Deleting the fork turns every version into garbage.
    env.data(&["vault", "delete", "scratch", "--yes"]);
    let before = env.stats(None);
    let dry = env.data(&["gc", "--dry-run"]);
    assert_eq!(dry["dry_run"], true);
    assert!(
        dry["objects_removed"].as_u64().unwrap() >= 5,
        "five versions of the deleted fork's file are garbage: {dry}"
    );
    assert!(
        dry["bytes_removed"].as_u64().unwrap() >= 5 * 50_000,
        "{dry}"
    );
    assert_eq!(
        env.stats(None)["objects"],
        before["objects"],
        "dry run removed objects"
    );
    let gc = env.data(&["gc"]);
    assert_eq!(gc["objects_removed"], dry["objects_removed"]);
    assert_eq!(gc["bytes_removed"], dry["bytes_removed"]);
    let after = env.stats(None);
    assert_eq!(
        after["objects"].as_u64().unwrap(),
        before["objects"].as_u64().unwrap() - gc["objects_removed"].as_u64().unwrap()
    );
    assert!(after["stored_bytes"].as_u64() < before["stored_bytes"].as_u64());
    assert_eq!(env.cat(None, "keep.txt"), b"kept");
    assert_eq!(env.cat_at(None, "keep.txt", "base"), b"kept");
    assert_eq!(env.data(&["vault", "check"])["ok"], true);
    assert_eq!(env.data(&["gc"])["objects_removed"], 0);

    // Overwritten, uncheckpointed content in main is garbage once the history that could
    // bring it back is pruned (prune runs gc).
    for i in 10..13 {
        env.data_in(&["write", "churn.bin"], &version(i));
    }
    let pruned = env.data(&["prune", "--keep-last", "1"]);
    assert!(
        pruned["gc"]["objects_removed"].as_u64().unwrap() >= 1,
        "the first overwritten version is garbage after pruning: {pruned}"
    );
    assert_eq!(env.cat(None, "churn.bin"), version(12));
    assert_eq!(env.cat_at(None, "keep.txt", "base"), b"kept");
    assert_eq!(env.data(&["vault", "check"])["ok"], true);

    // Content a checkpoint still needs is not garbage, even after the live file is gone.
    env.data_in(
        &["write", "only-in-cp.bin"],
        &common::random_bytes(200, 40_000),
    );
    env.data(&["checkpoint", "save", "holds-it"]);
    env.data(&["rm", "only-in-cp.bin"]);
    env.data(&["gc"]);
    assert_eq!(
        env.cat_at(None, "only-in-cp.bin", "holds-it"),
        common::random_bytes(200, 40_000)
    );
    assert_eq!(env.data(&["vault", "check"])["ok"], true);
}

#[test]
fn compact_reclaims_space_and_keeps_data() {
    if !common::skip::only_engine("sqlite") {
        return;
    }
    let env = TestEnv::with_vault("v");
    env.write(None, "small", b"s");
    env.data(&["vault", "fork", "v", "churn"]);
    for i in 0..4 {
        env.data_in(
            &["--workspace", "churn", "write", "churn.bin"],
            &common::random_bytes(300 + i, 400 * 1024),
        );
    }
    env.data(&["vault", "delete", "churn", "--yes"]);
    assert!(env.data(&["gc"])["bytes_removed"].as_u64().unwrap() >= 4 * 400 * 1024);
    let before = env.stats(None)["disk_bytes"].as_u64().unwrap();
    let c = env.data(&["compact"]);
    let after = env.stats(None)["disk_bytes"].as_u64().unwrap();
    assert!(after <= before, "{before} -> {after}");
    assert!(
        c["bytes_reclaimed"].as_u64().unwrap() > 0,
        "1.6 MB of freed objects leave pages to reclaim: {c}"
    );
    assert_eq!(env.cat(None, "small"), b"s");
    assert_eq!(env.data(&["vault", "check"])["ok"], true);
}

#[test]
fn stats_add_up_across_forks_and_dedup() {
    let env = TestEnv::with_vault("v");
    let s = env.stats(None);
    assert_eq!(s["workspaces"], 1);
    assert_eq!(s["checkpoints"], 0);
    assert_eq!(s["live_files"], 0);
    assert_eq!(s["logical_bytes"], 0);
    assert_eq!(s["dedup_ratio"], 1.0);

    let data = common::random_bytes(5, 10_000);
    env.data_in(&["write", "one"], &data);
    env.data_in(&["write", "two"], &data);
    env.data_in(&["write", "-p", "dir/three"], &data);
    let s = env.stats(None);
    assert_eq!(s["live_files"], 3);
    assert_eq!(s["logical_bytes"], 30_000);
    assert_eq!(
        s["content_bytes"], 10_000,
        "identical content is stored once"
    );
    assert_eq!(s["dedup_ratio"], 3.0);

    env.data(&["checkpoint", "save", "c"]);
    env.data(&["vault", "fork", "v", "f1"]);
    env.data(&["vault", "fork", "v", "f2"]);
    env.data(&["--workspace", "f1", "checkpoint", "save", "fc"]);
    let s = env.stats(None);
    assert_eq!(s["workspaces"], 3);
    assert_eq!(s["checkpoints"], 2);
    assert_eq!(s["live_files"], 9);
    assert_eq!(s["logical_bytes"], 90_000);
    assert_eq!(s["content_bytes"], 10_000);
    assert_eq!(s["dedup_ratio"], 9.0);
    assert!(s["disk_bytes"].as_u64().unwrap() > 10_000);
    assert!(s["stored_bytes"].as_u64().unwrap() >= s["content_bytes"].as_u64().unwrap());
    // stats is the same whichever workspace of the vault selects it.
    assert_eq!(env.stats(Some("f2")), s);
    env.avfs(&["stats"])
        .success()
        .stdout(predicates::str::contains("dedup ratio  9.00"));
}
