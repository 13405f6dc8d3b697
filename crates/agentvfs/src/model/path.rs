//! Paths inside a workspace: normalized, relative to the workspace root, never escaping it.

use std::fmt;

use crate::error::{Error, Result};

/// A normalized path inside a workspace. The root is the empty path; components are joined
/// with `/` and never contain `.`, `..`, empty names or NUL bytes.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct VPath(String);

impl VPath {
    pub fn root() -> Self {
        VPath(String::new())
    }

    /// Parse a user-supplied path. A leading `/` means the workspace root; `.` and `..` are
    /// resolved lexically, and `..` past the root is an error rather than a silent clamp.
    pub fn parse(input: &str) -> Result<Self> {
        Self::parse_with_dirs(input).map(|(p, _)| p)
    }

    /// `parse`, plus the paths the input requires to be directories: each one a `..`
    /// steps back out of, and the path before a trailing `/`. A kernel resolving the input
    /// fails with ENOTDIR when one is a file (`f/..`, `f/`); lexical parsing alone would
    /// not notice.
    pub fn parse_with_dirs(input: &str) -> Result<(Self, Vec<VPath>)> {
        let invalid = |reason: &str| Error::InvalidPath {
            path: input.to_string(),
            reason: reason.to_string(),
        };
        if input.contains('\0') {
            return Err(invalid("contains a NUL byte"));
        }
        let mut parts: Vec<&str> = Vec::new();
        let mut dirs: Vec<VPath> = Vec::new();
        for comp in input.split('/') {
            match comp {
                "" | "." => {}
                ".." => {
                    if !parts.is_empty() {
                        dirs.push(VPath(parts.join("/")));
                    }
                    if parts.pop().is_none() {
                        return Err(invalid("`..` escapes the workspace root"));
                    }
                }
                c => {
                    if c.len() > 255 {
                        return Err(invalid("a component is longer than 255 bytes"));
                    }
                    parts.push(c)
                }
            }
        }
        let path = VPath(parts.join("/"));
        if input.ends_with('/') && !path.is_root() {
            dirs.push(path.clone());
        }
        Ok((path, dirs))
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// A path as the store keeps it (`as_str` of a parsed one), taken back without parsing.
    pub(crate) fn from_stored(stored: &str) -> Self {
        VPath(stored.to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The last component, or "" for the root.
    pub fn name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or("")
    }

    /// The parent directory; the root's parent is `None`.
    pub fn parent(&self) -> Option<VPath> {
        if self.is_root() {
            return None;
        }
        Some(match self.0.rfind('/') {
            Some(i) => VPath(self.0[..i].to_string()),
            None => VPath::root(),
        })
    }

    /// Append one component (which must already be a valid name).
    pub fn join(&self, name: &str) -> VPath {
        if self.is_root() {
            VPath(name.to_string())
        } else {
            VPath(format!("{}/{}", self.0, name))
        }
    }

    /// Components from the root down.
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/').filter(|c| !c.is_empty())
    }

    /// Every ancestor from the root down, excluding `self`.
    pub fn ancestors(&self) -> Vec<VPath> {
        let mut out = vec![VPath::root()];
        let mut cur = String::new();
        let comps: Vec<&str> = self.components().collect();
        for c in comps.iter().take(comps.len().saturating_sub(1)) {
            if !cur.is_empty() {
                cur.push('/');
            }
            cur.push_str(c);
            out.push(VPath(cur.clone()));
        }
        if self.is_root() {
            out.clear();
        }
        out
    }

    /// True if `self` is `other` or lies below it.
    pub fn starts_with(&self, other: &VPath) -> bool {
        other.is_root()
            || self.0 == other.0
            || (self.0.starts_with(&other.0) && self.0.as_bytes().get(other.0.len()) == Some(&b'/'))
    }

    /// Bounds (exclusive) of the paths strictly below `self` in `VPath` order, for range
    /// scans of sorted maps; `None` for the root, below which is everything.
    pub fn below_bounds(&self) -> Option<(VPath, VPath)> {
        // '0' is the byte after '/', so "p/" <= x < "p0" is exactly the subtree.
        (!self.is_root()).then(|| (VPath(format!("{}/", self.0)), VPath(format!("{}0", self.0))))
    }

    /// Re-root `self` from under `from` to under `to`.
    pub fn rebase(&self, from: &VPath, to: &VPath) -> VPath {
        let rest = &self.0[from.0.len()..];
        let rest = rest.trim_start_matches('/');
        if rest.is_empty() {
            to.clone()
        } else {
            to.join(rest)
        }
    }

    /// `/`-prefixed form for display.
    pub fn display(&self) -> String {
        format!("/{}", self.0)
    }
}

impl fmt::Display for VPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "/{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_and_rejects_escapes() {
        assert_eq!(VPath::parse("/a//b/./c/").unwrap().as_str(), "a/b/c");
        assert_eq!(VPath::parse("a/x/../b").unwrap().as_str(), "a/b");
        assert!(VPath::parse("/").unwrap().is_root());
        assert!(VPath::parse("../x").is_err());
        assert!(VPath::parse("a/../../x").is_err());
        assert!(VPath::parse("a\0b").is_err());
    }

    #[test]
    fn relations() {
        let p = VPath::parse("a/b/c").unwrap();
        assert_eq!(p.name(), "c");
        assert_eq!(p.parent().unwrap().as_str(), "a/b");
        let anc: Vec<String> = p
            .ancestors()
            .iter()
            .map(|a| a.as_str().to_string())
            .collect();
        assert_eq!(anc, vec!["", "a", "a/b"]);
        assert!(p.starts_with(&VPath::parse("a/b").unwrap()));
        assert!(
            !VPath::parse("a/bc")
                .unwrap()
                .starts_with(&VPath::parse("a/b").unwrap())
        );
        let (lo, hi) = VPath::parse("a/b").unwrap().below_bounds().unwrap();
        let inside = |x: &str| {
            let x = VPath::parse(x).unwrap();
            lo <= x && x < hi
        };
        assert!(inside("a/b/c") && inside("a/b/c/d"));
        assert!(!inside("a/b") && !inside("a/bc") && !inside("a/b-c") && !inside("a/c"));
        assert!(VPath::root().below_bounds().is_none());
        let moved = p.rebase(&VPath::parse("a").unwrap(), &VPath::parse("z").unwrap());
        assert_eq!(moved.as_str(), "z/b/c");
    }
}
