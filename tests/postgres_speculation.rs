//! A fork, checkpoint or restore from a vault handle that wrote before goes to PostgreSQL
//! in one exchange, on what the handle knew after that write, with a guard the server checks
//! under the vault's lock. These tests make what the handle knew go out of date in every way
//! another host can (a write that moves the counters, a fork made or deleted under a name
//! it read, a checkpoint saved), and check that the guard refuses, the write then runs the
//! usual way with the right answer, and ids stay unique. A second handle is another host:
//! the vault attached at another path, with its own connection and knowledge.
#![cfg(feature = "postgres")]

mod common;

use std::path::Path;
use std::sync::Arc;

use agentvfs::Error;
use agentvfs::model::{Actor, Vault};
use agentvfs::store::{Engine, Server, Speculation, attach_store, speculation_counts};
use common::shared::{Host, server, unique};

fn actor() -> Actor {
    Actor {
        actor: "test".into(),
        source: "sdk".into(),
    }
}

/// Vault `name` on the test server at `dir/a.avfs`, and `hosts` more handles to it (the
/// vault attached at `dir/h<i>.avfs`), each of which has written once.
fn hosts(url: &str, dir: &Path, name: &str, hosts: usize) -> Vec<Arc<Vault>> {
    let server = Server::new(Some(url), name).unwrap();
    let a = Vault::create_on(&dir.join("a.avfs"), Engine::Postgres, Some(&server)).unwrap();
    let mut out = vec![a];
    for i in 0..hosts {
        let path = dir.join(format!("h{i}.avfs"));
        drop(attach_store(&path, &server).unwrap());
        out.push(Vault::open(&path).unwrap());
    }
    for (i, v) in out.iter().enumerate() {
        let main = v.workspace("main", actor()).unwrap();
        main.checkpoint_save(Some(&format!("warm{i}")), None)
            .unwrap();
    }
    out
}

/// What the writes since `before` did.
fn since(before: Speculation) -> Speculation {
    let now = speculation_counts();
    Speculation {
        applied: now.applied - before.applied,
        refused: now.refused - before.refused,
        missed: now.missed - before.missed,
        failed: now.failed - before.failed,
    }
}

#[test]
fn a_warm_handle_forks_in_one_exchange_and_another_hosts_write_sends_it_the_usual_way() {
    let Some(url) = server() else { return };
    // The counts are this process's: the tests of this file run one at a time.
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let v = hosts(&url, dir.path(), &unique("spec-fork"), 1);
    let (a, b) = (&v[0], &v[1]);
    let main_a = a.workspace("main", actor()).unwrap();
    let main_b = b.workspace("main", actor()).unwrap();

    // b wrote after a did (`hosts` warms them in turn), so a's first fork is refused and
    // runs the usual way; after it, nothing changed since a's last write, and each fork is
    // applied as it was tried.
    let before = speculation_counts();
    a.fork(&main_a, "f0", None).unwrap();
    assert_eq!(since(before).refused, 1, "{:?}", since(before));
    let before = speculation_counts();
    a.fork(&main_a, "f1", None).unwrap();
    a.fork(&main_a, "f2", None).unwrap();
    assert_eq!(since(before).applied, 2, "{:?}", since(before));
    assert_eq!(since(before).refused, 0);

    // Host b forks: a's counters are out of date. a's next fork is refused by the guard,
    // runs the usual way, and takes the next id.
    b.fork(&main_b, "fb", None).unwrap();
    let before = speculation_counts();
    a.fork(&main_a, "f3", None).unwrap();
    assert_eq!(since(before).refused, 1, "{:?}", since(before));
    assert_unique_ids(a, 5);

    // b makes a fork under a name a last knew as free: a's fork of that name is refused
    // by the guard, and the usual way says it exists; nothing is applied.
    b.fork(&main_b, "taken", None).unwrap();
    let forks_before = a.forks().unwrap().len();
    let e = a.fork(&main_a, "taken", None).unwrap_err();
    assert!(matches!(e, Error::AlreadyExists { .. }), "{e:?}");
    assert_eq!(a.forks().unwrap().len(), forks_before);

    // a forks under a name a itself took: the run on what a knows fails, and the usual
    // way, which has the last word, says the same.
    let before = speculation_counts();
    let e = a.fork(&main_a, "f3", None).unwrap_err();
    assert!(matches!(e, Error::AlreadyExists { .. }), "{e:?}");
    let counts = since(before);
    assert_eq!((counts.failed, counts.missed), (1, 0), "{counts:?}");

    // b deletes a fork a knew: a's fork of it is refused, and the usual way says it is gone.
    let f1_a = a.workspace("f1", actor()).unwrap();
    a.fork(&f1_a, "of-f1", None).unwrap();
    b.delete_fork("f1").unwrap();
    let e = a.fork(&f1_a, "of-f1-again", None).unwrap_err();
    assert!(matches!(e, Error::ForkNotFound { .. }), "{e:?}");

    // Every host sees the same forks, and the vault checks clean from each.
    let names = |v: &Arc<Vault>| {
        let mut n: Vec<String> = v.forks().unwrap().into_iter().map(|f| f.name).collect();
        n.sort();
        n
    };
    assert_eq!(names(a), names(b));
    for v in [a, b] {
        let report = v.check().unwrap();
        assert!(report.ok, "{:?}", report.problems);
    }
}

