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

const MODES: [&str; 3] = ["overlay", "fuse", "copy"];

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
fn exec(e: &ProxyEnv, mode: &str, args: &[&str], extra: &[(&str, &str)]) -> Value {
    let mut full = vec!["--json", "proxy", "exec", "--mode", mode];
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
    for mode in MODES {
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
        let mut child = avfs_command(e.home.path())
            .args(["--json", "proxy", "exec", "--mode", mode, "--timeout", "1h"])
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
    // The next run cleans the dead supervisor's directories away.
    let v = exec(&e, "overlay", &["--", "true"], &[]);
    assert_eq!(v["exit_code"], 0, "{v}");
    let left = std::fs::read_dir(e.home.path().join("run"))
        .unwrap()
        .count();
    assert_eq!(left, 0, "a dead supervisor's run directory stayed");
}
