//! Escape tests for the execution sandbox, through the real binary: a canary directory on
//! the host, outside the workspace, must survive untouched and unread whatever commands the
//! policy allows try, in every mode. Symlinks come from `avfs ln -s`, from an imported tree
//! and from a command; commands also try the avfs home, the vault file, a planted runtime
//! directory, and `kill -9` of their supervisor.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::mount::{ProxyEnv, avfs_command, ok};
use serde_json::Value;

/// Every mode, and `session`: commands of an overlay session, in its kept namespace.
const MODES: [&str; 4] = ["overlay", "fuse", "copy", "session"];
/// The modes of a command run on its own.
const ALONE: [&str; 3] = ["overlay", "fuse", "copy"];

/// A host directory the sandbox must keep commands away from.
struct Canary {
    dir: tempfile::TempDir,
    secret: String,
}

impl Canary {
    fn new() -> Canary {
        let dir = tempfile::tempdir().unwrap();
        let secret = format!("CANARY-{}-{}", std::process::id(), rand_word());
        std::fs::write(dir.path().join("secret.txt"), &secret).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/keep.txt"), "keep").unwrap();
        Canary { dir, secret }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Every entry below the canary with its content, mode and times.
    fn state(&self) -> BTreeMap<PathBuf, String> {
        use std::os::unix::fs::MetadataExt;
        let mut out = BTreeMap::new();
        for e in walk(self.path()) {
            let m = std::fs::symlink_metadata(&e).unwrap();
            let content = if m.is_file() {
                std::fs::read_to_string(&e).unwrap()
            } else {
                String::new()
            };
            out.insert(
                e.clone(),
                format!(
                    "{content}|{:o}|{}|{}|{}",
                    m.mode(),
                    m.uid(),
                    m.mtime(),
                    m.ctime()
                ),
            );
        }
        out
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn rand_word() -> u64 {
    let mut b = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .unwrap();
    u64::from_le_bytes(b)
}

fn env() -> Option<ProxyEnv> {
    if !common::skip::require_sandbox() {
        return None;
    }
    ProxyEnv::new()
}

/// `avfs --json proxy exec --mode MODE ARGS`, with extra environment: the envelope's data.
/// Mode `session`: in session `esc` (an overlay session, started on first use).
fn exec(e: &ProxyEnv, mode: &str, args: &[&str], extra: &[(&str, &str)]) -> Value {
    let mut full: Vec<&str> = exec_in(e, mode);
    full.extend_from_slice(args);
    let out = avfs_command(e.home.path())
        .args(&full)
        .envs(extra.iter().copied())
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "{full:?}: not JSON ({err}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(v["ok"], true, "{full:?}: {v}");
    v["data"].clone()
}

/// `--json proxy exec` in MODE: `--mode MODE`, or `--session esc` (an overlay session,
/// started on first use) for `session`.
fn exec_in<'m>(e: &ProxyEnv, mode: &'m str) -> Vec<&'m str> {
    if mode != "session" {
        return vec!["--json", "proxy", "exec", "--mode", mode];
    }
    let (v, _) = common::mount::avfs_json(e.home.path(), &["session", "list"]);
    if v["data"].as_array().is_none_or(|l| l.is_empty()) {
        ok(e.avfs(&[
            "session", "start", "w", "--name", "esc", "--mode", "overlay",
        ]));
    }
    vec!["--json", "proxy", "exec", "--session", "esc"]
}

fn assert_not_leaked(v: &Value, canary: &Canary, what: &str) {
    let text = v.to_string();
    assert!(
        !text.contains(&canary.secret),
        "{what}: the canary's content reached the envelope: {v}"
    );
}

#[test]
fn symlinks_to_the_host_point_at_nothing_in_every_mode() {
    let Some(e) = env() else { return };
    let canary = Canary::new();
    let before = canary.state();
    let target = canary.path().to_str().unwrap();
    // Made by `avfs ln -s`, and by an import of a tree that holds one.
    ok(e.avfs(&["ln", "-s", target, "/link"]));
    let tree = tempfile::tempdir().unwrap();
    std::fs::create_dir(tree.path().join("build")).unwrap();
    std::os::unix::fs::symlink(canary.path(), tree.path().join("build/cache")).unwrap();
    std::os::unix::fs::symlink(
        canary.path().join("secret.txt"),
        tree.path().join("build/file"),
    )
    .unwrap();
    ok(e.avfs(&["import", tree.path().to_str().unwrap(), "/imp"]));
    for mode in MODES {
        // Made by an allowed command (the path is built at run time, out of the policy's
        // sight), then used by the next one.
        let made = exec(
            &e,
            mode,
            &[
                "--",
                "python3",
                "-c",
                "import os; os.symlink(os.environ['PROBE'], os.environ['NAME'])",
            ],
            &[("PROBE", target), ("NAME", &format!("made-{mode}"))],
        );
        assert_eq!(made["exit_code"], 0, "{mode}: {made}");
        for link in ["link", "imp/build/cache", &format!("made-{mode}")] {
            let scripts = [
                format!("cat {link}/secret.txt"),
                format!("ls {link}/"),
                format!("echo overwritten > {link}/secret.txt"),
                format!("echo new > {link}/planted.txt"),
                format!("chmod 777 {link}/secret.txt"),
                format!("touch -d 2001-01-01 {link}/secret.txt"),
                format!("rm -rf {link}/"),
                format!("rm -rf {link}/sub"),
            ];
            for script in &scripts {
                let v = exec(&e, mode, &["--shell", script], &[]);
                assert_eq!(v["sandbox"]["kind"], "namespace", "{mode}: {v}");
                assert_not_leaked(&v, &canary, &format!("{mode}: {script}"));
            }
        }
        let v = exec(&e, mode, &["--shell", "cat imp/build/file"], &[]);
        assert_not_leaked(&v, &canary, &format!("{mode}: cat imp/build/file"));
        assert_ne!(
            v["exit_code"], 0,
            "{mode}: a link to a host file reads nothing: {v}"
        );
        assert_eq!(canary.state(), before, "{mode}: the canary changed");
    }
    // The links are still there, as links: the sandbox did not follow them out.
    let ls = ok(e.avfs(&["ls", "-l", "/"]));
    assert!(ls.contains(&format!("link -> {target}")), "{ls}");
}

#[test]
fn the_avfs_home_the_vault_file_and_host_paths_do_not_exist_inside() {
    let Some(e) = env() else { return };
    let canary = Canary::new();
    let before = canary.state();
    let home = e.home.path().to_str().unwrap().to_string();
    let vault = e.home.path().join("vaults/w.avfs");
    assert!(
        vault.exists(),
        "the vault file is where the test expects it"
    );
    // Paths built at run time, so the policy cannot see them: the sandbox must.
    let probe = "import os\n\
        for p in os.environ['PROBE'].split(':'):\n\
        \x20   try:\n\
        \x20       if os.path.isdir(p): print(p, 'LISTED', os.listdir(p))\n\
        \x20       else: print(p, 'READ', open(p, 'rb').read(64))\n\
        \x20   except OSError as e: print(p, 'ERR', e.errno)\n";
    for mode in MODES {
        // Named in the environment, where the policy does not look.
        let paths = [
            home.clone(),
            vault.display().to_string(),
            canary.path().display().to_string(),
            canary.path().join("secret.txt").display().to_string(),
            "/etc/shadow".into(),
            "/root".into(),
            "/var".into(),
            format!("/proc/1/root{}/secret.txt", canary.path().display()),
        ]
        .join(":");
        let v = exec(
            &e,
            mode,
            &["--", "python3", "-c", probe],
            &[("PROBE", &paths)],
        );
        assert_eq!(v["exit_code"], 0, "{mode}: {v}");
        let out = v["stdout"]["text"].as_str().unwrap();
        let bound: Vec<&str> = v["sandbox"]["ro"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap())
            .collect();
        // A private home lists only the toolchains bound into it (`sandbox.ro`).
        let only_bound = |line: &str| {
            let Some((dir, list)) = line.split_once(" LISTED ") else {
                return false;
            };
            list.trim_matches(['[', ']'])
                .split(", ")
                .filter(|n| !n.is_empty())
                .all(|n| bound.contains(&format!("{dir}/{}", n.trim_matches('\'')).as_str()))
        };
        for line in out.lines() {
            assert!(
                line.contains(" ERR ") || line.ends_with("READ b''") || only_bound(line),
                "{mode}: a host path was reachable: {line}\n{out}"
            );
        }
        assert_eq!(out.lines().count(), 8, "{mode}: {out}");
        assert_not_leaked(&v, &canary, mode);
        // The sandbox says what it bound, and none of it holds the avfs home.
        for p in v["sandbox"]["ro"].as_array().unwrap() {
            assert!(
                !home.starts_with(p.as_str().unwrap()),
                "{mode}: {p} holds the home"
            );
        }
    }
    assert_eq!(canary.state(), before);
}

#[test]
fn a_planted_runtime_directory_is_refused_and_runs_leave_nothing_behind() {
    let Some(e) = env() else { return };
    let canary = Canary::new();
    let before = canary.state();
    // A first run makes the runtime directory; each run removes its own directory in it.
    let v = exec(&e, "overlay", &["--", "true"], &[]);
    assert_eq!(v["exit_code"], 0, "{v}");
    let run = e.home.path().join("run");
    assert_eq!(
        std::fs::read_dir(&run).unwrap().count(),
        0,
        "a run left its directory"
    );
    // A symlink planted in its place would move every run (and its mounts) elsewhere.
    std::fs::remove_dir(&run).unwrap();
    std::os::unix::fs::symlink(canary.path(), &run).unwrap();
    for mode in ALONE {
        let out = avfs_command(e.home.path())
            .args(["--json", "proxy", "exec", "--mode", mode, "--", "true"])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["error"]["kind"], "sandbox_failed", "{mode}: {v}");
        assert_eq!(canary.state(), before, "{mode}: the canary changed");
    }
    std::fs::remove_file(&run).unwrap();
}