#[test]
fn checkpoints_and_restores_from_a_warm_handle_see_what_other_hosts_did() {
    let Some(url) = server() else { return };
    // The counts are this process's: the tests of this file run one at a time.
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let v = hosts(&url, dir.path(), &unique("spec-cp"), 1);
    let (a, b) = (&v[0], &v[1]);
    let ws_a = a.workspace("main", actor()).unwrap();
    let ws_b = b.workspace("main", actor()).unwrap();

    let p = agentvfs::model::path::VPath::parse("notes.txt").unwrap();
    let write = |ws: &agentvfs::model::Workspace, text: &str| {
        ws.edit("test.write", &[&p], |e| {
            e.write_file(&p, text.as_bytes(), Default::default())
        })
        .unwrap();
    };
    write(&ws_a, "one");
    ws_a.checkpoint_save(Some("one"), None).unwrap();

    // b changes the file after a's checkpoint: a's next checkpoint must hold b's text,
    // not the tree a last knew.
    write(&ws_b, "two, from b");
    let before = speculation_counts();
    ws_a.checkpoint_save(Some("after-b"), None).unwrap();
    assert_eq!(since(before).applied, 0, "{:?}", since(before));
    let text = |ws: &agentvfs::model::Workspace| ws.read(|r| r.read(&p)).unwrap();
    ws_a.checkpoint_restore("one").unwrap();
    assert_eq!(text(&ws_b), b"one");
    ws_b.checkpoint_restore("after-b").unwrap();
    assert_eq!(text(&ws_a), b"two, from b");

    // b saves a checkpoint under the name a is about to use: refused, then `already_exists`.
    ws_b.checkpoint_save(Some("both"), None).unwrap();
    let e = ws_a.checkpoint_save(Some("both"), None).unwrap_err();
    assert!(matches!(e, Error::AlreadyExists { .. }), "{e:?}");

    // With nothing in between, a's checkpoint and restore are applied as tried.
    ws_a.checkpoint_save(Some("quiet"), None).unwrap();
    let before = speculation_counts();
    ws_a.checkpoint_save(Some("quiet2"), None).unwrap();
    ws_a.checkpoint_restore("quiet").unwrap();
    assert_eq!(since(before).applied, 2, "{:?}", since(before));
    for v in [a, b] {
        let report = v.check().unwrap();
        assert!(report.ok, "{:?}", report.problems);
    }
}

