//! What counts as secret during a proxied run, and how it is recognised: paths the mount
//! hides (by name, and PEM files by the private key inside them) and environment variables
//! withheld from the command (by name, by the words of the name, by credentials in a URL
//! value). The policy file says which patterns (`[secrets]`); this module matches them.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::error::{Error, Result};
use crate::model::path::VPath;

/// How much of a file the private-key check reads: enough to find a key stored after a
/// certificate chain of a few certificates (a combined `cert + key` PEM), little enough
/// that a lookup stays cheap.
pub const KEY_SNIFF_BYTES: usize = 16 * 1024;

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

/// Paths hidden from every process using a proxied run's mount. A glob is tried on every
/// path from the root down to the entry (`a`, `a/b`, …, without the leading `/`) and on
/// every name along the way, so a hidden directory hides everything below it.
#[derive(Debug, Clone, Default)]
pub struct SecretPaths {
    /// `[secrets] paths`: hidden by name.
    names: Vec<String>,
    /// `[secrets] private_key_paths`: hidden when the file holds a private key.
    private_keys: Vec<String>,
    name_set: Option<GlobSet>,
    key_set: Option<GlobSet>,
}

/// Two sets hide the same paths when they were made from the same patterns.
impl PartialEq for SecretPaths {
    fn eq(&self, other: &Self) -> bool {
        self.names == other.names && self.private_keys == other.private_keys
    }
}

impl SecretPaths {
    /// `names` hide what they match; `private_keys` hide a regular file they match only
    /// when [`holds_private_key`] says so about its first [`KEY_SNIFF_BYTES`].
    pub fn new(names: Vec<String>, private_keys: Vec<String>) -> Result<SecretPaths> {
        Ok(SecretPaths {
            name_set: compile(&names, "paths", false)?,
            key_set: compile(&private_keys, "private_key_paths", false)?,
            names,
            private_keys,
        })
    }

    /// Whether nothing is secret.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty() && self.private_keys.is_empty()
    }

    /// The `[secrets] paths` globs.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The `[secrets] private_key_paths` globs.
    pub fn private_key_globs(&self) -> &[String] {
        &self.private_keys
    }

    /// Whether `path`, or a directory above it, is secret by its name.
    pub fn hides_by_name(&self, path: &VPath) -> bool {
        if self.name_set.is_none() {
            return false;
        }
        let mut cur = String::new();
        for comp in path.components() {
            if !cur.is_empty() {
                cur.push('/');
            }
            cur.push_str(comp);
            if is_match(&self.name_set, &cur) || is_match(&self.name_set, comp) {
                return true;
            }
        }
        false
    }

    /// Whether the file at `path` is hidden if it holds a private key: the caller reads
    /// its first [`KEY_SNIFF_BYTES`] and asks [`holds_private_key`].
    pub fn checks_content(&self, path: &VPath) -> bool {
        self.key_set.is_some()
            && (is_match(&self.key_set, path.as_str()) || is_match(&self.key_set, path.name()))
    }
}

impl SecretPaths {
    /// A short text equal for two sets made from the same patterns (a cache key part).
    pub fn fingerprint(&self) -> String {
        let mut h = blake3::Hasher::new();
        for list in [&self.names, &self.private_keys] {
            for p in list {
                h.update(p.as_bytes());
                h.update(b"\0");
            }
            h.update(b"\x01");
        }
        h.finalize().to_hex()[..16].to_string()
    }

    /// Whether `path` (whose node is `node`, if the caller has it) is a secret in the state
    /// `view` reads: by name, or a file of a content-checked name that holds a private key.
    pub fn refuses(
        &self,
        view: &crate::model::View<'_>,
        path: &VPath,
        node: Option<&crate::model::node::Node>,
    ) -> crate::error::Result<bool> {
        if self.is_empty() {
            return Ok(false);
        }
        let node = match node {
            Some(n) => Some(n.clone()),
            None => view.find(path)?,
        };
        if self.refuses_one(view, path, node.as_ref())? {
            return Ok(true);
        }
        // A hard-linked file is a secret if any of its names is: look for the others (a
        // walk of the tree, paid only for hard-linked files).
        let Some(link) = node.as_ref().and_then(|n| n.link).filter(|l| l.nlink > 1) else {
            return Ok(false);
        };
        let mut secret = false;
        view.walk(&VPath::root(), &mut |p, n| {
            if !secret
                && p != path
                && n.link.is_some_and(|l| l.inode == link.inode)
                && self.refuses_one(view, p, Some(n))?
            {
                secret = true;
            }
            Ok(())
        })?;
        Ok(secret)
    }

