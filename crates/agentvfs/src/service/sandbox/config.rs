//! What a sandboxed run is asked to be: its mode (`--mode`), its lower layer (`--lower`),
//! what the envelope says of it, and the policy's `[sandbox]` table.

use std::path::{Path, PathBuf};

use super::{join, trees};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How a proxied command's file system is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// `overlay` where the sandbox can be made, else `fuse`.
    Auto,
    /// A kernel overlay: the fork's starting state read-only below, the command's writes in
    /// a native directory above, ingested into the fork when it ends.
    Overlay,
    /// The fork served over FUSE, every call a round trip to avfs.
    Fuse,
    /// The fork copied to a native directory, the differences ingested afterwards.
    Copy,
}

impl Mode {
    /// The spellings `FromStr` takes, as the CLI lists them.
    pub const NAMES: [&'static str; 4] = ["auto", "overlay", "fuse", "copy"];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Overlay => "overlay",
            Mode::Fuse => "fuse",
            Mode::Copy => "copy",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(Mode::Auto),
            "overlay" => Ok(Mode::Overlay),
            "fuse" => Ok(Mode::Fuse),
            "copy" => Ok(Mode::Copy),
            _ => Err(Error::invalid(format!(
                "mode is one of auto, overlay, fuse or copy, not `{s}`"
            ))),
        }
    }
}

/// Whether a command ran in its own namespace.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SandboxKind {
    /// Its own mount and pid namespaces, on a root assembled for it.
    Namespace,
    /// The host's own view of the file system (see `reason`).
    #[default]
    None,
}

/// What the envelope says of the sandbox a command ran in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SandboxReport {
    pub kind: SandboxKind,
    /// Why there was no namespace.
    pub reason: Option<String>,
    /// Where the workspace was inside the sandbox.
    pub workspace_path: Option<String>,
    /// Host paths the command could read (at the same path).
    pub ro: Vec<String>,
    /// Host paths the command could write (at the same path).
    pub rw: Vec<String>,
    /// Paths the command wrote that the policy hides (secrets): not taken into the fork,
    /// which keeps its own.
    #[serde(default)]
    pub refused: Vec<String>,
    /// An overlay's lower layer: `fuse`, or `tree` with how the tree was had (`cached`,
    /// `updated` from the fork's previous tree, or `written` whole).
    #[serde(default)]
    pub lower: Option<String>,
}

impl SandboxReport {
    pub fn none(reason: impl Into<String>) -> SandboxReport {
        SandboxReport {
            reason: Some(reason.into()),
            ..SandboxReport::default()
        }
    }
}

/// The host's system directories every sandbox reads.
pub(super) const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];

/// The policy's `[sandbox]` table: where the workspace appears and which host paths are
/// bound in besides the system directories.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxConfig {
    /// The workspace's path inside the sandbox (default `/workspace`).
    pub workspace_path: String,
    /// Host paths to bind read-only (`~` and `$VAR` are expanded; missing ones skipped).
    pub ro: Vec<String>,
    /// Host paths to bind writable.
    pub rw: Vec<String>,
    /// The overlay's lower layer: `tree` (the fork's state written out as a native
    /// directory, cached by root) or `fuse` (a read-only FUSE view of the root).
    pub lower: Lower,
    /// The most the tree cache keeps, in MiB.
    pub tree_cache_mb: u64,
}

/// Where an overlay's lower layer comes from (see BENCHMARKS.md for why `tree` is the
/// default).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Lower {
    /// The fork's state at the command's root, materialized on the host disk and cached
    /// by root id (`trees`).
    #[default]
    Tree,
    /// A read-only FUSE view of the root, served by this process.
    Fuse,
}

impl Lower {
    pub const NAMES: [&'static str; 2] = ["tree", "fuse"];
}

impl std::str::FromStr for Lower {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "tree" => Ok(Lower::Tree),
            "fuse" => Ok(Lower::Fuse),
            _ => Err(Error::invalid(format!(
                "lower is one of tree or fuse, not `{s}`"
            ))),
        }
    }
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            workspace_path: "/workspace".into(),
            ro: vec![
                "$CARGO_HOME".into(),
                "$RUSTUP_HOME".into(),
                "~/.cargo".into(),
                "~/.rustup".into(),
            ],
            rw: Vec::new(),
            lower: Lower::default(),
            tree_cache_mb: trees::DEFAULT_BUDGET_MB,
        }
    }
}

