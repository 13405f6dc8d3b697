//! A PostgreSQL server of the test's own that stops, goes silent (SIGSTOP) or comes back on
//! another port, through the real binary: typed errors within the wait, never a hang, and
//! nothing half applied.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::check_json_output;
use common::shared::{Host, server, unique};

/// A server of this test's own, stopped and started again. A test that fails leaves no
/// server behind: dropping it resumes a stopped server and shuts it down.
struct OwnServer {
    dir: Option<tempfile::TempDir>,
}

impl OwnServer {
    fn start(dir: Option<tempfile::TempDir>) -> (OwnServer, String) {
        let dir = dir.unwrap_or_else(|| tempfile::tempdir_in("/tmp").unwrap());
        let out = std::process::Command::new(script())
            .args(["start", dir.path().to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the test server did not come up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let url = String::from_utf8(out.stdout).unwrap().trim().to_string();
        (OwnServer { dir: Some(dir) }, url)
    }

    fn dir(&self) -> &Path {
        self.dir.as_ref().expect("a running server").path()
    }

    fn run_stop(dir: &Path) -> std::io::Result<Output> {
        std::process::Command::new(script())
            .args(["stop", dir.to_str().unwrap()])
            .output()
    }

    fn stop(mut self) -> tempfile::TempDir {
        let dir = self.dir.take().expect("a running server");
        let out = Self::run_stop(dir.path()).unwrap();
        assert!(out.status.success(), "{out:?}");
        dir
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let Some(dir) = self.dir.take() else { return };
        // A server a failed test left stopped (SIGSTOP) must be resumed to shut down.
        if let Ok(text) = std::fs::read_to_string(dir.path().join("data/postmaster.pid")) {
            let pid = text.lines().next().unwrap_or_default().trim();
            let _ = std::process::Command::new("kill")
                .args(["-CONT", pid])
                .status();
            let _ = std::process::Command::new("pkill")
                .args(["-CONT", "-P", pid])
                .status();
            let _ = Self::run_stop(dir.path());
        }
    }
}

impl OwnServer {
    /// Send `signal` to the server and every process it started: `STOP` makes a server
    /// that accepts connections (the kernel queues them) and answers nothing.
    fn signal(&self, signal: &str) {
        let pid_file = self.dir().join("data/postmaster.pid");
        let text = std::fs::read_to_string(&pid_file).unwrap();
        let pid = text.lines().next().unwrap().trim().to_string();
        let sig = format!("-{signal}");
        // Children first on STOP (none starts a query while the parent still runs); the
        // parent first on CONT.
        let order: [&[&str]; 2] = if signal == "STOP" {
            [&["pkill", &sig, "-P", &pid], &["kill", &sig, &pid]]
        } else {
            [&["kill", &sig, &pid], &["pkill", &sig, "-P", &pid]]
        };
        for argv in order {
            let status = std::process::Command::new(argv[0])
                .args(&argv[1..])
                .status()
                .unwrap();
            assert!(status.success() || argv[0] == "pkill", "{argv:?}");
        }
    }
}

/// Run `cmd` to its end, or fail the test (resuming `pg` first) if it has not ended after
/// `limit`: the check that it does not hang, with room to spare over the wait it was given.
fn output_within(
    mut cmd: std::process::Command,
    limit: std::time::Duration,
    pg: &OwnServer,
) -> Output {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output().unwrap());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out,
        Err(_) => {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            pg.signal("CONT");
            panic!("avfs did not end within {limit:?} of a server that stopped answering");
        }
    }
}

