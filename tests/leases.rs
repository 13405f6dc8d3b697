//! Write leases across hosts: a read-write mount or a session holds its fork's lease, and
//! writes from another host are refused with `workspace_busy` naming the holder until it
//! ends or its lease lapses. Hosts are `avfs` processes with their own `AVFS_HOST_ID` on
//! one vault (the vault's engine is `AVFS_ENGINE`'s: CI runs this on PostgreSQL too).

mod common;

use std::io::Write as _;
use std::process::Command;
use std::time::Duration;

use common::{TestEnv, Unmount};

const A: &[(&str, &str)] = &[("AVFS_HOST_ID", "host-a"), ("AVFS_LEASE_SECS", "1")];
const B: &[(&str, &str)] = &[("AVFS_HOST_ID", "host-b"), ("AVFS_LEASE_SECS", "1")];

fn files(env: &TestEnv, host: &[(&str, &str)]) -> Vec<String> {
    let data = env.data_env(&["ls", "/"], host);
    data.as_array()
        .expect("ls lists")
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_read_write_mount_holds_its_fork_against_other_hosts_until_it_ends_or_lapses() {
    if !common::skip::require_fuse() {
        return;
    }
    let env = TestEnv::with_vault("v");
    let (dir, _guard) = mount_dir(&env, "mnt-a");
    let mount = env.data_env(&["mount", "v", dir.to_str().unwrap()], A);
    let pid = mount["pid"].as_u64().expect("the mount's pid") as u32;
    std::fs::write(dir.join("through-mount.txt"), b"a\n").unwrap();

    // Host B: a write, a checkpoint and a read-write mount are refused, naming the holder;
    // nothing changes.
    let e = env.err_env(&["write", "/b.txt", "b"], B, "workspace_busy");
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("host-a") && msg.contains("mount"), "{e}");
    assert_eq!(e["details"]["workspace"], "main", "{e}");
    env.err_env(&["rm", "/through-mount.txt"], B, "workspace_busy");
    let (dir_b, _guard_b) = mount_dir(&env, "mnt-b");
    env.err_env(
        &["mount", "v", dir_b.to_str().unwrap()],
        B,
        "workspace_busy",
    );
    assert!(!files(&env, B).contains(&"b.txt".to_string()));
    // Host B may read, fork and save a checkpoint (none changes the fork's files); host
    // A's own processes may write.
    assert!(files(&env, B).contains(&"through-mount.txt".to_string()));
    env.data_env(&["vault", "fork", "v", "side"], B);
    env.data_env(&["checkpoint", "save", "cp"], B);
    env.data_env(&["write", "/from-a-cli.txt", "a"], A);

    // The mount renews its lease: still held well past one lease length.
    std::thread::sleep(Duration::from_millis(2500));
    env.err_env(&["write", "/b.txt", "b"], B, "workspace_busy");

    // Host A dies. Its lease lapses, host B takes over, and nothing acknowledged is lost.
    Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    common::wait::until_true("the mount daemon to die", || {
        common::wait::process_gone(&pid.to_string())
    });
    std::thread::sleep(Duration::from_millis(1200));
    env.data_env(&["write", "/b.txt", "b"], B);
    env.data_env(&["mount", "v", dir_b.to_str().unwrap()], B);
    let now = files(&env, A);
    for f in ["from-a-cli.txt", "b.txt"] {
        assert!(now.contains(&f.to_string()), "{f} missing: {now:?}");
    }
    // Now host A is the other host, refused while B's mount holds the fork.
    let e = env.err_env(&["write", "/a2.txt", "a"], A, "workspace_busy");
    assert!(e["message"].as_str().unwrap().contains("host-b"), "{e}");
    // B's mount ends: its lease is given up at once, and A writes again.
    env.data_env(&["unmount", dir_b.to_str().unwrap()], B);
    env.data_env(&["write", "/a2.txt", "a"], A);
    env.data(&["vault", "check"]);
}

