//! The vocabulary of command analysis: words (`Arg`), scopes and working directories, roles,
//! stdin, facts, and resolving a path against the workspace. The shell walker and the
//! program classifiers both build on it; it imports neither.

use std::collections::{HashMap, HashSet};

use super::{Action, Category};

/// How deep substitutions, `bash -c` bodies and wrappers may nest before the engine gives up.
pub(super) const MAX_DEPTH: usize = 12;

/// How a finding may be overridden by a matching `[[rule]]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Replaced by the rule's decision.
    Normal,
    /// A path outside the workspace (or known only at run time): kept unless the rule's
    /// `paths` globs name it.
    Path,
    /// Kept whatever the rules say.
    Hard,
}

/// One thing the engine found out about a command.
#[derive(Debug, Clone)]
pub(crate) struct Fact {
    pub categories: Vec<Category>,
    /// An action that does not follow from the categories (rules, hard denials, `ask`).
    pub forced: Option<Action>,
    pub rule: String,
    pub reason: String,
    pub offending: Option<String>,
    /// The program the finding is about, for the read-only summary.
    pub program: Option<String>,
    pub kind: Kind,
}

/// A word after the expansions the policy can do statically.
#[derive(Debug, Clone)]
pub(crate) struct Arg {
    /// As written.
    pub raw: String,
    /// Quotes removed; `~` for `$HOME`; `.` for `$PWD`; known variables substituted.
    pub text: String,
    /// `text` after brace expansion (at least one element).
    pub alts: Vec<String>,
    /// Part of it is only known at run time.
    pub dynamic: bool,
    /// A substitution inside it talks to the network.
    pub networked: bool,
}

impl Arg {
    /// A literal word (argv requests: no shell, so no expansion).
    pub fn literal(s: &str) -> Arg {
        Arg {
            raw: s.to_string(),
            text: s.to_string(),
            alts: vec![s.to_string()],
            dynamic: false,
            networked: false,
        }
    }

    /// A word whose value is only known at run time.
    pub fn opaque(raw: &str) -> Arg {
        Arg {
            raw: raw.to_string(),
            text: raw.to_string(),
            alts: vec![raw.to_string()],
            dynamic: true,
            networked: false,
        }
    }

    /// A derived word (part of another), keeping its run-time flags.
    pub fn derived(&self, text: &str) -> Arg {
        Arg {
            raw: text.to_string(),
            text: text.to_string(),
            alts: vec![text.to_string()],
            dynamic: self.dynamic,
            networked: self.networked,
        }
    }

    /// Static text, if the whole word is known.
    pub fn known(&self) -> Option<&str> {
        (!self.dynamic).then_some(self.text.as_str())
    }

    /// Whether this is a static option word (`-x`, `--name`).
    pub fn is_flag(&self) -> bool {
        !self.dynamic && self.text.len() > 1 && self.text.starts_with('-')
    }
}

/// The working directory the walk is at.
#[derive(Debug, Clone)]
pub(super) enum Cwd {
    /// Inside the workspace, as path components.
    Known(Vec<String>),
    /// A `cd` left the workspace through this token.
    Outside(String),
    /// A `cd` to a directory known only at run time.
    Unknown,
}

/// Shell state that matters for classification.
#[derive(Debug, Clone)]
pub(super) struct Scope {
    pub cwd: Cwd,
    /// Variables with a statically known value.
    pub vars: HashMap<String, Arg>,
    /// `$0`, `$1`, … when known (`sh -c BODY NAME ARGS…`).
    pub positional: Vec<Arg>,
    pub functions: HashSet<String>,
}

impl Scope {
    pub fn new(cwd: &str) -> Scope {
        let mut parts: Vec<String> = Vec::new();
        for c in cwd.split('/') {
            match c {
                "" | "." => {}
                ".." => {
                    parts.pop();
                }
                c => parts.push(c.to_string()),
            }
        }
        Scope {
            cwd: Cwd::Known(parts),
            vars: HashMap::new(),
            positional: Vec::new(),
            functions: HashSet::new(),
        }
    }
}

/// Where a command's standard input comes from.
#[derive(Debug, Clone)]
pub(super) enum Stdin {
    /// The caller's (a terminal for an interactive program).
    Inherit,
    /// A pipe from earlier commands; `networked` if any of them talks to the network.
    Pipe { networked: bool },
    /// A file (`< file`).
    File,
    /// Text known statically (here-document, here-string, `echo … |`).
    Code(String),
    /// Text known only at run time (`<<< "$X"`, `< <(cmd)`).
    Dynamic { networked: bool },
}

/// How a path is used, for messages and for run-time targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Read,
    Write,
    Delete,
    Cd,
    Exec,
    /// A symlink's target: where the link will point.
    LinkTo,
}

impl Role {
    pub(super) fn verb(self) -> &'static str {
        match self {
            Role::Read => "reads",
            Role::Write => "writes",
            Role::Delete => "deletes",
            Role::Cd => "changes directory to",
            Role::Exec => "runs",
            Role::LinkTo => "points a symlink at",
        }
    }
}

/// Where a path resolves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Resolved {
    /// Inside the workspace, as a workspace path without the leading `/`.
    Inside(String),
    /// A harmless device such as `/dev/null`.
    Harmless,
    /// Outside the workspace, and why.
    Outside(String),
    /// Relative to a directory known only at run time.
    Unknown,
}

const HARMLESS_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/stdin",
    "/dev/stdout",
    "/dev/stderr",
    "/dev/tty",
];

