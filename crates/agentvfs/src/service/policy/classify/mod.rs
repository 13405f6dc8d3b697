//! What each program does: the built-in knowledge of common tools, wrappers, shells,
//! interpreters, `git`, package managers, and the getopt-style parsing their flags need.

mod archives;
mod embedded;
mod exec;
mod files;
mod find;
mod git;
mod git_config;
mod network;
mod opts;
mod packages;
mod tables;
mod text;
mod wrappers;

pub(super) use self::opts::subcommand;
use self::opts::{Opts, basename, destructive_flag, getopt, normalize};
use self::tables::{
    BUILD, DESTRUCTIVE, HOST_ESCAPE, INTERACTIVE, INTERPRETERS, NETWORKED, PRIVILEGED, READ_ONLY,
    READ_ONLY_TEXT, SHELLS, WRITES,
};
use super::Category as C;
use crate::service::policy::analyzer::Analyzer;
use crate::service::policy::words::{
    Arg, MAX_DEPTH, Resolved, Role, SYSTEM_BIN_DIRS, Scope, Stdin, looks_like_path, resolve,
    snippet,
};

impl Analyzer<'_> {
    /// Classify one simple command given as words (argv requests, wrappers, substitutions).
    pub fn classify_argv(&mut self, args: Vec<Arg>, scope: &mut Scope, stdin: Stdin) {
        if args.is_empty() {
            return;
        }
        if self.depth >= MAX_DEPTH {
            self.hard(
                &[C::Unknown],
                "builtin/too-deep",
                format!(
                    "`{}` nests wrappers and shells too deeply to analyze",
                    snippet(&args)
                ),
                &args[0].raw,
            );
            return;
        }
        let head = &args[0];
        if head.dynamic {
            self.dynamic_command(&args, scope);
            return;
        }
        let word = head.text.clone();
        let mut local = false;
        let name = if word.contains('/') {
            if !SYSTEM_BIN_DIRS.iter().any(|d| word.starts_with(d)) {
                match resolve(&word, &scope.cwd) {
                    Resolved::Inside(_) => local = true,
                    _ => self.path(&word, head, Role::Exec, scope),
                }
            }
            normalize(basename(&word))
        } else {
            normalize(&word)
        };
        self.invoked.push(name.clone());
        let start = self.facts.len();
        self.depth += 1;
        self.program(&name, &args, scope, stdin, local);
        self.depth -= 1;
        self.apply_rules(&name, &args, scope, start);
    }

    fn dynamic_command(&mut self, args: &[Arg], scope: &mut Scope) {
        let head = &args[0];
        if head.networked {
            self.hard(
                &[C::Networked, C::Unknown],
                "builtin/remote-code",
                format!(
                    "the command name `{}` comes from the network and is run",
                    head.raw
                ),
                &head.raw,
            );
        }
        if let Some(f) = args[1..].iter().find(|a| destructive_flag(a)) {
            self.hard(
                &[C::Unknown, C::Destructive],
                "builtin/dynamic-command",
                format!(
                    "the command name `{}` is only known at run time and it is given `{}`",
                    head.raw, f.raw
                ),
                &head.raw,
            );
        } else {
            self.push(
                &[C::Unknown],
                "builtin/dynamic-command",
                format!("the command name `{}` is only known at run time", head.raw),
                Some(&head.raw),
                None,
            );
        }
        self.generic_paths(&head.raw, &args[1..], Role::Read, scope);
    }

    /// Check every operand (and `=` values) of `prog` as paths in `role`.
    pub fn generic_paths(&mut self, prog: &str, args: &[Arg], role: Role, scope: &Scope) {
        let mut after_dd = false;
        for a in args {
            if !after_dd && a.known() == Some("--") {
                after_dd = true;
                continue;
            }
            if !after_dd && a.is_flag() {
                self.eq_value(prog, a, Role::Read, scope);
                continue;
            }
            self.path(prog, a, role, scope);
            if !a.dynamic && a.text.contains('=') {
                self.eq_value(prog, a, role, scope);
            }
        }
    }

    fn paths_of(&mut self, prog: &str, args: &[&Arg], role: Role, scope: &Scope) {
        for a in args {
            self.path(prog, a, role, scope);
        }
    }

    /// Values of unlisted options that look like paths leaving the workspace.
    fn stray_values(&mut self, prog: &str, opts: &Opts, skip: &[&str], scope: &Scope) {
        for v in opts.other_values(skip) {
            if looks_like_path(&v.text) {
                self.path(prog, v, Role::Read, scope);
            }
        }
    }

    fn program(&mut self, name: &str, args: &[Arg], scope: &mut Scope, stdin: Stdin, local: bool) {
        let rest = &args[1..];
        if scope.functions.contains(name) {
            self.push(
                &[C::ReadOnly],
                "builtin/readonly",
                format!("calls shell function `{name}` (classified where it is defined)"),
                None,
                Some(name),
            );
            self.generic_paths(name, rest, Role::Read, scope);
            return;
        }
        match name {
            n if SHELLS.contains(&n) => self.shell_program(n, args, scope, stdin),
            n if INTERPRETERS.contains(&n) => self.interpreter(n, args, scope, stdin),
            "busybox" | "toybox" => {
                if rest.is_empty() {
                    self.read_only(name);
                } else {
                    self.classify_argv(rest.to_vec(), scope, stdin);
                }
            }
            "env" => self.env(args, scope, stdin),
            "sudo" | "doas" => self.sudo(name, args, scope, stdin),
            "su" => self.su(args, scope),
            "nice" | "nohup" | "timeout" | "time" | "stdbuf" | "ionice" | "setsid" | "exec"
            | "command" | "builtin" | "unbuffer" | "taskset" | "strace" | "ltrace" | "flock"
            | "catchsegv" | "faketime" | "fakeroot" | "xvfb-run" | "dbus-run-session"
            | "firejail" | "proxychains" | "proxychains4" | "torsocks" | "caffeinate"
            | "systemd-inhibit" | "valgrind" | "perf" | "hyperfine" | "entr" | "chronic" | "ts"
            | "pv" | "direnv-exec" => self.wrapper(name, args, scope, stdin),
            "watch" => self.watch(args, scope),
            "xargs" | "parallel" => self.xargs(name, args, scope),
            "find" => self.find(args, scope),
            "fd" | "fdfind" => self.fd(name, args, scope),
            "eval" => self.eval(args, scope),
            "source" | "." => self.source(name, args, scope, stdin),
            "trap" => self.trap(args, scope),
            "alias" => self.alias(args, scope),
            "cd" | "pushd" | "chdir" => self.cd(name, args, scope),
            "export" | "declare" | "typeset" | "local" | "readonly" => {
                self.read_only(name);
                for a in rest.iter().filter(|a| !a.is_flag()) {
                    if let Some((k, v)) = a.text.split_once('=')
                        && !k.is_empty()
                        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    {
                        let val = a.derived(v);
                        self.env_assignment(k, &val);
                        scope.vars.insert(k.to_string(), val);
                    }
                }
            }
            "unset" => {
                self.read_only(name);
                for a in rest.iter().filter(|a| !a.is_flag()) {
                    scope.vars.remove(&a.text);
                }
            }
            "popd" => {
                scope.cwd = super::words::Cwd::Unknown;
                self.read_only(name);
            }
            "test" | "[" => self.test_cmd(name, rest, scope),
            "kill" => self.kill(args),
            "rm" => self.rm(args, scope),
            "rmdir" => {
                self.cat(
                    C::Mutating,
                    name,
                    format!("`{}` removes empty directories", snippet(args)),
                    None,
                );
                self.generic_paths(name, rest, Role::Delete, scope);
            }
            "dd" => self.dd(args, scope),
            "chmod" | "chown" | "chgrp" => self.chmod(name, args, scope),
            "tee" => self.tee(args, scope),
            "sed" => self.sed(args, scope),
            "awk" | "gawk" | "mawk" | "nawk" => self.awk(name, args, scope),
            "grep" | "rg" | "ag" | "ack" | "ugrep" | "pcregrep" => self.grep(name, args, scope),
            "jq" | "yq" | "gojq" | "jaq" => self.jq(name, args, scope),
            "sort" | "shuf" | "iconv" | "uniq" | "xxd" => {
                self.filter_with_output(name, args, scope)
            }
            "tar" | "bsdtar" | "gtar" => self.tar(args, scope),
            "gzip" | "gunzip" | "bzip2" | "bunzip2" | "xz" | "unxz" | "zstd" | "unzstd" | "lz4"
            | "compress" | "uncompress" | "brotli" | "pigz" => self.compress(name, args, scope),
            "unzip" | "7z" | "7za" | "7zr" | "unrar" => self.unarchive(name, args, scope),
            "patch" => {
                let o = getopt(
                    rest,
                    "iodprBzDFVY",
                    &["input", "output", "directory", "reject-file"],
                    false,
                );
                self.cat(
                    C::Mutating,
                    name,
                    format!("`{}` changes files", snippet(args)),
                    None,
                );
                self.paths_of(name, &o.values(&["-i", "--input"]), Role::Read, scope);
                self.paths_of(
                    name,
                    &o.values(&["-o", "--output", "-r", "--reject-file", "-d", "--directory"]),
                    Role::Write,
                    scope,
                );
                self.paths_of(name, &o.operands(), Role::Write, scope);
            }
            "curl" => self.curl(args, scope),
            "wget" => self.wget(args, scope),
            "ssh" => self.ssh(args, scope, &stdin),
            "scp" | "rsync" => self.copy_remote(name, args, scope),
            "git" => self.git(args, scope),
            "cargo" => self.cargo(args, scope),
            "npm" | "yarn" | "pnpm" => self.node_pm(name, args, scope),
            "pip" | "pip-sync" => self.pip(name, rest, scope),
            "uv" | "poetry" | "pipenv" | "pdm" | "hatch" | "rye" => self.py_pm(name, args, scope),
            "go" => self.go(args, scope),
            "gem" | "bundle" | "bundler" | "composer" | "brew" | "rustup" | "cabal-install"
            | "dotnet-tool" => self.other_pm(name, args, scope),
            "emacs" => {
                if rest
                    .iter()
                    .any(|a| matches!(a.known(), Some("--batch" | "-batch" | "--script")))
                {
                    self.cat(
                        C::Mutating,
                        name,
                        "`emacs --batch` runs Lisp that can change files".into(),
                        None,
                    );
                } else {
                    self.cat(
                        C::Interactive,
                        name,
                        "`emacs` needs a terminal".into(),
                        Some(name),
                    );
                }
                self.generic_paths(name, rest, Role::Write, scope);
            }
            "top" => {
                if rest
                    .iter()
                    .any(|a| a.known().is_some_and(|t| t.starts_with("-b") || t == "-l"))
                {
                    self.read_only(name);
                } else {
                    self.cat(
                        C::Interactive,
                        name,
                        "`top` needs a terminal (use `top -b -n 1`)".into(),
                        Some(name),
                    );
                }
            }
            "sqlite3" | "sqlite" | "duckdb" => {
                let o = getopt(
                    rest,
                    "",
                    &["cmd", "init", "separator", "newline", "nullvalue"],
                    false,
                );
                let ops = o.operands();
                if ops.len() < 2 && matches!(stdin, Stdin::Inherit) {
                    self.cat(
                        C::Interactive,
                        name,
                        format!("`{name}` without SQL opens an interactive prompt"),
                        Some(name),
                    );
                } else {
                    self.cat(
                        C::Mutating,
                        name,
                        format!("`{name}` runs SQL that can change the database"),
                        None,
                    );
                }
                if let Some(db) = ops.first() {
                    self.path(name, db, Role::Write, scope);
                }
            }
            "psql" | "mysql" | "mariadb" | "redis-cli" | "mongo" | "mongosh" | "cqlsh"
            | "clickhouse-client" | "sqlcmd" => {
                self.cat(
                    C::Networked,
                    name,
                    format!("`{name}` talks to a database server"),
                    Some(name),
                );
                let scripted = rest.iter().any(|a| {
                    a.known().is_some_and(|t| {
                        matches!(
                            t,
                            "-c" | "-e"
                                | "--command"
                                | "--execute"
                                | "--eval"
                                | "-f"
                                | "--file"
                                | "-Q"
                        ) || t.starts_with("--command=")
                            || t.starts_with("--execute=")
                            || t.starts_with("--eval=")
                    })
                });
                if !scripted && matches!(stdin, Stdin::Inherit) {
                    self.cat(
                        C::Interactive,
                        name,
                        format!("`{name}` without a command opens an interactive prompt"),
                        Some(name),
                    );
                }
            }
            "openssl" => {
                let sub = rest.first().and_then(|a| a.known()).unwrap_or("");
                match sub {
                    "s_client" | "s_server" | "s_time" | "ocsp" => {
                        self.cat(
                            C::Networked,
                            name,
                            format!("`openssl {sub}` talks to the network"),
                            Some(name),
                        );
                    }
                    "version" | "help" | "list" | "" => self.read_only(name),
                    _ => self.cat(
                        C::Mutating,
                        name,
                        format!("`openssl {sub}` can write files"),
                        None,
                    ),
                }
                for a in rest {
                    if looks_like_path(&a.text) || a.dynamic {
                        self.path(name, a, Role::Read, scope);
                    }
                }
            }
            "hostname" => {
                if rest.iter().any(|a| !a.is_flag()) {
                    self.cat(
                        C::Privileged,
                        name,
                        "`hostname NAME` changes the host's name".into(),
                        Some(name),
                    );
                } else {
                    self.read_only(name);
                }
            }
            "systemctl" => {
                let sub = subcommand(name, rest).unwrap_or_default();
                if sub.starts_with("list")
                    || sub.starts_with("is-")
                    || matches!(sub.as_str(), "status" | "show" | "cat" | "help")
                {
                    self.read_only(name);
                } else {
                    self.cat(
                        C::Privileged,
                        name,
                        format!("`systemctl {sub}` changes host services"),
                        Some(name),
                    );
                }
            }
            "ip" => {
                let read = rest
                    .iter()
                    .filter(|a| !a.is_flag())
                    .nth(1)
                    .and_then(|a| a.known());
                if rest.len() <= 1 || matches!(read, None | Some("show" | "list" | "ls" | "get")) {
                    self.read_only(name);
                } else {
                    self.cat(
                        C::Privileged,
                        name,
                        format!("`{}` changes the host's network", snippet(args)),
                        Some(name),
                    );
                }
            }
            "dpkg" | "rpm" => {
                let query = rest.iter().any(|a| {
                    a.known().is_some_and(|t| {
                        matches!(
                            t,
                            "-l" | "-L"
                                | "-s"
                                | "-S"
                                | "-q"
                                | "-qa"
                                | "-qi"
                                | "-ql"
                                | "-qf"
                                | "--list"
                                | "--listfiles"
                                | "--status"
                                | "--search"
                                | "--query"
                                | "--print-architecture"
                        )
                    })
                });
                if query {
                    self.read_only(name);
                } else {
                    self.cat(
                        C::Privileged,
                        name,
                        format!("`{name}` installs or removes host packages"),
                        Some(name),
                    );
                }
            }
            "apt-cache" | "apt-file" => self.read_only(name),
            "crontab" => {
                if rest.iter().any(|a| a.known() == Some("-l")) {
                    self.read_only(name);
                } else {
                    self.cat(
                        C::HostEscape,
                        name,
                        "`crontab` schedules commands on the host".into(),
                        Some(name),
                    );
                }
            }
            n if READ_ONLY.contains(&n) => {
                self.read_only(n);
                self.generic_paths(n, rest, Role::Read, scope);
            }
            n if READ_ONLY_TEXT.contains(&n) => {
                self.read_only(n);
                for a in rest {
                    if a.is_flag() {
                        self.eq_value(n, a, Role::Read, scope);
                    }
                }
            }
            n if WRITES.contains(&n) => {
                self.cat(
                    C::Mutating,
                    n,
                    format!("`{}` changes files in the workspace", snippet(args)),
                    None,
                );
                if n == "ln" {
                    self.ln(rest, scope);
                } else {
                    self.generic_paths(n, rest, Role::Write, scope);
                }
            }
            n if BUILD.contains(&n) => self.build_tool(n, args, scope),
            n if DESTRUCTIVE.contains(&n) => {
                self.cat(
                    C::Destructive,
                    n,
                    format!("`{}` destroys data; inside the workspace the checkpoint taken first makes it recoverable", snippet(args)),
                    rest.iter().find(|a| !a.is_flag()).map(|a| a.raw.as_str()),
                );
                self.generic_paths(n, rest, Role::Delete, scope);
            }
            n if NETWORKED.contains(&n) => {
                self.cat(
                    C::Networked,
                    n,
                    format!("`{n}` talks to the network"),
                    Some(n),
                );
                if matches!(
                    n,
                    "npx" | "pnpx" | "bunx" | "uvx" | "pipx" | "nix" | "nix-shell"
                ) {
                    self.cat(
                        C::Mutating,
                        n,
                        format!("`{n}` downloads and runs a package"),
                        None,
                    );
                }
                if matches!(n, "telnet" | "ftp" | "lftp" | "sftp" | "mosh")
                    && matches!(stdin, Stdin::Inherit)
                    && !rest.iter().any(|a| a.known() == Some("-b"))
                {
                    self.cat(
                        C::Interactive,
                        n,
                        format!("`{n}` opens an interactive session"),
                        Some(n),
                    );
                }
                for a in rest {
                    if looks_like_path(&a.text) {
                        self.path(n, a, Role::Read, scope);
                    }
                }
            }
            n if PRIVILEGED.contains(&n) => {
                self.cat(
                    C::Privileged,
                    n,
                    format!("`{n}` needs root or acts on the host's kernel, services or daemons"),
                    Some(n),
                );
                self.generic_paths(n, rest, Role::Read, scope);
            }
            n if INTERACTIVE.contains(&n) => {
                self.cat(
                    C::Interactive,
                    n,
                    format!("`{n}` needs a terminal"),
                    Some(n),
                );
                self.generic_paths(n, rest, Role::Read, scope);
            }
            n if HOST_ESCAPE.contains(&n) => {
                self.cat(
                    C::HostEscape,
                    n,
                    format!("`{}` acts on the host outside the workspace", snippet(args)),
                    Some(n),
                );
            }
            n => {
                let what = if local {
                    format!(
                        "runs `{}` from the workspace; the policy cannot see what it does",
                        args[0].raw
                    )
                } else {
                    format!("`{n}` is not a program the policy knows")
                };
                self.push(
                    &[C::Unknown],
                    "builtin/unknown",
                    what,
                    Some(&args[0].raw),
                    Some(n),
                );
                self.generic_paths(n, rest, Role::Read, scope);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::text::{awk_writes, sed_writes};
    use super::*;

    #[test]
    fn sed_scripts() {
        assert!(!sed_writes("s/a/b/g"));
        assert!(!sed_writes("s/e/x/"));
        assert!(sed_writes("s/a/b/w out.txt"));
        assert!(sed_writes("1e rm -rf /"));
        assert!(sed_writes("s/x/y/e"));
        assert!(sed_writes("/foo/w out"));
        assert!(!sed_writes("/home/d"));
    }

    #[test]
    fn awk_programs() {
        assert!(!awk_writes("{print $1}"));
        assert!(!awk_writes("$3 > 100 {print}"));
        assert!(awk_writes("{print $1 > \"out\"}"));
        assert!(awk_writes("{system(\"rm x\")}"));
    }

    #[test]
    fn getopt_bundles() {
        let args: Vec<Arg> = ["-sSLo", "out", "url", "--data=@f"]
            .iter()
            .map(|s| Arg::literal(s))
            .collect();
        let o = getopt(&args, "o", &["data"], false);
        assert!(o.has(&["-s", "-S", "-L"]));
        assert_eq!(o.values(&["-o"])[0].text, "out");
        assert_eq!(o.values(&["--data"])[0].text, "@f");
        assert_eq!(o.operands()[0].text, "url");
        // Unambiguous prefixes of long options, with = and without.
        let args: Vec<Arg> = ["--use-compress-prog=x", "--to-com", "y", "--r=z"]
            .iter()
            .map(|s| Arg::literal(s))
            .collect();
        let o = getopt(
            &args,
            "",
            &["use-compress-program", "to-command", "record-size", "rsh"],
            false,
        );
        assert_eq!(o.values(&["--use-compress-program"])[0].text, "x");
        assert_eq!(o.values(&["--to-command"])[0].text, "y");
        // Ambiguous: left as written.
        assert_eq!(o.values(&["--r"])[0].text, "z");
    }
}
