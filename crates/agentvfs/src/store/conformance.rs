//! The store trait's contract, run against every engine this build has: each test makes a
//! fresh vault file per engine and checks the same answers. Engine-specific behaviour (the
//! SQLite WAL, LMDB's map) is tested beside each engine; this is what the layers above rely
//! on.

use std::path::PathBuf;
use std::sync::Arc;

use super::{
    AuditRecord, CheckpointRecord, Engine, OpRecord, Store, WorkspaceRecord, create_store,
    open_store,
};
use crate::error::Error;
use crate::store::id::ObjectId;

/// The setups under test: every engine this build has, and PostgreSQL once more with every
/// object in an S3-compatible store. A server engine needs its server:
/// `AVFS_TEST_POSTGRES_URL`, and for S3 `AVFS_TEST_S3_ENDPOINT` with the AWS variables
/// (scripts/test.sh starts both); without them the suite fails, unless
/// `AVFS_TEST_NO_POSTGRES=1` (or `AVFS_TEST_NO_S3=1`) opts out, which prints a SKIP line.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Setup {
    engine: Engine,
    s3: bool,
}

fn engines() -> Vec<Setup> {
    let mut out = Vec::new();
    for engine in Engine::built_in() {
        if !engine.is_server() {
            out.push(Setup { engine, s3: false });
        } else if server_url().is_some() {
            out.push(Setup { engine, s3: false });
            if s3_configured() {
                out.push(Setup { engine, s3: true });
            }
        }
    }
    out
}

fn s3_configured() -> bool {
    test_server(
        "AVFS_TEST_S3_ENDPOINT",
        "AVFS_TEST_NO_S3",
        "postgres+S3",
        "s3.sh",
    )
    .is_some()
}

fn server_url() -> Option<String> {
    test_server(
        "AVFS_TEST_POSTGRES_URL",
        "AVFS_TEST_NO_POSTGRES",
        "postgres",
        "postgres.sh",
    )
}

/// The test server `var` names; `None` (with a SKIP line) under `opt_out=1`; a panic
/// otherwise, naming the script that starts one.
fn test_server(var: &str, opt_out: &str, setup: &str, script: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var(opt_out).as_deref() == Ok("1") => {
            println!("SKIP store conformance on {setup}: {opt_out}=1");
            None
        }
        _ => panic!(
            "the postgres engine is built but {var} is not set: start a server \
             (scripts/{script} start DIR) or set {opt_out}=1 to leave it out"
        ),
    }
}

/// A new store in `setup` at `file` in `dir`; on a server, under a name no other test uses
/// (and with S3, under a prefix of that name, every object in the store).
fn new_store(dir: &std::path::Path, file: &str, setup: Setup) -> Arc<dyn Store> {
    let server = setup.engine.is_server().then(|| {
        let name = format!(
            "t{}",
            ObjectId::of(dir.join(file).as_os_str().as_encoded_bytes()).to_hex()
        );
        let mut server = super::Server::new(server_url().as_deref(), &name[..20]).unwrap();
        if setup.s3 {
            server.objects = Some(format!("s3://avfs-test/{}", &name[..20]));
            server.inline_max = Some(0);
        }
        server
    });
    create_store(&dir.join(file), setup.engine, server.as_ref()).unwrap()
}

/// A fresh vault in each setup under test.
fn stores() -> Vec<(Setup, Arc<dyn Store>, tempfile::TempDir)> {
    engines()
        .into_iter()
        .map(|e| {
            let dir = tempfile::tempdir().unwrap();
            let store = new_store(dir.path(), "v.avfs", e);
            (e, store, dir)
        })
        .collect()
}

fn ws(name: &str) -> WorkspaceRecord {
    WorkspaceRecord {
        id: 0,
        name: name.into(),
        base: ObjectId::of(name.as_bytes()),
        parent: None,
        base_root: None,
        fork_checkpoint: None,
        created_at: 1,
        files: 0,
        bytes: 0,
    }
}

