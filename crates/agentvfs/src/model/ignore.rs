//! A workspace's ignore rules, read from one of its states: `.gitignore` and `.avfsignore`
//! in any directory (`.avfsignore` wins over `.gitignore` in the same directory, a deeper
//! directory over a shallower one), `.git/info/exclude`, and `.git/` itself, which git
//! never tracks either. Diffs, merges, `apply` and the proxy's envelope leave ignored
//! changes out by default (a virtualenv, `node_modules`, build output) and count them per
//! top directory instead; the files stay in the fork and in its history, so rollback and
//! undo still cover them.
//!
//! Cost: the rules of a directory are read once per use, and only for directories on the
//! paths asked about, so filtering a diff costs O(changes × depth), never O(workspace).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use super::diff::{Change, ChangeStatus};
use super::path::VPath;
use super::view::View;
use crate::error::Result;

/// The per-directory files holding rules, in rising precedence.
pub const RULE_FILES: [&str; 2] = [".gitignore", ".avfsignore"];
/// Rule files larger than this are not read (a generated file, not hand-written rules).
const MAX_RULES_BYTES: u64 = 1 << 20;

/// Ignored changes left out of a listing, counted per top-level name (`.venv`,
/// `node_modules`, or the file itself at the top).
pub type IgnoredCounts = BTreeMap<String, u64>;

/// The ignore rules of one state, read lazily from its view.
pub struct IgnoreRules<'v, 'a> {
    view: &'v View<'a>,
    /// Each directory's own rules (`None`: it has no rule files).
    dirs: RefCell<HashMap<VPath, Option<Gitignore>>>,
    /// `.git/info/exclude`, below every directory's rules.
    exclude: RefCell<Option<Option<Gitignore>>>,
    /// Directories already found ignored or not.
    verdicts: RefCell<HashMap<VPath, bool>>,
}

/// Where `path` is, for the matcher: rules match `/`-rooted host-like paths.
fn host_form(path: &VPath) -> PathBuf {
    PathBuf::from(path.display())
}

impl<'v, 'a> IgnoreRules<'v, 'a> {
    pub fn new(view: &'v View<'a>) -> Self {
        IgnoreRules {
            view,
            dirs: RefCell::default(),
            exclude: RefCell::default(),
            verdicts: RefCell::default(),
        }
    }

    /// Build a matcher rooted at `dir` from the rule files `files` (paths in the view).
    fn read_rules(&self, dir: &VPath, files: &[VPath]) -> Result<Option<Gitignore>> {
        let mut builder = GitignoreBuilder::new(host_form(dir));
        let mut any = false;
        for file in files {
            let Some(node) = self.view.find(file)? else {
                continue;
            };
            if !node.is_file() || node.size() > MAX_RULES_BYTES {
                continue;
            }
            let text = self.view.read_node(&node)?;
            for line in String::from_utf8_lossy(&text).lines() {
                // A malformed glob is skipped, as git skips it.
                if builder.add_line(None, line).is_ok() {
                    any = true;
                }
            }
        }
        Ok(if any { builder.build().ok() } else { None })
    }

    fn with_dir<R>(&self, dir: &VPath, f: impl FnOnce(Option<&Gitignore>) -> R) -> Result<R> {
        if let Some(g) = self.dirs.borrow().get(dir) {
            return Ok(f(g.as_ref()));
        }
        let files: Vec<VPath> = RULE_FILES.iter().map(|n| dir.join(n)).collect();
        let rules = self.read_rules(dir, &files)?;
        let out = f(rules.as_ref());
        self.dirs.borrow_mut().insert(dir.clone(), rules);
        Ok(out)
    }

    fn excluded(&self, path: &VPath, is_dir: bool) -> Result<bool> {
        if self.exclude.borrow().is_none() {
            let file = VPath::parse(".git/info/exclude")?;
            let rules = self.read_rules(&VPath::root(), &[file])?;
            *self.exclude.borrow_mut() = Some(rules);
        }
        Ok(self
            .exclude
            .borrow()
            .as_ref()
            .and_then(Option::as_ref)
            .is_some_and(|g| g.matched(host_form(path), is_dir).is_ignore()))
    }

    /// Whether `path` itself matches (its ancestors not considered): the deepest
    /// directory with a rule that matches decides, then `.git/info/exclude`.
    fn matches(&self, path: &VPath, is_dir: bool) -> Result<bool> {
        if path.name() == ".git" {
            return Ok(true);
        }
        let target = host_form(path);
        let mut dirs = path.ancestors();
        dirs.reverse();
        for dir in &dirs {
            let verdict = self.with_dir(dir, |g| {
                let m = g.map(|g| g.matched(&target, is_dir));
                match m {
                    Some(m) if m.is_ignore() => Some(true),
                    Some(m) if m.is_whitelist() => Some(false),
                    _ => None,
                }
            })?;
            if let Some(v) = verdict {
                return Ok(v);
            }
        }
        self.excluded(path, is_dir)
    }

