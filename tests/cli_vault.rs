//! Vault management through the real binary: create/list/use/info/delete/fork, vault
//! selection precedence, and what happens with foreign, newer or damaged vault files.

mod common;

use std::fs;

use common::TestEnv;
use predicates::prelude::*;
use serde_json::json;

fn list(env: &TestEnv) -> Vec<(String, String, bool)> {
    env.data(&["vault", "list"])
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap().to_string(),
                v["workspace"].as_str().unwrap().to_string(),
                v["current"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn current(env: &TestEnv) -> Option<String> {
    list(env).into_iter().find(|v| v.2).map(|v| v.0)
}

#[test]
fn create_list_use_info() {
    let env = TestEnv::new();
    assert_eq!(
        env.stdout(&["vault", "list"]).trim(),
        "no vaults yet: create one with `avfs vault create NAME`"
    );
    let a = env.create_vault("alpha");
    assert_eq!(a["name"], "alpha");
    assert_eq!(a["workspace"], "main");
    let path = env.vault_file("alpha");
    assert!(path.exists(), "vault file {} missing", path.display());
    assert_eq!(a["path"], json!(path.canonicalize().unwrap()));

    // The first vault becomes current; later ones do not.
    env.create_vault("beta");
    assert_eq!(current(&env).as_deref(), Some("alpha"));
    assert_eq!(
        list(&env),
        vec![
            ("alpha".into(), "main".into(), true),
            ("beta".into(), "main".into(), false)
        ]
    );
    env.avfs(&["vault", "list"])
        .success()
        .stdout(predicate::str::contains("*  alpha"));

    // Writes go to the current vault; `vault use` switches.
    env.write(None, "in-alpha.txt", b"a");
    let used = env.data(&["vault", "use", "beta"]);
    assert_eq!(used["name"], "beta");
    assert_eq!(current(&env).as_deref(), Some("beta"));
    env.write(None, "in-beta.txt", b"b");
    assert_eq!(
        env.files(None).keys().cloned().collect::<Vec<_>>(),
        vec!["/in-beta.txt"]
    );
    assert_eq!(
        env.files(Some("alpha")).keys().cloned().collect::<Vec<_>>(),
        vec!["/in-alpha.txt"]
    );

    // info of the current vault and of a named one.
    let info = env.data(&["vault", "info"]);
    assert_eq!(info["name"], "beta");
    assert_eq!(info["workspace"]["name"], "main");
    assert_eq!(info["workspace"]["files"], 1);
    assert_eq!(info["workspace"]["bytes"], 1);
    let engine = match info["engine"].as_str().unwrap() {
        "sqlite" => agentvfs::store::Engine::Sqlite,
        _ => agentvfs::store::Engine::Lmdb,
    };
    assert_eq!(
        info["format_version"],
        agentvfs::store::format_version(engine)
    );
    assert_eq!(info["checkpoints"], 0);
    let info = env.data(&["vault", "info", "alpha"]);
    assert_eq!(info["name"], "alpha");
    assert_eq!(info["path"], json!(path.canonicalize().unwrap()));
    env.avfs(&["vault", "info", "alpha"])
        .success()
        .stdout(predicate::str::contains("alpha").and(predicate::str::contains("files")));

    // Duplicates and bad names are refused without touching the registry.
    env.err(&["vault", "create", "alpha"], "already_exists");
    env.err(&["vault", "create", "bad name"], "invalid_name");
    env.err(&["vault", "create", "a/b"], "invalid_name");
    assert_eq!(list(&env).len(), 2);
    // `vault use` of something unknown changes nothing.
    env.err(&["vault", "use", "gamma"], "vault_not_found");
    assert_eq!(current(&env).as_deref(), Some("beta"));
}

#[test]
fn create_with_explicit_path() {
    let env = TestEnv::new();
    let file = env.host("elsewhere/nested/custom.avfs");
    let t = env.data(&[
        "vault",
        "create",
        "custom",
        "--path",
        file.to_str().unwrap(),
    ]);
    assert!(file.exists()); // a file, or a sled vault's directory
    assert_eq!(t["path"], json!(file.canonicalize().unwrap()));
    assert!(!env.vault_file("custom").exists());
    env.write(Some("custom"), "x", b"1");
    assert_eq!(env.cat(Some(file.to_str().unwrap()), "x"), b"1");
    // An existing file is never overwritten by `create`.
    let before = common::tree_bytes(&file);
    env.err(
        &["vault", "create", "other", "--path", file.to_str().unwrap()],
        "already_exists",
    );
    assert_eq!(common::tree_bytes(&file), before);
    assert_eq!(list(&env).len(), 1);
}

#[test]
fn delete_requires_yes_and_removes_vault_with_its_forks() {
    let env = TestEnv::with_vault("doomed");
    env.create_vault("keeper");
    env.write(Some("doomed"), "f", b"precious");
    env.data(&["vault", "fork", "doomed", "doomed-fork"]);
    let file = env.vault_file("doomed");

    // Without --yes: invalid_argument, exit 5, nothing deleted.
    let e = env.err(&["vault", "delete", "doomed"], "invalid_argument");
    assert!(e["message"].as_str().unwrap().contains("--yes"));
    env.avfs(&["vault", "delete", "doomed"])
        .code(5)
        .stderr(predicate::str::contains("--yes"));
    assert!(file.exists()); // a file, or a sled vault's directory
    assert_eq!(list(&env).len(), 3);
    assert_eq!(env.cat(Some("doomed"), "f"), b"precious");
    assert_eq!(env.cat(Some("doomed-fork"), "f"), b"precious");

    // With --yes: file, WAL side files and every name on it are gone.
    let r = env.data(&["vault", "delete", "doomed", "--yes"]);
    assert_eq!(r["file_deleted"], true);
    let mut gone: Vec<String> = r["unregistered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    gone.sort();
    assert_eq!(gone, vec!["doomed", "doomed-fork"]);
    assert!(!file.exists());
    for suffix in ["-wal", "-shm"] {
        let mut p = file.clone().into_os_string();
        p.push(suffix);
        assert!(!std::path::Path::new(&p).exists(), "{p:?} left behind");
    }
    assert_eq!(list(&env), vec![("keeper".into(), "main".into(), false)]);
    env.err(&["--workspace", "doomed", "ls"], "vault_not_found");
    env.err(&["--workspace", "doomed-fork", "ls"], "vault_not_found");
    // It was current; now nothing is.
    env.err(&["ls"], "no_vault_selected");
    env.err(&["vault", "delete", "doomed", "--yes"], "vault_not_found");
}

#[test]
fn delete_a_fork_keeps_the_vault() {
    let env = TestEnv::with_vault("v");
    env.write(None, "f", b"main");
    env.data(&["vault", "fork", "v", "f1"]);
    env.write(Some("f1"), "g", b"fork");
    env.err(&["vault", "delete", "f1"], "invalid_argument");
    assert_eq!(env.cat(Some("f1"), "g"), b"fork");
    let r = env.data(&["vault", "delete", "f1", "--yes"]);
    assert_eq!(r["file_deleted"], false);
    assert_eq!(r["unregistered"], json!(["f1"]));
    assert!(env.vault_file("v").exists());
    assert_eq!(env.cat(Some("v"), "f"), b"main");
    assert_eq!(list(&env), vec![("v".into(), "main".into(), true)]);
    env.err(&["--workspace", "f1", "ls"], "vault_not_found");
    let forks = env.data(&["vault", "info", "v"])["forks"].clone();
    assert_eq!(forks, json!([]));
}

#[test]
fn fork_live_at_checkpoint_and_use() {
    let env = TestEnv::with_vault("proj");
    env.write(None, "a.txt", b"v1");
    env.data(&["checkpoint", "save", "c1"]);
    env.write(None, "a.txt", b"v2");

    // A live fork sees v2 and does not change the current vault.
    let f = env.data(&["vault", "fork", "proj", "live"]);
    assert_eq!(f["target"]["name"], "live");
    assert_eq!(f["target"]["workspace"], "live");
    assert_eq!(f["fork"]["parent"], "main");
    assert_eq!(f["fork"]["forked_at_checkpoint"], json!(null));
    assert_eq!(env.cat(Some("live"), "a.txt"), b"v2");
    assert_eq!(current(&env).as_deref(), Some("proj"));

    // --at forks the checkpoint's state; --use makes it current.
    let f = env.data(&["vault", "fork", "proj", "old", "--at", "c1", "--use"]);
    assert_eq!(f["fork"]["forked_at_checkpoint"], "c1");
    assert_eq!(current(&env).as_deref(), Some("old"));
    assert_eq!(env.cat(None, "a.txt"), b"v1");
    assert_eq!(env.cat(Some("proj"), "a.txt"), b"v2");

    let info = env.data(&["vault", "info"]);
    assert_eq!(info["name"], "old");
    assert_eq!(info["workspace"]["name"], "old");
    assert_eq!(info["workspace"]["parent"], "main");
    assert_eq!(info["workspace"]["forked_at_checkpoint"], "c1");
    let mut forks: Vec<String> = env.data(&["vault", "info", "proj"])["forks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    forks.sort();
    assert_eq!(forks, vec!["live", "old"]);

    // A fork of a fork.
    env.data(&["vault", "fork", "old", "older"]);
    assert_eq!(
        env.data(&["vault", "info", "older"])["workspace"]["parent"],
        "old"
    );
    assert_eq!(env.cat(Some("older"), "a.txt"), b"v1");

    // Errors leave no half-made fork behind.
    env.err(
        &["vault", "fork", "proj", "ghost", "--at", "nope"],
        "checkpoint_not_found",
    );
    env.err(&["--workspace", "ghost", "ls"], "vault_not_found");
    env.err(&["vault", "fork", "proj", "live"], "already_exists");
    env.err(&["vault", "fork", "proj", "bad name"], "invalid_name");
    env.err(&["vault", "fork", "nosuch", "x"], "vault_not_found");
    assert_eq!(list(&env).len(), 4);
}

#[test]
fn selection_precedence_flag_env_current() {
    let env = TestEnv::new();
    env.create_vault("cur");
    env.create_vault("byenv");
    env.create_vault("byflag");
    env.write(Some("cur"), "which", b"cur");
    env.write(Some("byenv"), "which", b"env");
    env.write(Some("byflag"), "which", b"flag");
    let which = |args: &[&str], envs: &[(&str, &str)]| {
        let mut full = args.to_vec();
        full.extend_from_slice(&["cat", "which"]);
        let doc = env.data_env(&full, envs);
        doc["content"].as_str().unwrap().to_string()
    };
    assert_eq!(which(&[], &[]), "cur");
    assert_eq!(which(&[], &[("AVFS_WORKSPACE", "byenv")]), "env");
    assert_eq!(which(&["--workspace", "byflag"], &[]), "flag");
    assert_eq!(which(&["-w", "byflag"], &[]), "flag");
    assert_eq!(
        which(&["--workspace", "byflag"], &[("AVFS_WORKSPACE", "byenv")]),
        "flag"
    );

    // A path selects that file's main workspace, by flag or by env.
    let path = env.vault_file("byflag");
    let p = path.to_str().unwrap();
    assert_eq!(which(&["--workspace", p], &[]), "flag");
    assert_eq!(which(&[], &[("AVFS_WORKSPACE", p)]), "flag");
    // A relative path works from the working directory.
    let rel = env.host("rel.avfs");
    // A copy of the vault (`cp -a`: a sled vault is a directory).
    assert!(
        std::process::Command::new("cp")
            .arg("-a")
            .arg(&path)
            .arg(&rel)
            .status()
            .unwrap()
            .success()
    );
    assert_eq!(which(&["--workspace", "rel.avfs"], &[]), "flag");
    assert_eq!(which(&["--workspace", "./rel.avfs"], &[]), "flag");

    // A fork's name selects the fork; a path to the same file selects main.
    env.data(&["vault", "fork", "byflag", "fk"]);
    env.write(Some("fk"), "which", b"fork");
    assert_eq!(which(&["--workspace", "fk"], &[]), "fork");
    assert_eq!(which(&["--workspace", p], &[]), "flag");

    // An unknown name in AVFS_WORKSPACE is an error, not a silent fallback to the current one.
    env.err_env(
        &["cat", "which"],
        &[("AVFS_WORKSPACE", "nosuch")],
        "vault_not_found",
    );
    // A path that does not exist.
    let missing = env.host("missing.avfs");
    env.err(
        &["--workspace", missing.to_str().unwrap(), "ls"],
        "vault_not_found",
    );
    assert!(
        !missing.exists(),
        "selecting a missing path must not create it"
    );
}

#[test]
fn old_spellings_select_a_workspace_too() {
    // `--vault` and $AVFS_VAULT came before `--workspace` and $AVFS_WORKSPACE; scripts
    // written for them keep working, and the new spellings win where both are given.
    let env = TestEnv::new();
    for name in ["cur", "old", "new"] {
        env.create_vault(name);
        env.write(Some(name), "which", name.as_bytes());
    }
    env.data(&["vault", "use", "cur"]);
    let which = |args: &[&str], envs: &[(&str, &str)]| {
        let mut full = args.to_vec();
        full.extend_from_slice(&["cat", "which"]);
        let doc = env.data_env(&full, envs);
        doc["content"].as_str().unwrap().to_string()
    };
    assert_eq!(which(&["--vault", "old"], &[]), "old");
    assert_eq!(which(&[], &[("AVFS_VAULT", "old")]), "old");
    assert_eq!(
        which(&[], &[("AVFS_VAULT", "old"), ("AVFS_WORKSPACE", "new")]),
        "new"
    );
    assert_eq!(
        which(&["--vault", "old"], &[("AVFS_WORKSPACE", "new")]),
        "old"
    );
    assert_eq!(
        which(&["--workspace", "new"], &[("AVFS_VAULT", "old")]),
        "new"
    );
    // An unknown name in the old variable is an error too, not the current workspace.
    env.err_env(
        &["cat", "which"],
        &[("AVFS_VAULT", "nosuch")],
        "vault_not_found",
    );
    // The old option is accepted, not advertised.
    env.avfs(&["--help"])
        .success()
        .stdout(predicate::str::contains("--workspace"))
        .stdout(predicate::str::contains("--vault").not());
}

#[test]
fn typo_gets_suggestions() {
    let env = TestEnv::with_vault("project");
    env.create_vault("zebra");
    let e = env.err(&["--workspace", "projct", "ls"], "vault_not_found");
    assert_eq!(e["details"]["name"], "projct");
    assert_eq!(e["details"]["suggestions"], json!(["project"]));
    env.avfs(&["--workspace", "projct", "ls"])
        .code(3)
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains("did you mean project"));
    let e = env.err(&["vault", "use", "zebr"], "vault_not_found");
    assert_eq!(e["details"]["suggestions"], json!(["zebra"]));
    let e = env.err(&["vault", "info", "qqqqqqqqqq"], "vault_not_found");
    assert_eq!(e["details"]["suggestions"], json!([]));
}

#[test]
fn no_vault_selected() {
    let env = TestEnv::new();
    for args in [
        &["ls"][..],
        &["cat", "x"],
        &["write", "x", "y"],
        &["checkpoint", "list"],
        &["vault", "info"],
        &["stats"],
    ] {
        let e = env.err(args, "no_vault_selected");
        assert_eq!(e["details"], json!({}));
    }
    env.avfs(&["ls"])
        .code(3)
        .stderr(predicate::str::contains(
            "no workspace selected: pass --workspace",
        ))
        .stderr(predicate::str::contains("vault use"));
    // Nothing was created by trying.
    assert!(!env.home.join("vaults").exists());
}

#[test]
fn non_sqlite_file_is_not_a_vault() {
    let env = TestEnv::new();
    let junk = env.host("junk.avfs");
    let bytes = common::random_bytes(3, 8192);
    fs::write(&junk, &bytes).unwrap();
    let p = junk.to_str().unwrap();
    let e = env.err(&["--workspace", p, "ls"], "not_a_vault");
    assert_eq!(e["details"]["path"], json!(junk.canonicalize().unwrap()));
    env.avfs(&["--workspace", p, "ls"])
        .code(7)
        .stderr(predicate::str::contains("not an agentvfs vault"));
    env.err(&["--workspace", p, "write", "x", "y"], "not_a_vault");
    env.err(&["--workspace", p, "vault", "check"], "not_a_vault");
    assert_eq!(
        fs::read(&junk).unwrap(),
        bytes,
        "a foreign file was modified"
    );
    // An empty file is not a vault either.
    let empty = env.host("empty.avfs");
    fs::write(&empty, b"").unwrap();
    env.err(
        &["--workspace", empty.to_str().unwrap(), "ls"],
        "not_a_vault",
    );
}

/// A vault whose main workspace is missing (a create cut short between making the vault
/// and its first write) fails `vault check`, which says what happened and what to do.
#[test]
fn a_vault_without_its_main_workspace_fails_its_check() {
    if !common::skip::only_engine("sqlite") {
        return;
    }
    let env = TestEnv::with_vault("v");
    let conn = rusqlite::Connection::open(env.vault_file("v")).unwrap();
    conn.execute("DELETE FROM workspaces WHERE name = 'main'", [])
        .unwrap();
    drop(conn);
    let e = env.err(&["vault", "check"], "corrupt_vault");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("no main workspace: its creation did not finish"),
        "{e:#}"
    );
}

fn foreign_sqlite(env: &TestEnv) -> std::path::PathBuf {
    let db = env.host("app.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch("CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users(name) VALUES ('ann');")
        .unwrap();
    drop(conn);
    db
}

#[test]
fn sqlite_file_that_is_not_a_vault() {
    let env = TestEnv::new();
    let db = foreign_sqlite(&env);
    let p = db.to_str().unwrap();
    let e = env.err(&["--workspace", p, "ls"], "not_a_vault");
    assert!(
        e["details"]["reason"]
            .as_str()
            .unwrap()
            .contains("application id"),
        "{e:#}"
    );
    env.err(&["--workspace", p, "write", "x", "y"], "not_a_vault");
    env.err(&["--workspace", p, "checkpoint", "save"], "not_a_vault");
    // Its tables were not touched (no vault schema migrated into it).
    let conn = rusqlite::Connection::open(&db).unwrap();
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(tables, vec!["users"]);
    let v: u32 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(v, 0);
}

/// Trying a foreign SQLite database as a vault must leave the file exactly as it was: it
/// is someone else's database (an app's), and switching it to WAL mode changes how that
/// app's file behaves on disk.
#[test]
fn foreign_sqlite_file_is_left_byte_identical() {
    let env = TestEnv::new();
    let db = foreign_sqlite(&env);
    let before = fs::read(&db).unwrap();
    env.err(&["--workspace", db.to_str().unwrap(), "ls"], "not_a_vault");
    assert!(
        fs::read(&db).unwrap() == before,
        "opening a foreign SQLite file modified it"
    );
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mode: String = conn
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete", "journal mode of a foreign database changed");
    // An empty file named like a vault stays empty too.
    let empty = env.host("empty.avfs");
    fs::write(&empty, b"").unwrap();
    env.err(
        &["--workspace", empty.to_str().unwrap(), "ls"],
        "not_a_vault",
    );
    assert_eq!(
        fs::read(&empty).unwrap().len(),
        0,
        "an empty file was turned into a database"
    );
}

#[test]
fn an_older_format_is_migrated_forward_on_open() {
    if !common::skip::only_engine("sqlite") {
        return;
    }
    let env = TestEnv::with_vault("v");
    env.write(None, "f", b"data");
    {
        let conn = rusqlite::Connection::open(env.vault_file("v")).unwrap();
        // As a version-1 vault was: without what later versions added.
        conn.execute_batch(
            "ALTER TABLE checkpoints DROP COLUMN auto;
             DROP TABLE id_floor;
             DROP INDEX audit_by_step;
             ALTER TABLE audit DROP COLUMN step;",
        )
        .unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
    }
    env.avfs(&["cat", "f"]).success().stdout("data");
    let conn = rusqlite::Connection::open(env.vault_file("v")).unwrap();
    let v: u32 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(v, agentvfs::store::FORMAT_VERSION);
}

#[test]
fn newer_format_is_unsupported() {
    if !common::skip::only_engine("sqlite") {
        return;
    }
    let env = TestEnv::with_vault("v");
    env.write(None, "f", b"data");
    {
        let conn = rusqlite::Connection::open(env.vault_file("v")).unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
    }
    for args in [
        &["ls"][..],
        &["cat", "f"],
        &["write", "g", "x"],
        &["vault", "check"],
    ] {
        let e = env.err(args, "unsupported_format");
        assert_eq!(e["details"]["found"], 99);
        assert_eq!(e["details"]["supported"], agentvfs::store::FORMAT_VERSION);
    }
    let p = env.vault_file("v");
    env.err(
        &["--workspace", p.to_str().unwrap(), "ls"],
        "unsupported_format",
    );
    env.avfs(&["cat", "f"])
        .code(7)
        .stderr(predicate::str::contains("upgrade avfs"));
    // Not downgraded or migrated by the attempt.
    let conn = rusqlite::Connection::open(&p).unwrap();
    let v: u32 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(v, 99);
}

/// Ids (hex) of the stored content chunks.
fn chunk_ids(env: &TestEnv, vault: &str) -> Vec<String> {
    let conn = rusqlite::Connection::open(env.vault_file(vault)).unwrap();
    conn.prepare("SELECT lower(hex(id)) FROM objects WHERE kind = 1 ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn corrupt_chunks(env: &TestEnv, vault: &str) {
    let conn = rusqlite::Connection::open(env.vault_file(vault)).unwrap();
    let n = conn
        .execute(
            // Sizes kept right: this is damage only the content hash finds (a wrong size
            // has its own test).
            "UPDATE objects SET data = CAST('tampered ' || hex(id) AS BLOB), \
             size = length(CAST('tampered ' || hex(id) AS BLOB)) WHERE kind = 1",
            [],
        )
        .unwrap();
    assert!(n >= 2, "expected at least two chunks, corrupted {n}");
}

#[test]
fn check_ok_then_corruption_is_reported() {
    if !common::skip::only_engine("sqlite") {
        return;
    }
    let env = TestEnv::with_vault("v");
    env.write(None, "a.txt", b"alpha content");
    env.write(None, "dir/b.txt", b"beta content");
    env.data(&["checkpoint", "save", "c1"]);
    env.write(None, "a.txt", b"alpha v2");
    let ok = env.data(&["vault", "check"]);
    assert_eq!(ok["ok"], true);
    assert_eq!(ok["problems"], json!([]));
    let checked = ok["objects_checked"].as_u64().unwrap();
    assert!(checked >= 3);
    assert_eq!(
        env.stdout(&["vault", "check"]),
        format!("ok: {checked} objects verified\n")
    );

    let ids = chunk_ids(&env, "v");
    assert_eq!(ids.len(), 3, "three distinct contents: {ids:?}");
    corrupt_chunks(&env, "v");

    let e = env.err(&["vault", "check"], "corrupt_vault");
    let problems: Vec<String> = e["details"]["problems"]
        .as_array()
        .expect("details.problems is a list")
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    // Every damaged object is reported, none hidden behind the first.
    assert_eq!(problems.len(), ids.len(), "{problems:#?}");
    for id in &ids {
        assert!(
            problems.iter().any(|p| p.contains(id.as_str())),
            "damaged chunk {id} not reported: {problems:#?}"
        );
    }
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains(&format!("{} problem", ids.len()))
    );
}

/// `vault check` compares each object's recorded size with its data: reads trust the
/// size, so a wrong one would read short (or past the data) without a word.
#[test]
fn check_reports_an_object_whose_recorded_size_is_wrong() {
    if !common::skip::only_engine("sqlite") {
        return;
    }
    let env = TestEnv::with_vault("v");
    env.write(None, "a.txt", b"alpha content");
    let ids = chunk_ids(&env, "v");
    {
        let conn = rusqlite::Connection::open(env.vault_file("v")).unwrap();
        conn.execute("UPDATE objects SET size = 5 WHERE kind = 1", [])
            .unwrap();
    }
    let e = env.err(&["vault", "check"], "corrupt_vault");
    let problems = e["details"]["problems"].to_string();
    assert!(
        problems.contains(&format!(
            "object {} records size 5 but holds 13 bytes",
            ids[0]
        )),
        "{problems}"
    );
}

/// The human output of a failed check names every damaged object, not just the first.
#[test]
fn check_text_output_lists_every_problem() {
    if !common::skip::only_engine("sqlite") {
        return;
    }
    let env = TestEnv::with_vault("v");
    env.write(None, "a.txt", b"alpha content");
    env.write(None, "b.txt", b"beta content");
    let ids = chunk_ids(&env, "v");
    assert_eq!(ids.len(), 2);
    corrupt_chunks(&env, "v");
    let out = env.avfs(&["vault", "check"]).code(7).get_output().clone();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for id in &ids {
        assert!(
            text.contains(id.as_str()),
            "damaged chunk {id} missing from the text report:\n{text}"
        );
    }
}

/// A registered vault whose file was damaged is `corrupt_vault` (exit 7) saying what is
/// damaged, never `not_a_vault` with a suggestion to create one; `vault check` answers
/// with a report of the damage. Cases: the file cut in half, its header overwritten, a
/// row whose value has the wrong type.
#[test]
fn damaged_vault_files_are_corrupt_vault_and_check_reports_them() {
    if !common::skip::only_engine("sqlite") {
        return;
    }
    let env = TestEnv::with_vault("v");
    for i in 0..200 {
        env.write(
            None,
            &format!("d/f{i}.txt"),
            format!("content {i}").as_bytes(),
        );
    }
    let file = env.vault_file("v");
    let good = fs::read(&file).unwrap();
    let check_problems = |what: &str| {
        let e = env.err(&["ls", "/"], "corrupt_vault");
        let msg = e["message"].as_str().unwrap();
        assert!(!msg.contains("vault create"), "{what}: {msg}");
        let report = env.err(&["vault", "check"], "corrupt_vault");
        let problems = report["details"]["problems"].as_array().unwrap();
        assert!(!problems.is_empty(), "{what}: {report}");
        assert!(
            !report["message"]
                .as_str()
                .unwrap()
                .contains("run `avfs vault check`"),
            "{what}: {report}"
        );
    };
    fs::write(&file, &good[..good.len() / 2]).unwrap();
    check_problems("cut in half");
    let mut header = good.clone();
    header[..16].copy_from_slice(b"garbage garbage!");
    fs::write(&file, &header).unwrap();
    check_problems("header overwritten");
    fs::write(&file, &good).unwrap();
    env.data(&["ls", "/"]);
    rusqlite::Connection::open(&file)
        .unwrap()
        .execute("UPDATE workspaces SET base = 'not an id'", [])
        .unwrap();
    check_problems("a row of the wrong type");
    // A damaged pending-changes marker (writes fail on it): vault check names it.
    fs::write(&file, &good).unwrap();
    env.data(&["import", env.dir.path().to_str().unwrap(), "/imp"]);
    let n = rusqlite::Connection::open(&file)
        .unwrap()
        .execute(
            "UPDATE settings SET value = 'garbage' WHERE key LIKE 'unlogged.%'",
            [],
        )
        .unwrap();
    assert_eq!(n, 1);
    let report = env.err(&["vault", "check"], "corrupt_vault");
    assert!(report.to_string().contains("marker"), "{report}");
}
