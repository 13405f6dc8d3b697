//! The `--json` contract: every command in schema/avfs.schema.json is exercised and its
//! output validated; the committed schema is exactly what `avfs schema` prints; usage
//! errors are JSON too.

mod common;

use std::fs;

use common::{TestEnv, Unmount, contract, schema_path};
use predicates::prelude::*;
use serde_json::{Value, json};

#[test]
fn every_command_in_the_schema_is_exercised_and_valid() {
    let env = TestEnv::new();
    let host = env.host("host-src");
    fs::create_dir_all(host.join("sub")).unwrap();
    fs::write(host.join("sub/h.txt"), b"from host\n").unwrap();
    fs::hard_link(host.join("sub/h.txt"), host.join("h-link.txt")).unwrap();

    env.data(&["vault", "create", "c"]);
    env.data(&["vault", "create", "other"]);
    env.data(&["vault", "list"]);
    env.data(&["vault", "use", "c"]);
    env.data(&["vault", "info"]);
    env.data(&["write", "a.txt", "hello\nTODO: world\n"]);
    env.data(&["mkdir", "-p", "d/e"]);
    env.data(&["ls", "-l", "-a"]);
    env.data(&["cat", "a.txt"]);
    env.data(&["cp", "a.txt", "d/copy.txt"]);
    env.data(&["mv", "d/copy.txt", "d/e/moved.txt"]);
    env.data(&["ln", "-s", "a.txt", "link"]);
    let hard = env.data(&["ln", "a.txt", "hard.txt"]);
    assert_eq!(hard["nlink"], 2);
    env.data(&["chmod", "600", "a.txt"]);
    env.data(&["tree", "-L", "2"]);
    env.data(&["stat", "link"]);
    env.data(&["find", "*.txt", "--type", "f"]);
    env.data(&["grep", "-i", "todo"]);
    env.data(&["tag", "a.txt", "t1", "t2"]);
    env.data(&["untag", "a.txt", "t1"]);
    env.data(&["meta", "set", "a.txt", "k", "v"]);
    env.data(&["meta", "get", "a.txt"]);
    env.data(&["meta", "unset", "a.txt", "k"]);
    env.data(&["checkpoint", "save", "one", "-m", "first"]);
    env.data(&["checkpoint", "list"]);
    env.data(&["checkpoint", "info", "one"]);
    env.data(&["log", "a.txt"]);
    env.data(&["rm", "-r", "d"]);
    env.data(&["checkpoint", "restore", "one"]);
    env.data(&["checkpoint", "save"]);
    env.data(&["checkpoint", "delete", "one"]);
    env.data(&["import", host.to_str().unwrap(), "/imported"]);
    env.data(&["export", "/", env.host("exported").to_str().unwrap()]);
    env.data(&["quota", "set", "--max-files", "1000"]);
    env.data(&["quota", "show"]);
    env.data(&["audit", "--limit", "5"]);
    env.data(&["stats"]);
    env.data(&["gc", "--dry-run"]);
    env.data(&["gc"]);
    env.data(&["compact"]);

    // History: diff, op log, undo/redo, op restore, merge, apply, prune.
    env.data(&["write", "a.txt", "changed since the checkpoint\n"]);
    env.data(&["diff"]);
    let ops = env.data(&["op", "log", "--limit", "5"]);
    env.data(&["undo"]);
    env.data(&["redo"]);
    let id = ops[0]["id"]
        .as_i64()
        .expect("op log entries have ids")
        .to_string();
    env.data(&["op", "restore", &id]);
    let base = env.host("base-export");
    env.data(&["export", "/", base.to_str().unwrap()]);
    env.data(&["vault", "fork", "c", "feat"]);
    env.data(&["--workspace", "feat", "write", "feature.txt", "feature\n"]);
    env.data(&["--workspace", "feat", "apply", base.to_str().unwrap()]);
    env.data(&["merge", "feat"]);
    env.data(&["prune", "--keep-last", "100"]);

    // Mounts need FUSE; CI only allows running without it on purpose.
    let fuse = common::skip::require_fuse();
    let mut exempt = std::collections::BTreeSet::new();
    if fuse {
        let dir = env.host("mnt");
        fs::create_dir_all(&dir).unwrap();
        let _guard = Unmount(&env, dir.clone());
        env.data(&["mount", "c", dir.to_str().unwrap()]);
        env.data(&["mounts"]);
        env.data(&["unmount", dir.to_str().unwrap()]);
        env.data(&["proxy", "exec", "--shell", "echo hi > proxied.txt"]);
        env.data(&["rollback"]);
        env.data(&["session", "start", "c", "--name", "s1"]);
        env.data(&["session", "list"]);
        env.data(&["proxy", "exec", "--session", "s1", "--", "ls"]);
        env.data(&["session", "stop", "s1"]);
    } else {
        // require_fuse printed the SKIP line: only an opt-out gets here.
        for c in [
            "mount",
            "mounts",
            "unmount",
            "proxy exec",
            "rollback",
            "session start",
            "session list",
            "session stop",
        ] {
            exempt.insert(c.to_string());
        }
    }

    env.data(&["vault", "fork", "c", "f", "--use"]);
    env.data(&["vault", "check"]);
    // migrate needs a second engine in the build (the `lmdb` feature, as CI builds).
    if cfg!(feature = "lmdb") {
        let to = if common::skip::engine() == "lmdb" {
            "sqlite"
        } else {
            "lmdb"
        };
        env.data(&["vault", "migrate", "other", "--to", to]);
    } else {
        exempt.insert("vault migrate".to_string());
    }
    // attach: a vault another host made on the PostgreSQL server (a second $AVFS_HOME).
    match common::skip::postgres_url() {
        Some(url) => {
            let maker = TestEnv::new();
            let name = format!("contract-{}", std::process::id());
            maker.data(&[
                "vault", "create", &name, "--engine", "postgres", "--url", &url,
            ]);
            env.data(&["vault", "attach", &name, "--url", &url]);
            env.data(&["vault", "delete", &name, "--yes"]);
        }
        None => {
            exempt.insert("vault attach".to_string());
        }
    }
    env.data(&["vault", "delete", "other", "--yes"]);
    env.data(&["schema"]);
    env.data(&["completions", "bash"]);
    env.data(&["man"]);
    // Lines on stdin print their own documents; with none, only the shell's summary.
    env.data_in(&["shell"], b"");
    env.data(&["checkpoint", "retention"]);
    // handback needs git (CI installs it; AVFS_CI_ALLOW_NO_TOOLS opts out on purpose).
    if common::skip::require_tool("git") {
        let repo = env.host("git-repo");
        fs::create_dir_all(&repo).unwrap();
        let ok = std::process::Command::new("git")
            .args(["init", "-q"])
            .current_dir(&repo)
            .status()
            .unwrap()
            .success();
        assert!(ok);
        env.data(&["handback", "--git", repo.to_str().unwrap(), "--branch", "b"]);
    } else {
        exempt.insert("handback".to_string());
    }
    env.data(&["approvals", "grant", "make *", "--for", "1m"]);
    env.data(&["approvals", "list"]);
    env.data(&["approvals", "revoke", "1"]);
    env.data(&["policy", "show"]);
    env.data(&["policy", "test"]);
    env.data(&["proxy", "check", "--", "ls", "-la"]);

    let listed = contract().command_names();
    let mut seen = env.seen_commands();
    seen.extend(exempt);
    let missing: Vec<&String> = listed.difference(&seen).collect();
    assert!(missing.is_empty(), "not exercised: {missing:?}");
    let unknown: Vec<&String> = seen.difference(&listed).collect();
    assert!(
        unknown.is_empty(),
        "commands missing from the schema: {unknown:?}"
    );
}