    /// `refuses` for this one name of a file.
    fn refuses_one(
        &self,
        view: &crate::model::View<'_>,
        path: &VPath,
        node: Option<&crate::model::node::Node>,
    ) -> crate::error::Result<bool> {
        if self.hides_by_name(path) {
            return Ok(true);
        }
        if !self.checks_content(path) {
            return Ok(false);
        }
        let Some(node) = node.filter(|n| n.is_file()) else {
            return Ok(false);
        };
        let mut prefix = vec![0u8; KEY_SNIFF_BYTES];
        let n = view.read_content(node, 0, &mut prefix)?;
        Ok(holds_private_key(&prefix[..n]))
    }

    /// For an agent-facing read or write of `raw` (as of checkpoint `at`, or live): the
    /// path, or a typed `secret_refused` when it is a secret or leads to one.
    pub fn check_agent_access(
        &self,
        ws: &crate::model::Workspace,
        raw: &str,
        at: Option<&str>,
    ) -> crate::error::Result<VPath> {
        let path = ws.resolve_path(raw)?;
        if ws.read_at(at, |v| self.refuses_read(v, &path))? {
            return Err(crate::error::Error::SecretRefused {
                path: path.display(),
            });
        }
        Ok(path)
    }

    /// Whether reading `path` would give a secret's content: the path itself, or where its
    /// symlinks lead (`notes.txt -> .env`), is a secret.
    pub fn refuses_read(
        &self,
        view: &crate::model::View<'_>,
        path: &VPath,
    ) -> crate::error::Result<bool> {
        if self.refuses(view, path, None)? {
            return Ok(true);
        }
        match view.follow(path) {
            Ok((resolved, node)) => self.refuses(view, &resolved, Some(&node)),
            // Nothing to read there: the read reports that itself.
            Err(_) => Ok(false),
        }
    }
}

/// Whether `prefix`, the start of a file, holds a PEM private key: a line
/// `-----BEGIN … PRIVATE KEY-----` (PKCS#8 `PRIVATE KEY`, `ENCRYPTED PRIVATE KEY`, `RSA`,
/// `EC`, `DSA`, `OPENSSH`, the PGP `PRIVATE KEY BLOCK`, the SSH2 `---- BEGIN … ----` form).
/// Certificates, CA bundles and public keys are not.
pub fn holds_private_key(prefix: &[u8]) -> bool {
    prefix.split(|b| *b == b'\n').any(|line| {
        let line = line.trim_ascii();
        if !line.starts_with(b"----") {
            return false;
        }
        let dashes = line.iter().take_while(|b| matches!(b, b'-' | b' ')).count();
        let label = &line[dashes..];
        label.starts_with(b"BEGIN ") && contains(label, b"PRIVATE KEY")
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
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
    fn pem_private_keys_are_told_from_certificates() {
        for label in [
            "PRIVATE KEY",
            "RSA PRIVATE KEY",
            "EC PRIVATE KEY",
            "DSA PRIVATE KEY",
            "OPENSSH PRIVATE KEY",
            "ENCRYPTED PRIVATE KEY",
            "PGP PRIVATE KEY BLOCK",
        ] {
            let pem = format!("-----BEGIN {label}-----\nMIIB\n-----END {label}-----\n");
            assert!(holds_private_key(pem.as_bytes()), "{label}");
        }
        assert!(holds_private_key(
            b"---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----\r\nxx\r\n"
        ));
        // openssl pkcs12 output puts attributes first; a combined file has the cert first.
        assert!(holds_private_key(
            b"Bag Attributes\n    localKeyID: 01\n-----BEGIN CERTIFICATE-----\nMII\n-----END CERTIFICATE-----\n-----BEGIN EC PRIVATE KEY-----\n"
        ));
        for text in [
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
            "# Issuer: CN=GlobalSign Root CA\n-----BEGIN CERTIFICATE-----\n",
            "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----\n",
            "-----BEGIN X509 CRL-----\n",
            "the words PRIVATE KEY in prose\n",
            "",
        ] {
            assert!(!holds_private_key(text.as_bytes()), "{text}");
        }
    }

    #[test]
    fn names_hide_directories_and_everything_below() {
        let s =
            SecretPaths::new(vec![".ssh/".into(), "id_rsa".into()], vec!["*.pem".into()]).unwrap();
        let p = |s: &str| VPath::parse(s).unwrap();
        assert!(s.hides_by_name(&p("/.ssh")));
        assert!(s.hides_by_name(&p("/home/.ssh/config")));
        assert!(s.hides_by_name(&p("/deploy/id_rsa")));
        assert!(!s.hides_by_name(&p("/deploy/id_rsa.pub")));
        assert!(!s.hides_by_name(&p("/src/id_rsa_parser.rs")));
        assert!(s.checks_content(&p("/a/b/ca.pem")));
        assert!(!s.checks_content(&p("/a/b/ca.crt")));
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