#[test]
fn hosts_racing_forks_get_unique_ids_and_lose_none() {
    let Some(url) = server() else { return };
    // The counts are this process's: the tests of this file run one at a time.
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    const HOSTS: usize = 6;
    const FORKS: usize = 15;
    let v = hosts(&url, dir.path(), &unique("spec-race"), HOSTS - 1);
    let before = speculation_counts();
    let made: Vec<(String, i64)> = std::thread::scope(|s| {
        let runs: Vec<_> = v
            .iter()
            .enumerate()
            .map(|(h, vault)| {
                s.spawn(move || {
                    let main = vault.workspace("main", actor()).unwrap();
                    (0..FORKS)
                        .map(|k| {
                            let name = format!("h{h}-f{k}");
                            let info = vault.fork(&main, &name, None).unwrap();
                            (name, info.created_at)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        runs.into_iter().flat_map(|r| r.join().unwrap()).collect()
    });
    let counts = since(before);
    assert_eq!(made.len(), HOSTS * FORKS);
    assert_unique_ids(&v[0], HOSTS * FORKS);
    // Every fork is there, as made, seen from every host.
    for vault in &v {
        let forks = vault.forks().unwrap();
        for (name, at) in &made {
            let f = forks.iter().find(|f| &f.name == name);
            assert_eq!(f.map(|f| f.created_at), Some(*at), "{name}");
        }
        let report = vault.check().unwrap();
        assert!(report.ok, "{:?}", report.problems);
    }
    // The hosts got in each other's way, and the guard caught it.
    assert!(counts.refused > 0, "{counts:?}");
}

#[test]
fn threads_of_one_handle_write_side_by_side_and_lose_nothing() {
    let Some(url) = server() else { return };
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    // One host, many agents: the threads of one handle write through several connections
    // at once, each with what its own last write knew.
    const AGENTS: usize = 24;
    const ROUNDS: usize = 6;
    let v = hosts(&url, dir.path(), &unique("spec-threads"), 0).remove(0);
    let main = v.workspace("main", actor()).unwrap();
    std::thread::scope(|s| {
        for a in 0..AGENTS {
            let (v, main) = (&v, &main);
            s.spawn(move || {
                let name = format!("agent-{a}");
                v.fork(main, &name, None).unwrap();
                let ws = v.workspace(&name, actor()).unwrap();
                for r in 0..ROUNDS {
                    let p = agentvfs::model::path::VPath::parse(&format!("a{a}/r{r}.txt")).unwrap();
                    ws.edit("test.write", &[&p], |e| {
                        let parents = agentvfs::model::WriteOptions {
                            parents: true,
                            ..Default::default()
                        };
                        e.write_file(&p, format!("{a}.{r}").as_bytes(), parents)
                    })
                    .unwrap();
                    ws.checkpoint_save(Some(&format!("c{r}")), None).unwrap();
                }
                // Back to the first checkpoint, then forward again: restores race too.
                ws.checkpoint_restore("c0").unwrap();
                ws.checkpoint_restore(&format!("c{}", ROUNDS - 1)).unwrap();
            });
        }
    });
    // Every agent's every write is there, in its own fork, seen by a handle opened anew.
    let fresh = Vault::open(v.path()).unwrap();
    for a in 0..AGENTS {
        let ws = fresh.workspace(&format!("agent-{a}"), actor()).unwrap();
        assert_eq!(ws.checkpoints().unwrap().len(), ROUNDS, "agent {a}");
        for r in 0..ROUNDS {
            let p = agentvfs::model::path::VPath::parse(&format!("a{a}/r{r}.txt")).unwrap();
            let text = ws.read(|view| view.read(&p)).unwrap();
            assert_eq!(text, format!("{a}.{r}").into_bytes(), "agent {a} round {r}");
        }
    }
    assert_unique_ids(&fresh, AGENTS);
    let report = fresh.check().unwrap();
    assert!(report.ok, "{:?}", report.problems);
}

#[test]
fn a_vault_whose_schema_is_newer_than_the_build_is_refused_and_left_alone() {
    let Some(url) = server() else { return };
    let host = Host::new(&url);
    let name = unique("spec-newer");
    host.data(&["vault", "create", &name, "--engine", "postgres"]);
    let schema = host.schema(&name);
    let sql = |q: &str| {
        let out = std::process::Command::new("psql")
            .args([url.as_str(), "-qAtc", q])
            .output()
            .expect("psql runs");
        assert!(out.status.success(), "{q}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let newest = format!("SELECT max(version) FROM \"{schema}\".migrations");
    let known = sql(&newest);
    let next: i64 = known.parse::<i64>().unwrap() + 1;
    // As a later build would leave it.
    sql(&format!(
        "INSERT INTO \"{schema}\".migrations (version) VALUES ({next})"
    ));
    let e = host.err(&["vault", "fork", &name, "refused"], "unsupported_format");
    assert_eq!(e["details"]["found"], next, "{e}");
    assert_eq!(sql(&newest), next.to_string());
    sql(&format!(
        "DELETE FROM \"{schema}\".migrations WHERE version = {next}"
    ));
    host.data(&["vault", "fork", &name, "after"]);
    let forks = host.data(&["vault", "list"]).to_string();
    assert!(
        forks.contains("after") && !forks.contains("refused"),
        "{forks}"
    );
}

#[test]
fn a_write_behind_a_long_write_of_its_own_handle_waits_for_it() {
    let Some(url) = server() else { return };
    const NAME: &str = "a_write_behind_a_long_write_of_its_own_handle_waits_for_it";
    // The lock wait is set per process: run this test again in a process of its own with a
    // short one (1 s: two thirds of 1.5).
    if std::env::var_os("AVFS_TEST_SHORT_WAIT").is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", NAME, "--nocapture"])
            .env("AVFS_TEST_SHORT_WAIT", "1")
            .env("AVFS_SERVER_TIMEOUT_SECS", "1.5")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("1 passed"), "{text}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let v = hosts(&url, dir.path(), &unique("spec-long"), 0).remove(0);
    let main = v.workspace("main", actor()).unwrap();
    v.fork(&main, "other", None).unwrap();
    let other = v.workspace("other", actor()).unwrap();
    let path = |name: &str| agentvfs::model::path::VPath::parse(name).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            let p = path("long.txt");
            main.edit("test.long", &[&p], |e| {
                // Three lock waits long, holding the vault's lock.
                std::thread::sleep(std::time::Duration::from_secs(3));
                e.write_file(&p, b"long", Default::default())
            })
            .unwrap();
        });
        std::thread::sleep(std::time::Duration::from_millis(300));
        // Another thread of the same handle waits for it, as it would for one connection,
        // instead of failing when the server's lock wait runs out.
        let p = path("short.txt");
        other
            .edit("test.short", &[&p], |e| {
                e.write_file(&p, b"short", Default::default())
            })
            .unwrap();
    });
    assert_eq!(
        other.read(|r| r.read(&path("short.txt"))).unwrap(),
        b"short"
    );
    assert_eq!(main.read(|r| r.read(&path("long.txt"))).unwrap(), b"long");
}

/// A vault with a small file (its object kept in this process's memory of object rows once
/// written) and a large one (too large to keep), checkpointed; and its schema.
fn small_and_large(url: &str, dir: &Path) -> (Arc<Vault>, String) {
    let server = Server::new(Some(url), &unique("spec-check")).unwrap();
    let path = dir.join("a.avfs");
    let v = Vault::create_on(&path, Engine::Postgres, Some(&server)).unwrap();
    let ws = v.workspace("main", actor()).unwrap();
    let mut large = b"LARGEMARK-".to_vec();
    large.resize(100_000, b'L');
    for (name, data) in [
        ("small.txt", b"SMALLMARK-".repeat(10)),
        ("large.bin", large),
    ] {
        let p = agentvfs::model::path::VPath::parse(name).unwrap();
        ws.edit("test.write", &[&p], |e| {
            e.write_file(&p, &data, Default::default())
        })
        .unwrap();
    }
    ws.checkpoint_save(Some("c1"), None).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let line = text.lines().find(|l| l.starts_with("schema")).unwrap();
    (v, line.split('"').nth(1).unwrap().to_string())
}

#[test]
fn vault_check_in_a_long_lived_process_reads_every_object_from_the_server() {
    let Some(url) = server() else { return };
    let marked = "t = 1 AND (position('SMALLMARK'::bytea in v) > 0 \
                  OR position('LARGEMARK'::bytea in v) > 0)";
    for (damage, says) in [
        // One byte changed, the length kept: the totals still agree.
        (
            "UPDATE {s}.kv SET v = overlay(v placing '\\x00'::bytea from 20 for 1) WHERE {m}",
            "does not match",
        ),
        ("DELETE FROM {s}.kv WHERE {m}", "missing"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (v, schema) = small_and_large(&url, dir.path());
        let sql = damage
            .replace("{s}", &format!("\"{schema}\""))
            .replace("{m}", marked);
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        assert_eq!(c.execute(&sql, &[]).unwrap(), 2, "{sql}");
        // The small object is in this process's memory; check must not take it from there.
        let report = v.check().unwrap();
        let objects: std::collections::BTreeSet<_> = report
            .problems
            .iter()
            .filter(|p| p.problem.contains(says))
            .map(|p| p.object.clone())
            .collect();
        assert_eq!(objects.len(), 2, "{sql}: {:?}", report.problems);
    }
}

/// Every audit record has an id of its own, and there are `forks` records of forks made:
/// no write took an id another had (a counter read out of date and not caught).
fn assert_unique_ids(v: &Arc<Vault>, forks: usize) {
    let records = v.audit(100_000, None, true).unwrap();
    let mut ids: Vec<i64> = records.iter().map(|r| r.id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), records.len(), "audit ids repeat");
    let made = records
        .iter()
        .filter(|r| r.operation == "vault.fork" && r.result == "ok")
        .count();
    assert_eq!(made, forks, "forks recorded");
}

/// The counts are per process: tests that read them run one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|p| p.into_inner())
}