#[test]
fn a_read_only_mount_and_a_pinned_checkpoint_take_no_lease() {
    if !common::skip::require_fuse() {
        return;
    }
    let env = TestEnv::with_vault("v");
    let (dir, _guard) = mount_dir(&env, "ro");
    env.data_env(&["mount", "v", dir.to_str().unwrap(), "--readonly"], A);
    env.data_env(&["checkpoint", "save", "cp"], A);
    let (pinned, _guard_pinned) = mount_dir(&env, "pinned");
    env.data_env(&["mount", "v@cp", pinned.to_str().unwrap()], A);
    env.data_env(&["write", "/b.txt", "b"], B);
}

/// A conditional change beside a read-write mount (from the mount's own host, which its
/// lease lets write) first records what the mount wrote: the head it reports is the newest
/// entry `op log` shows, and a change conditional on that head applies.
#[test]
fn a_conditional_change_beside_a_mount_compares_a_head_op_log_shows() {
    if !common::skip::require_fuse() {
        return;
    }
    let env = TestEnv::with_vault("v");
    env.data_env(&["write", "/a.txt", "a"], A);
    let newest = |env: &TestEnv| env.data_env(&["op", "log", "--limit", "1"], A)[0]["id"].clone();
    let read = newest(&env).as_i64().unwrap().to_string();
    let (dir, _guard) = mount_dir(&env, "rw");
    env.data_env(&["mount", "v", dir.to_str().unwrap()], A);
    std::fs::write(dir.join("b.txt"), "from the mount").unwrap();
    let e = env.json_env(&["--if-head", &read, "write", "/c.txt", "c"], A);
    assert_eq!(e["error"]["kind"], "head_moved", "{e}");
    let mut head = e["error"]["details"]["head"].clone();
    assert_eq!(newest(&env), head, "{e}");
    // A change conditional on that head applies. The kernel sends the mount the file's
    // release after `close` returned, so the mount may hold one more unrecorded change
    // (recorded, again as its own entry, by the next conditional change): then that head
    // too is one `op log` shows, and the retry on it applies.
    for attempt in 0.. {
        let at = head.as_i64().unwrap().to_string();
        let e = env.json_env(&["--if-head", &at, "write", "/c.txt", "c"], A);
        if e["ok"] == true {
            break;
        }
        assert!(attempt < 3, "the head never settled: {e}");
        assert_eq!(e["error"]["kind"], "head_moved", "{e}");
        head = e["error"]["details"]["head"].clone();
        assert_eq!(newest(&env), head, "{e}");
    }
    assert_eq!(env.data_env(&["cat", "/c.txt"], A)["content"], "c");
}

#[test]
fn a_session_holds_its_fork_and_gives_it_up_when_stopped() {
    if !common::skip::require_fuse() {
        return;
    }
    let env = TestEnv::with_vault("v");
    env.data_env(&["session", "start", "v", "--name", "s"], A);
    let stop = SessionStop(&env);
    let e = env.json_env(&["write", "/b.txt", "b"], B);
    drop(stop);
    assert_eq!(e["error"]["kind"], "workspace_busy", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("session s"),
        "{e}"
    );
    env.data_env(&["write", "/b.txt", "b"], B);
}

#[test]
fn a_bad_lease_length_is_refused_before_anything_starts() {
    let env = TestEnv::with_vault("v");
    let (dir, _guard) = mount_dir(&env, "mnt");
    for bad in [
        "0",
        "-1",
        "0.5",
        "1000y",
        "inf",
        "NaN",
        "3601",
        "18446744073709551616",
    ] {
        let e = env.err_env(
            &["mount", "v", dir.to_str().unwrap()],
            &[("AVFS_LEASE_SECS", bad)],
            "invalid_argument",
        );
        assert!(
            e["message"].as_str().unwrap().contains("AVFS_LEASE_SECS"),
            "{bad}: {e}"
        );
        env.err_env(
            &["session", "start", "v", "--name", "s"],
            &[("AVFS_LEASE_SECS", bad)],
            "invalid_argument",
        );
    }
    assert!(std::fs::read_dir(&dir).unwrap().next().is_none());
    assert!(env.data(&["mounts"]).as_array().unwrap().is_empty());
}

/// An empty directory for a mount, and a guard that unmounts it (if mounted) on drop.
fn mount_dir<'a>(env: &'a TestEnv, name: &str) -> (std::path::PathBuf, Unmount<'a>) {
    let dir = env.host(name);
    std::fs::create_dir_all(&dir).unwrap();
    (dir.clone(), Unmount(env, dir))
}