#[test]
fn kill_9_of_the_supervisor_ends_the_command_and_leaves_no_mount() {
    let Some(e) = env() else { return };
    for mode in MODES {
        let marker = format!("4242.{}{}", std::process::id(), mode.len());
        // In a session the client dies, not the daemon that runs the command: the daemon
        // ends the command when its client hangs up.
        let mut child = avfs_command(e.home.path())
            .args(exec_in(&e, mode))
            .args(["--timeout", "1h"])
            .args([
                "--shell",
                &format!("setsid sleep {marker} & sleep {marker}"),
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        common::wait::until_true(&format!("{mode}: the command to start"), || {
            common::wait::processes_running(&marker).len() >= 2
        });
        child.kill().unwrap();
        child.wait().unwrap();
        common::wait::until_true(&format!("{mode}: every `sleep {marker}` to die"), || {
            common::wait::processes_running(&marker).is_empty()
        });
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let home = e.home.path().to_str().unwrap();
        assert!(
            !mounts.lines().any(|l| l.contains(home)),
            "{mode}: a mount was left behind:\n{mounts}"
        );
    }
    // The next run cleans the dead supervisor's directories away (the session's own go
    // when it stops).
    ok(e.avfs(&["session", "stop", "esc"]));
    let v = exec(&e, "overlay", &["--", "true"], &[]);
    assert_eq!(v["exit_code"], 0, "{v}");
    let left = std::fs::read_dir(e.home.path().join("run"))
        .unwrap()
        .count();
    assert_eq!(left, 0, "a dead supervisor's run directory stayed");
}

/// Write `text` into the vault at `/name` (the policy lets `python3 NAME` run it, where a
/// script given with `-c` may be asked about).
fn put_script(e: &ProxyEnv, name: &str, text: &str) {
    ok(e.avfs(&["write", &format!("/{name}"), text]));
}

#[test]
fn a_root_supervisor_gives_the_command_no_power_over_the_host() {
    // As root there is no user namespace: the command kept every capability, so it could
    // make the read-only /etc writable, unmask /etc/shadow and rename the host.
    let Some(e) = env() else { return };
    if !rustix::process::geteuid().is_root() {
        return;
    }
    let probe = format!("/etc/.avfs-probe-{}", rand_word());
    put_script(
        &e,
        "caps.py",
        "import ctypes, os\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         probe = os.environ['PROBE']\n\
         libc.mount(None, b'/etc', None, 32 | 4096, None)  # MS_REMOUNT | MS_BIND, not read-only\n\
         try:\n\
         \x20   open(probe, 'w').write('x'); os.remove(probe); print('ETC WRITTEN')\n\
         except OSError as e: print('etc', e.errno)\n\
         shadow = '/etc/' + 'shadow'\n\
         libc.umount2(shadow.encode(), 0)\n\
         print('SHADOW', len(open(shadow).read()))\n\
         name = open('/proc/sys/kernel/hostname').read().strip()\n\
         try:\n\
         \x20   open('/proc/sys/kernel/hostname', 'w').write(name); print('HOSTNAME SET')\n\
         except OSError as e: print('hostname', e.errno)\n",
    );
    for mode in MODES {
        let v = exec(
            &e,
            mode,
            &["--", "python3", "caps.py"],
            &[("PROBE", &probe)],
        );
        let _ = std::fs::remove_file(&probe);
        assert_eq!(v["exit_code"], 0, "{mode}: {v}");
        let out = v["stdout"]["text"].as_str().unwrap();
        assert!(
            !out.contains("ETC WRITTEN"),
            "{mode}: the host's /etc was written: {out}"
        );
        assert!(
            out.contains("SHADOW 0"),
            "{mode}: /etc/shadow was unmasked: {out}"
        );
        assert!(
            !out.contains("HOSTNAME SET"),
            "{mode}: the host's name could be set: {out}"
        );
    }
}

#[test]
fn a_root_command_cannot_open_host_files_by_handle() {
    // open_by_handle_at (CAP_DAC_READ_SEARCH) on the /etc bind opens any inode of the host's
    // root file system: here its root directory (ext4's inode 2), then the canary.
    let Some(e) = env() else { return };
    if !rustix::process::geteuid().is_root() {
        return;
    }
    let canary = Canary::new();
    put_script(
        &e,
        "handle.py",
        "import ctypes, os, struct\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         m = os.open('/etc', os.O_RDONLY | os.O_DIRECTORY)\n\
         h = struct.pack('II', 8, 1) + struct.pack('II', 2, 0)\n\
         fd = libc.open_by_handle_at(m, ctypes.create_string_buffer(h, len(h)), os.O_RDONLY | os.O_DIRECTORY)\n\
         print('handle', fd, ctypes.get_errno())\n\
         if fd >= 0:\n\
         \x20   f = os.open(os.environ['PROBE'].lstrip('/'), os.O_RDONLY, dir_fd=fd)\n\
         \x20   print(os.read(f, 200))\n",
    );
    let secret = canary.path().join("secret.txt");
    for mode in MODES {
        for confine in [&[][..], &["--confine"][..]] {
            let mut args = confine.to_vec();
            args.extend(["--", "python3", "handle.py"]);
            let v = exec(&e, mode, &args, &[("PROBE", secret.to_str().unwrap())]);
            assert_not_leaked(&v, &canary, &format!("{mode} {confine:?}"));
        }
    }
}

#[test]
fn descriptors_the_caller_left_open_do_not_reach_the_command() {
    // A harness that starts avfs with a descriptor open (not close-on-exec) must not hand
    // the sandboxed command a way out: a directory descriptor is the host's tree.
    let Some(e) = env() else { return };
    let canary = Canary::new();
    put_script(
        &e,
        "fd.py",
        "import os\n\
         try:\n\
         \x20   f = os.open('secret.txt', os.O_RDONLY, dir_fd=7); print(os.read(f, 200))\n\
         except OSError as e: print('fd 7', e.errno)\n",
    );
    let dir = std::fs::File::open(canary.path()).unwrap();
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let raw = dir.as_raw_fd();
    for mode in MODES {
        let mut c = avfs_command(e.home.path());
        c.args(exec_in(&e, mode)).args(["--", "python3", "fd.py"]);
        // SAFETY: dup2 only, between fork and exec.
        unsafe {
            c.pre_exec(move || {
                if libc::dup2(raw, 7) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = c.output().unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["ok"], true, "{mode}: {v}");
        assert_not_leaked(&v["data"], &canary, mode);
    }
}

#[test]
fn a_command_cannot_forge_how_it_ended() {
    // The reaper (pid 1 of the namespace) keeps the status pipe open while the command
    // runs; through /proc/1/fd the command can write the supervisor its own verdict.
    let Some(e) = env() else { return };
    put_script(
        &e,
        "forge.py",
        "import os\n\
         open('made.txt', 'w').write('work')\n\
         for fd in os.listdir('/proc/1/fd'):\n\
         \x20   p = '/proc/1/fd/' + fd\n\
         \x20   try:\n\
         \x20       if os.readlink(p).startswith('pipe:'):\n\
         \x20           w = os.open(p, os.O_WRONLY | os.O_NONBLOCK)\n\
         \x20           os.write(w, os.environ['FORGED'].encode() + b'\\n')\n\
         \x20   except OSError: pass\n",
    );
    for mode in MODES {
        for forged in [
            r#"{"spawn_failed":{"reason":"forged","os_error":2}}"#,
            r#"{"signaled":{"signal":9}}"#,
            r#"{"setup_failed":{"reason":"forged"}}"#,
        ] {
            let out = avfs_command(e.home.path())
                .args(exec_in(&e, mode))
                .args(["--", "python3", "forge.py"])
                .env("FORGED", forged)
                .output()
                .unwrap();
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["ok"], true, "{mode} {forged}: {v}");
            let d = &v["data"];
            assert_eq!(d["outcome"], "completed", "{mode} {forged}: {d}");
            assert_eq!(d["exit_code"], 0, "{mode} {forged}: {d}");
            assert_eq!(d["sandbox"]["kind"], "namespace", "{mode} {forged}: {d}");
            ok(e.avfs(&["rm", "/made.txt"]));
        }
    }
}

#[test]
fn a_workspace_path_inside_a_bound_host_path_is_refused_or_still_the_fork() {
    // The binds are mounted after the workspace: a workspace below an `rw` path is covered
    // by the host's directory, and the command writes the host instead of the fork.
    let Some(e) = env() else { return };
    // Not below /tmp, which is no workspace path.
    let host = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let policy = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        policy.path(),
        format!(
            "[sandbox]\nworkspace_path = \"/workspace\"\nrw = [\"{}\"]\n",
            host.path().display()
        ),
    )
    .unwrap();
    std::fs::create_dir(host.path().join("proj")).unwrap();
    let ws = host.path().join("proj");
    for mode in MODES {
        let out = avfs_command(e.home.path())
            .args(exec_in(&e, mode))
            .args(["--policy", policy.path().to_str().unwrap()])
            .args(["--workspace-path", ws.to_str().unwrap()])
            .args(["--shell", "echo x > result.txt"])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        if v["ok"] == false {
            assert_eq!(v["error"]["kind"], "invalid_argument", "{mode}: {v}");
            continue;
        }
        assert_eq!(v["data"]["outcome"], "completed", "{mode}: {v}");
        assert!(
            !ws.join("result.txt").exists(),
            "{mode}: the command wrote the host directory instead of the workspace: {v}"
        );
    }
}

#[test]
fn the_workspace_at_the_home_gets_no_mount_points_of_the_sandbox() {
    // With the workspace at $HOME, the toolchain binds (`~/.cargo`, `~/.rustup`) are made
    // inside the workspace, and their mount points become the command's changes.
    let Some(e) = env() else { return };
    let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::create_dir(home.path().join(".cargo")).unwrap();
    let h = home.path().to_str().unwrap();
    // Refused with a typed error (the sandbox makes the home itself), or run with no
    // change to the fork; never mount points in the fork.
    for mode in MODES {
        let out = avfs_command(e.home.path())
            .args(exec_in(&e, mode))
            .args(["--workspace-path", h])
            .args(["--", "true"])
            .env("HOME", h)
            .env("CARGO_HOME", "")
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        if v["ok"] == false {
            assert_eq!(v["error"]["kind"], "invalid_argument", "{mode}: {v}");
            continue;
        }
        assert_eq!(v["data"]["exit_code"], 0, "{mode}: {v}");
        assert_eq!(
            v["data"]["changes"],
            serde_json::json!([]),
            "{mode}: `true` changed the fork"
        );
    }
    assert!(
        ok(e.avfs(&["ls", "/"])).is_empty(),
        "the fork gained entries"
    );
}
