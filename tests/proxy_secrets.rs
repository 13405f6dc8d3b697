//! Secrets during `avfs proxy exec`: which files the command cannot see and which environment
//! variables it does not get, with the default policy. Ordinary project trees (a Python
//! venv made by `python3 -m venv`, node_modules, a cargo target dir) must stay whole while
//! private keys, `.env` files and credentials stay out of reach. Real binary, real vault,
//! real FUSE mount.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::mount::{ProxyEnv, avfs_env, ok};
use serde_json::Value;

const PRIVATE_KEY: &str = "-----BEGIN PRIVATE KEY-----\n\
    MIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQC7VJTUt9Us8cKj\n\
    -----END PRIVATE KEY-----\n";
const RSA_KEY: &str = "-----BEGIN RSA PRIVATE KEY-----\n\
    MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n\
    -----END RSA PRIVATE KEY-----\n";
const ENCRYPTED_KEY: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----\n\
    MIIFHDBOBgkqhkiG9w0BBQ0wQTApBgkqhkiG9w0BBQwwHAQIc2FsdHNhbHQCAggA\n\
    -----END ENCRYPTED PRIVATE KEY-----\n";
const OPENSSH_KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\n\
    b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n\
    -----END OPENSSH PRIVATE KEY-----\n";
const CERTIFICATE: &str = "-----BEGIN CERTIFICATE-----\n\
    MIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJ\n\
    -----END CERTIFICATE-----\n";

type Env = ProxyEnv;

impl ProxyEnv {
    /// `avfs --json proxy exec ARGS` with these environment variables added: the envelope's
    /// data and the exit code.
    fn exec_env(&self, args: &[&str], env: &[(&str, &str)]) -> (Value, i32) {
        let mut full = vec!["--json", "proxy", "exec"];
        full.extend_from_slice(args);
        let out = avfs_env(self.home.path(), &full, env);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "not one JSON document ({e}): {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        assert_eq!(v["ok"], true, "{args:?}: {v}");
        (v["data"].clone(), out.status.code().unwrap_or(-1))
    }

    /// Run shell text through the proxy; its stdout, after checking it ran and exited 0.
    fn sh(&self, script: &str) -> String {
        let (v, code) = self.exec_env(&["--timeout", "600s", "--shell", script], &[]);
        assert_eq!(v["ran"], true, "`{script}` did not run: {v}");
        assert_eq!(
            code, 0,
            "`{script}` failed: {}{}",
            v["stdout"]["text"], v["stderr"]["text"]
        );
        v["stdout"]["text"].as_str().unwrap().to_string()
    }

    /// Every path below `dir` as the proxied command sees it (a secret directory is
    /// listed but cannot be opened: find says so on stderr).
    fn listing_in_proxy(&self, dir: &str) -> Vec<String> {
        let out = self.sh(&format!(
            "cd {dir} && find . -mindepth 1 2>/dev/null | LC_ALL=C sort"
        ));
        out.lines().map(str::to_string).collect()
    }

