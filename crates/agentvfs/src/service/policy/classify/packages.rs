//! Package managers: `cargo`, `npm`/`yarn`/`pnpm`, `pip`, `uv`/`poetry`, `go`, `gem`, `brew`, …

use super::{getopt, subcommand};
use crate::service::policy::Category as C;
use crate::service::policy::analyzer::Analyzer;
use crate::service::policy::words::{Arg, Role, Scope, looks_like_path, snippet};

impl Analyzer<'_> {
    /// A package-manager command that fetches from its index and changes the project.
    fn uses_package_index(&mut self, name: &str, label: &str, what: &str) {
        self.cat(
            C::Networked,
            name,
            format!("`{label}` talks to the package index"),
            Some(label),
        );
        self.cat(C::Mutating, name, format!("`{label}` {what}"), None);
    }

    pub(super) fn cargo(&mut self, args: &[Arg], scope: &mut Scope) {
        let rest = &args[1..];
        let sub = subcommand("cargo", rest).unwrap_or_default();
        let label = format!("cargo {sub}");
        let flag = |names: &[&str]| {
            rest.iter()
                .any(|a| a.known().is_some_and(|t| names.contains(&t)))
        };
        match sub.as_str() {
            "" | "version" | "help" | "metadata" | "tree" | "locate-project" | "pkgid" | "verify-project" | "read-manifest" | "search" | "info" => {
                if matches!(sub.as_str(), "search" | "info") {
                    self.cat(C::Networked, &label, format!("`{label}` queries the registry"), Some(&label));
                } else if matches!(sub.as_str(), "metadata" | "tree" | "pkgid") && !flag(&["--locked", "--frozen"]) {
                    // Resolving the dependency graph writes Cargo.lock when it is missing or stale.
                    self.cat(C::Mutating, &label, format!("`{label}` may write Cargo.lock (--locked does not)"), None);
                } else {
                    self.read_only("cargo");
                }
            }
            "fmt" if flag(&["--check"]) => self.read_only("cargo"),
            "clean" => self.cat(C::Destructive, &label, "`cargo clean` deletes build outputs; the checkpoint taken first makes it recoverable".into(), Some(&label)),
            "install" | "uninstall" | "add" | "update" | "up" | "upgrade" | "fetch" | "vendor" | "login" | "logout" | "owner" | "yank" | "publish" | "audit" | "outdated" | "generate-lockfile" | "binstall" => {
                if !flag(&["--offline", "--frozen"]) || matches!(sub.as_str(), "install" | "publish" | "login" | "owner" | "yank" | "binstall") {
                    self.cat(C::Networked, &label, format!("`{label}` talks to the package registry"), Some(&label));
                }
                let what = if matches!(sub.as_str(), "install" | "uninstall" | "binstall") {
                    format!("`{label}` installs into the user's cargo home (~/.cargo)")
                } else {
                    format!("`{label}` changes dependencies")
                };
                self.cat(C::Mutating, &label, what, None);
            }
            _ => self.cat(C::Mutating, &label, format!("`{}` builds and runs project code", snippet(args)), None),
        }
        let o = getopt(
            rest,
            "CZ",
            &[
                "manifest-path",
                "target-dir",
                "config",
                "color",
                "lockfile-path",
                "artifact-dir",
                "out-dir",
                "root",
                "path",
                "package",
                "features",
                "bin",
                "example",
                "test",
                "bench",
                "target",
                "jobs",
                "profile",
                "message-format",
                "registry",
                "index",
                "git",
                "branch",
                "tag",
                "rev",
                "vers",
                "version",
                "rename",
                "timings",
                "exclude",
                "workspace",
            ],
            false,
        );
        self.paths_of(
            "cargo",
            &o.values(&["--manifest-path", "--lockfile-path", "--path", "-C"]),
            Role::Read,
            scope,
        );
        self.paths_of(
            "cargo",
            &o.values(&["--target-dir", "--artifact-dir", "--out-dir"]),
            Role::Write,
            scope,
        );
        if let Some(root) = o.values(&["--root"]).first() {
            self.path("cargo", root, Role::Write, scope);
        }
        self.stray_values("cargo", &o, &[], scope);
        for a in o.operands() {
            if looks_like_path(&a.text) {
                self.path("cargo", a, Role::Read, scope);
            }
        }
    }

    pub(super) fn node_pm(&mut self, name: &str, args: &[Arg], scope: &mut Scope) {
        let rest = &args[1..];
        let sub = subcommand(name, rest).unwrap_or_default();
        let label = if sub.is_empty() {
            name.to_string()
        } else {
            format!("{name} {sub}")
        };
        let global = rest
            .iter()
            .any(|a| matches!(a.known(), Some("-g" | "--global" | "--location=global")));
        let words: Vec<&str> = rest
            .iter()
            .filter(|a| !a.is_flag())
            .filter_map(|a| a.known())
            .collect();
        let config_write = sub == "config"
            && words
                .iter()
                .any(|w| matches!(*w, "set" | "delete" | "edit" | "rm"));
        let version_bump = sub == "version" && words.len() > 1;
        match sub.as_str() {
            "" if name == "yarn" => {
                self.cat(
                    C::Networked,
                    name,
                    "`yarn` installs dependencies from the registry".into(),
                    Some(name),
                );
                self.cat(
                    C::Mutating,
                    name,
                    "`yarn` installs dependencies".into(),
                    None,
                );
            }
            "" | "ls" | "list" | "ll" | "la" | "why" | "explain" | "root" | "prefix" | "bin"
            | "help" | "config" | "get" | "version"
                if !config_write && !version_bump =>
            {
                self.read_only(name);
            }
            "install" | "i" | "ci" | "add" | "update" | "up" | "upgrade" | "dedupe" | "audit"
            | "outdated" | "view" | "info" | "show" | "search" | "fetch" | "dlx" | "exec" | "x"
            | "create" | "doctor" | "import" | "install-test" | "it" | "cit" | "clean-install"
            | "publish" | "unpublish" | "deprecate" | "dist-tag" | "owner" | "login" | "logout"
            | "adduser" | "token" | "access" | "ping" | "team" | "org" | "hook" | "star"
            | "stars" | "fund" | "repo" | "docs" | "bugs" | "whoami" => {
                self.cat(
                    C::Networked,
                    name,
                    format!("`{label}` talks to the package registry"),
                    Some(&label),
                );
                let query = matches!(
                    sub.as_str(),
                    "audit"
                        | "outdated"
                        | "view"
                        | "info"
                        | "show"
                        | "search"
                        | "ping"
                        | "whoami"
                        | "fund"
                        | "doctor"
                        | "docs"
                        | "bugs"
                        | "repo"
                );
                if !query || words.contains(&"fix") {
                    self.cat(
                        C::Mutating,
                        name,
                        format!("`{label}` changes dependencies or runs package code"),
                        None,
                    );
                }
            }
            _ => self.cat(
                C::Mutating,
                name,
                format!("`{}` runs package scripts in the workspace", snippet(args)),
                None,
            ),
        }
        if global
            && matches!(
                sub.as_str(),
                "install"
                    | "i"
                    | "add"
                    | "uninstall"
                    | "remove"
                    | "rm"
                    | "un"
                    | "update"
                    | "up"
                    | "link"
            )
        {
            self.push(
                &[C::HostEscape],
                "builtin/host-escape",
                format!(
                    "`{}` installs outside the workspace (global)",
                    snippet(args)
                ),
                Some("-g"),
                Some(name),
            );
        }
        for a in rest {
            if a.known().is_some_and(|t| {
                t.starts_with("--prefix")
                    || t.starts_with("--cache")
                    || t.starts_with("--userconfig")
                    || t.starts_with("--cwd")
            }) {
                self.eq_value(name, a, Role::Write, scope);
            } else if looks_like_path(&a.text) {
                self.path(name, a, Role::Read, scope);
            }
        }
    }

    pub(super) fn pip(&mut self, name: &str, rest: &[Arg], scope: &mut Scope) {
        let sub = subcommand(name, rest).unwrap_or_default();
        let label = format!("pip {sub}");
        match sub.as_str() {
            "install" | "download" | "wheel" | "index" | "search" => {
                // --no-index keeps pip off the index, not off a URL it is given (a
                // requirement, --find-links or a VCS URL), nor off one it cannot see.
                let url = rest.iter().any(|a| match a.known() {
                    Some(t) => t.contains("://") || t.starts_with("git+") || t.contains("@git"),
                    None => true,
                });
                if url || !rest.iter().any(|a| matches!(a.known(), Some("--no-index"))) {
                    self.cat(
                        C::Networked,
                        name,
                        format!("`{label}` downloads packages"),
                        Some(&label),
                    );
                }
                if sub != "search" && sub != "index" {
                    self.cat(
                        C::Mutating,
                        name,
                        format!("`{label}` installs packages"),
                        None,
                    );
                }
            }
            "uninstall" => self.cat(
                C::Mutating,
                name,
                "`pip uninstall` removes packages".into(),
                None,
            ),
            "" | "list" | "show" | "freeze" | "check" | "help" | "config" | "debug" | "cache"
            | "hash" | "inspect" | "--version" | "-V" => {
                if sub == "cache"
                    && rest
                        .iter()
                        .any(|a| matches!(a.known(), Some("purge" | "remove")))
                {
                    self.cat(
                        C::Mutating,
                        name,
                        "`pip cache purge` deletes the cache".into(),
                        None,
                    );
                } else {
                    self.read_only("pip");
                }
            }
            _ => self.push(
                &[C::Unknown],
                "builtin/unknown",
                format!("`{label}` is not a pip command the policy knows"),
                Some(&label),
                Some("pip"),
            ),
        }
        let o = getopt(
            rest,
            "rcetfi",
            &[
                "requirement",
                "constraint",
                "editable",
                "target",
                "find-links",
                "index-url",
                "extra-index-url",
                "prefix",
                "root",
                "src",
                "cache-dir",
                "log",
                "cert",
                "client-cert",
                "python",
            ],
            false,
        );
        self.paths_of(
            name,
            &o.values(&["-r", "--requirement", "-c", "--constraint"]),
            Role::Read,
            scope,
        );
        self.paths_of(
            name,
            &o.values(&[
                "-t",
                "--target",
                "--prefix",
                "--root",
                "--src",
                "--log",
                "--cache-dir",
            ]),
            Role::Write,
            scope,
        );
        if rest.iter().any(|a| a.known() == Some("--user")) {
            self.push(
                &[C::HostEscape],
                "builtin/host-escape",
                "`pip install --user` installs into the user's home".into(),
                Some("--user"),
                Some("pip"),
            );
        }
        for a in o.operands() {
            if looks_like_path(&a.text) {
                self.path(name, a, Role::Read, scope);
            }
        }
    }

    pub(super) fn py_pm(&mut self, name: &str, args: &[Arg], scope: &mut Scope) {
        let rest = &args[1..];
        let sub = subcommand(name, rest).unwrap_or_default();
        let label = format!("{name} {sub}");
        match sub.as_str() {
            "pip" if name == "uv" => {
                let pos = rest
                    .iter()
                    .position(|a| a.known() == Some("pip"))
                    .unwrap_or(0);
                self.pip("pip", &rest[pos + 1..], scope);
                return;
            }
            "run" | "shell" | "exec" | "build" | "test" | "fmt" | "format" | "lint" | "check"
            | "script" => {
                self.cat(
                    C::Mutating,
                    name,
                    format!("`{}` runs project code", snippet(args)),
                    None,
                );
                // `uv run` may install the project's dependencies first; it is still
                // classified by what it runs.
            }
            "show" | "list" | "tree" | "--version" | "version" | "env" | "info" | "help"
            | "config" | "which" | "path" | "" => self.read_only(name),
            "venv" | "init" | "new" | "remove" | "uninstall" => self.cat(
                C::Mutating,
                name,
                format!("`{label}` changes the project environment"),
                None,
            ),
            _ => {
                self.uses_package_index(name, &label, "changes dependencies");
            }
        }
        for a in rest {
            if looks_like_path(&a.text) {
                self.path(name, a, Role::Read, scope);
            }
        }
    }

    pub(super) fn go(&mut self, args: &[Arg], scope: &mut Scope) {
        let rest = &args[1..];
        let sub = subcommand("go", rest).unwrap_or_default();
        let label = format!("go {sub}");
        match sub.as_str() {
            "" | "version" | "list" | "doc" | "help" | "vet" => self.read_only("go"),
            "env" if !rest.iter().any(|a| matches!(a.known(), Some("-w" | "-u"))) => {
                self.read_only("go")
            }
            "get" | "install" => {
                self.cat(
                    C::Networked,
                    "go",
                    format!("`{label}` downloads modules"),
                    Some(&label),
                );
                self.cat(
                    C::Mutating,
                    "go",
                    format!("`{label}` changes dependencies or installs binaries"),
                    None,
                );
            }
            "mod" => {
                let s = rest
                    .iter()
                    .filter(|a| !a.is_flag())
                    .nth(1)
                    .and_then(|a| a.known())
                    .unwrap_or("");
                match s {
                    "graph" | "why" | "verify" => self.read_only("go"),
                    "download" | "tidy" | "vendor" => {
                        self.cat(
                            C::Networked,
                            "go",
                            format!("`go mod {s}` downloads modules"),
                            Some(&label),
                        );
                        self.cat(
                            C::Mutating,
                            "go",
                            format!("`go mod {s}` changes dependencies"),
                            None,
                        );
                    }
                    _ => self.cat(
                        C::Mutating,
                        "go",
                        format!("`go mod {s}` changes go.mod"),
                        None,
                    ),
                }
            }
            "clean" => self.cat(
                C::Destructive,
                "go",
                "`go clean` deletes build outputs".into(),
                Some(&label),
            ),
            _ => self.cat(
                C::Mutating,
                "go",
                format!("`{}` builds and runs project code", snippet(args)),
                None,
            ),
        }
        for a in rest {
            if looks_like_path(&a.text) {
                self.path("go", a, Role::Read, scope);
            }
        }
    }

    pub(super) fn other_pm(&mut self, name: &str, args: &[Arg], scope: &mut Scope) {
        let rest = &args[1..];
        let sub = subcommand(name, rest).unwrap_or_default();
        let second = rest
            .iter()
            .filter(|a| !a.is_flag())
            .nth(1)
            .and_then(|a| a.known())
            .unwrap_or("");
        let label = format!("{name} {sub}");
        let read = match name {
            "rustup" => {
                matches!(sub.as_str(), "show" | "which" | "help" | "doc")
                    || (matches!(sub.as_str(), "toolchain" | "target" | "component")
                        && second == "list")
                    || (sub.is_empty()
                        && rest
                            .iter()
                            .any(|a| matches!(a.known(), Some("--version" | "-V"))))
            }
            _ => matches!(
                sub.as_str(),
                "" | "list"
                    | "show"
                    | "info"
                    | "which"
                    | "help"
                    | "version"
                    | "env"
                    | "config"
                    | "doctor"
                    | "leaves"
                    | "deps"
                    | "desc"
                    | "home"
                    | "contents"
                    | "outdated"
                    | "search"
            ),
        };
        if read {
            if matches!(sub.as_str(), "outdated" | "search") {
                self.cat(
                    C::Networked,
                    name,
                    format!("`{label}` queries the package index"),
                    Some(&label),
                );
            } else {
                self.read_only(name);
            }
        } else if matches!(sub.as_str(), "exec" | "run" | "test") {
            self.cat(
                C::Mutating,
                name,
                format!("`{}` runs project code", snippet(args)),
                None,
            );
        } else if matches!(
            sub.as_str(),
            "uninstall" | "remove" | "rm" | "cleanup" | "clean"
        ) {
            self.cat(
                C::Mutating,
                name,
                format!("`{label}` removes packages"),
                None,
            );
        } else {
            self.uses_package_index(name, &label, "installs or updates packages");
        }
        for a in rest {
            if looks_like_path(&a.text) {
                self.path(name, a, Role::Read, scope);
            }
        }
    }
}
