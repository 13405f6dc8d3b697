//! Shells, interpreters, `eval`/`source`/`trap`/`alias`, and wrappers that run another
//! command (`env`, `sudo`, `nice`, `timeout`, `xargs`, `find -exec`, …).

use super::embedded::inline_code_names;
use super::{getopt, subcommand};
use crate::service::policy::Category as C;
use crate::service::policy::analyzer::Analyzer;
use crate::service::policy::words::{
    Arg, Resolved, Role, Scope, Stdin, chdir, looks_like_path, resolve, snippet,
};

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

    pub(super) fn env(&mut self, args: &[Arg], scope: &mut Scope, stdin: Stdin) {
        let rest = &args[1..];
        let mut i = 0;
        let mut sub = scope.clone();
        while i < rest.len() {
            let a = &rest[i];
            let Some(t) = a.known() else { break };
            if t == "--" {
                i += 1;
                break;
            }
            if matches!(t, "-u" | "--unset") {
                i += 2;
                continue;
            }
            if matches!(t, "-C" | "--chdir") || t.starts_with("--chdir=") {
                let dir = if t.contains('=') {
                    Some(a.derived(t.split_once('=').map_or("", |x| x.1)))
                } else {
                    i += 1;
                    rest.get(i).cloned()
                };
                if let Some(d) = dir {
                    self.path("env -C", &d, Role::Cd, &sub);
                    sub.cwd = chdir(&sub.cwd, &d);
                }
                i += 1;
                continue;
            }
            if matches!(t, "-S" | "--split-string")
                || t.starts_with("--split-string=")
                || (t.starts_with("-S") && t.len() > 2)
            {
                let body = if let Some(v) = t.strip_prefix("--split-string=") {
                    v.to_string()
                } else if t.len() > 2 && t.starts_with("-S") {
                    t[2..].to_string()
                } else {
                    i += 1;
                    rest.get(i).map(|a| a.text.clone()).unwrap_or_default()
                };
                let tail: Vec<&str> = rest[(i + 1).min(rest.len())..]
                    .iter()
                    .map(|a| a.raw.as_str())
                    .collect();
                let text = format!("{body} {}", tail.join(" "));
                self.shell_text(&text, &mut sub, stdin);
                return;
            }
            if t.starts_with('-') && t.len() > 1 {
                i += 1;
                continue;
            }
            if let Some((k, v)) = t.split_once('=')
                && !k.is_empty()
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                let val = a.derived(v);
                self.env_assignment(k, &val);
                i += 1;
                continue;
            }
            break;
        }
        if i >= rest.len() {
            self.read_only("env");
            return;
        }
        self.classify_argv(rest[i..].to_vec(), &mut sub, stdin);
    }

    pub(super) fn sudo(&mut self, name: &str, args: &[Arg], scope: &mut Scope, stdin: Stdin) {
        let rest = &args[1..];
        let o = getopt(
            rest,
            "aCcDghpRrTUu",
            &[
                "user",
                "group",
                "host",
                "prompt",
                "role",
                "type",
                "other-user",
                "close-from",
                "chdir",
                "chroot",
                "command-timeout",
            ],
            true,
        );
        let cmd: Vec<Arg> = o.operands().into_iter().cloned().collect();
        if o.has(&[
            "-l",
            "--list",
            "-v",
            "--validate",
            "-k",
            "-K",
            "--reset-timestamp",
            "--remove-timestamp",
            "-V",
            "--version",
            "-h",
            "--help",
        ]) && cmd.is_empty()
        {
            self.cat(
                C::Privileged,
                name,
                format!("`{name}` queries root privileges"),
                Some(name),
            );
            return;
        }
        let target = if cmd.is_empty() {
            "a root shell".to_string()
        } else {
            format!("`{}`", snippet(&cmd))
        };
        self.cat(
            C::Privileged,
            name,
            format!("`{name}` runs {target} as root"),
            Some(name),
        );
        if o.has(&["-e", "--edit"]) {
            self.cat(
                C::Interactive,
                name,
                format!("`{name} -e` opens an editor"),
                Some(name),
            );
            return;
        }
        if cmd.is_empty() {
            self.cat(
                C::Interactive,
                name,
                format!("`{name}` without a command opens a shell"),
                Some(name),
            );
            return;
        }
        self.classify_argv(cmd, scope, stdin);
    }

    pub(super) fn su(&mut self, args: &[Arg], scope: &mut Scope) {
        let o = getopt(
            &args[1..],
            "cgGsw",
            &[
                "command",
                "group",
                "supp-group",
                "shell",
                "whitelist-environment",
                "session-command",
            ],
            false,
        );
        self.cat(
            C::Privileged,
            "su",
            "`su` switches to another user (root by default)".into(),
            Some("su"),
        );
        let bodies = o.values(&["-c", "--command", "--session-command"]);
        if bodies.is_empty() {
            self.cat(
                C::Interactive,
                "su",
                "`su` without -c opens a shell".into(),
                Some("su"),
            );
        }
        for b in bodies {
            if b.dynamic {
                self.dynamic_code(
                    "su",
                    format!("`su -c {}` runs code known only at run time", b.raw),
                    &b.raw,
                );
            } else {
                let mut sub = scope.clone();
                self.shell_text(&b.text.clone(), &mut sub, Stdin::Inherit);
            }
        }
    }

    /// Wrappers that run the rest of their arguments as a command.
    pub(super) fn wrapper(&mut self, name: &str, args: &[Arg], scope: &mut Scope, stdin: Stdin) {
        let rest = &args[1..];
        // (letters taking a value, long options taking a value, leading operands to skip)
        let (sv, lv, skip): (&str, &[&str], usize) = match name {
            "nice" => ("n", &["adjustment"], 0),
            "timeout" => ("sk", &["signal", "kill-after"], 1),
            "time" => ("fo", &["format", "output"], 0),
            "stdbuf" => ("ioe", &["input", "output", "error"], 0),
            "ionice" => ("cnpPu", &["class", "classdata", "pid", "pgid", "uid"], 0),
            "exec" => ("a", &[], 0),
            "taskset" => ("", &[], 1),
            "strace" | "ltrace" => ("abeEIoOpPsSuUX", &["output", "attach", "user"], 0),
            "flock" => (
                "wEc",
                &["wait", "timeout", "conflict-exit-code", "command"],
                1,
            ),
            "faketime" => ("f", &[], 1),
            "firejail" | "valgrind" | "perf" | "hyperfine" => ("", &[], 0),
            "systemd-inhibit" => ("", &["what", "who", "why", "mode"], 0),
            "pv" | "ts" => ("", &[], 0),
            _ => ("", &[], 0),
        };
        let o = getopt(rest, sv, lv, true);
        if name == "command" && o.has(&["-v", "-V"]) {
            self.read_only(name);
            return;
        }
        if matches!(name, "strace" | "ltrace") && o.has(&["-p", "--attach"]) {
            self.cat(
                C::HostEscape,
                name,
                format!("`{name} -p` attaches to a process outside the workspace"),
                Some("-p"),
            );
        }
        if name == "ionice" && o.has(&["-p", "-P", "-u", "--pid", "--pgid", "--uid"]) {
            self.cat(
                C::HostEscape,
                name,
                "`ionice -p` changes another process's priority".into(),
                Some("-p"),
            );
        }
        if name == "nice" {
            for v in o.values(&["-n", "--adjustment"]) {
                if v.text.starts_with('-') {
                    self.cat(
                        C::Privileged,
                        name,
                        format!("`nice -n {}` raises priority, which needs root", v.raw),
                        Some(&v.raw),
                    );
                }
            }
        }
        self.paths_of(name, &o.values(&["-o", "--output"]), Role::Write, scope);
        let ops: Vec<Arg> = o.operands().into_iter().cloned().collect();
        if name == "flock" {
            if let Some(lock) = ops.first() {
                self.path(name, lock, Role::Write, scope);
            }
            for body in o.values(&["-c", "--command"]) {
                if body.dynamic {
                    self.dynamic_code(
                        name,
                        format!("`flock -c {}` runs code known only at run time", body.raw),
                        &body.raw,
                    );
                } else {
                    let mut sub = scope.clone();
                    self.shell_text(&body.text.clone(), &mut sub, Stdin::Inherit);
                }
            }
        }
        if name == "pv" {
            self.read_only(name);
            self.generic_paths(name, rest, Role::Read, scope);
            return;
        }
        if name == "ts" {
            self.read_only(name);
            return;
        }
        let cmd: Vec<Arg> = ops.into_iter().skip(skip).collect();
        if cmd.is_empty() {
            if matches!(name, "exec" | "nice" | "time" | "command" | "builtin") {
                self.read_only(name);
            } else {
                self.push(
                    &[C::Unknown],
                    "builtin/unknown",
                    format!("`{name}` without a command"),
                    Some(name),
                    Some(name),
                );
            }
            return;
        }
        if name == "hyperfine" {
            // Each operand is a shell command.
            for c in cmd {
                if c.dynamic {
                    self.dynamic_code(
                        name,
                        format!("`hyperfine` runs `{}`, known only at run time", c.raw),
                        &c.raw,
                    );
                } else {
                    let mut sub = scope.clone();
                    self.shell_text(&c.text.clone(), &mut sub, Stdin::Inherit);
                }
            }
            return;
        }
        if name == "entr" {
            self.cat(
                C::Interactive,
                name,
                "`entr` waits for file changes forever".into(),
                Some(name),
            );
        }
        self.classify_argv(cmd, scope, stdin);
    }

    pub(super) fn watch(&mut self, args: &[Arg], scope: &mut Scope) {
        let o = getopt(
            &args[1..],
            "nqg",
            &["interval", "differences", "chgexit", "equexit", "q"],
            true,
        );
        self.cat(
            C::Interactive,
            "watch",
            "`watch` redraws a terminal until it is stopped".into(),
            Some("watch"),
        );
        let cmd: Vec<Arg> = o.operands().into_iter().cloned().collect();
        if cmd.is_empty() {
            return;
        }
        if o.has(&["-x", "--exec"]) {
            self.classify_argv(cmd, scope, Stdin::Inherit);
        } else if cmd.iter().any(|a| a.dynamic) {
            self.dynamic_code(
                "watch",
                format!("`watch {}` runs code known only at run time", snippet(&cmd)),
                "watch",
            );
        } else {
            let text: Vec<&str> = cmd.iter().map(|a| a.text.as_str()).collect();
            let mut sub = scope.clone();
            self.shell_text(&text.join(" "), &mut sub, Stdin::Inherit);
        }
    }

    pub(super) fn xargs(&mut self, name: &str, args: &[Arg], scope: &mut Scope) {
        let rest = &args[1..];
        let placeholder = |raw: String| Arg {
            raw,
            text: "$(…)".into(),
            alts: vec!["$(…)".into()],
            dynamic: true,
            networked: false,
        };
        let (cmd, repl, input): (Vec<Arg>, Option<String>, Arg) = if name == "parallel" {
            let end = rest
                .iter()
                .position(|a| matches!(a.known(), Some(":::" | "::::" | ":::+" | "::::+")))
                .unwrap_or(rest.len());
            let inputs: Vec<&Arg> = rest[end..]
                .iter()
                .filter(|a| !matches!(a.known(), Some(":::" | "::::" | ":::+" | "::::+")))
                .collect();
            let o = getopt(
                &rest[..end],
                "jSIa",
                &[
                    "jobs", "sshlogin", "arg-file", "results", "joblog", "workdir", "tmpdir",
                ],
                true,
            );
            if o.has(&["-S", "--sshlogin"]) {
                self.cat(
                    C::Networked,
                    name,
                    "`parallel -S` runs commands on other hosts".into(),
                    Some("-S"),
                );
            }
            self.paths_of(name, &o.values(&["-a", "--arg-file"]), Role::Read, scope);
            self.paths_of(
                name,
                &o.values(&["--results", "--joblog", "--workdir", "--tmpdir"]),
                Role::Write,
                scope,
            );
            let input = inputs
                .iter()
                .find(|a| {
                    a.dynamic
                        || a.alts
                            .iter()
                            .any(|t| !matches!(resolve(t, &scope.cwd), Resolved::Inside(_)))
                })
                .or(inputs.first())
                .map(|a| (*a).clone())
                .unwrap_or_else(|| placeholder(format!("<arguments {name} reads from stdin>")));
            (
                o.operands().into_iter().cloned().collect(),
                Some("{}".to_string()),
                input,
            )
        } else {
            let o = getopt(
                rest,
                "adEILnPs",
                &[
                    "arg-file",
                    "delimiter",
                    "max-lines",
                    "max-args",
                    "max-procs",
                    "max-chars",
                    "process-slot-var",
                    "replace",
                ],
                true,
            );
            self.paths_of(name, &o.values(&["-a", "--arg-file"]), Role::Read, scope);
            if o.has(&["-p", "--interactive", "-o", "--open-tty"]) {
                self.cat(
                    C::Interactive,
                    name,
                    format!("`{name} -p` asks on the terminal"),
                    Some("-p"),
                );
            }
            let repl = o
                .values(&["-I", "--replace"])
                .first()
                .map(|v| v.text.clone())
                .or_else(|| o.has(&["-i"]).then(|| "{}".to_string()));
            let input = placeholder(format!("<arguments {name} reads from stdin>"));
            (o.operands().into_iter().cloned().collect(), repl, input)
        };
        if cmd.is_empty() {
            self.read_only(name);
            return;
        }
        if cmd.len() == 1 && cmd[0].text.contains(' ') && !cmd[0].dynamic {
            // `parallel 'cmd {}'` / `xargs -I{} 'sh -c …'`: a whole command line.
            let text = match &repl {
                Some(r) if input.dynamic => cmd[0].text.replace(r.as_str(), "\"$AVFS_INPUT\""),
                Some(r) => cmd[0].text.replace(r.as_str(), &input.text),
                None => format!("{} \"$AVFS_INPUT\"", cmd[0].text),
            };
            let mut sub = scope.clone();
            self.shell_text(&text, &mut sub, Stdin::Inherit);
            return;
        }
        let mut replaced = false;
        let mut cmd: Vec<Arg> = cmd
            .into_iter()
            .map(|a| match &repl {
                Some(r) if a.text.contains(r.as_str()) => {
                    replaced = true;
                    let text = a.text.replace(r.as_str(), &input.text);
                    Arg {
                        raw: a.raw.clone(),
                        alts: vec![text.clone()],
                        text,
                        dynamic: a.dynamic || input.dynamic,
                        networked: a.networked || input.networked,
                    }
                }
                _ => a,
            })
            .collect();
        if !replaced {
            cmd.push(input);
        }
        let mut sub = scope.clone();
        self.classify_argv(cmd, &mut sub, Stdin::Inherit);
    }

    pub(super) fn find(&mut self, args: &[Arg], scope: &mut Scope) {
        let rest = &args[1..];
        let mut i = 0;
        while i < rest.len() {
            match rest[i].known() {
                Some("-H" | "-L" | "-P") => i += 1,
                Some("-D") => i += 2,
                Some(t) if t.starts_with("-O") => i += 1,
                _ => break,
            }
        }
        let mut roots: Vec<Arg> = Vec::new();
        while i < rest.len() {
            let a = &rest[i];
            if a.known()
                .is_some_and(|t| t.starts_with('-') || t == "(" || t == "!" || t == ",")
            {
                break;
            }
            roots.push(a.clone());
            i += 1;
        }
        if roots.is_empty() {
            roots.push(Arg::literal("."));
        }
        const VALUE_TESTS: &[&str] = &[
            "-name",
            "-iname",
            "-path",
            "-ipath",
            "-wholename",
            "-iwholename",
            "-regex",
            "-iregex",
            "-type",
            "-xtype",
            "-size",
            "-perm",
            "-user",
            "-group",
            "-uid",
            "-gid",
            "-mtime",
            "-mmin",
            "-atime",
            "-amin",
            "-ctime",
            "-cmin",
            "-inum",
            "-links",
            "-maxdepth",
            "-mindepth",
            "-fstype",
            "-used",
            "-printf",
            "-context",
            "-regextype",
            "-lname",
            "-ilname",
            "-newermt",
            "-newerat",
            "-newerct",
        ];
        const FILE_TESTS: &[&str] = &["-newer", "-anewer", "-cnewer", "-samefile", "-files0-from"];
        let mut delete = false;
        let mut execs: Vec<(String, Vec<Arg>)> = Vec::new();
        while i < rest.len() {
            let a = &rest[i];
            i += 1;
            let Some(t) = a.known() else { continue };
            match t {
                "-delete" => delete = true,
                "-exec" | "-execdir" | "-ok" | "-okdir" => {
                    let mut cmd = Vec::new();
                    while i < rest.len() {
                        let w = &rest[i];
                        i += 1;
                        if matches!(w.known(), Some(";" | "+")) {
                            break;
                        }
                        cmd.push(w.clone());
                    }
                    execs.push((t.to_string(), cmd));
                }
                "-fprint" | "-fprint0" | "-fls" => {
                    if let Some(f) = rest.get(i) {
                        self.cat(
                            C::Mutating,
                            "find",
                            format!("`find {t}` writes `{}`", f.raw),
                            None,
                        );
                        self.path("find", f, Role::Write, scope);
                    }
                    i += 1;
                }
                "-fprintf" => {
                    if let Some(f) = rest.get(i) {
                        self.cat(
                            C::Mutating,
                            "find",
                            format!("`find -fprintf` writes `{}`", f.raw),
                            None,
                        );
                        self.path("find", f, Role::Write, scope);
                    }
                    i += 2;
                }
                t if FILE_TESTS.contains(&t) => {
                    if let Some(f) = rest.get(i) {
                        self.path("find", f, Role::Read, scope);
                    }
                    i += 1;
                }
                t if VALUE_TESTS.contains(&t) => i += 1,
                _ => {}
            }
        }
        let role = if delete { Role::Delete } else { Role::Read };
        for r in &roots {
            self.path("find", r, role, scope);
        }
        if delete {
            self.cat(
                C::Destructive,
                "find",
                format!("`find {} -delete` deletes what it matches; inside the workspace the checkpoint taken first makes it recoverable", roots.iter().map(|r| r.raw.as_str()).collect::<Vec<_>>().join(" ")),
                Some("-delete"),
            );
        }
        if !delete && execs.is_empty() {
            self.read_only("find");
        }
        for (how, cmd) in execs {
            if how.starts_with("-ok") {
                self.cat(
                    C::Interactive,
                    "find",
                    format!("`find {how}` asks on the terminal"),
                    Some(&how),
                );
            }
            if cmd.is_empty() {
                continue;
            }
            let root = roots[0].clone();
            let cmd: Vec<Arg> = cmd
                .into_iter()
                .map(|a| {
                    if a.text.contains("{}") {
                        let text = a.text.replace("{}", &root.text);
                        Arg {
                            raw: a.raw.clone(),
                            alts: vec![text.clone()],
                            text,
                            dynamic: a.dynamic || root.dynamic,
                            networked: a.networked || root.networked,
                        }
                    } else {
                        a
                    }
                })
                .collect();
            let mut sub = scope.clone();
            self.classify_argv(cmd, &mut sub, Stdin::Inherit);
        }
    }

    pub(super) fn fd(&mut self, name: &str, args: &[Arg], scope: &mut Scope) {
        let rest = &args[1..];
        let pos = rest
            .iter()
            .position(|a| matches!(a.known(), Some("-x" | "--exec" | "-X" | "--exec-batch")));
        let (search, exec) = match pos {
            Some(p) => (&rest[..p], Some(&rest[p + 1..])),
            None => (rest, None),
        };
        let o = getopt(
            search,
            "edtEScjo",
            &[
                "extension",
                "max-depth",
                "type",
                "exclude",
                "size",
                "changed-within",
                "changed-before",
                "owner",
                "base-directory",
                "search-path",
                "ignore-file",
                "color",
                "threads",
                "max-results",
                "path-separator",
                "format",
                "and",
            ],
            false,
        );
        let ops = o.operands();
        let roots: Vec<Arg> = ops
            .iter()
            .skip(1)
            .map(|a| (*a).clone())
            .chain(
                o.values(&["--search-path", "--base-directory"])
                    .into_iter()
                    .cloned(),
            )
            .collect();
        for r in &roots {
            self.path(name, r, Role::Read, scope);
        }
        self.paths_of(name, &o.values(&["--ignore-file"]), Role::Read, scope);
        match exec {
            None => self.read_only(name),
            Some(cmd) => {
                let root = roots.first().cloned().unwrap_or_else(|| Arg::literal("."));
                let mut cmd: Vec<Arg> = cmd
                    .iter()
                    .take_while(|a| a.known() != Some(";"))
                    .cloned()
                    .collect();
                let mut placed = false;
                for a in cmd.iter_mut() {
                    if a.text.contains('{') {
                        a.text = root.text.clone();
                        a.alts = vec![root.text.clone()];
                        placed = true;
                    }
                }
                if !placed {
                    cmd.push(root);
                }
                let mut sub = scope.clone();
                self.classify_argv(cmd, &mut sub, Stdin::Inherit);
            }
        }
    }
}