fn cp(ws: i64, name: &str, auto: bool) -> CheckpointRecord {
    CheckpointRecord {
        id: 0,
        workspace: ws,
        name: name.into(),
        root: ObjectId::of(name.as_bytes()),
        message: Some(format!("m {name}")),
        created_at: 2,
        files: 3,
        bytes: 4,
        auto,
    }
}

fn op(ws: i64, n: i64) -> OpRecord {
    OpRecord {
        id: 0,
        workspace: ws,
        at: n,
        kind: "write".into(),
        description: format!("op {n}"),
        root_before: Some(ObjectId::of(&[n as u8])),
        root_after: None,
        target: Some(n),
        extra: None,
    }
}

fn audit(at: i64, step: bool) -> AuditRecord {
    AuditRecord {
        id: 0,
        at,
        actor: "a".into(),
        source: "cli".into(),
        workspace: "main".into(),
        operation: if step { "mount.write" } else { "write" }.into(),
        paths: vec![format!("/p{at}")],
        result: "ok".into(),
        detail: None,
        step,
    }
}

#[test]
fn objects_are_stored_once_read_whole_or_in_part_and_counted() {
    for (engine, s, _d) in stores() {
        let data = b"hello, world";
        let id = ObjectId::of(data);
        s.write(|w| {
            w.put_object(&id, 1, data)?;
            w.put_object(&id, 1, data)?; // content addressing: a second put is a no-op
            w.put_object(&ObjectId::of(b"t"), 2, b"tree")
        })
        .unwrap();
        s.read(|r| {
            let o = r.object(&id)?.expect("stored");
            assert_eq!((o.kind, o.data.as_slice()), (1, &data[..]), "{engine:?}");
            let mut buf = [0u8; 5];
            assert_eq!(r.object_read_at(&id, 7, &mut buf)?, Some((1, 5)));
            assert_eq!(&buf, b"world");
            assert_eq!(r.object_read_at(&id, 10, &mut buf)?, Some((1, 2)));
            assert_eq!(r.object_read_at(&id, u64::MAX, &mut buf)?, Some((1, 0)));
            assert_eq!(r.object_read_at(&ObjectId::of(b"x"), 0, &mut buf)?, None);
            assert!(r.has_object(&id)? && !r.has_object(&ObjectId::of(b"x"))?);
            assert_eq!(r.object_stats()?, (2, 16, 12), "{engine:?}");
            let mut ids = r.object_ids()?;
            ids.sort();
            assert_eq!(ids.len(), 2);
            // Sizes from the index, summing to the stored bytes `object_stats` counts.
            assert_eq!(ids.iter().map(|(_, _, n)| n).sum::<u64>(), 16, "{engine:?}");
            Ok(())
        })
        .unwrap();
        s.write(|w| {
            w.delete_object(&id)?;
            w.delete_object(&id)
        })
        .unwrap();
        assert_eq!(
            s.read(|r| r.object_stats()).unwrap(),
            (1, 4, 0),
            "{engine:?}"
        );
        assert!(s.integrity_problems().unwrap().is_empty(), "{engine:?}");
    }
}

/// Puts and deletes of the same objects in one write, stored before it or not, leave the
/// totals true (an engine may put first and look at commit).
#[test]
fn objects_put_and_deleted_in_one_write_keep_the_totals_true() {
    for (engine, s, _d) in stores() {
        let big = vec![7u8; 10_000]; // past any engine's inline limit
        let ids = [&b"x"[..], b"y", b"zz", b"n", &big].map(ObjectId::of);
        let [x, y, z, n, b] = ids;
        s.write(|w| {
            w.put_object(&x, 2, b"x")?;
            w.put_object(&z, 2, b"zz")?;
            w.put_object(&b, 1, &big)
        })
        .unwrap();
        s.write(|w| {
            w.put_object(&x, 2, b"x")?; // stored before: no change
            w.put_object(&b, 1, &big)?; // stored before, and large
            w.put_object(&y, 2, b"y")?; // new, then deleted: never there
            w.delete_object(&y)?;
            w.put_object(&x, 2, b"x")?; // stored before, put again, then deleted: gone
            w.delete_object(&x)?;
            w.delete_object(&z)?; // deleted, then put again: there
            w.put_object(&z, 2, b"zz")?;
            w.put_object(&n, 2, b"n")?; // new, put twice: once
            w.put_object(&n, 2, b"n")
        })
        .unwrap();
        s.read(|r| {
            let held: Vec<bool> = ids.iter().map(|id| r.has_object(id).unwrap()).collect();
            assert_eq!(held, [false, false, true, true, true], "{engine:?}");
            // Gone is gone for reads of content too (an engine that keeps object rows
            // it read or wrote must drop one it deleted).
            assert!(
                r.object(&x)?.is_none() && r.object(&y)?.is_none(),
                "{engine:?}"
            );
            assert_eq!(r.object(&b)?.expect("big").data, big, "{engine:?}");
            assert_eq!(r.object_stats()?, (3, 10_003, 10_000), "{engine:?}");
            assert_eq!(r.object_ids()?.len(), 3, "{engine:?}");
            Ok(())
        })
        .unwrap();
        assert!(s.integrity_problems().unwrap().is_empty(), "{engine:?}");
    }
}

