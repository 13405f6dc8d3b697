//! Real tools on a real FUSE mount: git, cargo, python venv, tar, sqlite, editor-style
//! atomic saves; read-only and checkpoint mounts; two forks mounted at once; stale mounts
//! left by a killed daemon; a crash during a write storm.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use common::mount::{Mounted, RequestTrace, avfs_in, ok, require_fuse};

#[test]
fn git_workflow_is_clean() {
    let Some(m) = Mounted::new("git") else { return };
    m.sh("git init -q -b main . && printf 'a\\n' > a.txt && mkdir -p src && printf 'fn main(){}\\n' > src/main.rs \
          && chmod +x src/main.rs && git add -A && git commit -qm init");
    m.sh("git checkout -q -b feature && printf 'b\\n' >> a.txt && git commit -qam feature \
          && git checkout -q main && printf 'c\\n' > c.txt && git add c.txt && git commit -qm main-side \
          && git checkout -q feature && git rebase -q main && git gc -q");
    assert_eq!(m.sh("git status --porcelain"), "");
    assert_eq!(
        m.sh("git log --format=%s").lines().collect::<Vec<_>>(),
        ["feature", "main-side", "init"]
    );
    m.sh("git fsck --strict");
    // The executable bit survived git's own object and checkout round trip.
    let mode = fs::metadata(m.dir.join("src/main.rs"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111);
    m.unmount();
    // After unmount the vault holds the repository, and the session is one op-log entry.
    let ls = ok(m.avfs(&["--workspace", "git", "ls", "-a", "/"]));
    assert!(ls.contains(".git/") && ls.contains("c.txt"), "{ls}");
    let ops: serde_json::Value =
        serde_json::from_str(&ok(m.avfs(&["--workspace", "git", "--json", "op", "log"]))).unwrap();
    let mounts = ops["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|op| op["kind"] == "mount")
        .count();
    assert_eq!(mounts, 1, "the whole session is one mount entry: {ops}");
}

#[test]
fn cargo_builds_and_tests_a_crate() {
    let Some(m) = Mounted::new("cargo") else {
        return;
    };
    let target = m.home.path().join("cargo-target-not-used");
    let _ = target;
    m.sh("cargo new -q --vcs none demo && cd demo && printf '#[test]\\nfn t() { assert_eq!(2 + 2, 4); }\\n' >> src/main.rs \
          && cargo build -q --offline && cargo test -q --offline 2>&1 | grep -q 'test result: ok. 1 passed'");
    assert_eq!(m.sh("./demo/target/debug/demo"), "Hello, world!\n");
}

#[test]
fn python_venv_runs() {
    let Some(m) = Mounted::new("py") else { return };
    m.sh("python3 -m venv --without-pip venv");
    let out = m.sh("./venv/bin/python -c 'import sys; print(sys.prefix)'");
    assert_eq!(out.trim(), m.dir.join("venv").to_str().unwrap());
}

#[test]
fn tar_round_trip_is_byte_identical() {
    let src = tempfile::tempdir().unwrap();
    let s = src.path();
    fs::create_dir_all(s.join("tree/bin")).unwrap();
    fs::write(s.join("tree/bin/run"), b"#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(s.join("tree/bin/run"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(
        s.join("tree/data.bin"),
        (0..200_000u32).map(|i| (i % 251) as u8).collect::<Vec<_>>(),
    )
    .unwrap();
    fs::write(s.join("tree/empty"), b"").unwrap();
    std::os::unix::fs::symlink("bin/run", s.join("tree/link")).unwrap();
    std::os::unix::fs::symlink("../outside", s.join("tree/dangling")).unwrap();
    let tar1 = s.join("in.tar");
    let status = Command::new("tar")
        .args([
            "cf",
            tar1.to_str().unwrap(),
            "--sort=name",
            "--mtime=2020-01-01",
            "--owner=0",
            "--group=0",
            "-C",
        ])
        .arg(s)
        .arg("tree")
        .status()
        .unwrap();
    assert!(status.success());

    let Some(m) = Mounted::new("tar") else { return };
    m.sh(&format!("tar xf {}", tar1.display()));
    let tar2 = s.join("out.tar");
    m.sh(&format!(
        "tar cf {} --sort=name --mtime=2020-01-01 --owner=0 --group=0 tree",
        tar2.display()
    ));
    assert_eq!(
        fs::read(&tar1).unwrap(),
        fs::read(&tar2).unwrap(),
        "tar c of the mount differs from the input"
    );
    assert_eq!(m.sh("./tree/bin/run"), "hi\n");
}

#[test]
fn sqlite_database_survives_concurrent_writers() {
    let Some(m) = Mounted::new("sqlite") else {
        return;
    };
    m.sh("sqlite3 db.sqlite 'PRAGMA journal_mode=DELETE; CREATE TABLE t(w INTEGER, i INTEGER);' >/dev/null");
    let mut children = Vec::new();
    for w in 0..4 {
        let script = format!(
            "for i in $(seq 1 25); do sqlite3 -cmd '.timeout 20000' db.sqlite \"INSERT INTO t VALUES({w}, $i);\" || exit 1; done"
        );
        children.push(
            Command::new("sh")
                .arg("-c")
                .arg(script)
                .current_dir(&m.dir)
                .spawn()
                .unwrap(),
        );
    }
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    assert_eq!(
        m.sh("sqlite3 db.sqlite 'SELECT count(*) FROM t;'").trim(),
        "100"
    );
    assert_eq!(
        m.sh("sqlite3 db.sqlite 'PRAGMA integrity_check;'").trim(),
        "ok"
    );
}

#[test]
fn editor_style_atomic_save() {
    let Some(m) = Mounted::new("editor") else {
        return;
    };
    fs::write(m.dir.join("doc.txt"), b"v1").unwrap();
    // Write a temp file, fsync it, rename it over the original.
    let tmp = m.dir.join(".doc.txt.swp");
    {
        use std::io::Write;
        let mut f = fs::File::create(&tmp).unwrap();
        f.write_all(b"v2 saved atomically").unwrap();
        f.sync_all().unwrap();
    }
    fs::rename(&tmp, m.dir.join("doc.txt")).unwrap();
    assert_eq!(
        fs::read(m.dir.join("doc.txt")).unwrap(),
        b"v2 saved atomically"
    );
    assert!(!tmp.exists());
    m.unmount();
    assert_eq!(
        ok(m.avfs(&["--workspace", "editor", "cat", "doc.txt"])),
        "v2 saved atomically"
    );
}

#[test]
fn readonly_and_checkpoint_mounts_refuse_writes() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    ok(avfs_in(h, &["vault", "create", "ro"]));
    ok(avfs_in(h, &["write", "f.txt", "before"]));
    ok(avfs_in(h, &["checkpoint", "save", "cp1"]));
    ok(avfs_in(h, &["write", "f.txt", "after"]));
    let dir = h.join("past");
    fs::create_dir(&dir).unwrap();
    ok(avfs_in(h, &["mount", "ro@cp1", dir.to_str().unwrap()]));
    assert_eq!(fs::read(dir.join("f.txt")).unwrap(), b"before");
    let err = fs::write(dir.join("new"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(30), "EROFS expected, got {err}");
    ok(avfs_in(h, &["unmount", dir.to_str().unwrap()]));

    let live = h.join("live");
    fs::create_dir(&live).unwrap();
    ok(avfs_in(
        h,
        &["mount", "ro", live.to_str().unwrap(), "--readonly"],
    ));
    assert_eq!(fs::read(live.join("f.txt")).unwrap(), b"after");
    assert_eq!(
        fs::write(live.join("f.txt"), b"x")
            .unwrap_err()
            .raw_os_error(),
        Some(30)
    );
    ok(avfs_in(h, &["unmount", live.to_str().unwrap()]));
    assert_eq!(ok(avfs_in(h, &["cat", "f.txt"])), "after");
}

#[test]
fn two_forks_mounted_at_once_stay_isolated() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    ok(avfs_in(h, &["vault", "create", "base"]));
    ok(avfs_in(h, &["write", "shared.txt", "original"]));
    ok(avfs_in(h, &["vault", "fork", "base", "f1"]));
    ok(avfs_in(h, &["vault", "fork", "base", "f2"]));
    let (d1, d2) = (h.join("m1"), h.join("m2"));
    fs::create_dir(&d1).unwrap();
    fs::create_dir(&d2).unwrap();
    ok(avfs_in(h, &["mount", "f1", d1.to_str().unwrap()]));
    ok(avfs_in(h, &["mount", "f2", d2.to_str().unwrap()]));
    fs::write(d1.join("shared.txt"), b"from f1").unwrap();
    fs::write(d2.join("only-f2"), b"2").unwrap();
    // The parent keeps changing while its forks are mounted.
    ok(avfs_in(h, &["write", "shared.txt", "parent changed"]));
    assert_eq!(fs::read(d1.join("shared.txt")).unwrap(), b"from f1");
    assert_eq!(fs::read(d2.join("shared.txt")).unwrap(), b"original");
    assert!(!d1.join("only-f2").exists());
    let mounts = ok(avfs_in(h, &["--json", "mounts"]));
    assert!(
        mounts.contains("\"vault\":\"f1\"") && mounts.contains("\"vault\":\"f2\""),
        "{mounts}"
    );
    ok(avfs_in(h, &["unmount", d1.to_str().unwrap()]));
    ok(avfs_in(h, &["unmount", d2.to_str().unwrap()]));
    assert_eq!(
        ok(avfs_in(h, &["--workspace", "f1", "cat", "shared.txt"])),
        "from f1"
    );
    assert_eq!(
        ok(avfs_in(h, &["--workspace", "base", "cat", "shared.txt"])),
        "parent changed"
    );
    assert!(
        !avfs_in(h, &["--workspace", "base", "cat", "only-f2"])
            .status
            .success()
    );
}

/// SIGKILL, as a crash would: the daemon gets no chance to unmount or save.
fn kill_9(pid: u32) {
    let status = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -9 {pid} failed");
}

/// Wait until a killed daemon is gone (the kill is asynchronous).
fn wait_gone(pid: u32) {
    common::wait::until_true(&format!("daemon {pid} to die"), || {
        common::wait::process_gone(&pid.to_string())
    });
}

fn daemon_pid(h: &std::path::Path) -> u32 {
    let v: serde_json::Value =
        serde_json::from_str(&ok(avfs_in(h, &["--json", "mounts"]))).unwrap();
    v["data"][0]["pid"].as_u64().unwrap() as u32
}

#[test]
fn killed_daemon_is_cleaned_up_and_double_unmount_is_a_noop() {
    if !require_fuse() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    ok(avfs_in(h, &["vault", "create", "k"]));
    let dir = h.join("mnt");
    fs::create_dir(&dir).unwrap();
    ok(avfs_in(h, &["mount", "k", dir.to_str().unwrap()]));
    let pid = daemon_pid(h);
    kill_9(pid);
    wait_gone(pid);
    // The next mount of the directory detects the dead mount and replaces it.
    ok(avfs_in(h, &["mount", "k", dir.to_str().unwrap()]));
    fs::write(dir.join("ok"), b"1").unwrap();
    let pid = daemon_pid(h);
    kill_9(pid);
    wait_gone(pid);
    let out: serde_json::Value = serde_json::from_str(&ok(avfs_in(
        h,
        &["--json", "unmount", dir.to_str().unwrap()],
    )))
    .unwrap();
    assert_eq!(out["data"]["stale"], true, "{out}");
    let again: serde_json::Value = serde_json::from_str(&ok(avfs_in(
        h,
        &["--json", "unmount", dir.to_str().unwrap()],
    )))
    .unwrap();
    assert_eq!(again["data"]["was_mounted"], false);
    assert!(
        fs::read_dir(&dir).is_ok(),
        "directory usable again after cleanup"
    );
    ok(avfs_in(h, &["vault", "check"]));
}

#[test]
fn crash_during_write_storm_keeps_every_fsynced_write() {
    if !require_fuse() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    ok(avfs_in(h, &["vault", "create", "storm"]));
    let dir = h.join("mnt");
    fs::create_dir(&dir).unwrap();
    ok(avfs_in(h, &["mount", "storm", dir.to_str().unwrap()]));
    let pid = daemon_pid(h);
    // fsync'd files are acknowledged; a writer keeps going with unsynced writes meanwhile.
    let mut storm = Command::new("sh")
        .arg("-c")
        .arg("i=0; while true; do i=$((i+1)); echo $i > noise-$((i % 50)); done")
        .current_dir(&dir)
        .spawn()
        .unwrap();
    let mut acked = Vec::new();
    for i in 0..40 {
        use std::io::Write;
        let p = dir.join(format!("durable-{i}"));
        let mut f = fs::File::create(&p).unwrap();
        f.write_all(format!("payload {i}").as_bytes()).unwrap();
        f.sync_all().unwrap();
        acked.push(i);
    }
    kill_9(pid);
    let _ = storm.kill();
    let _ = storm.wait();
    wait_gone(pid);
    ok(avfs_in(h, &["unmount", dir.to_str().unwrap()]));
    ok(avfs_in(h, &["vault", "check"]));
    for i in acked {
        assert_eq!(
            ok(avfs_in(h, &["cat", &format!("durable-{i}")])),
            format!("payload {i}"),
            "fsync'd write {i} lost"
        );
    }
}

#[test]
fn quota_surfaces_as_edquot_and_leaves_the_vault_intact() {
    if !require_fuse() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    ok(avfs_in(h, &["vault", "create", "q"]));
    ok(avfs_in(h, &["quota", "set", "--max-file-size-mb", "1"]));
    let dir = h.join("mnt");
    fs::create_dir(&dir).unwrap();
    ok(avfs_in(h, &["mount", "q", dir.to_str().unwrap()]));
    let err = fs::write(dir.join("big"), vec![7u8; 2 * 1024 * 1024]).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(122), "EDQUOT expected, got {err}");
    fs::write(dir.join("small"), b"fits").unwrap();
    ok(avfs_in(h, &["unmount", dir.to_str().unwrap()]));
    assert_eq!(ok(avfs_in(h, &["cat", "small"])), "fits");
    ok(avfs_in(h, &["vault", "check"]));
}

