//! What a sandboxed command leaves in its fork, through the real binary: the fork must end
//! up as the command left its workspace (as in fuse mode), whatever the command did to the
//! overlay's upper layer or the copy, and whatever else changed the fork meanwhile. Each
//! envelope lists exactly its own command's changes.

mod common;

use std::time::Duration;

use common::history::changed_paths;
use common::mount::{ProxyEnv, avfs_command, ok};
use serde_json::Value;

fn env() -> Option<ProxyEnv> {
    if !common::skip::require_sandbox() {
        return None;
    }
    ProxyEnv::new()
}

/// `avfs --json proxy exec --mode MODE ARGS`: the whole document (`ok`, `data`, `error`).
fn exec_doc(e: &ProxyEnv, mode: &str, args: &[&str]) -> Value {
    let mut full = vec!["--json", "proxy", "exec", "--mode", mode];
    full.extend_from_slice(args);
    let out = avfs_command(e.home.path()).args(&full).output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "{full:?}: not JSON ({err}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The envelope of a run that must succeed.
fn exec(e: &ProxyEnv, mode: &str, args: &[&str]) -> Value {
    let v = exec_doc(e, mode, args);
    assert_eq!(v["ok"], true, "{mode} {args:?}: {v}");
    v["data"].clone()
}

fn cat(e: &ProxyEnv, path: &str) -> Option<String> {
    let out = e.avfs(&["cat", path]);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A fresh environment with a script at `/s.py` (run as `python3 s.py`, which the policy
/// allows where `-c` text may be asked about).
fn with_script(text: &str) -> Option<ProxyEnv> {
    let e = env()?;
    ok(e.avfs(&["write", "/s.py", text]));
    Some(e)
}

#[test]
fn a_copy_run_keeps_what_others_wrote_to_the_fork_meanwhile() {
    // Copy mode ingests the whole copy against the fork as it is at the end: a file
    // written meanwhile is put back and a file made meanwhile is deleted, by `sleep`.
    let Some(e) = env() else { return };
    ok(e.avfs(&["write", "/f", "v1"]));
    let home = e.home.path().to_path_buf();
    let run = std::thread::spawn(move || {
        let out = avfs_command(&home)
            .args([
                "--json", "proxy", "exec", "--mode", "copy", "--", "sleep", "3",
            ])
            .output()
            .unwrap();
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    });
    std::thread::sleep(Duration::from_millis(1500));
    ok(e.avfs(&["write", "/f", "v2"]));
    ok(e.avfs(&["write", "/g", "made meanwhile"]));
    let v = run.join().unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(
        cat(&e, "/f").as_deref(),
        Some("v2"),
        "the write made meanwhile was undone"
    );
    assert_eq!(
        cat(&e, "/g").as_deref(),
        Some("made meanwhile"),
        "a file made meanwhile was deleted"
    );
    assert_eq!(
        changed_paths(&v["data"]),
        Vec::<String>::new(),
        "`sleep` changed nothing: {v}"
    );
}

#[test]
fn an_overlay_run_that_adds_to_a_directory_keeps_its_mode_as_changed_meanwhile() {
    // Adding d/x copies d up with the mode it had when the command started; the ingest
    // puts that mode back over a chmod another command made meanwhile.
    let Some(e) = env() else { return };
    ok(e.avfs(&["mkdir", "/d"]));
    ok(e.avfs(&[
        "write",
        "/s.py",
        "import time; time.sleep(3); open('d/x', 'w').write('x')\n",
    ]));
    let home = e.home.path().to_path_buf();
    let slow = std::thread::spawn(move || {
        let out = avfs_command(&home)
            .args([
                "--json", "proxy", "exec", "--mode", "overlay", "--", "python3", "s.py",
            ])
            .output()
            .unwrap();
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    });
    std::thread::sleep(Duration::from_millis(1200));
    let chmod = exec(&e, "overlay", &["--", "chmod", "700", "d"]);
    assert_eq!(chmod["exit_code"], 0, "{chmod}");
    let v = slow.join().unwrap();
    assert_eq!(v["ok"], true, "{v}");
    let stat = ok(e.avfs(&["stat", "/d"]));
    assert!(
        stat.contains("0700"),
        "the chmod made meanwhile was undone:\n{stat}"
    );
    let own: Vec<&Value> = v["data"]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["mode_changed"] == true)
        .collect();
    assert!(
        own.is_empty(),
        "the adding command is said to have changed a mode: {own:?}"
    );
}

#[test]
fn removing_a_directory_keeps_the_secrets_in_it() {
    // The command never sees `.env` or `*.key`; through fuse it cannot remove them. On an
    // overlay or a copy, removing or renaming their directory removed them from the fork.
    for mode in ["overlay", "copy", "fuse"] {
        let Some(e) = env() else { return };
        ok(e.avfs(&["mkdir", "/app"]));
        ok(e.avfs(&["write", "/app/.env", "TOKEN=1"]));
        ok(e.avfs(&["write", "/app/main.py", "code"]));
        ok(e.avfs(&["mkdir", "/certs"]));
        ok(e.avfs(&["write", "/certs/server.key", "key"]));
        exec(&e, mode, &["--", "rm", "-rf", "app"]);
        exec(&e, mode, &["--", "mv", "certs", "certs2"]);
        let kept = cat(&e, "/app/.env").is_some();
        let key = cat(&e, "/certs/server.key").is_some() || cat(&e, "/certs2/server.key").is_some();
        assert!(kept, "{mode}: rm -rf of its directory deleted /app/.env");
        assert!(key, "{mode}: mv of its directory deleted /certs/server.key");
        // What the command could see and removed is gone, as through fuse.
        assert!(
            cat(&e, "/app/main.py").is_none(),
            "{mode}: rm -rf kept /app/main.py beside the secret"
        );
    }
}

#[test]
fn replacing_one_name_of_a_hard_link_leaves_the_other_name_alone() {
    // `ln -f new h1` where h1 and h2 are one file: h1 becomes `new`, h2 keeps `old`. The
    // overlay ingest wrote `new` through h1's old link, into h2 too.
    for mode in ["overlay", "copy", "fuse"] {
        let Some(e) = env() else { return };
        ok(e.avfs(&["write", "/h1", "old"]));
        ok(e.avfs(&["ln", "/h1", "/h2"]));
        let v = exec(&e, mode, &["--shell", "echo new > new && ln -f new h1"]);
        assert_eq!(v["exit_code"], 0, "{mode}: {v}");
        assert_eq!(cat(&e, "/h1").as_deref(), Some("new\n"), "{mode}");
        assert_eq!(
            cat(&e, "/h2").as_deref(),
            Some("old"),
            "{mode}: h2 was overwritten"
        );
        assert!(
            !changed_paths(&v).contains(&"/h2".to_string()),
            "{mode}: h2 is listed as changed: {v}"
        );
    }
}

#[test]
fn renaming_the_directory_of_one_name_keeps_a_hard_link_whole() {
    // `mv d d2` where d/f and g are one file. Copy mode took d2/f in as a new file and left
    // g, unchanged in the copy, on its own: two files where the command left one. (Not
    // overlay mode: the overlay refuses to rename a directory of the lower layer, EXDEV, so
    // `mv` copies it and the command itself breaks the link.)
    for mode in ["copy", "fuse"] {
        let Some(e) = env() else { return };
        ok(e.avfs(&["write", "-p", "/d/f", "one"]));
        ok(e.avfs(&["ln", "/d/f", "/g"]));
        let v = exec(&e, mode, &["--shell", "mv d d2"]);
        assert_eq!(v["exit_code"], 0, "{mode}: {v}");
        assert_eq!(cat(&e, "/d2/f").as_deref(), Some("one"), "{mode}");
        assert!(cat(&e, "/d/f").is_none(), "{mode}");
        ok(e.avfs(&["write", "/g", "two"]));
        assert_eq!(
            cat(&e, "/d2/f").as_deref(),
            Some("two"),
            "{mode}: d2/f and g are no longer one file"
        );
    }
}

#[test]
fn a_user_xattr_named_like_the_overlays_is_the_commands_data() {
    // As root the overlay keeps its bookkeeping in `trusted.overlay.*`; `user.overlay.*`
    // is an ordinary user attribute (rootless container tools set them). The ingest took
    // `user.overlay.opaque` for the overlay's own and deleted the directory's entries.
    let script = "import os\n\
                  os.setxattr('d', 'user.overlay.opaque', b'y')\n\
                  os.setxattr('f', 'user.overlay.origin', b'data')\n";
    for mode in ["overlay", "copy", "fuse"] {
        let Some(e) = with_script(script) else { return };
        if !rustix::process::geteuid().is_root() {
            return;
        }
        ok(e.avfs(&["mkdir", "/d"]));
        ok(e.avfs(&["write", "/d/a", "a"]));
        ok(e.avfs(&["write", "/f", "f"]));
        let v = exec(&e, mode, &["--", "python3", "s.py"]);
        assert_eq!(v["exit_code"], 0, "{mode}: {v}");
        assert_eq!(
            cat(&e, "/d/a").as_deref(),
            Some("a"),
            "{mode}: d's entries were deleted"
        );
        let probe = exec(
            &e,
            "fuse",
            &[
                "--",
                "python3",
                "-c",
                "import os; print(sorted(os.listxattr('f')))",
            ],
        );
        let out = probe["stdout"]["text"].as_str().unwrap_or_default();
        if probe["ran"] == true {
            assert!(
                out.contains("user.overlay.origin"),
                "{mode}: the xattr was dropped: {probe}"
            );
        }
    }
}

#[test]
fn a_file_name_that_is_not_utf8_fails_that_file_not_the_whole_run() {
    // Through fuse such a name is refused (EINVAL) and the rest of the run is kept. In a
    // directory new on the overlay, or anywhere in a copy, the name reached the ingest,
    // which failed the whole run: no envelope, every other write lost.
    let script = "import os\n\
                  open('good.txt', 'w').write('work')\n\
                  os.mkdir('newdir')\n\
                  try:\n\
                  \x20   open(b'newdir/bad\\xff.txt', 'wb').write(b'x')\n\
                  except OSError as e: print('refused', e.errno)\n";
    for mode in ["overlay", "copy", "fuse"] {
        let Some(e) = with_script(script) else { return };
        let v = exec_doc(&e, mode, &["--", "python3", "s.py"]);
        assert_eq!(v["ok"], true, "{mode}: the run failed as a whole: {v}");
        assert_eq!(cat(&e, "/good.txt").as_deref(), Some("work"), "{mode}");
    }
}

#[test]
fn an_immutable_file_in_a_copy_does_not_keep_the_run_directory() {
    // As root the command can set FS_IMMUTABLE_FL on a file of the copy (a host directory);
    // the run directory can then never be removed, by this run or any later one.
    let script = "import fcntl, os, struct\n\
                  open('imm', 'w').write('y')\n\
                  fd = os.open('imm', os.O_RDONLY)\n\
                  fcntl.ioctl(fd, 0x40086602, struct.pack('l', 0x10))\n";
    let Some(e) = with_script(script) else { return };
    if !rustix::process::geteuid().is_root() {
        return;
    }
    let v = exec(&e, "copy", &["--", "python3", "s.py"]);
    exec(&e, "copy", &["--", "true"]);
    let run = e.home.path().join("run");
    let left: Vec<_> = std::fs::read_dir(&run)
        .unwrap()
        .flatten()
        .map(|d| d.path())
        .collect();
    // Leave nothing the temp dir's removal trips over.
    for dir in &left {
        let _ = std::process::Command::new("chattr")
            .arg("-R")
            .arg("-i")
            .arg(dir)
            .status();
    }
    assert!(left.is_empty(), "run directories stayed: {left:?} ({v})");
}

#[test]
fn a_file_capability_made_in_the_sandbox_does_not_reach_the_host_through_export() {
    // Export drops set-ID bits, but restored `security.capability`: a sandboxed command
    // makes a copy of a program with cap_setuid, and `avfs export` by root installs it.
    let script = "import os, shutil, struct\n\
                  shutil.copy('/usr/bin/true', 'capbin')\n\
                  os.setxattr('capbin', 'security.capability', struct.pack('<IIIII', 0x02000001, 1 << 7, 0, 0, 0))\n";
    let Some(e) = with_script(script) else { return };
    if !rustix::process::geteuid().is_root() {
        return;
    }
    for mode in ["overlay", "copy", "fuse"] {
        // The command may not even set it (the sandbox drops CAP_SETFCAP); whatever it
        // managed, the export must not carry it.
        let v = exec(&e, mode, &["--", "python3", "s.py"]);
        assert_eq!(v["ran"], true, "{mode}: {v}");
        let out = tempfile::tempdir().unwrap();
        let dest = out.path().join("x");
        ok(e.avfs(&["export", "/", dest.to_str().unwrap()]));
        let caps =
            rustix::fs::lgetxattr(dest.join("capbin"), "security.capability", &mut [0u8; 64]);
        assert!(
            caps.is_err(),
            "{mode}: the exported program carries file capabilities"
        );
    }
}