#[test]
fn every_command_schema_compiles() {
    let broken = contract().broken_schemas();
    assert!(
        broken.is_empty(),
        "command schemas in schema/avfs.schema.json that do not compile: {broken:#?}"
    );
}

/// The committed schema cannot drift from the binary: it must be byte-for-byte what
/// `avfs schema` prints (CONTRIBUTING: `cargo run -q -- schema > schema/avfs.schema.json`).
#[test]
fn committed_schema_is_exactly_avfs_schema_output() {
    let env = TestEnv::new();
    let printed = env.stdout(&["schema"]);
    let committed = fs::read_to_string(schema_path()).unwrap();
    if printed != committed {
        let first = printed
            .lines()
            .zip(committed.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(printed.lines().count().min(committed.lines().count()));
        panic!(
            "schema/avfs.schema.json differs from `avfs schema` at line {}:\n  avfs schema: {:?}\n  committed:   {:?}\nregenerate with `cargo run -q -- schema > schema/avfs.schema.json`",
            first + 1,
            printed.lines().nth(first),
            committed.lines().nth(first)
        );
    }
    // The JSON form carries the same document.
    let data = env.data(&["schema"]);
    assert_eq!(data, contract().doc);
}

/// Subcommand names from the `Commands:` section of a help text.
fn help_commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .map_while(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect()
}

#[test]
fn schema_covers_every_subcommand_of_the_cli() {
    // Every leaf subcommand in `avfs --help` (groups expanded) has a schema entry, and
    // every schema entry is a real command.
    let env = TestEnv::new();
    let mut leaves = Vec::new();
    for name in help_commands(&env.stdout(&["--help"])) {
        // `avfs mcp` speaks the Model Context Protocol on stdout instead (tests/mcp.rs).
        if name == "mcp" {
            continue;
        }
        let sub = help_commands(&env.stdout(&[&name, "--help"]));
        if sub.is_empty() {
            leaves.push(name);
        } else {
            leaves.extend(sub.into_iter().map(|s| format!("{name} {s}")));
        }
    }
    assert!(leaves.len() > 30, "{leaves:?}");
    let leaves: std::collections::BTreeSet<String> = leaves.into_iter().collect();
    let listed = contract().command_names();
    let no_schema: Vec<&String> = leaves.difference(&listed).collect();
    assert!(
        no_schema.is_empty(),
        "commands without a schema entry: {no_schema:?}"
    );
    let no_command: Vec<&String> = listed.difference(&leaves).collect();
    assert!(
        no_command.is_empty(),
        "schema entries with no command: {no_command:?}"
    );
}

fn usage(env: &TestEnv, args: &[&str]) -> Value {
    let doc = env.json(args);
    assert_eq!(doc["ok"], false, "{args:?}: {doc:#}");
    assert_eq!(doc["error"]["kind"], "usage", "{args:?}: {doc:#}");
    assert!(!doc["error"]["message"].as_str().unwrap().is_empty());
    doc
}

#[test]
fn usage_errors_under_json() {
    let env = TestEnv::with_vault("v");
    for args in [
        &["no-such-command"][..],
        &["cat"],
        &["write"],
        &["ls", "--bogus-flag"],
        &["chmod", "99x", "a"],
        &[],
        &["vault", "create"],
        &["checkpoint", "frobnicate"],
        &["tree", "-L", "deep"],
        &["audit", "--limit", "-3"],
        &["write", "--mode", "888", "f", "x"],
    ] {
        usage(&env, args);
    }
    // --json anywhere on the line counts.
    let mut c = env.cmd();
    let out = c.args(["cat", "--json"]).output().unwrap();
    let doc = common::check_json_output(&["cat", "--json"], &out);
    assert_eq!(doc["error"]["kind"], "usage");
    // Without --json, usage errors are clap's text on stderr, exit 2, nothing on stdout.
    env.avfs(&["no-such-command"])
        .code(2)
        .stdout(predicate::str::is_empty())
        .stderr(predicate::str::contains("no-such-command"));
    // Nothing was written by a rejected command line.
    assert_eq!(env.data(&["ls"]), json!([]));
    // Help is not an error.
    env.avfs(&["--help"])
        .success()
        .stdout(predicate::str::contains("Exit codes"));
}

/// `avfs --json vault` (a group without its subcommand) exits 2 like any usage error, so it
/// must print the usage JSON document too, not clap's help on stderr.
#[test]
fn missing_subcommand_of_a_group_is_a_json_usage_error() {
    let env = TestEnv::with_vault("v");
    for group in ["vault", "checkpoint", "meta", "quota", "op"] {
        let out = env.cmd().args(["--json", group]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "avfs --json {group}");
        let doc = common::check_json_output(&["--json", group], &out);
        assert_eq!(doc["error"]["kind"], "usage", "{doc:#}");
    }
}

#[test]
fn error_envelopes_name_their_command() {
    let env = TestEnv::with_vault("v");
    for (args, command, kind) in [
        (&["cat", "nope"][..], "cat", "path_not_found"),
        (
            &["checkpoint", "restore", "nope"],
            "checkpoint restore",
            "checkpoint_not_found",
        ),
        (&["vault", "use", "nope"], "vault use", "vault_not_found"),
        (
            &["meta", "get", "/", "nokey"],
            "meta get",
            "invalid_argument",
        ),
        (&["mkdir", "/"], "mkdir", "already_exists"),
    ] {
        let doc = env.json(args);
        assert_eq!(doc["command"], command, "{doc:#}");
        assert_eq!(doc["error"]["kind"], kind, "{doc:#}");
        assert!(doc["error"]["details"].is_object());
        // Text mode: the message on stderr, nothing on stdout, same exit code.
        env.avfs(args)
            .code(common::exit_code_for(kind))
            .stdout(predicate::str::is_empty())
            .stderr(predicate::str::starts_with("error: "));
    }
}

#[test]
fn every_time_field_also_comes_as_an_rfc3339_string() {
    let env = TestEnv::with_vault("v");
    env.write(None, "a.txt", b"a");
    env.data(&["checkpoint", "save", "one"]);
    let ops = env.data(&["op", "log"]);
    let stat = env.data(&["stat", "a.txt"]);
    let cps = env.data(&["checkpoint", "list"]);
    let audit = env.data(&["audit", "--limit", "1"]);
    let mut seen = 0;
    for (doc, field) in [
        (&ops[0], "at"),
        (&stat, "mtime"),
        (&stat, "atime"),
        (&stat, "ctime"),
        (&cps[0], "created_at"),
        (&audit[0], "at"),
    ] {
        let ns = doc[field]
            .as_i64()
            .unwrap_or_else(|| panic!("{field}: {doc}"));
        let iso = doc[format!("{field}_iso")].as_str().unwrap();
        // 2026-12-05T18:33:26.588920211Z: the same instant, to the nanosecond.
        let t = humantime::parse_rfc3339(iso).unwrap();
        let back = t.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64;
        assert_eq!(back, ns, "{field}: {iso}");
        assert!(iso.ends_with('Z') && iso.len() == 30, "{iso}");
        seen += 1;
    }
    assert_eq!(seen, 6);

    // A time before the epoch (a file from 1960) is a time too, not a crash.
    let old = env.host("old");
    fs::create_dir_all(&old).unwrap();
    fs::write(old.join("f"), "x").unwrap();
    common::set_mtime(&old.join("f"), -315_619_200_000_000_000);
    env.data(&["import", old.to_str().unwrap(), "/old"]);
    let st = env.data(&["stat", "old/f"]);
    assert_eq!(st["mtime_iso"], "1960-01-01T00:00:00.000000000Z", "{st}");
}

/// An argument that is not UTF-8 is a typed usage error (exit 2), never a panic.
#[test]
fn a_non_utf8_argument_is_a_usage_error() {
    use std::os::unix::ffi::OsStrExt;
    let home = tempfile::tempdir().unwrap();
    let odd = std::ffi::OsStr::from_bytes(b"/odd/\xff\xfe");
    let out = std::process::Command::new(common::BIN)
        .env("AVFS_HOME", home.path())
        .args(["--json", "write", "-p"])
        .arg(odd)
        .arg("x")
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["kind"], "usage", "{doc}");
    assert_eq!(out.status.code(), Some(2));
}