/// Directories whose programs may be named by absolute path as the command word.
pub(super) const SYSTEM_BIN_DIRS: &[&str] = &[
    "/bin/",
    "/usr/bin/",
    "/usr/local/bin/",
    "/sbin/",
    "/usr/sbin/",
    "/usr/local/sbin/",
    "/opt/homebrew/bin/",
];

/// Resolve a path word against the workspace cwd.
pub(super) fn resolve(text: &str, cwd: &Cwd) -> Resolved {
    if text == "~" || text.starts_with("~/") {
        return Resolved::Outside("the home directory, outside the workspace".into());
    }
    if text.starts_with('~') {
        return Resolved::Outside("a home directory outside the workspace".into());
    }
    if text.starts_with('/') {
        if HARMLESS_DEVICES.contains(&text)
            || text.starts_with("/dev/fd/")
            || text.starts_with("/proc/self/fd/")
        {
            return Resolved::Harmless;
        }
        return Resolved::Outside("an absolute host path outside the workspace".into());
    }
    let mut parts = match cwd {
        Cwd::Known(p) => p.clone(),
        Cwd::Outside(tok) => {
            return Resolved::Outside(format!(
                "relative to `{tok}`, which is outside the workspace"
            ));
        }
        Cwd::Unknown => return Resolved::Unknown,
    };
    for c in text.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Resolved::Outside("it climbs above the workspace root".into());
                }
            }
            c => parts.push(c.to_string()),
        }
    }
    Resolved::Inside(parts.join("/"))
}

/// The directory `cd ARG` leads to.
pub(super) fn chdir(cwd: &Cwd, arg: &Arg) -> Cwd {
    if arg.dynamic && !(arg.text.starts_with('/') || arg.text.starts_with('~')) {
        return Cwd::Unknown;
    }
    match resolve(&arg.text, cwd) {
        Resolved::Inside(p) => Cwd::Known(
            p.split('/')
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
        ),
        Resolved::Unknown => Cwd::Unknown,
        Resolved::Harmless | Resolved::Outside(_) => Cwd::Outside(arg.raw.clone()),
    }
}

/// Brace expansion (`{a,b}` → `a`, `b`; sequences `{1..3}` are left alone), at most 64
/// results.
pub(super) fn expand_braces(text: &str) -> Vec<String> {
    fn go(text: &str, out: &mut Vec<String>, budget: &mut usize) {
        if *budget == 0 {
            out.push(text.to_string());
            return;
        }
        let bytes = text.as_bytes();
        for (open, _) in text.char_indices().filter(|(_, c)| *c == '{') {
            let mut depth = 0;
            let mut commas = Vec::new();
            let mut close = None;
            for (j, c) in text[open..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            close = Some(open + j);
                            break;
                        }
                    }
                    ',' if depth == 1 => commas.push(open + j),
                    _ => {}
                }
            }
            let Some(close) = close else { continue };
            if commas.is_empty() || (open > 0 && bytes[open - 1] == b'$') {
                continue;
            }
            let mut bounds = vec![open];
            bounds.extend(&commas);
            bounds.push(close);
            for w in bounds.windows(2) {
                let piece = &text[w[0] + 1..w[1]];
                let s = format!("{}{}{}", &text[..open], piece, &text[close + 1..]);
                *budget = budget.saturating_sub(1);
                go(&s, out, budget);
            }
            return;
        }
        out.push(text.to_string());
    }
    let mut out = Vec::new();
    let mut budget = 64;
    go(text, &mut out, &mut budget);
    out.dedup();
    out
}

/// Whether a value looks like a path worth checking (absolute, home, or climbing).
pub(super) fn looks_like_path(v: &str) -> bool {
    v.starts_with('/')
        || v.starts_with('~')
        || v.starts_with("file://")
        || v == ".."
        || v.starts_with("../")
        || v.contains("/../")
        || v.ends_with("/..")
}

pub(super) fn short(s: &str) -> String {
    let one_line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > 60 {
        let cut: String = one_line.chars().take(57).collect();
        format!("{cut}…")
    } else {
        one_line
    }
}

/// `prog arg1 arg2` as written, shortened for messages.
pub(super) fn snippet(args: &[Arg]) -> String {
    short(
        &args
            .iter()
            .map(|a| a.raw.as_str())
            .collect::<Vec<_>>()
            .join(" "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces() {
        assert_eq!(expand_braces("{/,x}"), vec!["/", "x"]);
        assert_eq!(expand_braces("a{b,c}d"), vec!["abd", "acd"]);
        assert_eq!(expand_braces("{1..3}"), vec!["{1..3}"]);
        assert_eq!(expand_braces("plain"), vec!["plain"]);
    }

    #[test]
    fn resolving() {
        let root = Cwd::Known(vec![]);
        let src = Cwd::Known(vec!["src".into()]);
        assert_eq!(resolve("a/b", &root), Resolved::Inside("a/b".into()));
        assert!(matches!(resolve("..", &root), Resolved::Outside(_)));
        assert_eq!(resolve("..", &src), Resolved::Inside(String::new()));
        assert!(matches!(resolve("../..", &src), Resolved::Outside(_)));
        assert_eq!(resolve("/dev/null", &root), Resolved::Harmless);
        assert!(matches!(
            resolve("/etc/passwd", &root),
            Resolved::Outside(_)
        ));
        assert!(matches!(resolve("~/.ssh", &root), Resolved::Outside(_)));
    }
}