    /// Every path below `dir` as stored in the vault (an export hides nothing).
    fn listing_in_vault(&self, dir: &str) -> Vec<String> {
        let out = tempfile::tempdir().unwrap();
        let dest = out.path().join("x");
        ok(self.avfs(&["export", dir, dest.to_str().unwrap()]));
        let found = std::process::Command::new("sh")
            .arg("-c")
            .arg("find . -mindepth 1 | LC_ALL=C sort")
            .current_dir(&dest)
            .output()
            .unwrap();
        assert!(found.status.success());
        String::from_utf8(found.stdout)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

fn write_tree(root: &Path, files: &[(&str, &str)]) {
    for (path, content) in files {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
}

#[test]
fn ordinary_trees_stay_visible_and_private_keys_stay_hidden() {
    let Some(e) = Env::new() else { return };
    let host = tempfile::tempdir().unwrap();
    let combined = format!("{CERTIFICATE}{CERTIFICATE}{RSA_KEY}");
    write_tree(
        host.path(),
        &[
            // Looks like real packages: test fixtures with certificates, modules named id_*.
            ("node_modules/x/package.json", "{\"name\":\"x\"}"),
            ("node_modules/x/test/fixtures/ca.pem", CERTIFICATE),
            (
                "node_modules/x/test/fixtures/chain.pem",
                &CERTIFICATE.repeat(3),
            ),
            (
                "node_modules/y/lib/id_gen.js",
                "module.exports = () => 1;\n",
            ),
            (
                "node_modules/y/lib/identity.js",
                "module.exports = x => x;\n",
            ),
            ("node_modules/.package-lock.json", "{}"),
            // A cargo target dir: crate `id-arena`, a build script's certificate.
            (
                "target/CACHEDIR.TAG",
                "Signature: 8a477f597d28d172789f06886806bc55\n",
            ),
            ("target/debug/.cargo-lock", ""),
            ("target/debug/deps/id_arena-0c5e8b2f.d", "deps\n"),
            ("target/debug/deps/libid_arena-0c5e8b2f.rlib", "rlib"),
            (
                "target/debug/.fingerprint/id-arena-0c5e8b2f/lib-id_arena",
                "f00d",
            ),
            ("target/debug/build/rustls-5d1c/out/ca.pem", CERTIFICATE),
            ("src/main.rs", "fn main() {}\n"),
            // Public halves and look-alikes stay visible.
            ("deploy/id_ed25519.pub", "ssh-ed25519 AAAA test\n"),
            (".envrc", "use flake\n"),
            ("docs/env.md", "env\n"),
            // Secrets.
            ("keys/server.pem", PRIVATE_KEY),
            ("keys/rsa.pem", RSA_KEY),
            ("keys/legacy.pem", ENCRYPTED_KEY),
            ("certs/combined.pem", &combined),
            ("deploy/id_ed25519", OPENSSH_KEY),
            ("deploy/id_rsa", RSA_KEY),
            ("tls/server.key", "key material\n"),
            (".env", "API_KEY=hunter2\n"),
            (".env.local", "API_KEY=hunter2\n"),
            (".env.production", "API_KEY=hunter2\n"),
            (".ssh/config", "Host x\n"),
            (".aws/credentials", "[default]\n"),
        ],
    );
    ok(e.avfs(&["import", host.path().to_str().unwrap()]));

    let hidden = [
        "./keys/server.pem",
        "./keys/rsa.pem",
        "./keys/legacy.pem",
        "./certs/combined.pem",
        "./deploy/id_ed25519",
        "./deploy/id_rsa",
        "./tls/server.key",
        "./.env",
        "./.env.local",
        "./.env.production",
        "./.ssh",
        "./.ssh/config",
        "./.aws",
        "./.aws/credentials",
    ];
    let stored = e.listing_in_vault("/");
    for h in hidden {
        assert!(stored.iter().any(|p| p == h), "{h} not in the vault");
    }
    // Secrets are listed (a tracked one must not look deleted to git); what is inside a
    // secret directory is not.
    let expected: Vec<String> = stored
        .iter()
        .filter(|p| !p.starts_with("./.ssh/") && !p.starts_with("./.aws/"))
        .cloned()
        .collect();
    assert_eq!(e.listing_in_proxy("."), expected);
    let modes = e.sh("stat -c '%a %n' .env .ssh keys/server.pem keys/rsa.pem");
    assert_eq!(modes, "0 .env\n0 .ssh\n0 keys/server.pem\n0 keys/rsa.pem\n");

    // Visible files can be opened by name, hidden ones cannot.
    let certs = e.sh(
        "cat node_modules/x/test/fixtures/ca.pem target/debug/build/rustls-5d1c/out/ca.pem \
         node_modules/y/lib/id_gen.js deploy/id_ed25519.pub",
    );
    assert_eq!(
        certs,
        format!("{CERTIFICATE}{CERTIFICATE}module.exports = () => 1;\nssh-ed25519 AAAA test\n")
    );
    // No secret can be read, listed, changed or removed.
    let probe: String = hidden
        .iter()
        .map(|h| {
            format!(
                "cat {h} >/dev/null 2>&1 && echo read:{h}; ls {h}/ >/dev/null 2>&1 && echo listed:{h}; \
                 touch {h} 2>/dev/null && echo touched:{h}; rm {h} 2>/dev/null && echo removed:{h}; "
            )
        })
        .collect();
    let probe = format!("{probe}true");
    // Through the FUSE mount nothing works. On an overlay, a secret is listed with no
    // content the command can open, so only `rm` works, in the sandbox: the fork keeps
    // every secret, and the envelope lists each removal as refused.
    let (v, code) = e.exec_env(&["--mode", "fuse", "--shell", &probe], &[]);
    assert_eq!((code, v["stdout"]["text"].as_str()), (0, Some("")), "{v}");
    let (v, code) = e.exec_env(&["--mode", "overlay", "--shell", &probe], &[]);
    assert_eq!(code, 0, "{v}");
    let files: Vec<&str> = hidden
        .iter()
        .copied()
        .filter(|h| {
            !matches!(*h, "./.ssh" | "./.aws")
                && !h.starts_with("./.ssh/")
                && !h.starts_with("./.aws/")
        })
        .collect();
    let removed: String = files.iter().map(|h| format!("removed:{h}\n")).collect();
    assert_eq!(v["stdout"]["text"].as_str().unwrap(), removed, "{v}");
    let mut refused: Vec<String> = files.iter().map(|h| h[1..].to_string()).collect();
    refused.sort();
    assert_eq!(v["sandbox"]["refused"], serde_json::json!(refused), "{v}");
    assert!(v["changes"].as_array().unwrap().is_empty(), "{v}");
    assert_eq!(e.listing_in_vault("/"), stored, "a secret left the fork");
    // Nor reached through another name, in any mode. A new file under a secret's name:
    // the FUSE mount refuses it at once; on an overlay or a copy the command may write it
    // in its sandbox, but it never reaches the fork, and the envelope lists it as refused.
    let script = "echo x > .env.new 2>/dev/null && echo made; ln .env env-copy 2>/dev/null && echo linked; \
                  mv .env env-moved 2>/dev/null && echo moved; true";
    for mode in ["fuse", "overlay", "copy"] {
        let (v, code) = e.exec_env(&["--mode", mode, "--shell", script], &[]);
        assert_eq!(code, 0, "{mode}: {v}");
        let out = v["stdout"]["text"].as_str().unwrap();
        if mode == "fuse" {
            assert_eq!(out, "", "{mode}: {v}");
        } else {
            assert_eq!(out, "made\n", "{mode}: {v}");
            assert_eq!(
                v["sandbox"]["refused"],
                serde_json::json!(["/.env.new"]),
                "{mode}"
            );
        }
        assert!(v["changes"].as_array().unwrap().is_empty(), "{mode}: {v}");
        assert!(
            !self_listing(&e).contains(&".env.new".to_string()),
            "{mode}: a secret name reached the fork"
        );
    }

    // The command can create files such names used to hide: its own id_* sources, a
    // copy of a certificate under a *.pem name.
    let made = e.sh(
        "printf 'pub fn id() {}\\n' > src/id_new.rs && mkdir -p vendor/certifi \
         && cp node_modules/x/test/fixtures/ca.pem vendor/certifi/cacert.pem \
         && cat src/id_new.rs && cmp vendor/certifi/cacert.pem node_modules/x/test/fixtures/ca.pem \
         && echo same",
    );
    assert_eq!(made, "pub fn id() {}\nsame\n");

    // Hidden files are untouched in the vault.
    assert_eq!(ok(e.avfs(&["cat", "keys/server.pem"])), PRIVATE_KEY);
    assert_eq!(ok(e.avfs(&["cat", "deploy/id_ed25519"])), OPENSSH_KEY);
}

#[test]
fn python_venv_with_pip_is_whole_inside_the_proxy() {
    let Some(e) = Env::new() else { return };
    // ensurepip installs pip, whose vendored certifi ships `cacert.pem`: a CA bundle.
    e.sh("python3 -m venv .venv");
    let out = e.sh(".venv/bin/python -c 'import pip._vendor.certifi as c; \
         t = open(c.where()).read(); print(\"BEGIN CERTIFICATE\" in t, len(t) > 100000)'");
    assert_eq!(out, "True True\n");
    let seen = e.listing_in_proxy(".venv");
    assert!(
        seen.iter().any(|p| p.ends_with("certifi/cacert.pem")),
        "{seen:?}"
    );
    assert_eq!(seen, e.listing_in_vault("/.venv"));
}

/// The environment the proxied command got, as `env` prints it.
fn child_env(v: &Value) -> BTreeMap<String, String> {
    v["stdout"]["text"]
        .as_str()
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn secret_looking_environment_is_withheld_and_the_rest_passes() {
    let Some(e) = Env::new() else { return };
    let secret = [
        ("my_token", "t0k3n"),
        ("DATABASE_URL", "postgres://u:pass@db.example/app"),
        (
            "PIP_INDEX_URL",
            "https://__token__:pypi-abc@pypi.example/simple",
        ),
        ("GH_PAT", "ghp_abc"),
        ("NPM_AUTH", "npm_abc"),
        ("SSH_AUTH_SOCK", "/tmp/ssh-XXXX/agent.1"),
        ("githubToken", "ghp_def"),
        ("Db_Password", "hunter2"),
        ("OPENAI_API_KEY", "sk-abc"),
        ("client_secret", "s3cr3t"),
        ("GOOGLE_APPLICATION_CREDENTIALS", "/keys/sa.json"),
    ];
    let ordinary = [
        ("HOME", "/home/agent"),
        ("LANG", "C.UTF-8"),
        ("TERM", "xterm-256color"),
        ("PYTHONPATH", "/opt/py"),
        ("MANPATH", "/usr/share/man"),
        ("KEYBOARD", "us"),
        ("TOKENIZERS_PARALLELISM", "false"),
        ("GIT_AUTHOR_NAME", "agent"),
        ("REGISTRY_URL", "https://registry.example/simple"),
        ("NOTES", "mail me at a@b.example"),
    ];
    let all: Vec<(&str, &str)> = secret.iter().chain(&ordinary).copied().collect();
    let (v, code) = e.exec_env(&["--", "env"], &all);
    assert_eq!(code, 0, "{v}");
    let got = child_env(&v);
    for (k, _) in secret {
        assert!(!got.contains_key(k), "{k} reached the command: {got:?}");
    }
    for (k, val) in ordinary {
        assert_eq!(got.get(k).map(String::as_str), Some(val), "{k}: {got:?}");
    }
    assert_eq!(
        got.get("PATH").map(String::as_str),
        std::env::var("PATH").ok().as_deref()
    );

    // --allow-env passes one by its exact name, whichever rule withheld it.
    let (v, _) = e.exec_env(
        &[
            "--allow-env",
            "DATABASE_URL",
            "--allow-env",
            "my_token",
            "--",
            "env",
        ],
        &all,
    );
    let got = child_env(&v);
    assert_eq!(got["DATABASE_URL"], "postgres://u:pass@db.example/app");
    assert_eq!(got["my_token"], "t0k3n");
    assert!(!got.contains_key("GH_PAT"), "{got:?}");

    // So does the policy's env_allow.
    let policy = e.home.path().join("allow.toml");
    std::fs::write(
        &policy,
        "version = 1\n[secrets]\nenv_allow = [\"GH_PAT\", \"SSH_AUTH_SOCK\"]\n",
    )
    .unwrap();
    let (v, _) = e.exec_env(&["--policy", policy.to_str().unwrap(), "--", "env"], &all);
    let got = child_env(&v);
    assert_eq!(got["GH_PAT"], "ghp_abc");
    assert_eq!(got["SSH_AUTH_SOCK"], "/tmp/ssh-XXXX/agent.1");
    assert!(!got.contains_key("NPM_AUTH"), "{got:?}");
}

#[test]
fn the_policy_file_chooses_what_is_refused() {
    let Some(e) = Env::new() else { return };
    ok(e.avfs(&["write", "-p", "keys/server.pem", "--", PRIVATE_KEY]));
    ok(e.avfs(&["write", "-p", "notes/secret.txt", "x"]));
    // Own name globs; the private-key rule is kept.
    let own = e.home.path().join("own.toml");
    std::fs::write(&own, "version = 1\n[secrets]\npaths = [\"secret.txt\"]\n").unwrap();
    let (v, code) = e.exec_env(
        &[
            "--policy",
            own.to_str().unwrap(),
            "--shell",
            "cat keys/server.pem notes/secret.txt 2>&1; true",
        ],
        &[],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        v["stdout"]["text"],
        "cat: keys/server.pem: Permission denied\ncat: notes/secret.txt: Permission denied\n",
        "{v}"
    );
    // Both emptied: everything is visible.
    let open = e.home.path().join("open.toml");
    std::fs::write(
        &open,
        "version = 1\n[secrets]\npaths = []\nprivate_key_paths = []\n",
    )
    .unwrap();
    let (v, _) = e.exec_env(
        &[
            "--policy",
            open.to_str().unwrap(),
            "--shell",
            "find . -type f | LC_ALL=C sort",
        ],
        &[],
    );
    assert_eq!(
        v["stdout"]["text"], "./keys/server.pem\n./notes/secret.txt\n",
        "{v}"
    );
}

/// A secret tracked by the project's git stays in its history: the fork's git sees it as
/// present (modified, since its stat data differs and it cannot be read), refuses
/// `git add -A` and `git commit -a` loudly instead of recording a deletion, and commits of
/// named paths keep the secret as it was.
#[test]
fn a_tracked_secret_is_never_recorded_as_deleted_by_git() {
    let Some(e) = Env::new() else { return };
    let host = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(host.path())
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    git(&["init", "-q", "-b", "main"]);
    write_tree(
        host.path(),
        &[(".env", "API_KEY=hunter2\n"), ("a.txt", "a\n")],
    );
    git(&["add", "."]);
    git(&["commit", "-qm", "init"]);
    ok(e.avfs(&["import", host.path().to_str().unwrap()]));
    let status = e.sh("git status --porcelain");
    assert!(!status.contains("D .env"), "{status}");
    let (v, code) = e.exec_env(&["--shell", "git add -A"], &[]);
    assert_ne!(code, 0, "{v}");
    assert!(
        v["stderr"]["text"].as_str().unwrap().contains(".env"),
        "{v}"
    );
    e.sh("echo b > a.txt && git -c user.name=t -c user.email=t@example.com commit -qm two a.txt");
    // In the fork's history .env is what it was; the host copy is byte-identical.
    assert_eq!(e.sh("git ls-tree -r --name-only HEAD"), ".env\na.txt\n");
    assert_eq!(e.sh("git log --format=%s"), "two\ninit\n");
    assert_eq!(ok(e.avfs(&["cat", ".env"])), "API_KEY=hunter2\n");
    assert_eq!(e.sh("git diff --name-status HEAD~1 HEAD"), "M\ta.txt\n");
}

/// The names at the top of the fork, as stored (an export hides nothing).
fn self_listing(e: &Env) -> Vec<String> {
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("x");
    ok(e.avfs(&["export", "/", dest.to_str().unwrap()]));
    std::fs::read_dir(&dest)
        .unwrap()
        .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// A secret with a second, innocent-looking name (host hard links kept by `import`) is a
/// secret under both: the command reads neither, and a name made later by `ln` in the
/// mount is refused too.
#[test]
fn a_hard_link_to_a_secret_is_as_hidden_as_the_secret() {
    let Some(e) = Env::new() else { return };
    let host = tempfile::tempdir().unwrap();
    write_tree(
        host.path(),
        &[(".env", "API_KEY=hunter2\n"), ("plain.txt", "plain\n")],
    );
    std::fs::hard_link(host.path().join(".env"), host.path().join("notes.txt")).unwrap();
    ok(e.avfs(&["import", host.path().to_str().unwrap()]));
    assert_eq!(e.sh("cat plain.txt"), "plain\n");
    for script in ["cat notes.txt", "cat .env", "cp notes.txt copy.txt"] {
        let (v, code) = e.exec_env(&["--shell", script], &[]);
        assert_ne!(code, 0, "`{script}` read the secret: {v}");
        assert!(
            !v["stdout"]["text"].as_str().unwrap().contains("hunter2"),
            "{v}"
        );
    }
    // Linking the plain file under a secret name makes both names secrets: the mount
    // refuses the link; on an overlay or a copy the new name never reaches the fork.
    for mode in ["fuse", "overlay", "copy"] {
        let (v, code) = e.exec_env(
            &[
                "--mode",
                mode,
                "--shell",
                "ln plain.txt .env.local && cat plain.txt",
            ],
            &[],
        );
        if mode == "fuse" {
            assert_ne!(code, 0, "{v}");
        } else {
            assert_eq!(
                v["sandbox"]["refused"],
                serde_json::json!(["/.env.local"]),
                "{v}"
            );
        }
        let out = tempfile::tempdir().unwrap();
        let dest = out.path().join("x");
        ok(e.avfs(&["export", "/", dest.to_str().unwrap()]));
        assert!(!dest.join(".env.local").exists(), "{mode}: {v}");
        assert_eq!(
            std::fs::read_to_string(dest.join(".env")).unwrap(),
            "API_KEY=hunter2\n"
        );
    }
    // The person at the CLI still reads them.
    assert_eq!(ok(e.avfs(&["cat", "notes.txt"])), "API_KEY=hunter2\n");
}

/// Every secret pattern of the default policy, each with a file or variable it must hide,
/// and a near miss it must not. The lists are compared with `avfs policy show`, so a default
/// pattern added without an example here fails.
#[test]
fn every_default_secret_pattern_is_hidden() {
    let Some(e) = Env::new() else { return };
    let paths: &[(&str, &str)] = &[
        (".env", ".env"),
        (".env.*", ".env.local"),
        ("id_rsa", "home/.keys/id_rsa"),
        ("id_dsa", "id_dsa"),
        ("id_ecdsa", "id_ecdsa"),
        ("id_ed25519", "deploy/id_ed25519"),
        ("id_ecdsa_sk", "id_ecdsa_sk"),
        ("id_ed25519_sk", "id_ed25519_sk"),
        ("*.key", "tls/server.key"),
        (".ssh/", "home/.ssh/config"),
        (".aws/", ".aws/credentials"),
    ];
    let private_keys: &[(&str, &str)] = &[("*.pem", "keys/server.pem")];
    let env_vars: &[(&str, &str)] = &[
        ("*_TOKEN", "GITHUB_TOKEN"),
        ("*SECRET*", "MYSECRETTHING"),
        ("AWS_*", "AWS_REGION"),
        ("*_KEY", "STRIPE_KEY"),
        ("*PASSWORD*", "DBPASSWORDX"),
        ("*PASSWD*", "ROOTPASSWDX"),
        ("*_PWD", "DB_PWD"),
        ("*PASS", "SMTPPASS"),
        ("*PASSPHRASE*", "GPGPASSPHRASEX"),
        ("*PRIVATEKEY*", "XPRIVATEKEYX"),
        ("*ACCESSKEY*", "XACCESSKEYX"),
        ("*APIKEY*", "XAPIKEYX"),
        ("*AUTHORIZATION*", "XAUTHORIZATIONX"),
        ("*CREDENTIAL*", "XCREDENTIALX"),
        ("SSH_AUTH_SOCK", "SSH_AUTH_SOCK"),
    ];
    let policy = ok(e.avfs(&["--json", "policy", "show"]));
    let policy: Value = serde_json::from_str(&policy).unwrap();
    let globs = |key: &str| -> Vec<String> {
        policy["data"][key]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_str().unwrap().to_string())
            .collect()
    };
    let firsts = |l: &[(&str, &str)]| l.iter().map(|(p, _)| p.to_string()).collect::<Vec<_>>();
    assert_eq!(globs("secret_globs"), firsts(paths));
    assert_eq!(globs("private_key_globs"), firsts(private_keys));
    assert_eq!(globs("secret_env_patterns"), firsts(env_vars));

    // Files: each secret refused, each near miss readable.
    let near_misses = [".envrc", "id_rsa.pub", "keyboard.txt", "certs/ca.pem"];
    let tree = tempfile::tempdir().unwrap();
    let mut files: Vec<(&str, &str)> = paths.iter().map(|(_, f)| (*f, "secret\n")).collect();
    files.push((private_keys[0].1, PRIVATE_KEY));
    // A certificate is a `.pem` without a private key: readable.
    files.extend(near_misses.iter().map(|f| {
        let content = if f.ends_with(".pem") {
            CERTIFICATE
        } else {
            "public\n"
        };
        (*f, content)
    }));
    write_tree(tree.path(), &files);
    ok(e.avfs(&["import", tree.path().to_str().unwrap(), "/"]));
    let mut script = String::new();
    for (f, _) in &files {
        script.push_str(&format!(
            "if cat '{f}' >/dev/null 2>&1; then echo 'read {f}'; else echo 'refused {f}'; fi\n"
        ));
    }
    let got = e.sh(&script);
    let mut want = String::new();
    for (f, _) in &files {
        let refused = !near_misses.contains(f);
        want.push_str(&format!(
            "{} {f}\n",
            if refused { "refused" } else { "read" }
        ));
    }
    assert_eq!(got, want);

    // Environment: each matching variable withheld, a plain one passed.
    let mut vars: Vec<(&str, &str)> = env_vars.iter().map(|(_, v)| (*v, "s3cret")).collect();
    vars.push(("EDITOR", "visible"));
    let (v, code) = e.exec_env(&["--", "env"], &vars);
    assert_eq!(code, 0, "{v}");
    let seen = child_env(&v);
    for (pattern, name) in env_vars {
        assert!(
            !seen.contains_key(*name),
            "{name} ({pattern}) reached the command"
        );
    }
    assert_eq!(seen.get("EDITOR").map(String::as_str), Some("visible"));
}
