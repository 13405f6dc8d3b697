//! Archivers and compressors: `tar` (its traditional option letters and the commands it
//! may run), `gzip` and friends, `unzip` and other extractors.

use super::embedded::Named;
use super::getopt;
use crate::service::policy::Category as C;
use crate::service::policy::analyzer::Analyzer;
use crate::service::policy::words::{Arg, Role, Scope, snippet};

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
}
