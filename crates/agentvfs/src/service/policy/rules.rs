//! The TOML policy file: its serde shape, and `[[rule]]` entries compiled into matchers.

use std::collections::BTreeMap;

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use serde::Deserialize;

use super::{Action, Category};
use crate::error::{Error, Result};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PolicyFile {
    #[serde(default)]
    pub version: Option<i64>,
    #[serde(default)]
    pub builtin_rules: Option<bool>,
    #[serde(default)]
    pub examples: Vec<ExampleSpec>,
    #[serde(default)]
    pub actions: BTreeMap<Category, Action>,
    #[serde(default)]
    pub secrets: Option<SecretsSpec>,
    #[serde(default)]
    pub confinement: Option<ConfinementSpec>,
    #[serde(default)]
    pub sandbox: Option<SandboxSpec>,
    #[serde(default, rename = "rule")]
    pub rules: Vec<RuleSpec>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SecretsSpec {
    pub paths: Option<Vec<String>>,
    pub private_key_paths: Option<Vec<String>>,
    pub env: Option<Vec<String>>,
    pub env_words: Option<Vec<String>>,
    pub env_url_credentials: Option<bool>,
    pub env_allow: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ConfinementSpec {
    pub landlock: Option<bool>,
    pub offline: Option<super::Offline>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SandboxSpec {
    pub workspace_path: Option<String>,
    pub ro: Option<Vec<String>>,
    pub rw: Option<Vec<String>>,
    pub lower: Option<crate::service::sandbox::Lower>,
    pub tree_cache_mb: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn list(o: &Option<OneOrMany>) -> Vec<String> {
        match o {
            None => Vec::new(),
            Some(OneOrMany::One(s)) => vec![s.clone()],
            Some(OneOrMany::Many(v)) => v.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RuleSpec {
    pub name: toml::Spanned<String>,
    #[serde(default)]
    pub program: Option<OneOrMany>,
    #[serde(default)]
    pub subcommand: Option<OneOrMany>,
    #[serde(default)]
    pub flags: Vec<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub paths: Vec<String>,
    pub action: Action,
    #[serde(default)]
    pub category: Option<Category>,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub examples: Vec<ExampleSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ExampleSpec {
    pub command: String,
    #[serde(default)]
    pub action: Option<Action>,
    #[serde(default)]
    pub category: Option<Category>,
    #[serde(default)]
    pub cwd: Option<String>,
}

/// One example of a policy file, checked by `avfs policy test`.
#[derive(Debug, Clone)]
pub(crate) struct Example {
    pub command: String,
    pub action: Option<Action>,
    pub category: Option<Category>,
    pub cwd: String,
}

impl Example {
    pub(super) fn from_spec(e: &ExampleSpec, rule: &str) -> Result<Example> {
        if e.action.is_none() && e.category.is_none() {
            return Err(Error::invalid(format!(
                "policy file: rule `{rule}`: example `{}` needs an `action` or a `category` to check",
                e.command
            )));
        }
        Ok(Example {
            command: e.command.clone(),
            action: e.action,
            category: e.category,
            cwd: e.cwd.clone().unwrap_or_else(|| "/".into()),
        })
    }
}

/// The 1-based line of a byte offset.
pub(super) fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset.min(text.len()))
        .map_or(0, |t| t.matches('\n').count())
        + 1
}

/// A glob in the policy's syntax: `*` also matches `/`.
pub(super) fn glob(pattern: &str) -> std::result::Result<Glob, String> {
    GlobBuilder::new(pattern)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
        .map_err(|e| format!("invalid glob `{pattern}`: {e}"))
}

pub(super) fn globset(
    patterns: &[String],
    what: &str,
) -> std::result::Result<Option<GlobSet>, String> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        b.add(glob(p).map_err(|e| format!("{what}: {e}"))?);
    }
    b.build().map(Some).map_err(|e| format!("{what}: {e}"))
}

/// A compiled `[[rule]]`.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    pub name: String,
    program: Option<GlobSet>,
    subcommand: Option<GlobSet>,
    flags: Vec<String>,
    args: Option<GlobSet>,
    paths: Option<GlobSet>,
    pub action: Action,
    pub category: Option<Category>,
    pub reason: Option<String>,
}

/// What a rule is matched against: one layer of a simple command.
pub(super) struct Invocation<'a> {
    pub program: &'a str,
    pub subcommand: Option<&'a str>,
    /// The static arguments after the program, quotes removed.
    pub args: Vec<&'a str>,
    /// Path-like arguments: (as written, workspace path without the leading `/` if inside).
    pub paths: Vec<(String, Option<String>)>,
}

/// How a rule matched.
pub(super) struct RuleMatch {
    /// The token that made it match (a flag, argument, path or the program).
    pub offending: String,
    /// Path tokens the rule's `paths` globs name (their host-escape findings are waived).
    pub covered: Vec<String>,
}

impl Rule {
    pub(super) fn compile(r: &RuleSpec, index: usize, text: &str) -> Result<Rule> {
        let name = r.name.get_ref().clone();
        let line = line_of(text, r.name.span().start);
        let err = |msg: String| {
            Error::invalid(format!(
                "policy file: rule #{} `{name}` (line {line}): {msg}",
                index + 1
            ))
        };
        if name.trim().is_empty() {
            return Err(err("`name` must not be empty".into()));
        }
        let program = OneOrMany::list(&r.program);
        let subcommand = OneOrMany::list(&r.subcommand);
        if program.is_empty()
            && subcommand.is_empty()
            && r.flags.is_empty()
            && r.args.is_empty()
            && r.paths.is_empty()
        {
            return Err(err(
                "it has no criteria (program, subcommand, flags, args, paths); use program = \"*\" for a catch-all".into(),
            ));
        }
        for f in &r.flags {
            if !f.starts_with('-') || f == "-" || f == "--" {
                return Err(err(format!("flag `{f}` must look like `-x` or `--name`")));
            }
        }
        Ok(Rule {
            program: globset(&program, "program").map_err(err)?,
            subcommand: globset(&subcommand, "subcommand").map_err(err)?,
            flags: r.flags.clone(),
            args: globset(&r.args, "args").map_err(err)?,
            paths: globset(&r.paths, "paths").map_err(err)?,
            action: r.action,
            category: r.category,
            reason: r.reason.clone(),
            name,
        })
    }

    pub(super) fn matches(&self, inv: &Invocation) -> Option<RuleMatch> {
        let mut offending = inv.program.to_string();
        if let Some(p) = &self.program
            && !p.is_match(inv.program)
        {
            return None;
        }
        if let Some(s) = &self.subcommand {
            let sub = inv.subcommand?;
            if !s.is_match(sub) {
                return None;
            }
            offending = format!("{} {sub}", inv.program);
        }
        if !self.flags.is_empty() {
            let hit = inv
                .args
                .iter()
                .take_while(|a| **a != "--")
                .find(|a| self.flags.iter().any(|f| flag_matches(f, a)))?;
            offending = hit.to_string();
        }
        if let Some(g) = &self.args {
            let hit = inv.args.iter().find(|a| g.is_match(a))?;
            offending = hit.to_string();
        }
        let mut covered = Vec::new();
        if let Some(g) = &self.paths {
            for (tok, rel) in &inv.paths {
                let name = tok.trim_end_matches('/').rsplit('/').next().unwrap_or(tok);
                let stripped = tok.strip_prefix("./").unwrap_or(tok);
                if g.is_match(tok)
                    || g.is_match(stripped)
                    || g.is_match(name)
                    || rel.as_deref().is_some_and(|r| g.is_match(r))
                {
                    covered.push(tok.clone());
                }
            }
            offending = covered.first()?.clone();
        }
        Some(RuleMatch { offending, covered })
    }
}

/// Whether argument `arg` sets `flag`: equal, `--name=value`, or a short flag inside a bundle
/// (`-f` in `-rf`).
fn flag_matches(flag: &str, arg: &str) -> bool {
    if arg == flag {
        return true;
    }
    if let Some(long) = flag.strip_prefix("--") {
        return arg
            .strip_prefix("--")
            .and_then(|a| a.split_once('='))
            .is_some_and(|(n, _)| n == long);
    }
    let mut fc = flag.chars().skip(1);
    match (fc.next(), fc.next()) {
        (Some(c), None) => {
            arg.starts_with('-')
                && !arg.starts_with("--")
                && arg.len() > 2
                && arg[1..].chars().all(|x| x.is_ascii_alphabetic())
                && arg[1..].contains(c)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags() {
        assert!(flag_matches("-f", "-f"));
        assert!(flag_matches("-f", "-rf"));
        assert!(!flag_matches("-f", "--force"));
        assert!(flag_matches("--force", "--force"));
        assert!(flag_matches(
            "--force-with-lease",
            "--force-with-lease=main"
        ));
        assert!(!flag_matches("-f", "-n5"));
    }
}
