//! What counts as secret during a proxied run, and how it is recognised: environment
//! variables withheld from the command (by name, by the words of the name, by credentials
//! in a URL value). The policy file says which patterns (`[secrets]`); this module matches
//! them.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::error::{Error, Result};

fn compile(patterns: &[String], key: &str, case_insensitive: bool) -> Result<Option<GlobSet>> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let bad = |p: &str, e: globset::Error| {
        Error::invalid(format!(
            "policy file: [secrets] {key}: invalid glob `{p}`: {e}"
        ))
    };
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        let glob = GlobBuilder::new(p.trim_end_matches('/'))
            .literal_separator(false)
            .backslash_escape(true)
            .case_insensitive(case_insensitive)
            .build()
            .map_err(|e| bad(p, e))?;
        b.add(glob);
    }
    b.build()
        .map(Some)
        .map_err(|e| Error::invalid(format!("policy file: [secrets] {key}: {e}")))
}

fn is_match(set: &Option<GlobSet>, text: &str) -> bool {
    set.as_ref().is_some_and(|s| s.is_match(text))
}

/// Environment variables withheld from a proxied command.
#[derive(Debug, Clone, Default)]
pub struct SecretEnv {
    /// `[secrets] env`: name globs, any case.
    globs: Vec<String>,
    /// `[secrets] env_words`: lowercase words; a name with one of them is secret.
    words: Vec<String>,
    /// `[secrets] env_url_credentials`: a value that is a URL with credentials is secret.
    url_credentials: bool,
    /// `[secrets] env_allow`: names (globs, exact case) passed all the same.
    allow: Vec<String>,
    glob_set: Option<GlobSet>,
    allow_set: Option<GlobSet>,
}

impl SecretEnv {
    pub fn new(
        globs: Vec<String>,
        words: Vec<String>,
        url_credentials: bool,
        allow: Vec<String>,
    ) -> Result<SecretEnv> {
        for w in &words {
            if w.is_empty() || !w.chars().all(char::is_alphabetic) {
                return Err(Error::invalid(format!(
                    "policy file: [secrets] env_words: `{w}` is not a word: a name is split \
                     into words at everything but letters (`GH_PAT` is `gh`, `pat`), so only \
                     letters can match"
                )));
            }
        }
        Ok(SecretEnv {
            glob_set: compile(&globs, "env", true)?,
            allow_set: compile(&allow, "env_allow", false)?,
            words: words.iter().map(|w| w.to_lowercase()).collect(),
            globs,
            url_credentials,
            allow,
        })
    }

    pub fn globs(&self) -> &[String] {
        &self.globs
    }

    pub fn words(&self) -> &[String] {
        &self.words
    }

    pub fn url_credentials(&self) -> bool {
        self.url_credentials
    }

    pub fn allowed(&self) -> &[String] {
        &self.allow
    }

    /// Whether the variable `name=value` is withheld: its name matches a glob or has a
    /// secret word, or its value is a URL with credentials, and `env_allow` does not name it.
    pub fn withholds(&self, name: &str, value: &str) -> bool {
        let secret = is_match(&self.glob_set, name)
            || name_words(name).any(|w| self.words.iter().any(|s| s.eq_ignore_ascii_case(w)))
            || (self.url_credentials && has_url_credentials(value));
        secret && !is_match(&self.allow_set, name)
    }
}

/// The words of a variable name: runs of letters, also split where a lowercase letter meets
/// an uppercase one. `GH_PAT` is `GH`, `PAT`; `githubToken` is `github`, `Token`; `API_KEY2`
/// is `API`, `KEY`; `PATH` and `PYTHONPATH` are one word each.
pub fn name_words(name: &str) -> impl Iterator<Item = &str> {
    let mut words = Vec::new();
    let mut start = None;
    let mut prev_lower = false;
    for (i, c) in name.char_indices() {
        if !c.is_alphabetic() {
            if let Some(s) = start.take() {
                words.push(&name[s..i]);
            }
            prev_lower = false;
            continue;
        }
        match start {
            None => start = Some(i),
            Some(s) if prev_lower && c.is_uppercase() => {
                words.push(&name[s..i]);
                start = Some(i);
            }
            Some(_) => {}
        }
        prev_lower = c.is_lowercase();
    }
    if let Some(s) = start {
        words.push(&name[s..]);
    }
    words.into_iter()
}

/// Whether `value` holds a URL whose authority carries user information
/// (`scheme://user:pass@host`, `https://TOKEN@host`, `redis://:pass@host`).
pub fn has_url_credentials(value: &str) -> bool {
    let mut rest = value;
    while let Some(at) = rest.find("://") {
        let scheme_start = rest[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |i| i + 1);
        let scheme = &rest[scheme_start..at];
        let after = &rest[at + 3..];
        let authority_end = after
            .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace())
            .unwrap_or(after.len());
        let authority = &after[..authority_end];
        if scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && authority.rfind('@').is_some_and(|i| i > 0)
        {
            return true;
        }
        rest = after;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(name: &str) -> Vec<&str> {
        name_words(name).collect()
    }

    #[test]
    fn names_split_into_words() {
        assert_eq!(words("GH_PAT"), ["GH", "PAT"]);
        assert_eq!(words("githubToken"), ["github", "Token"]);
        assert_eq!(words("API_KEY2"), ["API", "KEY"]);
        assert_eq!(words("PATH"), ["PATH"]);
        assert_eq!(words("PYTHONPATH"), ["PYTHONPATH"]);
        assert_eq!(
            words("npm_config__authToken"),
            ["npm", "config", "auth", "Token"]
        );
        assert_eq!(words("__"), Vec::<&str>::new());
    }

    #[test]
    fn url_credentials_are_found_in_the_authority_only() {
        for v in [
            "postgres://u:pass@host/db",
            "https://ghp_x@github.com/o/r.git",
            "redis://:secret@cache:6379/0",
            "mirror https://a:b@pypi.example/simple",
        ] {
            assert!(has_url_credentials(v), "{v}");
        }
        for v in [
            "https://registry.npmjs.org/@babel%2fcore",
            "https://example.com/?to=a@b.example",
            "git@github.com:o/r.git",
            "a@b.example",
            "https://@host/",
            "://u:p@host",
            "/usr/bin:/bin",
        ] {
            assert!(!has_url_credentials(v), "{v}");
        }
    }

    #[test]
    fn env_names_words_values_and_allow() {
        let env = SecretEnv::new(
            vec!["AWS_*".into()],
            vec!["token".into(), "pat".into()],
            true,
            vec!["CI_TOKEN".into()],
        )
        .unwrap();
        assert!(env.withholds("aws_region", "x"));
        assert!(env.withholds("my_token", "x"));
        assert!(env.withholds("GH_PAT", "x"));
        assert!(env.withholds("DATABASE_URL", "postgres://u:p@h/db"));
        assert!(!env.withholds("CI_TOKEN", "x"));
        assert!(!env.withholds("PATH", "/usr/bin"));
        assert!(!env.withholds("TOKENIZERS_PARALLELISM", "false"));
        let err = SecretEnv::new(vec![], vec!["api_key".into()], false, vec![]).unwrap_err();
        assert!(err.to_string().contains("api_key"), "{err}");
    }
}