#[test]
fn a_failed_write_changes_nothing_and_reads_see_only_commits() {
    for (engine, s, _d) in stores() {
        let err = s.write(|w| {
            w.put_object(&ObjectId::of(b"a"), 2, b"a")?;
            w.set_setting("k", Some("v"))?;
            w.append_op(&op(1, 1))?;
            Err::<(), _>(Error::invalid("boom"))
        });
        assert!(err.is_err());
        s.read(|r| {
            assert!(!r.has_object(&ObjectId::of(b"a"))?, "{engine:?}");
            assert_eq!(r.setting("k")?, None);
            assert!(r.ops(None, 10)?.is_empty());
            assert_eq!(r.object_stats()?, (0, 0, 0));
            Ok(())
        })
        .unwrap();
        // A read snapshot (from its first read on) does not see a later commit.
        s.read(|r| {
            assert_eq!(r.setting("late")?, None);
            s.write(|w| w.set_setting("late", Some("1"))).unwrap();
            assert_eq!(r.setting("late")?, None, "{engine:?}");
            Ok(())
        })
        .unwrap();
        assert_eq!(s.read(|r| r.setting("late")).unwrap().as_deref(), Some("1"));
    }
}

/// A read snapshot keeps its state through a commit made while it is open, in lookups and in
/// every kind of list: keys the commit adds, changes and deletes, forwards and newest-first.
/// (sled has no snapshots of its own; its engine keeps replaced values for open reads.)
#[test]
fn a_read_snapshot_keeps_its_lists_through_a_commit() {
    for (engine, s, _d) in stores() {
        let w1 = s
            .write(|w| {
                let id = w.insert_workspace(&ws("a"))?;
                for p in ["/d/a", "/d/b", "/d/c"] {
                    w.overlay_put(id, p, "/d", Some(p.as_bytes()))?;
                }
                w.set_setting("p.1", Some("one"))?;
                w.set_setting("p.2", Some("two"))?;
                w.append_op(&op(id, 1))?;
                w.append_op(&op(id, 2))?;
                Ok(id)
            })
            .unwrap();
        let lists = |r: &dyn super::StoreRead| {
            let ops: Vec<i64> = r.ops(Some(w1), 10).unwrap().iter().map(|o| o.at).collect();
            (
                r.overlay_children(w1, "/d").unwrap(),
                r.overlay_below(w1, "/d").unwrap(),
                r.overlay_get(w1, "/d/b").unwrap(),
                r.settings_with_prefix("p.").unwrap(),
                ops,
                r.overlay_len(w1).unwrap(),
            )
        };
        s.read(|r| {
            let before = lists(r);
            s.write(|w| {
                w.overlay_delete(w1, "/d/a")?;
                w.overlay_put(w1, "/d/b", "/d", Some(b"changed"))?;
                w.overlay_put(w1, "/d/bb", "/d", Some(b"new"))?;
                w.set_setting("p.1", None)?;
                w.set_setting("p.3", Some("three"))?;
                w.append_op(&op(w1, 3))?;
                Ok(())
            })
            .unwrap();
            assert_eq!(lists(r), before, "{engine:?}: the snapshot moved");
            Ok(())
        })
        .unwrap();
        let after = s.read(|r| Ok(lists(r))).unwrap();
        let paths: Vec<&str> = after.0.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["/d/b", "/d/bb", "/d/c"], "{engine:?}");
        assert_eq!(after.2, Some(Some(b"changed".to_vec())), "{engine:?}");
        assert_eq!(after.4, [3, 2, 1], "{engine:?}");
        assert_eq!(after.5, 3, "{engine:?}");
    }
}