#[test]
fn close_costs_no_round_trip_under_the_writeback_cache() {
    const FUSE_FLUSH: u32 = 25;
    let Some(m) = Mounted::new("flush") else {
        return;
    };
    let trace = RequestTrace::start(&m.dir, FUSE_FLUSH);
    if !common::skip::require(
        "no fuse:fuse_request_send tracepoint (Linux 6.15+, tracefs at /sys/kernel/tracing)",
        trace.is_some(),
        "AVFS_CI_ALLOW_NO_FUSE_TRACE",
    ) {
        return;
    }
    let trace = trace.unwrap();
    for i in 0..20 {
        fs::write(m.dir.join(format!("f{i}")), format!("content {i}")).unwrap();
    }
    // The session answers the first FLUSH with ENOSYS and the kernel sends no more.
    assert!(trace.count() <= 1, "{} FLUSH requests", trace.count());
    drop(trace);
    m.unmount();
    for i in [0, 19] {
        assert_eq!(
            ok(m.avfs(&["cat", &format!("f{i}")])),
            format!("content {i}")
        );
    }

    // Under a size quota there is no writeback cache: close(2) commits, and reports the
    // quota, so every close is a FLUSH.
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    ok(avfs_in(h, &["vault", "create", "q"]));
    ok(avfs_in(h, &["quota", "set", "--max-file-size-mb", "10"]));
    let q = Mounted::mount_existing(home, "q");
    let trace = RequestTrace::start(&q.dir, FUSE_FLUSH).unwrap();
    for i in 0..20 {
        fs::write(q.dir.join(format!("f{i}")), b"x").unwrap();
    }
    let flushes = trace.count();
    assert!(flushes >= 20, "{flushes} FLUSH requests for 20 closes");
}

