//! `find` and `grep` over a workspace: walk the live tree (or a checkpoint) and match names,
//! types, sizes or file contents.

use serde::Serialize;

use crate::error::{Error, Result};
use crate::model::Workspace;
use crate::model::path::VPath;

/// A size filter: `+N` (more than), `-N` (less than) or `N` (exactly), in bytes with an
/// optional `k`, `M` or `G` suffix (powers of 1024).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeFilter {
    Over(u64),
    Under(u64),
    Exactly(u64),
}

impl std::str::FromStr for SizeFilter {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::invalid(format!(
                "bad size `{s}`: use +N, -N or N with optional k, M, G"
            ))
        };
        let (ctor, rest): (fn(u64) -> SizeFilter, &str) = match s.as_bytes().first() {
            Some(b'+') => (SizeFilter::Over, &s[1..]),
            Some(b'-') => (SizeFilter::Under, &s[1..]),
            _ => (SizeFilter::Exactly, s),
        };
        let (num, mult) = match rest.chars().last() {
            Some('k' | 'K') => (&rest[..rest.len() - 1], 1024),
            Some('M') => (&rest[..rest.len() - 1], 1024 * 1024),
            Some('G') => (&rest[..rest.len() - 1], 1024 * 1024 * 1024),
            _ => (rest, 1),
        };
        let n: u64 = num.parse().map_err(|_| bad())?;
        Ok(ctor(n.saturating_mul(mult)))
    }
}

impl SizeFilter {
    fn matches(&self, size: u64) -> bool {
        match *self {
            SizeFilter::Over(n) => size > n,
            SizeFilter::Under(n) => size < n,
            SizeFilter::Exactly(n) => size == n,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct FindQuery {
    /// Glob on the entry's name (e.g. `*.rs`).
    pub name: Option<String>,
    /// `f`, `d`, `l` or `p` (fifo).
    pub kind: Option<char>,
    pub size: Option<SizeFilter>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct FoundEntry {
    pub path: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub size: u64,
}

pub fn find(ws: &Workspace, root: &VPath, q: &FindQuery) -> Result<Vec<FoundEntry>> {
    let glob = match &q.name {
        Some(p) => Some(
            globset::Glob::new(p)
                .map_err(|e| Error::invalid(format!("bad pattern `{p}`: {e}")))?
                .compile_matcher(),
        ),
        None => None,
    };
    if let Some(k) = q.kind
        && !matches!(k, 'f' | 'd' | 'l' | 'p' | 'c' | 'b' | 's')
    {
        return Err(Error::invalid(format!(
            "bad type `{k}`: use f, d, l, p, c, b or s"
        )));
    }
    ws.read(|view| {
        let mut out = Vec::new();
        view.walk(root, &mut |path, node| {
            let type_char = match node.kind.type_letter() {
                '-' => 'f',
                letter => letter,
            };
            let ok = !path.is_root()
                && glob.as_ref().is_none_or(|g| g.is_match(path.name()))
                && q.kind.is_none_or(|k| k == type_char)
                && q.size.is_none_or(|s| s.matches(node.size()));
            if ok {
                out.push(FoundEntry {
                    path: path.display(),
                    kind: node.type_name().into(),
                    size: node.size(),
                });
            }
            Ok(())
        })?;
        Ok(out)
    })
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct GrepMatch {
    pub path: String,
    /// 1-based line number.
    pub line: u64,
    pub text: String,
}

/// Search regular files under `root` for `pattern`. Binary files (a NUL byte in the first
/// 8 KiB) are skipped.
pub fn grep(
    ws: &Workspace,
    pattern: &str,
    root: &VPath,
    ignore_case: bool,
) -> Result<Vec<GrepMatch>> {
    let re = regex::RegexBuilder::new(pattern)
        .case_insensitive(ignore_case)
        .build()
        .map_err(|e| Error::invalid(format!("bad regex: {e}")))?;
    ws.read(|view| {
        let mut out = Vec::new();
        view.walk(root, &mut |path, node| {
            if !node.is_file() || node.size() > crate::model::limits::MAX_TEXT_BYTES {
                return Ok(());
            }
            let data = view.read_node(node)?;
            if data[..data.len().min(8192)].contains(&0) {
                return Ok(());
            }
            let text = String::from_utf8_lossy(&data);
            for (i, line) in text.lines().enumerate() {
                if re.is_match(line) {
                    out.push(GrepMatch {
                        path: path.display(),
                        line: i as u64 + 1,
                        text: line.to_string(),
                    });
                }
            }
            Ok(())
        })?;
        Ok(out)
    })
}
