//! `git`: global options before the subcommand, then one classification per subcommand.

use crate::service::policy::Category as C;
use crate::service::policy::analyzer::Analyzer;
use crate::service::policy::words::{Arg, Role, Scope, Stdin, chdir, snippet};

impl Analyzer<'_> {
    pub(super) fn git(&mut self, args: &[Arg], scope: &mut Scope) {
        let rest = &args[1..];
        let mut i = 0;
        let mut gscope = scope.clone();
        let mut optional_locks = true;
        while i < rest.len() {
            let a = &rest[i];
            let Some(t) = a.known() else { break };
            match t {
                "-C" => {
                    if let Some(d) = rest.get(i + 1) {
                        self.path("git -C", d, Role::Cd, &gscope);
                        gscope.cwd = chdir(&gscope.cwd, d);
                    }
                    i += 2;
                }
                "-c" => {
                    if let Some(kv) = rest.get(i + 1) {
                        self.git_config_kv(kv, scope);
                    }
                    i += 2;
                }
                "--git-dir" | "--work-tree" | "--namespace" | "--super-prefix" | "--exec-path"
                | "--config-env" => {
                    if matches!(t, "--git-dir" | "--work-tree" | "--exec-path")
                        && let Some(d) = rest.get(i + 1)
                    {
                        self.path("git", d, Role::Read, &gscope);
                    }
                    i += 2;
                }
                t if t.starts_with("--git-dir=")
                    || t.starts_with("--work-tree=")
                    || t.starts_with("--exec-path=") =>
                {
                    self.eq_value("git", a, Role::Read, &gscope);
                    i += 1;
                }
                t if t.starts_with("--config-env=") => {
                    self.push(
                        &[C::Unknown],
                        "builtin/exec-variable",
                        format!("`git {t}` takes configuration from the environment"),
                        Some(t),
                        Some("git"),
                    );
                    i += 1;
                }
                "--no-optional-locks" => {
                    optional_locks = false;
                    i += 1;
                }
                t if t.starts_with('-') => i += 1,
                _ => break,
            }
        }
        let Some(sub_arg) = rest.get(i) else {
            self.read_only("git");
            return;
        };
        let Some(sub) = sub_arg.known().map(String::from) else {
            self.push(
                &[C::Unknown],
                "builtin/dynamic-command",
                format!(
                    "the git subcommand `{}` is only known at run time",
                    sub_arg.raw
                ),
                Some(&sub_arg.raw),
                Some("git"),
            );
            return;
        };
        let sargs = &rest[i + 1..];
        let label = format!("git {sub}");
        let has = |names: &[&str]| {
            sargs
                .iter()
                .take_while(|a| a.known() != Some("--"))
                .any(|a| {
                    a.known().is_some_and(|t| {
                        names.iter().any(|n| {
                            t == *n
                                || (n.starts_with("--") && t.starts_with(&format!("{n}=")))
                                || (n.len() == 2
                                    && !n.starts_with("--")
                                    && t.starts_with('-')
                                    && !t.starts_with("--")
                                    && t.len() > 2
                                    && t[1..].chars().all(|c| c.is_ascii_alphabetic())
                                    && t[1..].contains(&n[1..]))
                        })
                    })
                })
        };
        let positional: Vec<&Arg> = {
            let mut v = Vec::new();
            let mut skip = false;
            let mut after = false;
            for a in sargs {
                if skip {
                    skip = false;
                    continue;
                }
                if after {
                    v.push(a);
                    continue;
                }
                match a.known() {
                    Some("--") => after = true,
                    Some(
                        "-m" | "--message" | "-F" | "--file" | "-C" | "-c" | "--author" | "--date"
                        | "-S" | "-G" | "--grep" | "-n" | "--max-count" | "-b" | "-B" | "-u"
                        | "--onto" | "-X" | "-s" | "--strategy" | "--format" | "--pretty" | "-o"
                        | "--origin" | "--depth" | "--branch" | "--exec" | "-x" | "--reference"
                        | "--template" | "--separate-git-dir" | "-U" | "--since" | "--until"
                        | "--after" | "--before" | "-e" | "--set-upstream-to" | "--sort"
                        | "--points-at" | "--contains" | "--merged" | "--no-merged" | "--abbrev"
                        | "--trailer" | "--cleanup" | "-L" | "--output" | "--prefix" | "--remote"
                        | "--upload-pack" | "--receive-pack" | "--push-option" | "--jobs" | "-j",
                    ) => skip = true,
                    Some(t) if t.starts_with('-') && t.len() > 1 => {
                        if !t.starts_with("--")
                            && (t.ends_with('m') || t.ends_with('F'))
                            && t.len() > 2
                            && t[1..].chars().all(|c| c.is_ascii_alphabetic())
                        {
                            skip = true;
                        }
                    }
                    _ => v.push(a),
                }
            }
            v
        };
        // Text-valued options are never paths; every other operand is checked relative to
        // the git working directory.
        let check_operands = |this: &mut Self, role: Role| {
            for a in &positional {
                if a.text.contains("://") || (a.text.contains('@') && a.text.contains(':')) {
                    continue;
                }
                this.path(&label, a, role, &gscope);
            }
            for a in sargs {
                let text_opt = a.text.split_once('=').is_some_and(|(n, _)| {
                    matches!(
                        n,
                        "--author"
                            | "--committer"
                            | "--grep"
                            | "--format"
                            | "--pretty"
                            | "--message"
                            | "--date"
                            | "--since"
                            | "--until"
                            | "--after"
                            | "--before"
                            | "--trailer"
                            | "--cleanup"
                            | "--abbrev"
                            | "--sort"
                            | "--exclude"
                            | "--glob"
                    )
                });
                if a.is_flag() && !text_opt {
                    this.eq_value(&label, a, Role::Read, &gscope);
                }
            }
        };
        let ro = |this: &mut Self| this.read_only("git");
        match sub.as_str() {
            "status" | "log" | "diff" | "show" | "blame" | "annotate" | "shortlog" | "describe"
            | "rev-parse" | "rev-list" | "ls-files" | "ls-tree" | "cat-file" | "grep"
            | "whatchanged" | "name-rev" | "merge-base" | "for-each-ref" | "show-ref"
            | "show-branch" | "count-objects" | "check-ignore" | "check-attr"
            | "check-ref-format" | "var" | "verify-commit" | "verify-tag" | "cherry"
            | "range-diff" | "diff-tree" | "diff-files" | "diff-index" | "fsck" | "help"
            | "version" | "get-tar-commit-id" | "interpret-trailers" | "column" | "show-index"
            | "verify-pack" | "request-pull" | "check-mailmap" | "fsck-objects" | "patch-id"
            | "stripspace" | "bugreport" | "hash-object" | "ls-remote-local" => {
                // What git rewrites on its own while it reads: the index's stat cache.
                // Measured (git 2.47): `status` rewrites .git/index unless run with
                // `--no-optional-locks`; `diff` against the worktree (`diff`, `diff HEAD`)
                // rewrites it even then; `describe --dirty` refreshes it too.
                let refreshes = match sub.as_str() {
                    "status" => optional_locks,
                    "diff" => !has(&["--cached", "--staged", "--no-index"]),
                    "describe" => has(&["--dirty", "--broken"]),
                    _ => false,
                };
                if sub == "hash-object" && has(&["-w"]) {
                    git_mutating(self, &label);
                } else if refreshes {
                    self.cat(
                        C::Mutating,
                        &label,
                        format!("`{label}` may rewrite .git/index (git refreshes its stat cache)"),
                        None,
                    );
                } else {
                    ro(self);
                }
                if sub == "diff" && has(&["--output"]) {
                    self.cat(
                        C::Mutating,
                        &label,
                        "`git diff --output` writes a file".into(),
                        None,
                    );
                }
                check_operands(self, Role::Read);
            }
            "branch" => {
                if has(&["-D"]) || (has(&["-d", "--delete"]) && has(&["-f", "--force"])) {
                    self.cat(
                        C::Destructive,
                        &label,
                        format!("`{}` force-deletes branches", snippet(args)),
                        Some("-D"),
                    );
                } else if has(&["--edit-description"]) {
                    self.cat(
                        C::Interactive,
                        &label,
                        "`git branch --edit-description` opens an editor".into(),
                        Some("--edit-description"),
                    );
                } else if has(&[
                    "-d",
                    "--delete",
                    "-m",
                    "-M",
                    "-c",
                    "-C",
                    "--move",
                    "--copy",
                    "--set-upstream-to",
                    "-u",
                    "--unset-upstream",
                    "-f",
                    "--force",
                    "-t",
                    "--track",
                ]) || (!positional.is_empty()
                    && !has(&[
                        "-l",
                        "--list",
                        "--contains",
                        "--merged",
                        "--no-merged",
                        "--points-at",
                    ]))
                {
                    git_mutating(self, &label);
                } else {
                    ro(self);
                }
            }
            "tag" => {
                let list = positional.is_empty()
                    || has(&[
                        "-l",
                        "--list",
                        "--contains",
                        "--no-contains",
                        "--points-at",
                        "--merged",
                        "--no-merged",
                        "-v",
                        "--verify",
                    ]);
                if has(&["-d", "--delete"]) {
                    git_mutating(self, &label);
                } else if has(&["-a", "--annotate", "-s", "--sign", "-u"])
                    && !has(&["-m", "--message", "-F", "--file"])
                {
                    self.cat(
                        C::Interactive,
                        &label,
                        "`git tag -a` without -m opens an editor".into(),
                        Some("-a"),
                    );
                } else if list && !has(&["-a", "-s", "-m", "-F", "-f", "--force"]) {
                    ro(self);
                } else {
                    git_mutating(self, &label);
                }
            }
            "remote" => {
                let s = positional.first().and_then(|a| a.known()).unwrap_or("");
                match s {
                    "" | "get-url" => ro(self),
                    "show" | "prune" | "update" => {
                        if has(&["-n"]) {
                            ro(self);
                        } else {
                            self.cat(
                                C::Networked,
                                &label,
                                format!("`git remote {s}` contacts the remote"),
                                Some(s),
                            );
                        }
                    }
                    _ => git_mutating(self, &label),
                }
            }
            "config" => self.git_config(sargs, &positional, &label),
            "stash" => {
                let s = positional.first().and_then(|a| a.known()).unwrap_or("push");
                if has(&["-p", "--patch"]) {
                    self.cat(
                        C::Interactive,
                        &label,
                        "`git stash -p` asks on the terminal".into(),
                        Some("-p"),
                    );
                }
                match s {
                    "list" | "show" => ro(self),
                    "drop" | "clear" => self.cat(
                        C::Destructive,
                        &label,
                        format!("`git stash {s}` discards stashed changes"),
                        Some(s),
                    ),
                    _ => git_mutating(self, &label),
                }
            }
            "worktree" => {
                let s = positional.first().and_then(|a| a.known()).unwrap_or("");
                match s {
                    "list" => ro(self),
                    "remove" | "prune" => self.cat(
                        C::Destructive,
                        &label,
                        format!("`git worktree {s}` deletes a working tree"),
                        Some(s),
                    ),
                    _ => git_mutating(self, &label),
                }
                for a in positional.iter().skip(1) {
                    self.path(&label, a, Role::Write, &gscope);
                }
            }
            "reset" => {
                if has(&["-p", "--patch"]) {
                    self.cat(
                        C::Interactive,
                        &label,
                        "`git reset -p` asks on the terminal".into(),
                        Some("-p"),
                    );
                } else if has(&["--hard", "--merge", "--keep"]) {
                    self.cat(C::Destructive, &label, format!("`{}` discards uncommitted changes; inside the workspace the checkpoint taken first makes it recoverable", snippet(args)), Some("--hard"));
                } else {
                    git_mutating(self, &label);
                }
                check_operands(self, Role::Read);
            }
            "checkout" | "switch" | "restore" => {
                if has(&["-p", "--patch"]) {
                    self.cat(
                        C::Interactive,
                        &label,
                        format!("`{label} -p` asks on the terminal"),
                        Some("-p"),
                    );
                } else if has(&["-f", "--force", "--discard-changes"])
                    || sargs.iter().any(|a| a.known() == Some("--"))
                    || positional.iter().any(|a| a.text == ".")
                    || (sub == "restore"
                        && (has(&["--worktree", "-W"]) || !has(&["--staged", "-S"])))
                {
                    self.cat(C::Destructive, &label, format!("`{}` discards working-tree changes; inside the workspace the checkpoint taken first makes it recoverable", snippet(args)), Some(&label));
                } else {
                    git_mutating(self, &label);
                }
                check_operands(self, Role::Write);
            }
            "clean" => {
                if has(&["-n", "--dry-run"]) {
                    ro(self);
                } else if has(&["-i", "--interactive"]) {
                    self.cat(
                        C::Interactive,
                        &label,
                        "`git clean -i` asks on the terminal".into(),
                        Some("-i"),
                    );
                } else {
                    self.cat(C::Destructive, &label, format!("`{}` deletes untracked files; inside the workspace the checkpoint taken first makes it recoverable", snippet(args)), Some(&label));
                }
                check_operands(self, Role::Delete);
                // `git clean` acts on the whole working tree it is run in.
                if let crate::service::policy::words::Cwd::Outside(tok) = &gscope.cwd
                    && positional.is_empty()
                {
                    let tok = tok.clone();
                    self.push(
                        &[C::HostEscape],
                        "builtin/host-escape",
                        format!("`git clean` deletes files in `{tok}`, outside the workspace"),
                        Some(&tok),
                        Some("git"),
                    );
                }
            }
            "rm" => {
                if has(&["--cached"]) {
                    git_mutating(self, &label);
                } else {
                    self.cat(C::Destructive, &label, format!("`{}` deletes files; inside the workspace the checkpoint taken first makes it recoverable", snippet(args)), positional.first().map(|a| a.raw.as_str()));
                }
                check_operands(self, Role::Delete);
            }
            "commit" => {
                let message = has(&[
                    "-m",
                    "--message",
                    "-F",
                    "--file",
                    "-C",
                    "--reuse-message",
                    "--no-edit",
                    "--fixup",
                    "--dry-run",
                ]);
                if has(&["-p", "--patch", "--interactive"]) {
                    self.cat(
                        C::Interactive,
                        &label,
                        "`git commit -p` asks on the terminal".into(),
                        Some("-p"),
                    );
                } else if !message {
                    self.cat(
                        C::Interactive,
                        &label,
                        "`git commit` without -m opens an editor; pass -m MESSAGE".into(),
                        Some(&label),
                    );
                } else {
                    git_mutating(self, &label);
                }
                check_operands(self, Role::Read);
            }
            "add" => {
                if has(&["-p", "--patch", "-i", "--interactive", "-e", "--edit"]) {
                    self.cat(
                        C::Interactive,
                        &label,
                        format!("`{}` asks on the terminal", snippet(args)),
                        Some(&label),
                    );
                } else {
                    git_mutating(self, &label);
                }
                check_operands(self, Role::Read);
            }
            "rebase" => {
                if has(&["-i", "--interactive"]) {
                    self.cat(
                        C::Interactive,
                        &label,
                        "`git rebase -i` opens an editor".into(),
                        Some("-i"),
                    );
                } else {
                    git_mutating(self, &label);
                }
                self.git_exec_values(sargs, &["-x", "--exec"], scope);
            }
            "bisect" => {
                if positional.first().and_then(|a| a.known()) == Some("run") {
                    let cmd: Vec<Arg> = positional[1..].iter().map(|a| (*a).clone()).collect();
                    self.classify_argv(cmd, &mut gscope, Stdin::Inherit);
                }
                if matches!(
                    positional.first().and_then(|a| a.known()),
                    Some("log" | "view" | "visualize")
                ) {
                    ro(self);
                } else {
                    git_mutating(self, &label);
                }
            }
            "submodule" => {
                let s = positional
                    .first()
                    .and_then(|a| a.known())
                    .unwrap_or("status");
                match s {
                    "status" | "summary" => ro(self),
                    "foreach" => {
                        ro(self);
                        let body: Vec<&str> =
                            positional[1..].iter().map(|a| a.text.as_str()).collect();
                        let mut sub = gscope.clone();
                        self.shell_text(&body.join(" "), &mut sub, Stdin::Inherit);
                    }
                    "init" | "deinit" | "absorbgitdirs" | "set-branch" | "set-url" => {
                        git_mutating(self, &label)
                    }
                    _ => {
                        self.cat(
                            C::Networked,
                            &label,
                            format!("`git submodule {s}` fetches from remotes"),
                            Some(s),
                        );
                        git_mutating(self, &label);
                    }
                }
            }
            "push" => {
                self.cat(
                    C::Networked,
                    &label,
                    format!("`{}` sends commits to a remote", snippet(args)),
                    Some(&label),
                );
                let forced = sargs
                    .iter()
                    .find(|a| {
                        a.known().is_some_and(|t| {
                            matches!(
                                t,
                                "-f" | "--force"
                                    | "--mirror"
                                    | "--delete"
                                    | "-d"
                                    | "--prune"
                                    | "--force-if-includes"
                            ) || t.starts_with("--force-with-lease")
                                || (t.starts_with('-')
                                    && !t.starts_with("--")
                                    && t[1..].chars().all(|c| c.is_ascii_alphabetic())
                                    && t.contains('f'))
                        })
                    })
                    .map(|a| a.raw.clone())
                    .or_else(|| {
                        positional
                            .iter()
                            .skip(1)
                            .find(|a| a.text.starts_with('+') || a.text.starts_with(':'))
                            .map(|a| a.raw.clone())
                    });
                if let Some(f) = forced {
                    self.cat(C::Destructive, &label, format!("`{}` rewrites or deletes history on the remote (`{f}`); a local checkpoint cannot undo it", snippet(args)), Some(&f));
                }
            }
            "pull" | "fetch" | "clone" | "ls-remote" | "fetch-pack" | "send-pack"
            | "send-email" | "svn" | "p4" | "daemon" | "instaweb" | "http-fetch" | "http-push"
            | "upload-pack" | "receive-pack" | "archive-remote" => {
                self.cat(
                    C::Networked,
                    &label,
                    format!("`{}` talks to a remote", snippet(args)),
                    Some(&label),
                );
                if matches!(sub.as_str(), "pull" | "fetch" | "clone" | "svn" | "p4") {
                    git_mutating(self, &label);
                }
                if sub == "clone" {
                    let dest: Vec<&Arg> = positional.iter().skip(1).copied().collect();
                    self.paths_of(&label, &dest, Role::Write, &gscope);
                    for a in sargs {
                        if a.is_flag() {
                            self.eq_value(&label, a, Role::Read, &gscope);
                        }
                    }
                    if let Some(src) = positional.first()
                        && !src.text.contains("://")
                        && (!src.text.contains(':') || src.text.starts_with('/'))
                    {
                        self.path(&label, src, Role::Read, &gscope);
                    }
                }
            }
            "archive" => {
                if has(&["--remote"]) {
                    self.cat(
                        C::Networked,
                        &label,
                        "`git archive --remote` talks to a remote".into(),
                        Some("--remote"),
                    );
                }
                if has(&["-o", "--output"]) {
                    git_mutating(self, &label);
                    let outs: Vec<Arg> = sargs
                        .windows(2)
                        .filter(|w| matches!(w[0].known(), Some("-o" | "--output")))
                        .map(|w| w[1].clone())
                        .collect();
                    for o in &outs {
                        self.path(&label, o, Role::Write, &gscope);
                    }
                } else {
                    ro(self);
                }
            }
            "reflog" => match positional.first().and_then(|a| a.known()) {
                Some("expire" | "delete" | "drop") => self.cat(
                    C::Destructive,
                    &label,
                    "`git reflog expire/delete` drops recovery points".into(),
                    Some(&label),
                ),
                _ => ro(self),
            },
            "gc" | "prune" | "filter-branch" | "filter-repo" | "replace" | "update-ref"
            | "maintenance" => {
                if sub == "filter-branch"
                    || sub == "filter-repo"
                    || sub == "prune"
                    || (sub == "gc" && has(&["--prune"]))
                    || (sub == "update-ref" && has(&["-d"]))
                {
                    self.cat(
                        C::Destructive,
                        &label,
                        format!("`{}` rewrites or drops history", snippet(args)),
                        Some(&label),
                    );
                } else {
                    git_mutating(self, &label);
                }
                if sub == "filter-branch" {
                    self.git_exec_values(
                        sargs,
                        &[
                            "--tree-filter",
                            "--index-filter",
                            "--msg-filter",
                            "--env-filter",
                            "--commit-filter",
                            "--parent-filter",
                            "--tag-name-filter",
                        ],
                        scope,
                    );
                }
            }
            "merge" | "cherry-pick" | "revert" | "am" | "apply" | "mv" | "init" | "notes"
            | "update-index" | "symbolic-ref" | "read-tree" | "write-tree" | "commit-tree"
            | "repack" | "pack-refs" | "sparse-checkout" | "format-patch" | "bundle" | "mktag"
            | "mktree" | "rerere" | "commit-graph" | "multi-pack-index" | "pack-objects"
            | "unpack-objects" | "index-pack" | "checkout-index" | "merge-file" | "merge-tree"
            | "lfs" | "unpack-file" | "backfill" | "replay" => {
                if sub == "lfs"
                    && matches!(
                        positional.first().and_then(|a| a.known()),
                        Some("pull" | "fetch" | "push" | "clone" | "install")
                    )
                {
                    self.cat(
                        C::Networked,
                        &label,
                        "`git lfs` transfers objects with a remote".into(),
                        Some(&label),
                    );
                }
                if matches!(sub.as_str(), "merge" | "cherry-pick" | "revert")
                    && has(&["-e", "--edit"])
                {
                    self.cat(
                        C::Interactive,
                        &label,
                        format!("`{label} -e` opens an editor"),
                        Some("-e"),
                    );
                }
                git_mutating(self, &label);
                check_operands(self, Role::Write);
            }
            "mergetool" | "difftool" | "gui" | "citool" | "gitk" | "add--interactive" => {
                self.cat(
                    C::Interactive,
                    &label,
                    format!("`{label}` needs a terminal or a display"),
                    Some(&label),
                );
            }
            "credential" | "credential-store" | "credential-cache" => {
                self.cat(
                    C::HostEscape,
                    &label,
                    format!("`{label}` reads or stores the host's credentials"),
                    Some(&label),
                );
            }
            _ => {
                self.push(
                    &[C::Unknown],
                    "builtin/unknown",
                    format!("`{label}` is a git alias or extension the policy does not know"),
                    Some(&label),
                    Some("git"),
                );
                check_operands(self, Role::Read);
            }
        }
    }
}

fn git_mutating(this: &mut Analyzer<'_>, label: &str) {
    this.cat(
        C::Mutating,
        label,
        format!("`{label}` changes the repository or working tree"),
        None,
    );
}
