//! Wrappers that run another command: `env`, `sudo`, `su`, `nice`, `timeout`, `watch`,
//! `xargs` and the like; each is classified by the command it runs.

use super::getopt;
use crate::service::policy::Category as C;
use crate::service::policy::analyzer::Analyzer;
use crate::service::policy::words::{Arg, Resolved, Role, Scope, Stdin, chdir, resolve, snippet};

impl Analyzer<'_> {
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
}
