//! Shells and interpreters, and the shell builtins that run code: `eval`, `source`, `trap`,
//! `alias`; code from stdin, from the network, or known only at run time.

use super::embedded::inline_code_names;
use super::subcommand;
use crate::service::policy::Category as C;
use crate::service::policy::analyzer::Analyzer;
use crate::service::policy::words::{Arg, Role, Scope, Stdin, looks_like_path, snippet};

impl Analyzer<'_> {
    pub(super) fn remote_code(&mut self, prog: &str, what: &str) {
        self.hard(
            &[C::Networked, C::Unknown],
            "builtin/remote-code",
            format!("`{prog}` would run {what} downloaded from the network"),
            prog,
        );
    }

    /// Code that only exists at run time (`eval "$X"`, `… | sh`, `bash -c "$X"`): ask.
    pub fn dynamic_code(&mut self, prog: &str, what: String, offending: &str) {
        self.facts.push(crate::service::policy::words::Fact {
            categories: vec![C::Unknown],
            forced: Some(crate::service::policy::Action::Ask),
            rule: "builtin/dynamic-code".into(),
            reason: what,
            offending: Some(offending.to_string()),
            program: Some(prog.to_string()),
            kind: crate::service::policy::words::Kind::Normal,
        });
    }

    /// A program that reads code from its standard input.
    pub(super) fn stdin_code(
        &mut self,
        prog: &str,
        stdin: &Stdin,
        scope: &mut Scope,
        is_shell: bool,
    ) {
        match stdin {
            Stdin::Inherit => self.cat(
                C::Interactive,
                prog,
                format!("`{prog}` with no script starts an interactive session"),
                Some(prog),
            ),
            Stdin::Pipe { networked: true } | Stdin::Dynamic { networked: true } => {
                self.remote_code(prog, "code piped in");
            }
            Stdin::Pipe { .. } | Stdin::Dynamic { .. } => self.dynamic_code(
                prog,
                format!("`{prog}` runs code from its input, which is only known at run time"),
                prog,
            ),
            Stdin::File => self.cat(
                C::Mutating,
                prog,
                format!("`{prog}` runs a script read from a file"),
                None,
            ),
            Stdin::Code(text) => {
                if is_shell {
                    let mut sub = scope.clone();
                    self.shell_text(text, &mut sub, Stdin::Inherit);
                } else {
                    self.cat(
                        C::Mutating,
                        prog,
                        format!("`{prog}` runs inline code"),
                        None,
                    );
                }
            }
        }
    }

    pub(super) fn shell_program(
        &mut self,
        prog: &str,
        args: &[Arg],
        scope: &mut Scope,
        stdin: Stdin,
    ) {
        let mut i = 1;
        let (mut c, mut s, mut noexec) = (false, false, false);
        while i < args.len() {
            let a = &args[i];
            let Some(t) = a.known() else { break };
            if t == "--" || t == "-" {
                i += 1;
                break;
            }
            if matches!(t, "-o" | "+o" | "-O" | "+O") {
                i += 2;
                continue;
            }
            if matches!(t, "--rcfile" | "--init-file") {
                if let Some(f) = args.get(i + 1) {
                    self.path(prog, f, Role::Read, scope);
                }
                i += 2;
                continue;
            }
            if t.starts_with("--") {
                i += 1;
                continue;
            }
            if (t.starts_with('-') || t.starts_with('+')) && t.len() > 1 {
                for ch in t[1..].chars() {
                    match ch {
                        'c' => c = true,
                        's' => s = true,
                        'n' => noexec = true,
                        _ => {}
                    }
                }
                i += 1;
                continue;
            }
            break;
        }
        let rest = &args[i.min(args.len())..];
        if c {
            let Some(body) = rest.first() else {
                self.push(
                    &[C::Unknown],
                    "builtin/unknown",
                    format!("`{prog} -c` without a command"),
                    Some(prog),
                    Some(prog),
                );
                return;
            };
            if body.networked {
                self.remote_code(prog, "a command");
                return;
            }
            if body.dynamic {
                self.dynamic_code(
                    prog,
                    format!("`{prog} -c {}` runs code known only at run time", body.raw),
                    &body.raw,
                );
                return;
            }
            let mut sub = scope.clone();
            sub.positional = rest[1..].to_vec();
            sub.functions.clear();
            if noexec {
                self.read_only(prog);
            }
            self.shell_text(&body.text.clone(), &mut sub, stdin);
            return;
        }
        if noexec {
            self.read_only(prog);
            self.generic_paths(prog, rest, Role::Read, scope);
            return;
        }
        let script = rest.first();
        match script {
            None => self.stdin_code(prog, &stdin, scope, true),
            Some(_) if s => self.stdin_code(prog, &stdin, scope, true),
            Some(f) if matches!(f.known(), Some("/dev/stdin" | "-")) => {
                self.stdin_code(prog, &stdin, scope, true)
            }
            Some(f) => {
                if f.networked {
                    self.remote_code(prog, "a script");
                    return;
                }
                self.path(prog, f, Role::Read, scope);
                self.cat(
                    C::Mutating,
                    prog,
                    format!(
                        "`{prog} {}` runs a script the policy cannot see into",
                        f.raw
                    ),
                    None,
                );
                self.generic_paths(prog, &rest[1..], Role::Read, scope);
            }
        }
    }

    pub(super) fn interpreter(
        &mut self,
        prog: &str,
        args: &[Arg],
        scope: &mut Scope,
        stdin: Stdin,
    ) {
        let rest = &args[1..];
        if rest.len() == 1
            && matches!(
                rest[0].known(),
                Some("--version" | "-V" | "-v" | "--help" | "-h" | "-version")
            )
        {
            self.read_only(prog);
            return;
        }
        if matches!(prog, "deno" | "bun") {
            return self.js_runtime(prog, args, scope, stdin);
        }
        // (flags whose value is code, flags that take a value)
        let (code_flags, value_flags): (&[&str], &[&str]) = match prog {
            "python" | "pypy" => (&["-c"], &["-W", "-X", "--check-hash-based-pycs"]),
            "node" => (
                &["-e", "--eval", "-p", "--print"],
                &[
                    "-r",
                    "--require",
                    "--import",
                    "--loader",
                    "--experimental-loader",
                    "--env-file",
                    "--input-type",
                    "--conditions",
                    "-C",
                    "--title",
                ],
            ),
            "ruby" => (&["-e"], &["-r", "-I", "-C", "-E", "-F", "-K", "-T"]),
            "perl" => (
                &["-e", "-E"],
                &["-I", "-M", "-m", "-x", "-F", "-C", "-l", "-0", "-d", "-D"],
            ),
            "php" => (&["-r"], &["-c", "-d", "-f", "-z", "-t", "-S"]),
            _ => (&[], &[]),
        };
        let mut i = 0;
        while i < rest.len() {
            let a = &rest[i];
            let Some(t) = a.known() else { break };
            if t == "-" {
                return self.stdin_code(prog, &stdin, scope, false);
            }
            if t == "--" {
                i += 1;
                break;
            }
            if !t.starts_with('-') || t.len() == 1 {
                break;
            }
            let bare = t.split('=').next().unwrap_or(t);
            let bundle = !t.starts_with("--") && t[1..].chars().all(|c| c.is_ascii_alphanumeric());
            if prog == "perl" && bundle && t[1..].contains('i') {
                self.cat(
                    C::Mutating,
                    prog,
                    "`perl -i` edits files in place".into(),
                    None,
                );
            }
            if prog == "php" && t == "-S" {
                self.cat(
                    C::Networked,
                    prog,
                    "`php -S` starts a web server".into(),
                    Some("-S"),
                );
            }
            let is_code = code_flags.contains(&bare)
                || (prog == "perl" && bundle && (t[1..].contains('e') || t[1..].contains('E')))
                || (prog == "python" && bundle && t.ends_with('c'));
            if is_code {
                let body = if t.contains('=') {
                    Some(a.derived(t.split_once('=').map_or("", |x| x.1)))
                } else {
                    rest.get(i + 1).cloned()
                };
                if body.as_ref().is_some_and(|b| b.networked) {
                    self.remote_code(prog, "code");
                    return;
                }
                self.cat(
                    C::Mutating,
                    prog,
                    format!("`{prog}` runs inline code that can change files"),
                    None,
                );
                if let Some(b) = body.as_ref().filter(|b| !b.dynamic) {
                    self.embedded(prog, b, inline_code_names(&b.text), scope);
                }
                let after = rest.get(i + 2..).unwrap_or(&[]);
                self.generic_paths(prog, after, Role::Read, scope);
                return;
            }
            if matches!(prog, "python" | "pypy") && t.starts_with("-m") {
                let (module, more) = if t.len() > 2 {
                    (Some(a.derived(&t[2..])), rest.get(i + 1..).unwrap_or(&[]))
                } else {
                    (rest.get(i + 1).cloned(), rest.get(i + 2..).unwrap_or(&[]))
                };
                self.python_module(prog, module.as_ref(), more, scope);
                return;
            }
            if value_flags.contains(&bare) && !t.contains('=') {
                if let Some(v) = rest.get(i + 1)
                    && looks_like_path(&v.text)
                {
                    self.path(prog, v, Role::Read, scope);
                }
                i += 2;
                continue;
            }
            i += 1;
        }
        let Some(script) = rest.get(i) else {
            return self.stdin_code(prog, &stdin, scope, false);
        };
        if script.networked {
            self.remote_code(prog, "a script");
            return;
        }
        if script.known() == Some("/dev/stdin") {
            return self.stdin_code(prog, &stdin, scope, false);
        }
        self.path(prog, script, Role::Read, scope);
        self.cat(
            C::Mutating,
            prog,
            format!(
                "`{prog} {}` runs a program that can change files",
                script.raw
            ),
            None,
        );
        self.generic_paths(prog, &rest[i + 1..], Role::Read, scope);
    }

    pub(super) fn python_module(
        &mut self,
        prog: &str,
        module: Option<&Arg>,
        more: &[Arg],
        scope: &mut Scope,
    ) {
        let Some(m) = module.and_then(|m| m.known()) else {
            self.push(
                &[C::Unknown],
                "builtin/unknown",
                format!("`{prog} -m` with a module known only at run time"),
                None,
                Some(prog),
            );
            return;
        };
        match m {
            "pip" => self.pip("pip", more, scope),
            "http.server" | "SimpleHTTPServer" | "smtpd" | "ftplib" | "webbrowser" => {
                self.cat(
                    C::Networked,
                    prog,
                    format!("`{prog} -m {m}` uses the network"),
                    Some(m),
                );
            }
            "json.tool" | "tokenize" | "pydoc" | "site" | "sysconfig" | "platform" | "this"
            | "calendar" | "pyclbr" => {
                self.read_only(prog);
                self.generic_paths(prog, more, Role::Read, scope);
            }
            "venv" | "virtualenv" => {
                self.cat(
                    C::Mutating,
                    prog,
                    format!("`{prog} -m {m}` creates a virtual environment"),
                    None,
                );
                self.generic_paths(prog, more, Role::Write, scope);
            }
            _ => {
                self.cat(
                    C::Mutating,
                    prog,
                    format!("`{prog} -m {m}` runs a module that can change files"),
                    None,
                );
                self.generic_paths(prog, more, Role::Read, scope);
            }
        }
    }

    pub(super) fn js_runtime(&mut self, prog: &str, args: &[Arg], scope: &mut Scope, stdin: Stdin) {
        let rest = &args[1..];
        let sub = subcommand(prog, rest).unwrap_or_default();
        match sub.as_str() {
            "" => self.stdin_code(prog, &stdin, scope, false),
            "install" | "i" | "add" | "update" | "upgrade" | "x" | "create" | "outdated"
            | "publish" | "cache" => {
                self.cat(
                    C::Networked,
                    prog,
                    format!("`{prog} {sub}` downloads packages"),
                    Some(prog),
                );
                self.cat(
                    C::Mutating,
                    prog,
                    format!("`{prog} {sub}` changes dependencies"),
                    None,
                );
            }
            "fmt" | "lint" | "check" | "info" | "doc" | "types" | "pm" => {
                if rest.iter().any(|a| matches!(a.known(), Some("--check"))) || sub != "fmt" {
                    self.read_only(prog);
                } else {
                    self.cat(
                        C::Mutating,
                        prog,
                        format!("`{prog} fmt` rewrites files"),
                        None,
                    );
                }
            }
            _ => self.cat(
                C::Mutating,
                prog,
                format!("`{}` runs project code", snippet(args)),
                None,
            ),
        }
        if rest
            .iter()
            .any(|a| a.text.starts_with("http://") || a.text.starts_with("https://"))
        {
            self.cat(
                C::Networked,
                prog,
                format!("`{prog}` runs code from a URL"),
                Some(prog),
            );
        }
        self.generic_paths(prog, rest, Role::Read, scope);
    }

    pub(super) fn eval(&mut self, args: &[Arg], scope: &mut Scope) {
        let rest = &args[1..];
        if rest.iter().any(|a| a.networked) {
            self.remote_code("eval", "text");
            return;
        }
        if let Some(d) = rest.iter().find(|a| a.dynamic) {
            self.dynamic_code(
                "eval",
                format!("`{}` runs text known only at run time", snippet(args)),
                &d.raw,
            );
            return;
        }
        let text: Vec<&str> = rest.iter().map(|a| a.text.as_str()).collect();
        self.shell_text(&text.join(" "), scope, Stdin::Inherit);
    }

    pub(super) fn source(&mut self, name: &str, args: &[Arg], scope: &mut Scope, stdin: Stdin) {
        let Some(f) = args.get(1) else {
            self.push(
                &[C::Unknown],
                "builtin/unknown",
                format!("`{name}` without a file"),
                Some(name),
                Some(name),
            );
            return;
        };
        if f.networked {
            self.remote_code(name, "a script");
            return;
        }
        if matches!(f.known(), Some("/dev/stdin" | "-")) {
            self.stdin_code(name, &stdin, scope, true);
            return;
        }
        self.path(name, f, Role::Read, scope);
        self.cat(
            C::Mutating,
            name,
            format!(
                "`{name} {}` runs a script the policy cannot see into",
                f.raw
            ),
            None,
        );
    }

    pub(super) fn trap(&mut self, args: &[Arg], scope: &mut Scope) {
        self.read_only("trap");
        let rest = &args[1..];
        let Some(action) = rest.first() else { return };
        if action.is_flag() || rest.len() < 2 {
            return;
        }
        if action.dynamic {
            self.dynamic_code(
                "trap",
                format!("`trap {}` runs code known only at run time", action.raw),
                &action.raw,
            );
        } else {
            let mut sub = scope.clone();
            self.shell_text(&action.text.clone(), &mut sub, Stdin::Inherit);
        }
    }

    pub(super) fn alias(&mut self, args: &[Arg], scope: &mut Scope) {
        self.read_only("alias");
        for a in &args[1..] {
            if let Some((_, body)) = a.text.split_once('=') {
                if a.dynamic {
                    self.dynamic_code(
                        "alias",
                        format!("`alias {}` defines code known only at run time", a.raw),
                        &a.raw,
                    );
                } else {
                    let mut sub = scope.clone();
                    self.shell_text(body, &mut sub, Stdin::Inherit);
                }
            }
        }
    }
}
