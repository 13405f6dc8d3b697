//! `find` and `fd`: their tests and actions, and the commands `-exec` / `--exec` run.

use super::getopt;
use crate::service::policy::Category as C;
use crate::service::policy::analyzer::Analyzer;
use crate::service::policy::words::{Arg, Role, Scope, Stdin};

impl Analyzer<'_> {
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
