//! Text tools that can write or run commands despite reading text: `sed`, `awk`, `grep`,
//! `jq`, filters with an output option, and the sed and awk script scanners.

use super::embedded::{awk_names, sed_names};
use super::getopt;
use crate::service::policy::Category as C;
use crate::service::policy::analyzer::Analyzer;
use crate::service::policy::words::{Arg, Role, Scope, snippet};

impl Analyzer<'_> {
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