#[test]
fn workspaces_get_ids_in_order_that_are_never_reused() {
    for (engine, s, _d) in stores() {
        let (a, b) = s
            .write(|w| Ok((w.insert_workspace(&ws("a"))?, w.insert_workspace(&ws("b"))?)))
            .unwrap();
        assert!(a < b, "{engine:?}");
        assert!(
            s.write(|w| w.insert_workspace(&ws("a"))).is_err(),
            "{engine:?}"
        );
        let root = ObjectId::of(b"r");
        s.write(|w| {
            w.update_workspace_state(a, &root, 7, 70)?;
            w.set_base_root(a, &root)
        })
        .unwrap();
        let got = s.read(|r| r.workspace("a")).unwrap().unwrap();
        assert_eq!((got.id, got.base, got.files, got.bytes), (a, root, 7, 70));
        assert_eq!(got.base_root, Some(root));
        let names: Vec<String> = s
            .read(|r| r.workspaces())
            .unwrap()
            .into_iter()
            .map(|w| w.name)
            .collect();
        assert_eq!(names, ["a", "b"], "{engine:?}");
        s.write(|w| {
            w.overlay_put(b, "/x", "/", Some(b"n"))?;
            w.insert_checkpoint(&cp(b, "c1", false))?;
            w.append_op(&op(b, 1))?;
            w.delete_workspace(b)
        })
        .unwrap();
        s.read(|r| {
            assert!(r.workspace("b")?.is_none(), "{engine:?}");
            assert!(r.overlay_all(b)?.is_empty() && r.overlay_len(b)? == 0);
            assert!(r.checkpoints(b)?.is_empty() && r.ops(Some(b), 10)?.is_empty());
            Ok(())
        })
        .unwrap();
        // No engine hands an id out twice, not even that of the newest row, deleted.
        let c = s.write(|w| w.insert_workspace(&ws("c"))).unwrap();
        assert!(c > b, "{engine:?}");
        let (cp_id, op_id) = s
            .write(|w| {
                Ok((
                    w.insert_checkpoint(&cp(c, "c1", false))?,
                    w.append_op(&op(c, 1))?,
                ))
            })
            .unwrap();
        s.write(|w| w.delete_workspace(c)).unwrap();
        let d = s.write(|w| w.insert_workspace(&ws("c"))).unwrap();
        let (cp_again, op_again) = s
            .write(|w| {
                Ok((
                    w.insert_checkpoint(&cp(d, "c1", false))?,
                    w.append_op(&op(d, 1))?,
                ))
            })
            .unwrap();
        assert!(
            d > c && cp_again > cp_id && op_again > op_id,
            "{engine:?}: a workspace made again under its old name gets new ids"
        );
    }
}

