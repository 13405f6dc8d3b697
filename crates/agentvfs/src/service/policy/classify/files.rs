//! File and text tools: `cd`, `test`, `kill`, `rm`, `dd`, `chmod`, `tee`, `sed`, `awk`,
//! `grep`, `jq`, archivers, and build tools.

use super::embedded::{Named, awk_names, sed_names};
use super::getopt;
use crate::service::policy::Category as C;
use crate::service::policy::analyzer::Analyzer;
use crate::service::policy::words::{Arg, Resolved, Role, Scope, chdir, resolve, snippet};

/// tar's short options that take a value, in the dashed and the traditional (`tar cIf`)
/// forms alike.
const TAR_VALUE_LETTERS: &str = "fCTXbKNgLVHIF";

/// tar's options whose value is a command it runs.
const TAR_RUNS: [&str; 7] = [
    "-I",
    "--use-compress-program",
    "--to-command",
    "--rsh-command",
    "--info-script",
    "-F",
    "--new-volume-script",
];

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

    pub(super) fn sed(&mut self, args: &[Arg], scope: &mut Scope) {
        let rest = &args[1..];
        let o = getopt(rest, "efl", &["expression", "file", "line-length"], false);
        let in_place = o.has(&["-i", "--in-place"])
            || rest.iter().any(|a| {
                a.known().is_some_and(|t| {
                    t.starts_with("-i")
                        || (t.starts_with('-')
                            && !t.starts_with("--")
                            && t.contains('i')
                            && t.len() <= 4)
                })
            });
        let mut ops = o.operands();
        let mut scripts: Vec<&Arg> = o.values(&["-e", "--expression"]);
        self.paths_of("sed", &o.values(&["-f", "--file"]), Role::Read, scope);
        if scripts.is_empty() && o.values(&["-f", "--file"]).is_empty() && !ops.is_empty() {
            scripts.push(ops.remove(0));
        }
        let mut writes_other = false;
        if !o.values(&["-f", "--file"]).is_empty() {
            // The script is a file the policy does not read: it may write or run anything.
            self.cat(
                C::Unknown,
                "sed",
                "`sed -f` runs a script file the policy cannot see".into(),
                None,
            );
            writes_other = true;
        }
        for s in &scripts {
            if s.dynamic || sed_writes(&s.text) {
                writes_other = true;
            }
            if !s.dynamic {
                self.embedded("sed", s, sed_names(&s.text), scope);
            }
        }
        if in_place {
            self.cat(
                C::Mutating,
                "sed",
                format!("`{}` edits files in place", snippet(args)),
                None,
            );
            self.paths_of("sed", &ops, Role::Write, scope);
        } else {
            if writes_other {
                self.cat(
                    C::Mutating,
                    "sed",
                    "the sed script writes files or runs commands (`w`, `e`)".into(),
                    None,
                );
            } else {
                self.read_only("sed");
            }
            self.paths_of("sed", &ops, Role::Read, scope);
        }
    }

    pub(super) fn awk(&mut self, name: &str, args: &[Arg], scope: &mut Scope) {
        let rest = &args[1..];
        let o = getopt(
            rest,
            "fvFiEl",
            &[
                "file",
                "assign",
                "field-separator",
                "include",
                "exec",
                "load",
            ],
            false,
        );
        let mut ops = o.operands();
        let files = o.values(&["-f", "--file", "-E", "--exec"]);
        self.paths_of(name, &files, Role::Read, scope);
        let mut program_writes = false;
        if files.is_empty() && !ops.is_empty() {
            let p = ops.remove(0);
            program_writes = p.dynamic || awk_writes(&p.text);
            if !p.dynamic {
                self.embedded(name, p, awk_names(&p.text), scope);
            }
        }
        let inplace = o
            .values(&["-i", "--include"])
            .iter()
            .any(|v| v.text == "inplace");
        if inplace {
            self.cat(
                C::Mutating,
                name,
                format!("`{name} -i inplace` edits files in place"),
                None,
            );
            self.paths_of(name, &ops, Role::Write, scope);
            return;
        }
        if program_writes || !files.is_empty() {
            self.cat(
                C::Mutating,
                name,
                format!("the {name} program writes files or runs commands"),
                None,
            );
        } else {
            self.read_only(name);
        }
        let files: Vec<&Arg> = ops
            .into_iter()
            .filter(|a| !a.text.contains('=') || a.text.starts_with('/'))
            .collect();
        self.paths_of(name, &files, Role::Read, scope);
    }

    pub(super) fn grep(&mut self, name: &str, args: &[Arg], scope: &mut Scope) {
        let rest = &args[1..];
        let (sv, lv): (&str, &[&str]) = if name == "rg" {
            (
                "efgmABCjMtTErd",
                &[
                    "regexp",
                    "file",
                    "glob",
                    "iglob",
                    "max-count",
                    "after-context",
                    "before-context",
                    "context",
                    "threads",
                    "max-columns",
                    "type",
                    "type-not",
                    "type-add",
                    "type-clear",
                    "encoding",
                    "replace",
                    "pre",
                    "pre-glob",
                    "ignore-file",
                    "max-depth",
                    "max-filesize",
                    "sort",
                    "sortr",
                    "colors",
                    "color",
                    "path-separator",
                    "context-separator",
                    "field-match-separator",
                    "dfa-size-limit",
                    "regex-size-limit",
                    "engine",
                ],
            )
        } else {
            (
                "efmABCdD",
                &[
                    "regexp",
                    "file",
                    "max-count",
                    "after-context",
                    "before-context",
                    "context",
                    "include",
                    "exclude",
                    "exclude-dir",
                    "exclude-from",
                    "label",
                    "binary-files",
                    "devices",
                    "directories",
                    "group-separator",
                    "color",
                    "colour",
                ],
            )
        };
        let o = getopt(rest, sv, lv, false);
        if name == "rg" && o.has(&["--pre"]) {
            self.push(
                &[C::Unknown],
                "builtin/unknown",
                "`rg --pre` runs a preprocessor command on every file".into(),
                Some("--pre"),
                Some(name),
            );
        }
        self.read_only(name);
        let pats = o.values(&["-e", "--regexp"]);
        let pat_files = o.values(&["-f", "--file", "--exclude-from", "--ignore-file"]);
        self.paths_of(name, &pat_files, Role::Read, scope);
        let mut ops = o.operands();
        if pats.is_empty() && pat_files.is_empty() && !ops.is_empty() {
            ops.remove(0);
        }
        self.paths_of(name, &ops, Role::Read, scope);
    }

    pub(super) fn jq(&mut self, name: &str, args: &[Arg], scope: &mut Scope) {
        let rest = &args[1..];
        let mut i = 0;
        let mut filter_seen = false;
        let mut from_file = false;
        let mut in_place = false;
        let mut files = Vec::new();
        while i < rest.len() {
            let a = &rest[i];
            i += 1;
            match a.known() {
                Some("--arg" | "--argjson") => i += 2,
                Some("--slurpfile" | "--rawfile") => {
                    if let Some(f) = rest.get(i + 1) {
                        self.path(name, f, Role::Read, scope);
                    }
                    i += 2;
                }
                Some("--args" | "--jsonargs") => break,
                Some("-f" | "--from-file") => {
                    from_file = true;
                    if let Some(f) = rest.get(i) {
                        self.path(name, f, Role::Read, scope);
                    }
                    i += 1;
                }
                Some("-i" | "--inplace") => in_place = true,
                Some(
                    "--indent" | "-L" | "--tab" | "--output-format" | "-o" | "-p"
                    | "--input-format",
                ) => {
                    if matches!(
                        a.known(),
                        Some(
                            "--indent" | "-L" | "--output-format" | "-o" | "-p" | "--input-format"
                        )
                    ) {
                        i += 1;
                    }
                }
                Some(t) if t.starts_with('-') && t.len() > 1 => {}
                _ => {
                    if !filter_seen && !from_file {
                        filter_seen = true;
                    } else {
                        files.push(a);
                    }
                }
            }
        }
        if in_place {
            self.cat(
                C::Mutating,
                name,
                format!("`{name} -i` edits files in place"),
                None,
            );
            self.paths_of(name, &files, Role::Write, scope);
        } else {
            self.read_only(name);
            self.paths_of(name, &files, Role::Read, scope);
        }
    }

    /// `sort -o`, `shuf -o`, `iconv -o`, `uniq IN OUT`, `xxd IN OUT`.
    pub(super) fn filter_with_output(&mut self, name: &str, args: &[Arg], scope: &mut Scope) {
        let rest = &args[1..];
        let (sv, lv): (&str, &[&str]) = match name {
            "sort" => (
                "oktST",
                &[
                    "output",
                    "key",
                    "field-separator",
                    "buffer-size",
                    "temporary-directory",
                    "files0-from",
                    "batch-size",
                    "parallel",
                    "compress-program",
                    "random-source",
                ],
            ),
            "shuf" => (
                "oni",
                &["output", "head-count", "input-range", "random-source"],
            ),
            "iconv" => ("oft", &["output", "from-code", "to-code"]),
            "uniq" => ("fsw", &["skip-fields", "skip-chars", "check-chars"]),
            "xxd" => (
                "cglsonC",
                &["cols", "groupsize", "len", "seek", "offset", "name"],
            ),
            _ => ("", &[]),
        };
        let o = getopt(rest, sv, lv, false);
        let outputs = o.values(&["-o", "--output"]);
        let outputs: Vec<&Arg> = if name == "xxd" { Vec::new() } else { outputs };
        let mut ops = o.operands();
        if name == "shuf" && o.has(&["-e", "--echo"]) {
            ops.clear();
        }
        let mut out_ops: Vec<&Arg> = Vec::new();
        if matches!(name, "uniq" | "xxd") && ops.len() >= 2 {
            out_ops.push(ops.remove(1));
        }
        if name == "sort" && o.has(&["--compress-program"]) {
            self.push(
                &[C::Unknown],
                "builtin/unknown",
                "`sort --compress-program` runs another program".into(),
                Some("--compress-program"),
                Some(name),
            );
        }
        if outputs.is_empty() && out_ops.is_empty() {
            self.read_only(name);
        } else {
            self.cat(
                C::Mutating,
                name,
                format!("`{}` writes a file", snippet(args)),
                None,
            );
        }
        self.paths_of(name, &outputs, Role::Write, scope);
        self.paths_of(name, &out_ops, Role::Write, scope);
        self.paths_of(
            name,
            &o.values(&["-T", "--temporary-directory"]),
            Role::Write,
            scope,
        );
        self.paths_of(
            name,
            &o.values(&["--files0-from", "--random-source"]),
            Role::Read,
            scope,
        );
        self.paths_of(name, &ops, Role::Read, scope);
    }

    pub(super) fn tar(&mut self, args: &[Arg], scope: &mut Scope) {
        let mut rest: Vec<Arg> = args[1..].to_vec();
        // Traditional `tar czf out.tgz dir`: a first word of option letters.
        if let Some(first) = rest.first()
            && let Some(t) = first.known()
            && !t.starts_with('-')
            && !t.is_empty()
            && t.chars().all(|c| c.is_ascii_alphabetic())
            && t.chars().any(|c| matches!(c, 'c' | 'x' | 't' | 'r' | 'u'))
        {
            let letters: Vec<char> = t.chars().collect();
            let mut words = vec![];
            let mut k = 1;
            for c in letters {
                words.push(Arg::literal(&format!("-{c}")));
                if TAR_VALUE_LETTERS.contains(c) && k < rest.len() {
                    words.push(rest[k].clone());
                    k += 1;
                }
            }
            words.extend(rest[k..].iter().cloned());
            rest = words;
        }
        let o = getopt(
            &rest,
            TAR_VALUE_LETTERS,
            &[
                "file",
                "directory",
                "files-from",
                "exclude-from",
                "exclude",
                "transform",
                "xform",
                "owner",
                "group",
                "mode",
                "mtime",
                "newer",
                "newer-mtime",
                "after-date",
                "use-compress-program",
                "to-command",
                "rsh-command",
                "info-script",
                "new-volume-script",
                "index-file",
                "volno-file",
                "suffix",
                "backup",
                "format",
                "label",
                "blocking-factor",
                "record-size",
                "level",
                "occurrence",
                "sort",
                "strip-components",
                "checkpoint-action",
                "warning",
                "quoting-style",
                "listed-incremental",
                "tape-length",
            ],
            false,
        );
        let archive = o.values(&["-f", "--file"]);
        let dirs = o.values(&["-C", "--directory"]);
        // The commands tar runs are decided like commands on the line.
        for v in o.values(&TAR_RUNS) {
            if !v.dynamic {
                self.embedded("tar", v, vec![Named::Command(v.text.clone())], scope);
            }
        }
        for v in o.values(&["--checkpoint-action"]) {
            if let Some(cmd) = v.known().and_then(|t| t.strip_prefix("exec=")) {
                self.embedded("tar", v, vec![Named::Command(cmd.to_string())], scope);
            }
        }
        let mode_create = o.has(&[
            "-c",
            "--create",
            "-r",
            "--append",
            "-u",
            "--update",
            "-A",
            "--catenate",
            "--concatenate",
            "--delete",
        ]);
        let mode_extract = o.has(&["-x", "--extract", "--get"]);
        let mode_list = o.has(&["-t", "--list", "-d", "--diff", "--compare"]);
        if o.has(&TAR_RUNS) || o.has(&["--checkpoint-action"]) {
            self.push(
                &[C::Unknown],
                "builtin/unknown",
                "this tar invocation runs another program".into(),
                Some("tar"),
                Some("tar"),
            );
        }
        for a in &archive {
            if a.text.contains(':') && !a.text.starts_with('/') && !a.text.contains('/') {
                self.cat(
                    C::Networked,
                    "tar",
                    format!("`tar -f {}` uses a remote archive", a.raw),
                    Some(&a.raw),
                );
            }
        }
        self.paths_of(
            "tar",
            &o.values(&[
                "-T",
                "--files-from",
                "-X",
                "--exclude-from",
                "-g",
                "--listed-incremental",
            ]),
            Role::Read,
            scope,
        );
        let ops = o.operands();
        if mode_extract {
            self.cat(
                C::Mutating,
                "tar",
                format!("`{}` extracts files", snippet(args)),
                None,
            );
            if o.has(&["-P", "--absolute-names"]) {
                self.cat(
                    C::HostEscape,
                    "tar",
                    "`tar -P` extracts absolute member paths onto the host".into(),
                    Some("-P"),
                );
            }
            if o.has(&["--overwrite", "--unlink-first", "-U", "--recursive-unlink"]) {
                self.cat(
                    C::Destructive,
                    "tar",
                    "this extraction overwrites or unlinks existing files".into(),
                    Some("tar"),
                );
            }
            self.paths_of("tar", &archive, Role::Read, scope);
            self.paths_of("tar", &dirs, Role::Write, scope);
        } else if mode_create {
            self.cat(
                C::Mutating,
                "tar",
                format!("`{}` writes an archive", snippet(args)),
                None,
            );
            let archive: Vec<&Arg> = archive.into_iter().filter(|a| a.text != "-").collect();
            self.paths_of("tar", &archive, Role::Write, scope);
            self.paths_of("tar", &dirs, Role::Read, scope);
            self.paths_of("tar", &ops, Role::Read, scope);
        } else if mode_list {
            self.read_only("tar");
            self.paths_of("tar", &archive, Role::Read, scope);
        } else {
            self.push(
                &[C::Unknown],
                "builtin/unknown",
                format!("`{}`: cannot tell what this tar does", snippet(args)),
                Some("tar"),
                Some("tar"),
            );
            self.generic_paths("tar", &rest, Role::Read, scope);
        }
    }

    pub(super) fn compress(&mut self, name: &str, args: &[Arg], scope: &mut Scope) {
        let o = getopt(
            &args[1..],
            "SobTLpD",
            &[
                "suffix", "output", "threads", "memlimit", "format", "level", "dict",
            ],
            false,
        );
        let to_stdout = o.has(&[
            "-c",
            "--stdout",
            "--to-stdout",
            "-l",
            "--list",
            "-t",
            "--test",
        ]);
        let ops = o.operands();
        if to_stdout {
            self.read_only(name);
            self.paths_of(name, &ops, Role::Read, scope);
        } else {
            self.cat(
                C::Mutating,
                name,
                format!(
                    "`{}` replaces files with their (de)compressed form",
                    snippet(args)
                ),
                None,
            );
            self.paths_of(name, &ops, Role::Write, scope);
            self.paths_of(name, &o.values(&["-o", "--output"]), Role::Write, scope);
        }
    }

    pub(super) fn unarchive(&mut self, name: &str, args: &[Arg], scope: &mut Scope) {
        let rest = &args[1..];
        let listing = if name == "unzip" {
            rest.iter().any(|a| {
                matches!(
                    a.known(),
                    Some("-l" | "-t" | "-v" | "-Z" | "-p" | "-z" | "-lv")
                )
            })
        } else {
            matches!(
                rest.first().and_then(|a| a.known()),
                Some("l" | "t" | "h" | "i" | "lt" | "vt")
            )
        };
        if listing {
            self.read_only(name);
            self.generic_paths(name, rest, Role::Read, scope);
            return;
        }
        self.cat(
            C::Mutating,
            name,
            format!("`{}` extracts or writes files", snippet(args)),
            None,
        );
        let o = getopt(rest, "dx", &[], false);
        self.paths_of(name, &o.values(&["-d"]), Role::Write, scope);
        for a in rest {
            if let Some(dir) = a.known().and_then(|t| t.strip_prefix("-o"))
                && name != "unzip"
                && !dir.is_empty()
            {
                let d = a.derived(dir);
                self.path(name, &d, Role::Write, scope);
            }
        }
        self.paths_of(name, &o.operands(), Role::Write, scope);
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

/// Whether a sed script writes files (`w`, `W`, `s///w`) or runs commands (`e`, `s///e`).
pub(super) fn sed_writes(script: &str) -> bool {
    for cmd in script.split([';', '\n']) {
        let c = cmd.trim_start();
        // Skip an address: line numbers, `$`, `/re/`, `,`, `!`.
        let mut rest = c;
        loop {
            let t = rest.trim_start();
            if let Some(r) = t.strip_prefix('/') {
                match r.find('/') {
                    Some(end) => rest = &r[end + 1..],
                    None => break,
                }
            } else if t.starts_with(|ch: char| {
                ch.is_ascii_digit() || matches!(ch, '$' | ',' | '!' | '~' | '+')
            }) {
                rest = &t[1..];
            } else {
                rest = t;
                break;
            }
        }
        let rest = rest.trim_start_matches('{').trim_start();
        match rest.chars().next() {
            Some('w' | 'W' | 'e') => return true,
            Some('s') => {
                let mut it = rest[1..].chars();
                let Some(delim) = it.next() else { continue };
                let body: String = it.collect();
                let mut count = 0;
                let mut escaped = false;
                let mut flags_at = None;
                for (i, ch) in body.char_indices() {
                    if escaped {
                        escaped = false;
                        continue;
                    }
                    if ch == '\\' {
                        escaped = true;
                    } else if ch == delim {
                        count += 1;
                        if count == 2 {
                            flags_at = Some(i + ch.len_utf8());
                            break;
                        }
                    }
                }
                if let Some(at) = flags_at {
                    let flags: String = body[at..]
                        .chars()
                        .take_while(|c| !matches!(c, '}' | ' '))
                        .collect();
                    if flags.contains('w') || flags.contains('e') {
                        return true;
                    }
                }
            }
            _ => {}
        }
    }
    false
}

/// Whether an awk program writes files or runs commands.
pub(super) fn awk_writes(program: &str) -> bool {
    if program.contains("system")
        || program.contains('|')
        || program.contains("fflush") && program.contains('>')
    {
        return true;
    }
    // `print … > "file"` / `printf … >> file`
    let mut rest = program;
    while let Some(i) = rest.find("print") {
        let after = &rest[i + 5..];
        let stmt: String = after
            .chars()
            .take_while(|c| !matches!(c, ';' | '}' | '\n'))
            .collect();
        if stmt.contains('>') {
            return true;
        }
        rest = after;
    }
    false
}
