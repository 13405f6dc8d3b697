//! git's configuration: `-c key=value`, `git config`, and the keys whose values git runs
//! as programs (`core.pager`, `alias.*`, `*.helper`, …).

use crate::service::policy::Category as C;
use crate::service::policy::analyzer::Analyzer;
use crate::service::policy::words::{Arg, Scope, Stdin};

impl Analyzer<'_> {
    pub(super) fn git_exec_values(&mut self, sargs: &[Arg], names: &[&str], scope: &mut Scope) {
        for w in sargs.windows(2) {
            if w[0].known().is_some_and(|t| names.contains(&t)) {
                let body = &w[1];
                if body.dynamic {
                    self.dynamic_code(
                        "git",
                        format!("git runs `{}`, known only at run time", body.raw),
                        &body.raw,
                    );
                } else {
                    let mut sub = scope.clone();
                    self.shell_text(&body.text.clone(), &mut sub, Stdin::Inherit);
                }
            }
        }
        for a in sargs {
            if let Some(t) = a.known()
                && let Some((n, v)) = t.split_once('=')
                && names.contains(&n)
            {
                let mut sub = scope.clone();
                self.shell_text(v, &mut sub, Stdin::Inherit);
            }
        }
    }

    pub(super) fn git_config_kv(&mut self, kv: &Arg, scope: &mut Scope) {
        let (k, v) = kv.text.split_once('=').unwrap_or((kv.text.as_str(), ""));
        if git_exec_key(k) {
            self.push(
                &[C::Unknown],
                "builtin/exec-variable",
                format!("`git -c {}` sets a command git runs", kv.raw),
                Some(&kv.raw),
                Some("git"),
            );
            let body = v.strip_prefix('!').unwrap_or(v);
            if !kv.dynamic && !body.trim().is_empty() {
                let mut sub = scope.clone();
                self.shell_text(body, &mut sub, Stdin::Inherit);
            }
        }
    }

    pub(super) fn git_config(&mut self, sargs: &[Arg], positional: &[&Arg], label: &str) {
        let flag = |names: &[&str]| {
            sargs.iter().any(|a| {
                a.known().is_some_and(|t| {
                    names
                        .iter()
                        .any(|n| t == *n || t.starts_with(&format!("{n}=")))
                })
            })
        };
        let first = positional.first().and_then(|a| a.known()).unwrap_or("");
        let get = flag(&[
            "--get",
            "--get-all",
            "--get-regexp",
            "--get-urlmatch",
            "--get-color",
            "--get-colorbool",
            "-l",
            "--list",
            "--show-origin",
            "--show-scope",
            "--name-only",
        ]) || matches!(first, "get" | "list")
            || (!flag(&[
                "--unset",
                "--unset-all",
                "--add",
                "--replace-all",
                "--rename-section",
                "--remove-section",
                "-e",
                "--edit",
            ]) && !matches!(
                first,
                "set" | "unset" | "rename-section" | "remove-section" | "edit"
            ) && positional.len() <= 1);
        if flag(&["-e", "--edit"]) || first == "edit" {
            self.cat(
                C::Interactive,
                label,
                "`git config --edit` opens an editor".into(),
                Some("--edit"),
            );
            return;
        }
        if get {
            self.read_only("git");
            return;
        }
        if flag(&["--global", "--system", "--file", "-f", "--blob"]) {
            let which = sargs
                .iter()
                .find(|a| {
                    a.known().is_some_and(|t| {
                        t.starts_with("--global")
                            || t.starts_with("--system")
                            || t.starts_with("--file")
                            || t == "-f"
                    })
                })
                .map(|a| a.raw.clone())
                .unwrap_or_default();
            self.push(
                &[C::HostEscape],
                "builtin/host-escape",
                format!("`git config {which}` writes configuration outside the workspace"),
                Some(&which),
                Some("git"),
            );
            return;
        }
        let key = if matches!(first, "set" | "unset") {
            positional.get(1)
        } else {
            positional.first()
        };
        if key.is_some_and(|k| git_exec_key(&k.text)) {
            self.push(
                &[C::Unknown],
                "builtin/exec-variable",
                format!(
                    "`git config {}` sets a command git will run",
                    key.map(|k| k.raw.as_str()).unwrap_or("")
                ),
                key.map(|k| k.raw.as_str()),
                Some("git"),
            );
        }
        self.cat(
            C::Mutating,
            label,
            "`git config` changes the repository's configuration".into(),
            None,
        );
    }
}

/// `git -c` keys whose value is a command git runs.
fn git_exec_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k.starts_with("alias.")
        || k.starts_with("pager.")
        || k.starts_with("filter.")
        || k.ends_with(".command")
        || k.ends_with(".cmd")
        || k.ends_with(".textconv")
        || k.ends_with(".helper")
        || k.ends_with(".program")
        || matches!(
            k.as_str(),
            "core.pager"
                | "core.editor"
                | "core.sshcommand"
                | "core.fsmonitor"
                | "core.hookspath"
                | "core.askpass"
                | "sequence.editor"
                | "diff.external"
                | "gpg.program"
                | "credential.helper"
                | "uploadpack.packobjectshook"
        )
}