impl SandboxConfig {
    /// Check the table: an absolute, normal workspace path that is not a system directory.
    pub fn validate(&self) -> Result<()> {
        let p = Path::new(&self.workspace_path);
        let normal = p.is_absolute()
            && p.components().all(|c| {
                matches!(
                    c,
                    std::path::Component::RootDir | std::path::Component::Normal(_)
                )
            })
            && p != Path::new("/");
        if !normal {
            return Err(Error::invalid(format!(
                "sandbox workspace_path must be an absolute path below /, without `.` or `..`: `{}`",
                self.workspace_path
            )));
        }
        let reserved = ["/proc", "/dev", "/tmp", "/run", join::STAGE]
            .iter()
            .chain(SYSTEM_DIRS)
            .find(|d| p.starts_with(d));
        if let Some(d) = reserved {
            return Err(Error::invalid(format!(
                "sandbox workspace_path `{}` is inside {d}, which the sandbox provides itself",
                self.workspace_path
            )));
        }
        Ok(())
    }
}

/// Expand `~` and `$VAR`/`${VAR}` (from `env`) in a policy path; `None` when a variable is
/// unset or the result is not absolute.
pub(super) fn expand(raw: &str, env: &[(String, String)]) -> Option<PathBuf> {
    let var = |name: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
    };
    let mut s = raw.to_string();
    if let Some(rest) = s.strip_prefix('~') {
        s = format!("{}{rest}", var("HOME")?);
    }
    if let Some(rest) = s.strip_prefix('$') {
        let (name, tail) = match rest.strip_prefix('{') {
            Some(r) => {
                let end = r.find('}')?;
                (&r[..end], &r[end + 1..])
            }
            None => {
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                (&rest[..end], &rest[end..])
            }
        };
        s = format!("{}{tail}", var(name)?);
    }
    let p = PathBuf::from(s);
    p.is_absolute().then_some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn policy_paths_expand_home_and_variables_or_are_skipped() {
        let e = env(&[("HOME", "/home/a"), ("CARGO_HOME", "/opt/cargo")]);
        assert_eq!(expand("~/.cargo", &e), Some("/home/a/.cargo".into()));
        assert_eq!(expand("$CARGO_HOME", &e), Some("/opt/cargo".into()));
        assert_eq!(
            expand("${CARGO_HOME}/bin", &e),
            Some("/opt/cargo/bin".into())
        );
        assert_eq!(expand("$RUSTUP_HOME", &e), None, "unset");
        assert_eq!(expand("relative/path", &e), None, "not absolute");
        assert_eq!(expand("/srv/cache", &e), Some("/srv/cache".into()));
    }

    #[test]
    fn the_workspace_path_must_be_absolute_and_not_a_system_directory() {
        let with = |p: &str| SandboxConfig {
            workspace_path: p.into(),
            ..SandboxConfig::default()
        };
        assert!(with("/workspace").validate().is_ok());
        assert!(with("/home/me/project").validate().is_ok());
        for bad in [
            "workspace",
            "/",
            "/.avfs",
            "/.avfs/l",
            "/usr/src/x",
            "/proc",
            "/a/../b",
            "/etc",
            "/tmp/w",
        ] {
            let err = with(bad).validate().expect_err(bad);
            assert_eq!(err.kind(), "invalid_argument", "{bad}");
        }
    }

    #[test]
    fn modes_parse_and_refuse_other_words() {
        for (i, name) in Mode::NAMES.iter().enumerate() {
            let m: Mode = name.parse().unwrap();
            assert_eq!(serde_json::to_value(m).unwrap(), Mode::NAMES[i]);
        }
        assert_eq!(
            "bogus".parse::<Mode>().unwrap_err().kind(),
            "invalid_argument"
        );
    }
}
