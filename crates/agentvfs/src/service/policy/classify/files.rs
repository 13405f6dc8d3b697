//! File tools: `cd`, `test`, `kill`, `rm`, `dd`, `chmod`, `tee`, and build tools.

use super::getopt;
use crate::service::policy::Category as C;
use crate::service::policy::analyzer::Analyzer;
use crate::service::policy::words::{Arg, Resolved, Role, Scope, chdir, resolve, snippet};

impl Analyzer<'_> {
    pub(super) fn cd(&mut self, name: &str, args: &[Arg], scope: &mut Scope) {
        let o = getopt(&args[1..], "", &[], false);
        let target = o.operands().first().map(|a| (*a).clone());
        self.read_only(name);
        match target {
            None => {
                let home = Arg::literal("~");
                let home = Arg {
                    raw: name.to_string(),
                    ..home
                };
                self.push(
                    &[C::HostEscape],
                    "builtin/host-escape",
                    format!("`{name}` with no directory goes to the home directory, outside the workspace"),
                    Some(name),
                    Some(name),
                );
                scope.cwd = chdir(&scope.cwd, &home);
            }
            Some(t) if t.known() == Some("-") => {
                scope.cwd = crate::service::policy::words::Cwd::Unknown;
            }
            Some(t) => {
                self.path(name, &t, Role::Cd, scope);
                scope.cwd = chdir(&scope.cwd, &t);
            }
        }
    }

    pub(super) fn test_cmd(&mut self, name: &str, rest: &[Arg], scope: &Scope) {
        self.read_only(name);
        const FILE_OPS: &[&str] = &[
            "-e", "-f", "-d", "-r", "-w", "-x", "-s", "-L", "-h", "-b", "-c", "-p", "-S", "-g",
            "-u", "-k", "-O", "-G", "-N",
        ];
        for w in rest.windows(2) {
            if w[0].known().is_some_and(|t| FILE_OPS.contains(&t)) {
                self.path(name, &w[1], Role::Read, scope);
            }
        }
    }

    pub(super) fn kill(&mut self, args: &[Arg]) {
        let rest = &args[1..];
        if rest
            .iter()
            .any(|a| matches!(a.known(), Some("-l" | "-L" | "--list" | "--table")))
        {
            self.read_only("kill");
            return;
        }
        let mut targets: Vec<&Arg> = Vec::new();
        let mut signal_seen = false;
        let mut i = 0;
        while i < rest.len() {
            let a = &rest[i];
            i += 1;
            match a.known() {
                Some("-s" | "-n" | "--signal") => {
                    signal_seen = true;
                    i += 1;
                }
                Some("--") => {
                    targets.extend(rest[i..].iter());
                    break;
                }
                Some(t)
                    if t.starts_with('-') && t.len() > 1 && !signal_seen && targets.is_empty() =>
                {
                    signal_seen = true;
                }
                _ => targets.push(a),
            }
        }
        if targets.is_empty() {
            self.read_only("kill");
        }
        for t in targets {
            if t.raw == "$!" || t.known().is_some_and(|x| x.starts_with('%') || x == "0") {
                self.cat(
                    C::Mutating,
                    "kill",
                    format!("`kill {}` signals a job of this command", t.raw),
                    None,
                );
            } else if t.dynamic {
                self.facts.push(crate::service::policy::words::Fact {
                    categories: vec![C::Unknown],
                    forced: Some(crate::service::policy::Action::Ask),
                    rule: "builtin/dynamic-target".into(),
                    reason: format!("`kill {}` signals a process known only at run time", t.raw),
                    offending: Some(t.raw.clone()),
                    program: Some("kill".into()),
                    kind: crate::service::policy::words::Kind::Path,
                });
            } else {
                self.push(
                    &[C::HostEscape],
                    "builtin/host-escape",
                    format!("`kill {}` signals a process outside this command", t.raw),
                    Some(&t.raw),
                    Some("kill"),
                );
            }
        }
    }

    pub(super) fn rm(&mut self, args: &[Arg], scope: &mut Scope) {
        let o = getopt(&args[1..], "", &["interactive"], false);
        let ops = o.operands();
        let flags: Vec<&str> = [
            "-r",
            "-R",
            "--recursive",
            "-f",
            "--force",
            "--no-preserve-root",
        ]
        .into_iter()
        .filter(|f| o.has(&[f]))
        .collect();
        let how = if flags.is_empty() {
            String::new()
        } else {
            format!(" ({})", flags.join(" "))
        };
        self.cat(
            C::Destructive,
            "rm",
            format!(
                "`{}` deletes files{how}; inside the workspace the checkpoint taken first makes it recoverable",
                snippet(args)
            ),
            ops.first().map(|a| a.raw.as_str()),
        );
        self.paths_of("rm", &ops, Role::Delete, scope);
    }

    pub(super) fn dd(&mut self, args: &[Arg], scope: &mut Scope) {
        let mut writes = false;
        for a in &args[1..] {
            let Some((k, v)) = a.text.split_once('=') else {
                continue;
            };
            let val = a.derived(v);
            let val = Arg {
                raw: a.raw.clone(),
                ..val
            };
            match k {
                "if" => self.path("dd", &val, Role::Read, scope),
                "of" => {
                    writes = true;
                    self.path("dd", &val, Role::Write, scope);
                }
                _ => {}
            }
        }
        if writes {
            self.cat(
                C::Destructive,
                "dd",
                format!("`{}` overwrites its output block by block", snippet(args)),
                args[1..]
                    .iter()
                    .find(|a| a.text.starts_with("of="))
                    .map(|a| a.raw.as_str()),
            );
        } else {
            self.read_only("dd");
        }
    }

    pub(super) fn chmod(&mut self, name: &str, args: &[Arg], scope: &mut Scope) {
        let o = getopt(&args[1..], "", &["reference", "from"], false);
        let mut ops = o.operands();
        let reference = o.values(&["--reference"]);
        self.paths_of(name, &reference, Role::Read, scope);
        let spec = if reference.is_empty() && !ops.is_empty() {
            Some(ops.remove(0))
        } else {
            None
        };
        let recursive = o.has(&["-R", "--recursive"]);
        let broad = ops.iter().any(|a| {
            matches!(
                a.text.as_str(),
                "." | "./" | "*" | ".." | "../" | "./*" | "~" | "/"
            ) || a.text.starts_with('/')
                || a.text.starts_with('~')
        });
        if name != "chmod"
            && let Some(s) = spec
        {
            let owner = s.text.trim_start_matches(':');
            let user = s.text.split([':', '.']).next().unwrap_or("");
            if user == "root"
                || user == "0"
                || owner == "root"
                || owner == "0"
                || (name == "chgrp" && matches!(s.text.as_str(), "root" | "0" | "wheel"))
            {
                self.cat(
                    C::Privileged,
                    name,
                    format!("`{name} {}` gives files to root", s.raw),
                    Some(&s.raw),
                );
            }
        }
        if recursive && broad {
            self.cat(
                C::Destructive,
                name,
                format!("`{}` recursively changes a whole tree", snippet(args)),
                ops.iter().find(|a| !a.is_flag()).map(|a| a.raw.as_str()),
            );
        } else {
            self.cat(
                C::Mutating,
                name,
                format!("`{}` changes file metadata", snippet(args)),
                None,
            );
        }
        self.paths_of(name, &ops, Role::Write, scope);
    }

    /// `ln`: the names it makes are written. A symbolic link's target is a path relative to
    /// the directory the link is in (not to the cwd, unless `--relative`), so it is
    /// resolved from there; where the link lands depends on whether its last operand is a
    /// directory, which is known only at run time, so a target must stay inside from both.
    pub(super) fn ln(&mut self, args: &[Arg], scope: &Scope) {
        let o = getopt(args, "St", &["suffix", "target-directory"], false);
        let operands = o.operands();
        let into = o.values(&["-t", "--target-directory"]).first().copied();
        // Long options may be abbreviated as far as they stay unambiguous among ln's own
        // (`--sym`, `--rel`): each counts as the option it names.
        let flag = |short: &str, long: &str, shortest: usize| {
            o.0.iter().any(|opt| match opt {
                super::opts::Opt::Flag(n) => {
                    n == short
                        || (n.len() >= shortest
                            && n.starts_with("--")
                            && long.starts_with(n.as_str()))
                }
                _ => false,
            })
        };
        let symbolic = flag("-s", "--symbolic", 4) && !flag("-r", "--relative", 3);
        if !symbolic {
            let written: Vec<&Arg> = operands.iter().copied().chain(into).collect();
            return self.paths_of("ln", &written, Role::Write, scope);
        }
        // The targets, and the directories the links may land in (as paths from the cwd).
        let (targets, names, dirs): (&[&Arg], Vec<&Arg>, Vec<Arg>) = match (into, &operands[..]) {
            (Some(dir), all) => (all, vec![dir], vec![dir.clone()]),
            (None, [target]) => (
                std::slice::from_ref(target),
                vec![],
                vec![Arg::literal(".")],
            ),
            (None, [targets @ .., last]) if targets.len() > 1 => {
                (targets, vec![*last], vec![(*last).clone()])
            }
            (None, [target, name]) => {
                let parent = match name.text.rsplit_once('/') {
                    Some(("", _)) => "/".to_string(),
                    Some((dir, _)) => dir.to_string(),
                    None => ".".to_string(),
                };
                let mut dirs = vec![name.derived(&parent)];
                if !flag("-T", "--no-target-directory", 6) {
                    dirs.push((*name).clone());
                }
                (std::slice::from_ref(target), vec![*name], dirs)
            }
            (None, _) => (&[], vec![], vec![]),
        };
        self.paths_of("ln", &names, Role::Write, scope);
        for target in targets {
            // One finding per target, from the first place it leaves the workspace.
            let found = self.facts.len();
            for dir in &dirs {
                let mut from = scope.clone();
                from.cwd = chdir(&scope.cwd, dir);
                self.path("ln", target, Role::LinkTo, &from);
                if self.facts.len() > found {
                    break;
                }
            }
        }
    }

    pub(super) fn tee(&mut self, args: &[Arg], scope: &mut Scope) {
        let o = getopt(&args[1..], "", &["output-error"], false);
        let ops = o.operands();
        let all_harmless = ops
            .iter()
            .all(|a| !a.dynamic && resolve(&a.text, &scope.cwd) == Resolved::Harmless);
        if ops.is_empty() || all_harmless {
            self.read_only("tee");
        } else {
            self.cat(
                C::Mutating,
                "tee",
                format!("`{}` writes files", snippet(args)),
                None,
            );
        }
        self.paths_of("tee", &ops, Role::Write, scope);
    }

    pub(super) fn build_tool(&mut self, name: &str, args: &[Arg], scope: &mut Scope) {
        let rest = &args[1..];
        let any = |fs: &[&str]| {
            rest.iter()
                .any(|a| a.known().is_some_and(|t| fs.contains(&t)))
        };
        let version =
            rest.len() == 1 && any(&["--version", "-V", "--help", "-h", "-version", "version"]);
        let first = rest
            .iter()
            .find(|a| !a.is_flag())
            .and_then(|a| a.known())
            .unwrap_or("");
        let read_only = version
            || match name {
                "make" | "gmake" => any(&[
                    "-n",
                    "--dry-run",
                    "--just-print",
                    "--recon",
                    "-q",
                    "--question",
                ]),
                "gofmt" | "goimports" => !any(&["-w"]),
                "clang-format" | "autopep8" | "yapf" => !any(&["-i", "--in-place"]),
                "prettier" => !any(&["-w", "--write"]),
                "black" | "rustfmt" => any(&["--check", "--diff"]),
                "isort" => any(&["--check-only", "-c", "--diff"]),
                "eslint" | "stylelint" | "mypy" | "pyright" | "golangci-lint" | "clang-tidy" => {
                    !any(&["--fix", "-fix", "--fix-errors", "--fix-dry-run"])
                }
                "ruff" => match first {
                    "check" => !any(&["--fix", "--unsafe-fixes"]),
                    "format" => any(&["--check", "--diff"]),
                    _ => false,
                },
                _ => false,
            };
        if read_only {
            self.read_only(name);
        } else {
            self.cat(
                C::Mutating,
                name,
                format!(
                    "`{}` builds, tests or formats: it runs project code and writes files",
                    snippet(args)
                ),
                None,
            );
        }
        if matches!(name, "make" | "gmake" | "ninja" | "mvn" | "gradle" | "just") {
            let o = getopt(
                rest,
                "CfIoWjlEt",
                &[
                    "directory",
                    "file",
                    "makefile",
                    "include-dir",
                    "old-file",
                    "what-if",
                    "jobs",
                    "load-average",
                    "eval",
                    "justfile",
                    "working-directory",
                ],
                false,
            );
            self.paths_of(
                name,
                &o.values(&[
                    "-C",
                    "--directory",
                    "-f",
                    "--file",
                    "--makefile",
                    "-I",
                    "--include-dir",
                    "--justfile",
                    "--working-directory",
                ]),
                Role::Read,
                scope,
            );
            for a in o.operands() {
                self.eq_value(name, a, Role::Write, scope);
            }
            return;
        }
        self.generic_paths(name, rest, Role::Read, scope);
    }
}