/// Tools that copy a file's attributes keep its mode in the mount: GNU `sed -i` (which
/// copies the original's POSIX ACL onto its 0600 temp file), `cp -a`, `rsync -a` and
/// `install -m`. An edited script still runs. `apply` carries the modes to the host and
/// reports every mode it changes, also on a file whose content it rewrites.
#[test]
fn mode_keeping_tools_keep_modes_and_apply_reports_them() {
    let rsync = Command::new("rsync").arg("--version").output();
    assert!(
        rsync.is_ok_and(|o| o.status.success()),
        "rsync is required (apt-get install rsync)"
    );
    let Some(m) = Mounted::new("modes") else {
        return;
    };
    m.sh(
        "printf 'a\\n' > f && chmod 644 f && printf '#!/bin/sh\\necho hi\\n' > s && chmod 755 s \
         && sed -i s/a/b/ f && sed -i s/hi/ho/ s && cp -a s cp && rsync -a s rs \
         && install -m 750 s inst",
    );
    assert_eq!(m.sh("./s"), "ho\n");
    let want = [
        ("f", 0o644),
        ("s", 0o755),
        ("cp", 0o755),
        ("rs", 0o755),
        ("inst", 0o750),
    ];
    for (name, mode) in want {
        let got = fs::metadata(m.dir.join(name)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(got, mode, "{name} in the mount");
        let mut names = vec![0u8; 4096];
        let n = rustix::fs::listxattr(m.dir.join(name), &mut names).unwrap();
        let names = String::from_utf8_lossy(&names[..n]);
        assert!(!names.contains("posix_acl"), "{name} kept an ACL: {names}");
    }
    m.unmount();
    // The host has an older f with other bits: apply rewrites it and says the mode changed.
    let host = m.home.path().join("host");
    fs::create_dir(&host).unwrap();
    fs::write(host.join("f"), b"old\n").unwrap();
    fs::set_permissions(host.join("f"), fs::Permissions::from_mode(0o600)).unwrap();
    let out = ok(m.avfs(&["--json", "apply", host.to_str().unwrap(), "--force"]));
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let changed = report["data"]["mode_changed"].as_array().unwrap();
    assert!(changed.iter().any(|p| p == "/f"), "{report}");
    for (name, mode) in want {
        let got = fs::metadata(host.join(name)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(got, mode, "{name} on the host");
    }
}

/// The vault-wide quotas surface in the mount as EDQUOT too: `max_size` when the live tree
/// would outgrow it, `max_files` when one more file would be too many. What fit stays.
#[test]
fn size_and_file_count_quotas_surface_as_edquot() {
    if !require_fuse() {
        return;
    }
    const EDQUOT: i32 = 122;
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    ok(avfs_in(h, &["vault", "create", "qs"]));
    ok(avfs_in(h, &["quota", "set", "--max-size-mb", "1"]));
    let m = Mounted::mount_existing(home, "qs");
    fs::write(m.dir.join("half"), vec![1u8; 512 * 1024]).unwrap();
    let err = fs::write(m.dir.join("more"), vec![2u8; 768 * 1024]).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(EDQUOT), "max_size: got {err}");
    m.unmount();
    assert_eq!(ok(m.avfs(&["cat", "half"])).len(), 512 * 1024);
    ok(m.avfs(&["vault", "check"]));

    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    ok(avfs_in(h, &["vault", "create", "qf"]));
    ok(avfs_in(h, &["quota", "set", "--max-files", "3"]));
    let m = Mounted::mount_existing(home, "qf");
    for i in 0..3 {
        fs::write(m.dir.join(format!("f{i}")), b"x").unwrap();
    }
    let err = fs::write(m.dir.join("f3"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(EDQUOT), "max_files: got {err}");
    m.unmount();
    let listed = ok(m.avfs(&["ls", "/"]));
    assert_eq!(listed.lines().collect::<Vec<_>>(), ["f0", "f1", "f2"]);
    ok(m.avfs(&["vault", "check"]));
}