    /// Whether `path` is ignored: it or a directory above it matches the rules (as in git,
    /// nothing inside an ignored directory can be brought back by a `!` rule).
    pub fn is_ignored(&self, path: &VPath, is_dir: bool) -> Result<bool> {
        if path.is_root() {
            return Ok(false);
        }
        for dir in path.ancestors().into_iter().skip(1) {
            if self.dir_ignored(&dir)? {
                return Ok(true);
            }
        }
        self.matches(path, is_dir)
    }

    fn dir_ignored(&self, dir: &VPath) -> Result<bool> {
        if let Some(v) = self.verdicts.borrow().get(dir) {
            return Ok(*v);
        }
        let v = self.matches(dir, true)?;
        self.verdicts.borrow_mut().insert(dir.clone(), v);
        Ok(v)
    }
}

/// The top-level name a path is counted under.
fn top_name(path: &str) -> String {
    path.trim_start_matches('/')
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Whether a change is ignored. An added path is judged by the rules of the state it leads
/// to (`after`), a deleted one by those of the state it was in (`before`); a path that is
/// in both (modified, re-typed) only if both states' rules ignore it, so editing the rules
/// cannot hide a change to a file that was not ignored; a rename only when both names
/// are. A change to a rule file itself is never ignored.
pub fn change_ignored(
    c: &Change,
    before: &IgnoreRules<'_, '_>,
    after: &IgnoreRules<'_, '_>,
) -> Result<bool> {
    let is_dir = c.kind == "dir";
    let path = VPath::parse(&c.path)?;
    let rule_file = |p: &VPath| RULE_FILES.contains(&p.name()) || p.as_str() == ".git/info/exclude";
    if rule_file(&path)
        || c.old_path
            .as_deref()
            .and_then(|o| VPath::parse(o).ok())
            .is_some_and(|o| rule_file(&o))
    {
        return Ok(false);
    }
    Ok(match c.status {
        ChangeStatus::Deleted => before.is_ignored(&path, is_dir)?,
        ChangeStatus::Modified | ChangeStatus::TypeChanged => {
            after.is_ignored(&path, is_dir)? && before.is_ignored(&path, is_dir)?
        }
        ChangeStatus::Renamed => {
            let old = VPath::parse(c.old_path.as_deref().unwrap_or_default())?;
            after.is_ignored(&path, is_dir)? && before.is_ignored(&old, is_dir)?
        }
        _ => after.is_ignored(&path, is_dir)?,
    })
}

/// Split the changes from `before` to `after` into those to list and the ignored ones.
pub fn partition(
    changes: Vec<Change>,
    before: &View<'_>,
    after: &View<'_>,
) -> Result<(Vec<Change>, Vec<Change>)> {
    let (rb, ra) = (IgnoreRules::new(before), IgnoreRules::new(after));
    let mut kept = Vec::with_capacity(changes.len());
    let mut ignored = Vec::new();
    for c in changes {
        if change_ignored(&c, &rb, &ra)? {
            ignored.push(c);
        } else {
            kept.push(c);
        }
    }
    Ok((kept, ignored))
}

/// The changes to list from `before` to `after`, and the ignored ones counted (all are
/// listed with `include_ignored`).
pub fn listed(
    changes: Vec<Change>,
    before: &View<'_>,
    after: &View<'_>,
    include_ignored: bool,
) -> Result<(Vec<Change>, IgnoredCounts)> {
    if include_ignored {
        return Ok((changes, IgnoredCounts::new()));
    }
    let (kept, ignored) = partition(changes, before, after)?;
    Ok((kept, counts(&ignored)))
}

/// Ignored changes counted per top-level name.
pub fn counts(ignored: &[Change]) -> IgnoredCounts {
    let mut out = IgnoredCounts::new();
    for c in ignored {
        *out.entry(top_name(&c.path)).or_default() += 1;
    }
    out
}

/// The paths of some changes, reduced to the topmost ones (a directory stands for
/// everything below it), sorted: where a merge leaves ignored changes out.
pub fn top_paths(changes: &[Change]) -> Result<Vec<VPath>> {
    let mut paths = Vec::new();
    for c in changes {
        paths.push(VPath::parse(&c.path)?);
        if let Some(old) = &c.old_path {
            paths.push(VPath::parse(old)?);
        }
    }
    let all: std::collections::HashSet<VPath> = paths.iter().cloned().collect();
    let mut top: Vec<VPath> = paths
        .into_iter()
        .filter(|p| !p.ancestors().iter().any(|a| all.contains(a)))
        .collect();
    top.sort();
    top.dedup();
    Ok(top)
}
