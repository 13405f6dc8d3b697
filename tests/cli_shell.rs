//! `avfs shell`, `avfs completions` and `avfs man` through the real binary.

mod common;

use std::io::Write;
use std::process::Stdio;

use common::mount::avfs_command as avfs;

/// Feed `script` to `avfs [args] shell` on stdin: (stdout, stderr, exit code).
fn shell(home: &std::path::Path, args: &[&str], script: &str) -> (String, String, i32) {
    let mut child = avfs(home)
        .args(args)
        .arg("shell")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code().unwrap_or(-1),
    )
}

#[test]
fn the_shell_runs_commands_relative_to_its_cwd() {
    let home = tempfile::tempdir().unwrap();
    assert!(
        avfs(home.path())
            .args(["vault", "create", "v"])
            .status()
            .unwrap()
            .success()
    );
    let (out, err, code) = shell(
        home.path(),
        &[],
        "mkdir -p src/deep\n\
         cd src\n\
         write a.txt 'hello world'\n\
         pwd\n\
         cat a.txt\n\
         cd deep\n\
         write ../b.txt bee\n\
         cd ..\n\
         ls\n\
         cd missing\n\
         vault fork v side\n\
         use side\n\
         write /only-side.txt x\n\
         use v\n\
         ls /\n\
         exit\n\
         write never.txt x\n",
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("/src\nhello world"), "{out}");
    assert!(out.contains("a.txt\nb.txt\ndeep/\n"), "{out}");
    assert!(
        err.contains("no such file or directory: `/src/missing`"),
        "{err}"
    );
    // `use` switched vaults: the fork's file is only in the fork.
    assert!(out.ends_with("src/\n"), "{out}");
    let side = avfs(home.path())
        .args(["--workspace", "side", "cat", "/only-side.txt"])
        .output()
        .unwrap();
    assert!(side.status.success());
    // Nothing after `exit` ran.
    let never = avfs(home.path())
        .args(["cat", "/src/never.txt"])
        .output()
        .unwrap();
    assert!(!never.status.success());
    // History is kept across sessions.
    let history = std::fs::read_to_string(home.path().join("shell_history")).unwrap();
    assert!(history.contains("cd deep"), "{history}");
}

#[test]
fn json_shell_prints_one_document_per_line() {
    let home = tempfile::tempdir().unwrap();
    let (out, _, code) = shell(
        home.path(),
        &["--json"],
        "vault create j\nwrite x.txt 1\ncat nope.txt\n",
    );
    assert_eq!(code, 0);
    let docs: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(docs.len(), 4, "{out}");
    assert_eq!(docs[0]["command"], "vault create");
    assert_eq!(docs[2]["error"]["kind"], "path_not_found");
    assert_eq!(docs[3]["command"], "shell");
    assert_eq!(docs[3]["data"]["commands"], 3);
    assert_eq!(docs[3]["data"]["failed"], 1);
}

#[test]
fn completions_and_man_pages_come_from_the_definitions() {
    let home = tempfile::tempdir().unwrap();
    for (shell, needle) in [
        ("bash", "complete -F _avfs"),
        ("zsh", "#compdef avfs"),
        ("fish", "complete -c avfs"),
    ] {
        let out = avfs(home.path())
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(needle), "{shell}: {text}");
        assert!(text.contains("checkpoint"), "{shell} completes subcommands");
    }
    let man = avfs(home.path()).arg("man").output().unwrap();
    let text = String::from_utf8_lossy(&man.stdout);
    assert!(text.contains(".TH avfs 1"), "{text}");
    let dir = home.path().join("man");
    let out = avfs(home.path())
        .args(["--json", "man", "--dir", dir.to_str().unwrap()])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let pages = v["data"]["pages"].as_array().unwrap();
    assert!(pages.len() > 50, "{v}");
    let page = std::fs::read_to_string(dir.join("avfs-proxy-exec.1")).unwrap();
    assert!(page.contains("Examples"), "examples reach the man pages");
    // Every command's --help has examples.
    let help = avfs(home.path())
        .args(["checkpoint", "restore", "--help"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("Examples:\n  avfs checkpoint restore"));
}
