//! getopt-style parsing of a command's arguments, its subcommand (after git's or cargo's
//! global options), flags that make a command destructive, and normalized program names.

use crate::service::policy::words::Arg;

/// One parsed command-line element.
#[derive(Debug, Clone)]
pub(super) enum Opt {
    /// `-x` or `--name` (names keep their dashes).
    Flag(String),
    /// An option with its value (`-o FILE`, `-oFILE`, `--out=FILE`, `--out FILE`).
    Value(String, Arg),
    Operand(Arg),
}

/// Parsed arguments.
#[derive(Debug, Clone, Default)]
pub(super) struct Opts(pub Vec<Opt>);

impl Opts {
    pub fn has(&self, names: &[&str]) -> bool {
        self.0.iter().any(|o| match o {
            Opt::Flag(n) | Opt::Value(n, _) => names.contains(&n.as_str()),
            Opt::Operand(_) => false,
        })
    }

    pub fn values(&self, names: &[&str]) -> Vec<&Arg> {
        self.0
            .iter()
            .filter_map(|o| match o {
                Opt::Value(n, v) if names.contains(&n.as_str()) => Some(v),
                _ => None,
            })
            .collect()
    }

    pub fn operands(&self) -> Vec<&Arg> {
        self.0
            .iter()
            .filter_map(|o| match o {
                Opt::Operand(a) => Some(a),
                _ => None,
            })
            .collect()
    }

    /// Values of options not listed in `skip` (their values may still be paths).
    pub fn other_values(&self, skip: &[&str]) -> Vec<&Arg> {
        self.0
            .iter()
            .filter_map(|o| match o {
                Opt::Value(n, v) if !skip.contains(&n.as_str()) => Some(v),
                _ => None,
            })
            .collect()
    }
}

/// getopt_long-style parsing. `short_val`: letters that take a value; `long_val`: long names
/// (without `--`) that take a value; `posix`: options end at the first operand.
pub(super) fn getopt(args: &[Arg], short_val: &str, long_val: &[&str], posix: bool) -> Opts {
    let mut out = Vec::new();
    let mut i = 0;
    let mut only_operands = false;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if only_operands || !a.is_flag() {
            if posix {
                only_operands = true;
            }
            out.push(Opt::Operand(a.clone()));
            continue;
        }
        let t = a.text.as_str();
        if t == "--" {
            only_operands = true;
            continue;
        }
        if let Some(long) = t.strip_prefix("--") {
            // GNU getopt takes any unambiguous prefix of a long option (`--use-compress-prog`).
            let full = |n: &str| -> String {
                let mut hits = long_val.iter().filter(|l| l.starts_with(n));
                match (long_val.contains(&n), hits.next(), hits.next()) {
                    (false, Some(only), None) if !n.is_empty() => (*only).to_string(),
                    _ => n.to_string(),
                }
            };
            if let Some((n, v)) = long.split_once('=') {
                out.push(Opt::Value(format!("--{}", full(n)), a.derived(v)));
            } else if long_val.contains(&full(long).as_str()) {
                let t = format!("--{}", full(long));
                match args.get(i) {
                    Some(v) => {
                        out.push(Opt::Value(t, v.clone()));
                        i += 1;
                    }
                    None => out.push(Opt::Flag(t)),
                }
            } else {
                out.push(Opt::Flag(t.to_string()));
            }
            continue;
        }
        let chars: Vec<char> = t[1..].chars().collect();
        for (k, c) in chars.iter().enumerate() {
            if short_val.contains(*c) {
                let rest: String = chars[k + 1..].iter().collect();
                if !rest.is_empty() {
                    out.push(Opt::Value(format!("-{c}"), a.derived(&rest)));
                } else if let Some(v) = args.get(i) {
                    out.push(Opt::Value(format!("-{c}"), v.clone()));
                    i += 1;
                } else {
                    out.push(Opt::Flag(format!("-{c}")));
                }
                break;
            }
            out.push(Opt::Flag(format!("-{c}")));
        }
    }
    Opts(out)
}

/// The program's subcommand, for `[[rule]] subcommand` (after git's / cargo's global options).
pub(in crate::service::policy) fn subcommand(name: &str, rest: &[Arg]) -> Option<String> {
    let mut i = 0;
    while i < rest.len() {
        let a = &rest[i];
        let t = a.known()?;
        match name {
            "git" if matches!(t, "-C" | "-c" | "--git-dir" | "--work-tree" | "--namespace") => {
                i += 2;
                continue;
            }
            "cargo" if t.starts_with('+') => {
                i += 1;
                continue;
            }
            "cargo" if matches!(t, "--color" | "-Z" | "--config" | "-C") => {
                i += 2;
                continue;
            }
            _ => {}
        }
        if t.starts_with('-') {
            i += 1;
            continue;
        }
        return Some(t.to_string());
    }
    None
}

/// `-rf`, `--force`, `--delete`…: flags that make an unknown command word dangerous.
pub(super) fn destructive_flag(a: &Arg) -> bool {
    let Some(t) = a.known() else { return false };
    if let Some(long) = t.strip_prefix("--") {
        let n = long.split('=').next().unwrap_or(long);
        return matches!(
            n,
            "force" | "recursive" | "delete" | "no-preserve-root" | "hard" | "prune" | "mirror"
        ) || n.starts_with("force")
            || n.starts_with("delete")
            || n.starts_with("remove");
    }
    if t == "-delete" {
        return true;
    }
    t.len() > 1
        && t.starts_with('-')
        && t[1..].chars().all(|c| c.is_ascii_alphabetic())
        && t[1..].chars().any(|c| matches!(c, 'r' | 'R' | 'f'))
}

pub(super) fn basename(s: &str) -> &str {
    s.trim_end_matches('/').rsplit('/').next().unwrap_or(s)
}

/// `python3.12` → `python`, `pip3` → `pip`, `mkfs.ext4` → `mkfs`, `nodejs` → `node`.
pub(super) fn normalize(name: &str) -> String {
    for base in [
        "python", "pip", "ruby", "perl", "php", "lua", "node", "pypy",
    ] {
        if let Some(rest) = name.strip_prefix(base)
            && rest.chars().all(|c| c.is_ascii_digit() || c == '.')
        {
            return base.to_string();
        }
    }
    if name == "nodejs" {
        return "node".into();
    }
    if name.starts_with("mkfs.") || name.starts_with("mke2fs") {
        return "mkfs".into();
    }
    if name.starts_with("qemu-system-") {
        return "qemu-system".into();
    }
    name.to_string()
}