#[test]
fn the_overlay_answers_children_subtrees_and_long_paths() {
    let long_dir = format!("/{}", "d".repeat(600));
    let long_file = format!("{long_dir}/{}", "f".repeat(200));
    for (engine, s, _d) in stores() {
        let w1 = s.write(|w| w.insert_workspace(&ws("w"))).unwrap();
        s.write(|w| {
            w.overlay_put(w1, "", "", Some(b"root"))?;
            w.overlay_put(w1, "/a", "/", Some(b"a"))?;
            w.overlay_put(w1, "/a/b", "/a", Some(b"ab"))?;
            w.overlay_put(w1, "/a/b/c", "/a/b", None)?;
            w.overlay_put(w1, "/a0", "/", Some(b"a0"))?;
            w.overlay_put(w1, "/a-", "/", Some(b"a-"))?;
            w.overlay_put(w1, &long_dir, "/", Some(b"ld"))?;
            w.overlay_put(w1, &long_file, &long_dir, Some(b"lf"))?;
            w.overlay_put(w1, "/a", "/", Some(b"a2"))
        })
        .unwrap();
        s.read(|r| {
            assert_eq!(r.overlay_len(w1)?, 8, "{engine:?}");
            assert_eq!(r.overlay_get(w1, "/a")?, Some(Some(b"a2".to_vec())));
            assert_eq!(r.overlay_get(w1, "/a/b/c")?, Some(None));
            assert_eq!(r.overlay_get(w1, "/nope")?, None);
            assert_eq!(r.overlay_get(w1, &long_file)?, Some(Some(b"lf".to_vec())));
            let mut kids: Vec<String> = r
                .overlay_children(w1, "/")?
                .into_iter()
                .map(|e| e.0)
                .collect();
            kids.sort();
            let mut want = vec![
                "/a".to_string(),
                "/a-".into(),
                "/a0".into(),
                long_dir.clone(),
            ];
            want.sort();
            assert_eq!(kids, want, "{engine:?}");
            let below: Vec<String> = r
                .overlay_below(w1, "/a")?
                .into_iter()
                .map(|e| e.0)
                .collect();
            assert_eq!(below, ["/a/b", "/a/b/c"], "{engine:?}");
            let deep: Vec<String> = r
                .overlay_below(w1, &long_dir)?
                .into_iter()
                .map(|e| e.0)
                .collect();
            assert_eq!(deep, std::slice::from_ref(&long_file), "{engine:?}");
            let all: Vec<String> = r.overlay_all(w1)?.into_iter().map(|e| e.0).collect();
            let mut sorted = all.clone();
            sorted.sort();
            assert_eq!(all, sorted, "{engine:?}: overlay_all is in path order");
            assert_eq!(all.len(), 8);
            Ok(())
        })
        .unwrap();
        s.write(|w| {
            w.overlay_delete_below(w1, "/a")?;
            w.overlay_delete(w1, &long_dir)?;
            w.overlay_delete(w1, "/missing")
        })
        .unwrap();
        s.read(|r| {
            let all: Vec<String> = r.overlay_all(w1)?.into_iter().map(|e| e.0).collect();
            assert_eq!(
                all,
                ["", "/a", "/a-", "/a0", long_file.as_str()],
                "{engine:?}"
            );
            assert_eq!(r.overlay_len(w1)?, 5);
            assert!(r.overlay_children(w1, &long_dir)?.len() == 1);
            Ok(())
        })
        .unwrap();
        s.write(|w| w.overlay_clear(w1)).unwrap();
        assert_eq!(s.read(|r| r.overlay_len(w1)).unwrap(), 0, "{engine:?}");
        assert!(s.integrity_problems().unwrap().is_empty(), "{engine:?}");
    }
}

#[test]
fn checkpoints_list_in_order_rename_and_delete() {
    for (engine, s, _d) in stores() {
        let w1 = s.write(|w| w.insert_workspace(&ws("w"))).unwrap();
        let w2 = s.write(|w| w.insert_workspace(&ws("v"))).unwrap();
        let (c1, c2) = s
            .write(|w| {
                let c1 = w.insert_checkpoint(&cp(w1, "zeta", false))?;
                let c2 = w.insert_checkpoint(&cp(w1, "alpha", true))?;
                w.insert_checkpoint(&cp(w2, "zeta", false))?;
                Ok((c1, c2))
            })
            .unwrap();
        assert!(
            s.write(|w| w.insert_checkpoint(&cp(w1, "zeta", false)))
                .is_err()
        );
        let names = |s: &Arc<dyn Store>| -> Vec<String> {
            s.read(|r| r.checkpoints(w1))
                .unwrap()
                .into_iter()
                .map(|c| c.name)
                .collect()
        };
        assert_eq!(names(&s), ["zeta", "alpha"], "{engine:?}: in id order");
        let got = s.read(|r| r.checkpoint(w1, "alpha")).unwrap().unwrap();
        assert_eq!((got.id, got.auto, got.files, got.bytes), (c2, true, 3, 4));
        assert_eq!(got.message.as_deref(), Some("m alpha"));
        s.write(|w| w.rename_checkpoint(c1, "omega")).unwrap();
        assert_eq!(names(&s), ["omega", "alpha"], "{engine:?}");
        assert!(s.read(|r| r.checkpoint(w1, "zeta")).unwrap().is_none());
        s.write(|w| w.delete_checkpoint(c2)).unwrap();
        assert_eq!(names(&s), ["omega"]);
        assert_eq!(s.read(|r| r.all_checkpoint_roots()).unwrap().len(), 2);
    }
}