#[test]
fn a_server_that_stops_answering_mid_command_is_a_typed_error_not_a_hang() {
    if !common::skip::require_fuse() {
        return;
    }
    let Some((pg, h, name)) = own_server_with_a_vault("silent") else {
        return;
    };
    let wait = [("AVFS_SERVER_TIMEOUT_SECS", Some("3"))];
    // Bad waits are refused up front, and change nothing.
    for bad in [
        "0",
        "-1",
        "0.5",
        "3601",
        "1000y",
        "inf",
        "NaN",
        "18446744073709551616",
    ] {
        let args = ["write", "bad.txt", "x"];
        let out = h.run_with(&args, &[("AVFS_SERVER_TIMEOUT_SECS", Some(bad))]);
        let doc = check_json_output(&args, &out);
        assert_eq!(doc["error"]["kind"], "invalid_argument", "{bad}: {doc}");
    }
    h.err(&["cat", "bad.txt"], "path_not_found");
    // A proxied command whose server stops answering while it runs: its envelope says so,
    // typed, once the wait is over; nothing of it was kept.
    let script = "sleep 2; echo during > during.txt";
    let args = ["proxy", "exec", "--", "sh", "-c", script];
    let cmd = h.command(&args, &wait);
    let limit = std::time::Duration::from_secs(60);
    let run = std::thread::scope(|s| {
        let run = s.spawn(|| output_within(cmd, limit, &pg));
        std::thread::sleep(std::time::Duration::from_millis(1000));
        pg.signal("STOP");
        run.join().unwrap()
    });
    let doc = check_json_output(&args, &run);
    assert_eq!(doc["error"]["kind"], "store_unavailable", "{doc}");
    assert_eq!(run.status.code(), Some(8), "{doc}");
    let message = doc["error"]["message"].as_str().unwrap();
    assert!(message.contains("did not answer within 3 s"), "{doc}");
    // Its checkpoint before the command was committed, and it says so: running it again
    // is for the agent to decide, having looked.
    let _ = writeln!(
        std::io::stderr(),
        "proxied command on a silent server: {doc}"
    );
    assert!(
        doc["error"]["details"]["writes_kept"].as_u64() >= Some(1),
        "{doc}"
    );
    assert!(message.contains("look before running it again"), "{doc}");
    // A new command against the silent server: the same, at connect.
    let args = ["write", "lost.txt", "during\n"];
    let out = output_within(h.command(&args, &wait), limit, &pg);
    let doc = check_json_output(&args, &out);
    assert_eq!(doc["error"]["kind"], "store_unavailable", "{doc}");
    assert_eq!(doc["error"]["details"]["maybe_applied"], false, "{doc}");
    assert_eq!(doc["error"]["details"]["writes_kept"], 0, "{doc}");
    // The vault's administration (a blocking client of its own) is bounded the same way:
    // whether the server acted on a create once it answers is unknown, and said so; a
    // delete is refused before it starts (its lease check cannot read the vault).
    let other = unique("silent-other");
    for (args, maybe) in [
        (
            vec!["vault", "create", other.as_str(), "--engine", "postgres"],
            true,
        ),
        (vec!["vault", "delete", name.as_str(), "--yes"], false),
    ] {
        let out = output_within(h.command(&args, &wait), limit, &pg);
        let doc = check_json_output(&args, &out);
        assert_eq!(doc["error"]["kind"], "store_unavailable", "{args:?}: {doc}");
        assert_eq!(
            doc["error"]["details"]["maybe_applied"], maybe,
            "{args:?}: {doc}"
        );
    }
    // The server answers again: the abandoned transactions were rolled back, the vault is
    // whole, and it takes writes.
    pg.signal("CONT");
    assert_eq!(h.cat("kept.txt"), "before\n");
    h.err(&["cat", "during.txt"], "path_not_found");
    h.err(&["cat", "lost.txt"], "path_not_found");
    h.data(&["vault", "check"]);
    h.data(&["write", "after.txt", "after\n"]);
    assert_eq!(h.cat("after.txt"), "after\n");
    // The delete that was refused did nothing; the create may have landed once the server
    // answered (the process that sent it is gone either way).
    assert!(
        h.data(&["vault", "list"])
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == name.as_str())
    );
    drop(pg.stop());
}

/// A server of the test's own (when the suite has one to test with), a host, and a vault
/// `what-…` on it holding `kept.txt`.
fn own_server_with_a_vault(what: &str) -> Option<(OwnServer, Host, String)> {
    server()?;
    let (pg, url) = OwnServer::start(None);
    let h = Host::new(&url);
    let name = unique(what);
    h.data(&["vault", "create", &name, "--engine", "postgres"]);
    h.data(&["write", "kept.txt", "before\n"]);
    Some((pg, h, name))
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/postgres.sh")
}

#[test]
fn a_stopped_server_gives_a_typed_error_and_nothing_half_applied() {
    let Some((pg, h, _)) = own_server_with_a_vault("stopped") else {
        return;
    };
    let dir = pg.stop();
    let e = h.err(&["write", "lost.txt", "during\n"], "store_unavailable");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("run the command again"),
        "{e}"
    );
    let out = h.run(&["ls", "/"]);
    assert_eq!(out.status.code(), Some(8), "{out:?}");
    // Back (on another port: the URL comes from the environment, so the vault follows it).
    let (pg, url) = OwnServer::start(Some(dir));
    let h = Host { url, ..h };
    assert_eq!(h.cat("kept.txt"), "before\n");
    h.err(&["cat", "lost.txt"], "path_not_found");
    h.data(&["vault", "check"]);
    h.data(&["write", "after.txt", "after\n"]);
    drop(pg.stop());
}

#[test]
fn a_warm_handle_carries_on_after_the_server_restarts() {
    use agentvfs::model::path::VPath;
    use agentvfs::model::{Actor, Vault, WriteOptions};
    use agentvfs::store::{Engine, Server};
    if server().is_none() {
        return;
    }
    let (pg, url) = OwnServer::start(None);
    let dir = tempfile::tempdir().unwrap();
    let actor = || Actor {
        actor: "test".into(),
        source: "sdk".into(),
    };
    // A handle that stays open and has written, as a mount, a session or the MCP server
    // holds: its next fork, save or restore is one exchange on its pooled connection.
    let server = Server::new(Some(&url), &unique("warm")).unwrap();
    let vault =
        Vault::create_on(&dir.path().join("v.avfs"), Engine::Postgres, Some(&server)).unwrap();
    let main = vault.workspace("main", actor()).unwrap();
    let kept = VPath::parse("kept.txt").unwrap();
    main.edit("test.write", &[&kept], |e| {
        e.write_file(&kept, b"before\n", WriteOptions::default())
    })
    .unwrap();
    main.checkpoint_save(Some("one"), None).unwrap();
    vault.fork(&main, "f1", None).unwrap();
    // Every connection ends; the server comes back on the same port.
    let out = std::process::Command::new(script())
        .args(["restart", pg.dir().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // The handle's connection is gone: its next writes reconnect rather than fail (or
    // claim they may have been applied).
    vault.fork(&main, "f2", None).unwrap();
    main.checkpoint_save(Some("two"), None).unwrap();
    main.checkpoint_restore("one").unwrap();
    let names: Vec<String> = vault.forks().unwrap().into_iter().map(|f| f.name).collect();
    assert!(
        names.contains(&"f1".into()) && names.contains(&"f2".into()),
        "{names:?}"
    );
    let content = main.read(|v| v.read(&kept)).unwrap();
    assert_eq!(content, b"before\n");
    drop((main, vault));
    drop(pg.stop());
}