/// Stops session `s` on drop.
struct SessionStop<'a>(&'a TestEnv);

impl Drop for SessionStop<'_> {
    fn drop(&mut self) {
        let _ = self.0.cmd().args(["session", "stop", "s"]).output();
    }
}

/// Sends SIGCONT on drop.
struct Resume(u32);

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}

fn mount_pid(doc: &serde_json::Value) -> u32 {
    doc["pid"].as_u64().expect("the mount's pid") as u32
}

fn kill(signal: &str, pid: u32) {
    assert!(
        Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
}

/// A holder that stalls past its lease (SIGSTOP) while another host writes is fenced when
/// it wakes: its mount refuses changes, and the other host's acknowledged write stays. One
/// that stalls while nobody else changes the fork carries on.
/// (It used to renew the lapsed lease as its own and write its stale view back over it.)
#[test]
fn a_holder_that_stalled_past_its_lease_never_writes_over_another_hosts_work() {
    if !common::skip::require_fuse() {
        return;
    }
    if common::skip::engine() == "sled" {
        // One process at a time holds a sled vault, so a stopped holder stops every other
        // process of the host, readers too; and a sled vault is never shared by hosts.
        // Past the test harness's capture, as common::skip's lines are.
        let _ = writeln!(
            std::io::stderr(),
            "SKIP a_holder_that_stalled_past_its_lease_never_writes_over_another_hosts_work: \
             a stopped process holds a sled vault whole (AVFS_ENGINE=sled)"
        );
        return;
    }
    let env = TestEnv::with_vault("v");
    env.data(&["write", "/f.txt", "orig"]);
    let (dir, _guard) = mount_dir(&env, "mnt-a");
    let pid = mount_pid(&env.data_env(&["mount", "v", dir.to_str().unwrap()], A));
    // Dropped before the unmount guard: a failed assertion leaves no stopped daemon.
    let _resume = Resume(pid);
    assert_eq!(std::fs::read(dir.join("f.txt")).unwrap(), b"orig");
    // A stall past the lease with nobody else changing the fork (a paused VM, a slow
    // database) is harmless: the holder carries on.
    kill("-STOP", pid);
    std::thread::sleep(Duration::from_millis(1600));
    env.data_env(&["cat", "/f.txt"], B);
    kill("-CONT", pid);
    std::thread::sleep(Duration::from_millis(1000));
    std::fs::write(dir.join("after-pause.txt"), b"a").unwrap();
    env.err_env(&["write", "/b.txt", "b"], B, "workspace_busy");
    // A stall during which another host changes the fork is not. The holder may have
    // stopped inside a transaction, holding the vault's lock: then host B's write waits
    // for it, and runs after the holder woke (and renewed), or before its renewal.
    kill("-STOP", pid);
    std::thread::sleep(Duration::from_millis(1600));
    let b_write = std::thread::spawn({
        let cmd = env.std_cmd();
        move || {
            let mut cmd = cmd;
            cmd.args(["--json", "write", "/f.txt", "from-b"]);
            for (k, v) in B {
                cmd.env(k, v);
            }
            cmd.output().unwrap()
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while !b_write.is_finished() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    kill("-CONT", pid);
    let out = b_write.join().unwrap();
    let acked: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The woken holder's renewal (every third of a second) finds the lease lost, or kept.
    std::thread::sleep(Duration::from_millis(1000));
    let append = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("f.txt"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"+a").and_then(|_| f.sync_all()));
    if acked["ok"] == true {
        // B's write landed after the lapse: A is fenced, and B's write stays.
        assert!(append.is_err(), "a fenced mount took a write");
        assert!(std::fs::write(dir.join("new.txt"), b"a").is_err());
        assert_eq!(env.cat(None, "/f.txt"), b"from-b", "{acked}");
    } else {
        // B waited for the holder's lock and found the lease renewed: refused, and the
        // holder carries on.
        assert_eq!(acked["error"]["kind"], "workspace_busy", "{acked}");
        append.expect("the holder kept its lease");
        assert_eq!(env.cat(None, "/f.txt"), b"orig+a");
    }
    // Host A's other processes, with a fresh view, still write.
    env.data_env(&["write", "/a-cli.txt", "a"], A);
}

/// Two read-write mounts of one fork on one host share its lease: unmounting one leaves
/// the fork held for the other. (The first unmount used to drop the lease.)
#[test]
fn a_second_mount_on_the_same_host_keeps_the_fork_held_after_the_first_ends() {
    if !common::skip::require_fuse() {
        return;
    }
    let env = TestEnv::with_vault("v");
    let ((one, _g1), (two, _g2)) = (mount_dir(&env, "one"), mount_dir(&env, "two"));
    env.data_env(&["mount", "v", one.to_str().unwrap()], A);
    env.data_env(&["mount", "v", two.to_str().unwrap()], A);
    // Past a few renewals of both.
    std::thread::sleep(Duration::from_millis(1500));
    env.data_env(&["unmount", one.to_str().unwrap()], A);
    env.err_env(&["write", "/b.txt", "b"], B, "workspace_busy");
    std::fs::write(two.join("still.txt"), b"a").unwrap();
    env.data_env(&["unmount", two.to_str().unwrap()], A);
    env.data_env(&["write", "/b.txt", "b"], B);
    assert_eq!(env.cat(None, "/still.txt"), b"a");
}

/// Another host may not delete a held fork; cleaning up a killed mount gives its lease up
/// at once (not after an hour-long lease lapses); a host id is trimmed.
#[test]
fn a_held_fork_is_not_deleted_from_another_host_and_a_dead_holder_is_cleared_by_unmount() {
    if !common::skip::require_fuse() {
        return;
    }
    let env = TestEnv::with_vault("v");
    env.data(&["vault", "fork", "v", "f"]);
    let (dir, _guard) = mount_dir(&env, "mnt");
    let hour_a = &[("AVFS_HOST_ID", " host-a "), ("AVFS_LEASE_SECS", "3600")];
    let pid = mount_pid(&env.data_env(&["mount", "f", dir.to_str().unwrap()], hour_a));
    env.err_env(&["vault", "delete", "f", "--yes"], B, "workspace_busy");
    env.data_env(&["-w", "f", "write", "/a.txt", "a"], A);
    kill("-9", pid);
    common::wait::until_true("the mount daemon to die", || {
        common::wait::process_gone(&pid.to_string())
    });
    env.err_env(&["-w", "f", "write", "/b.txt", "b"], B, "workspace_busy");
    assert_eq!(
        env.data_env(&["unmount", dir.to_str().unwrap()], A)["stale"],
        true
    );
    env.data_env(&["-w", "f", "write", "/b.txt", "b"], B);
    env.data_env(&["vault", "delete", "f", "--yes"], B);
}

/// Deleting a shared vault (on a server), or moving any vault to another engine, from
/// another host while one of its forks is held is refused: the holder would lose the vault under its feet. (Both
/// went through: only deleting the held fork itself was refused.)
#[test]
fn a_vault_with_a_held_fork_is_not_deleted_or_migrated_from_another_host() {
    if !common::skip::require_fuse() {
        return;
    }
    let env = TestEnv::with_vault("v");
    env.data(&["vault", "fork", "v", "f"]);
    let (dir, _guard) = mount_dir(&env, "mnt");
    env.data_env(&["mount", "f", dir.to_str().unwrap()], A);
    // Only a vault on a server is shared by hosts: deleting a local one checks no lease.
    if common::skip::engine() == "postgres" {
        let e = env.err_env(&["vault", "delete", "v", "--yes"], B, "workspace_busy");
        assert!(e["message"].as_str().unwrap().contains("host-a"), "{e}");
    }
    // Host B's own home, where no mount of host A's is recorded: only the lease tells.
    let home_b = env.host("home-b");
    let file = env.vault_file("v");
    let b_home = [B[0], B[1], ("AVFS_HOME", home_b.to_str().unwrap())];
    let to = ["vault", "migrate", file.to_str().unwrap(), "--to", "sqlite"];
    env.err_env(&to, &b_home, "workspace_busy");
    std::fs::write(dir.join("still.txt"), b"a").unwrap();
    env.data_env(&["unmount", dir.to_str().unwrap()], A);
    assert_eq!(env.cat(Some("f"), "/still.txt"), b"a");
    env.data_env(&["vault", "delete", "v", "--yes"], B);
}