#[test]
fn settings_match_by_prefix_in_key_order_long_keys_too() {
    let long = format!("origin:{}", "x".repeat(700));
    for (engine, s, _d) in stores() {
        s.write(|w| {
            w.set_setting("fork:a/k2", Some("2"))?;
            w.set_setting("fork:a/k1", Some("1"))?;
            w.set_setting("fork:ab/k", Some("no"))?;
            w.set_setting(&long, Some("long"))?;
            w.set_setting(&format!("{long}y"), Some("longer"))?;
            w.set_setting("gone", Some("x"))?;
            w.set_setting("gone", None)
        })
        .unwrap();
        s.read(|r| {
            let got = r.settings_with_prefix("fork:a/")?;
            let want = [("fork:a/k1", "1"), ("fork:a/k2", "2")]
                .map(|(k, v)| (k.to_string(), v.to_string()));
            assert_eq!(got, want, "{engine:?}");
            assert_eq!(r.setting(&long)?.as_deref(), Some("long"), "{engine:?}");
            assert_eq!(r.settings_with_prefix(&long)?.len(), 2, "{engine:?}");
            assert_eq!(r.setting("gone")?, None);
            Ok(())
        })
        .unwrap();
    }
}

#[test]
fn ops_and_audit_read_newest_first_within_their_limits() {
    for (engine, s, _d) in stores() {
        let ids = s
            .write(|w| {
                let mut ids = Vec::new();
                for n in 1..=5 {
                    ids.push(w.append_op(&op(1 + n % 2, n))?);
                }
                for at in 1..=6 {
                    w.append_audit(&audit(at * 10, at % 2 == 0))?;
                }
                Ok(ids)
            })
            .unwrap();
        s.read(|r| {
            let all: Vec<i64> = r.ops(None, 3)?.into_iter().map(|o| o.at).collect();
            assert_eq!(all, [5, 4, 3], "{engine:?}");
            let mine: Vec<i64> = r.ops(Some(2), 10)?.into_iter().map(|o| o.at).collect();
            assert_eq!(mine, [5, 3, 1], "{engine:?}");
            assert!(r.ops(None, 0)?.is_empty());
            let o = &r.ops(None, 1)?[0];
            assert_eq!(
                (o.target, o.root_before),
                (Some(5), Some(ObjectId::of(&[5])))
            );
            let main: Vec<i64> = r
                .audit(10, None, false)?
                .into_iter()
                .map(|a| a.at)
                .collect();
            assert_eq!(main, [50, 30, 10], "{engine:?}");
            let steps: Vec<i64> = r.audit(4, None, true)?.into_iter().map(|a| a.at).collect();
            assert_eq!(steps, [60, 50, 40, 30], "{engine:?}");
            let since: Vec<i64> = r
                .audit(10, Some(30), false)?
                .into_iter()
                .map(|a| a.at)
                .collect();
            assert_eq!(since, [50, 30], "{engine:?}");
            assert_eq!(r.audit(1, None, false)?[0].paths, ["/p50"]);
            Ok(())
        })
        .unwrap();
        s.write(|w| w.delete_op(ids[4])).unwrap();
        let left: Vec<i64> = s
            .read(|r| r.ops(Some(2), 10))
            .unwrap()
            .into_iter()
            .map(|o| o.at)
            .collect();
        assert_eq!(left, [3, 1], "{engine:?}");
        let next = s.write(|w| w.append_op(&op(2, 9))).unwrap();
        assert!(
            next > ids[4],
            "{engine:?}: an op id is never handed out twice"
        );
    }
}

