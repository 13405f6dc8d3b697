//! The sandbox for a user who is not root, through the real binary: `auto` must give a run
//! (overlay, else copy, else fuse without a namespace), and an explicit mode either runs in
//! its namespace or is `sandbox_unavailable`. Run as root, the test drops to an unprivileged
//! uid for the commands.

mod common;

use std::os::unix::process::CommandExt;

use serde_json::Value;

const NOBODY: u32 = 65534;

/// `avfs ARGS` as uid/gid 65534 with `home` as `$AVFS_HOME`.
fn avfs_as_nobody(home: &std::path::Path, args: &[&str]) -> Value {
    let mut c = common::mount::avfs_command(home);
    c.args(args).env("HOME", home).current_dir(home);
    // SAFETY: setgroups/setgid/setuid only, between fork and exec.
    unsafe {
        c.pre_exec(|| {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(NOBODY) != 0
                || libc::setuid(NOBODY) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = c.output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "{args:?}: not JSON ({err}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn a_user_who_is_not_root_gets_a_run_in_auto_mode_and_a_namespace_or_a_reason_in_every_mode() {
    if !common::skip::require_root() || !common::skip::require_sandbox() {
        return;
    }
    // Below the target directory, which 65534 can reach, not in a 0700 temp dir of root's.
    let base = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = base.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&home, Some(NOBODY), Some(NOBODY)).unwrap();
    let created = avfs_as_nobody(&home, &["--json", "vault", "create", "w"]);
    assert_eq!(created["ok"], true, "{created}");
    let v = avfs_as_nobody(&home, &["--json", "proxy", "exec", "--", "true"]);
    assert_eq!(v["ok"], true, "auto mode gave no run: {v}");
    assert_eq!(v["data"]["exit_code"], 0, "{v}");
    for mode in ["overlay", "fuse", "copy"] {
        let v = avfs_as_nobody(
            &home,
            &["--json", "proxy", "exec", "--mode", mode, "--", "true"],
        );
        if v["ok"] == true {
            assert_eq!(v["data"]["exit_code"], 0, "{mode}: {v}");
        } else {
            // FUSE cannot be had: say so, not an I/O error on the run's own directories.
            assert!(
                ["sandbox_unavailable", "fuse_unavailable"]
                    .contains(&v["error"]["kind"].as_str().unwrap_or_default()),
                "{mode}: {v}"
            );
        }
    }
    // A session: `auto` picks what this user can have (copy, here) and its commands run
    // sandboxed; a kept overlay namespace needs root.
    let started = avfs_as_nobody(&home, &["--json", "session", "start", "w", "--name", "u"]);
    assert_eq!(started["ok"], true, "{started}");
    let mode = started["data"]["mode"].as_str().unwrap().to_string();
    let v = avfs_as_nobody(
        &home,
        &[
            "--json",
            "proxy",
            "exec",
            "--session",
            "u",
            "--shell",
            "echo s > s.txt",
        ],
    );
    let stopped = avfs_as_nobody(&home, &["--json", "session", "stop", "u"]);
    assert_eq!(stopped["ok"], true, "{stopped}");
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["data"]["exit_code"], 0, "{v}");
    assert_eq!(v["data"]["mode"], mode, "{v}");
    let kind = if mode == "fuse" { "none" } else { "namespace" };
    assert_eq!(v["data"]["sandbox"]["kind"], kind, "{v}");
    let overlay = avfs_as_nobody(
        &home,
        &[
            "--json", "session", "start", "w", "--name", "o", "--mode", "overlay",
        ],
    );
    if overlay["ok"] == true {
        avfs_as_nobody(&home, &["--json", "session", "stop", "o"]);
    }
    assert_eq!(overlay["error"]["kind"], "sandbox_unavailable", "{overlay}");
}