#[test]
fn a_vault_reopens_in_the_engine_that_made_it() {
    for (engine, s, d) in stores() {
        s.write(|w| w.set_setting("kept", Some("yes"))).unwrap();
        let path: PathBuf = s.path().to_path_buf();
        drop(s);
        assert_eq!(super::engine_of(&path), engine.engine);
        let again = open_store(&path).unwrap();
        assert_eq!(again.engine(), engine.engine);
        assert_eq!(
            again.read(|r| r.setting("kept")).unwrap().as_deref(),
            Some("yes")
        );
        assert!(again.disk_size() > 0);
        again.sync().unwrap();
        drop(d);
    }
}

#[test]
fn a_store_copies_into_every_engine_with_its_ids_and_verifies() {
    use crate::model::migrate::{copy_store, verify_copy};
    let built = engines();
    for from in &built {
        for to in &built {
            let dir = tempfile::tempdir().unwrap();
            let src = new_store(dir.path(), "a.avfs", *from);
            let w1 = src
                .write(|w| {
                    let w1 = w.insert_workspace(&ws("main"))?;
                    w.overlay_put(w1, "", "", Some(b"root"))?;
                    w.overlay_put(w1, "d", "", Some(b"dir"))?;
                    w.overlay_put(w1, "d/f", "d", None)?;
                    w.insert_checkpoint(&cp(w1, "c", true))?;
                    for n in 1..=3 {
                        w.append_op(&op(w1, n))?;
                    }
                    w.append_audit(&audit(5, false))?;
                    w.append_audit(&audit(6, true))?;
                    w.set_setting("quota.max_files", Some("10"))?;
                    w.put_object(&crate::model::node::object_id(1, b"x"), 1, b"x")?;
                    Ok(w1)
                })
                .unwrap();
            // An id gap (a deleted op) must survive the copy too, and so must the ids of
            // the newest op and checkpoint, deleted: the copy never hands them out again.
            let second = src.read(|r| r.ops(None, 3)).unwrap()[1].id;
            src.write(|w| w.delete_op(second)).unwrap();
            let (gone_op, gone_cp) = src
                .write(|w| {
                    let o = w.append_op(&op(w1, 4))?;
                    let c = w.insert_checkpoint(&cp(w1, "gone", false))?;
                    w.delete_op(o)?;
                    w.delete_checkpoint(c)?;
                    Ok((o, c))
                })
                .unwrap();
            let dst = new_store(dir.path(), "b.avfs", *to);
            let counts = src
                .read(|r| copy_store(r, &*dst, &mut |_, _, _| {}))
                .unwrap_or_else(|e| panic!("{from:?} -> {to:?}: {e}"));
            assert_eq!(
                (counts.objects, counts.ops, counts.audit_records),
                (1, 2, 2)
            );
            src.read(|r| dst.read(|c| verify_copy(r, c, &mut |_, _, _| {})))
                .unwrap_or_else(|e| panic!("{from:?} -> {to:?}: {e}"));
            let ids: Vec<i64> = dst
                .read(|r| r.ops(Some(w1), 10))
                .unwrap()
                .iter()
                .map(|o| o.id)
                .collect();
            assert!(
                !ids.contains(&second) && ids.len() == 2,
                "{from:?} -> {to:?}: {ids:?}"
            );
            // The copy's counters are past every id the source handed out.
            let next = dst.write(|w| w.append_op(&op(w1, 9))).unwrap();
            assert!(next > gone_op, "{from:?} -> {to:?}");
            let next_cp = dst
                .write(|w| w.insert_checkpoint(&cp(w1, "again", false)))
                .unwrap();
            assert!(next_cp > gone_cp, "{from:?} -> {to:?}");
            // A copy that lost something does not verify.
            dst.write(|w| w.set_setting("quota.max_files", Some("11")))
                .unwrap();
            let e = src.read(|r| dst.read(|c| verify_copy(r, c, &mut |_, _, _| {})));
            assert!(e.is_err(), "{from:?} -> {to:?}");
        }
    }
}
