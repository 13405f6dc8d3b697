//! Git-native hand-back and import, through git's objects (the `gix` crate), never a
//! checkout: `handback` writes a fork's files as one commit on a branch of a host
//! repository without touching its worktree, index or HEAD; `import_commit` takes exactly
//! the tracked files of a commit into a workspace, with git's modes and symlinks.
//!
//! A hand-back's tree is the fork's files as `git add -A` would take them against the parent
//! commit: the workspace's ignore rules apply (`.gitignore`, `.avfsignore`,
//! `.git/info/exclude`) except to paths the parent tracks, `.git/` is left out, a file with
//! any execute bit is 100755, a symlink is a link, empty directories are not trees,
//! submodules stay at the commit the parent records, and FIFOs, devices and sockets are
//! skipped (listed). A branch the fork handed back to before moves on only from where the
//! fork left it; one that moved since, or that the fork did not make, is refused with
//! `branch_moved`. Hand-backs to one repository take turns (a `flock` on its git
//! directory), so two forks racing for a new branch cannot both make it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gix::bstr::{BString, ByteSlice};
use gix::objs::tree::{Entry, EntryKind};
use gix::refs::transaction::PreviousValue;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::ignore::IgnoreRules;
use crate::model::node::NodeKind;
use crate::model::path::VPath;
use crate::model::{View, Workspace, WriteOptions, fork_key};

/// The settings key prefix, in the fork's scope, of its last hand-back to each branch.
const LAST_PREFIX: &str = "handback:";

/// What `handback` did.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct HandbackReport {
    /// The host repository (its git directory's parent, or the bare repository).
    pub repo: String,
    /// The full branch name, `refs/heads/…`.
    pub branch: String,
    /// The commit written, or `null` when the fork's files equal the parent's tree.
    pub commit: Option<String>,
    /// Its parent: the branch's tip when it moves on, else the commit the workspace was
    /// imported from, else the repository's HEAD (`null` in an empty repository).
    pub parent: Option<String>,
    /// The tree of the fork's files.
    pub tree: String,
    /// True if the branch was made by this hand-back.
    pub created: bool,
    /// Files (blobs and symlinks) in the tree.
    pub files: u64,
    /// Paths left out that git cannot hold (FIFOs, devices, sockets).
    pub skipped: Vec<String>,
    /// Submodules (gitlinks) of the parent commit, kept at the commit the parent records:
    /// a hand-back does not move or remove submodules.
    pub submodules: Vec<String>,
    /// Why nothing was committed, when nothing was.
    pub note: Option<String>,
}

/// What `import --git` took.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct GitImportReport {
    pub repo: String,
    /// The commit imported.
    pub commit: String,
    pub files: u64,
    pub symlinks: u64,
    pub dirs: u64,
    pub bytes: u64,
    /// Submodules (gitlinks), which are not files of this commit.
    pub skipped: Vec<String>,
}

/// The last hand-back of a fork, to move its branch on only from there.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Last {
    repo: String,
    branch: String,
    commit: String,
}

fn git_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::invalid(format!("{what}: {e}"))
}

fn open(repo: &Path) -> Result<gix::Repository> {
    gix::open(repo)
        .map_err(|e| git_error(&format!("{} is not a git repository", repo.display()), e))
}

/// Where a repository is, for reports and records: the worktree, or the bare directory.
fn repo_path(repo: &gix::Repository) -> PathBuf {
    let p = repo.workdir().unwrap_or_else(|| repo.git_dir());
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The commit `HEAD` of the git repository at `dir`, if it is one and has a commit.
pub fn head_commit(dir: &Path) -> Option<String> {
    let repo = gix::open(dir).ok()?;
    repo.head_id().ok().map(|id| id.to_string())
}

/// The entries of tree `id` of `repo`, by name; none for `None`.
fn tree_entries(
    repo: &gix::Repository,
    id: Option<gix::ObjectId>,
) -> Result<BTreeMap<BString, (EntryKind, gix::ObjectId)>> {
    let Some(id) = id else {
        return Ok(BTreeMap::new());
    };
    let read = |e: &dyn std::fmt::Display| git_error("reading the parent's tree", e);
    let tree = repo
        .find_object(id)
        .map_err(|e| read(&e))?
        .try_into_tree()
        .map_err(|e| read(&e))?;
    let decoded = tree.decode().map_err(|e| read(&e))?;
    Ok(decoded
        .entries
        .iter()
        .map(|e| (e.filename.to_owned(), (e.mode.kind(), e.oid.to_owned())))
        .collect())
}

/// Write the fork's directory `dir` as a tree of `repo`, as `git add -A` would take it
/// against `parent`, the same directory's tree in the parent commit: what the ignore rules
/// ignore is left out unless the parent tracks it (git keeps tracked files up to date even
/// when a rule matches them), and submodules (gitlinks) of the parent are kept as they are
/// unless the fork put a file in their place. Cost: every file's content is read and hashed
/// (git stores whole trees).
fn write_tree(
    repo: &gix::Repository,
    view: &View<'_>,
    rules: &IgnoreRules<'_, '_>,
    dir: &VPath,
    parent: Option<gix::ObjectId>,
    top: bool,
    out: &mut TreeCount,
) -> Result<Option<gix::ObjectId>> {
    let write = |e: gix::object::write::Error| git_error("writing a git object", e);
    let mut tracked = tree_entries(repo, parent)?;
    let mut entries = Vec::new();
    for child in view.list(dir)? {
        let path = dir.join(&child.name);
        let node = &child.node;
        let filename = BString::from(child.name.as_bytes());
        let before = tracked.remove(&filename);
        if git_refuses(&child.name) {
            if !(dir.is_root() && child.name == ".git") {
                out.skipped
                    .push(format!("{}: a name git refuses", path.display()));
            }
            continue;
        }
        if before.is_none() && rules.is_ignored(&path, node.is_dir())? {
            continue;
        }
        let (kind, oid) = match (&node.kind, before) {
            (NodeKind::Dir { .. }, Some((EntryKind::Commit, oid))) => {
                out.submodules.push(path.display().to_string());
                (EntryKind::Commit, oid)
            }
            (NodeKind::Dir { .. }, before) => {
                let sub = before.filter(|(k, _)| *k == EntryKind::Tree).map(|b| b.1);
                match write_tree(repo, view, rules, &path, sub, false, out)? {
                    Some(id) => (EntryKind::Tree, id),
                    None => continue,
                }
            }
            (NodeKind::Symlink { target }, _) => {
                out.files += 1;
                (
                    EntryKind::Link,
                    repo.write_blob(target.as_bytes()).map_err(write)?.detach(),
                )
            }
            (NodeKind::File { .. } | NodeKind::Inode { .. } | NodeKind::Link { .. }, _) => {
                out.files += 1;
                let kind = if node.attrs.mode & 0o111 != 0 {
                    EntryKind::BlobExecutable
                } else {
                    EntryKind::Blob
                };
                (
                    kind,
                    repo.write_blob(view.read_node(node)?)
                        .map_err(write)?
                        .detach(),
                )
            }
            _ => {
                out.skipped.push(format!(
                    "{}: git holds no {}",
                    path.display(),
                    node.type_name()
                ));
                continue;
            }
        };
        entries.push(Entry {
            mode: kind.into(),
            filename,
            oid,
        });
    }
    // A submodule the fork never had (an import through git takes none): kept.
    for (filename, (kind, oid)) in tracked {
        if kind == EntryKind::Commit {
            out.submodules
                .push(dir.join(&filename.to_string()).display().to_string());
            entries.push(Entry {
                mode: kind.into(),
                filename,
                oid,
            });
        }
    }
    if entries.is_empty() && !top {
        return Ok(None);
    }
    entries.sort();
    let tree = gix::objs::Tree { entries };
    Ok(Some(repo.write_object(&tree).map_err(write)?.detach()))
}

/// Names `git add` refuses to put in a tree (its `.git` in any case, with trailing spaces or
/// dots, and the 8.3 short name `git~1`): a tree holding one fails `fsck` and checkout.
fn git_refuses(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.trim_end_matches([' ', '.']) == ".git" || lower == "git~1"
}

/// What `write_tree` counted on the way.
#[derive(Default)]
struct TreeCount {
    files: u64,
    skipped: Vec<String>,
    submodules: Vec<String>,
}

/// Hold an exclusive `flock` on the repository's git directory while a hand-back reads and
/// moves a branch, so two hand-backs (from any processes) to the same repository take turns
/// and the second sees the first's commit.
fn lock_repo(repo: &gix::Repository) -> Result<std::fs::File> {
    let dir = repo.common_dir();
    let file = std::fs::File::open(dir).map_err(|e| Error::io("opening", dir, e))?;
    loop {
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive) {
            Ok(()) => return Ok(file),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(Error::io("locking", dir, e.into())),
        }
    }
}

/// Whether host directory `host` (an origin's) is the repository's worktree or directory.
fn same_dir(host: &str, repo: &gix::Repository) -> bool {
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let host = canon(Path::new(host));
    host == repo_path(repo) || host == canon(repo.git_dir())
}

/// Refuse a branch name that cannot live beside the repository's refs: one an existing
/// branch is below (`a` when `a/b` exists) or above (`a/b` when `a` exists), which git
/// refuses too, and the branch a worktree has checked out (moving it would leave that
/// worktree's index showing the reverse of the commit).
fn check_branch_free(repo: &gix::Repository, full: &str) -> Result<()> {
    let refs = repo
        .references()
        .map_err(|e| git_error("reading the refs", e))?;
    let below = format!("{full}/");
    for r in refs
        .all()
        .map_err(|e| git_error("reading the refs", e))?
        .flatten()
    {
        let name = r.name().as_bstr().to_string();
        if name.starts_with(&below)
            || (full.starts_with(&format!("{name}/")) && name.starts_with("refs/heads/"))
        {
            return Err(Error::invalid(format!(
                "branch `{full}` cannot be made: it clashes with the existing `{name}` (a branch cannot be both a name and a directory of names)"
            )));
        }
    }
    Ok(())
}

/// The branches checked out in the repository's worktrees (its main one and linked ones).
fn checked_out(repo: &gix::Repository) -> Vec<String> {
    let mut heads = Vec::new();
    let mut read = |head: PathBuf| {
        if let Ok(text) = std::fs::read_to_string(head)
            && let Some(r) = text.trim().strip_prefix("ref: ")
        {
            heads.push(r.to_string());
        }
    };
    if repo.workdir().is_some() {
        read(repo.common_dir().join("HEAD"));
    }
    if let Ok(dirs) = std::fs::read_dir(repo.common_dir().join("worktrees")) {
        for d in dirs.flatten() {
            read(d.path().join("HEAD"));
        }
    }
    heads
}

fn signature(repo: &gix::Repository, ws: &Workspace) -> gix::actor::Signature {
    let time = gix::date::Time::now_local_or_utc();
    match repo.committer() {
        Some(Ok(s)) => gix::actor::Signature {
            name: s.name.into(),
            email: s.email.into(),
            time,
        },
        _ => gix::actor::Signature {
            name: ws.actor_name().into(),
            email: "avfs@localhost".into(),
            time,
        },
    }
}

/// Write the live files of fork `ws` as one commit on `branch` (a short name like
/// `agent/task-7`, or `refs/heads/…`) of the repository at `repo_dir`, with `message`.
pub fn handback(
    ws: &Workspace,
    repo_dir: &Path,
    branch: &str,
    message: Option<&str>,
) -> Result<HandbackReport> {
    let repo = open(repo_dir)?;
    // Branches only (refs/heads/…), never HEAD, tags, remotes or notes.
    let short = branch.strip_prefix("refs/heads/").unwrap_or(branch);
    if short.starts_with("refs/")
        || short.starts_with('-')
        || short == "HEAD"
        || short.ends_with("_HEAD")
        || short == "@"
    {
        return Err(Error::invalid(format!(
            "`{branch}` is not a branch name: hand back to a branch (refs/heads/…), not HEAD, a tag or another ref"
        )));
    }
    if message.is_some_and(|m| m.trim().is_empty()) {
        return Err(Error::invalid(
            "the commit message is empty: give one with -m, or leave -m out for the default",
        ));
    }
    let full = format!("refs/heads/{short}");
    let name: gix::refs::FullName = full
        .as_str()
        .try_into()
        .map_err(|e| git_error(&format!("`{branch}` is not a branch name"), e))?;
    let where_ = repo_path(&repo).display().to_string();
    let _turn = lock_repo(&repo)?;
    let last_key = fork_key(ws.name(), &format!("{LAST_PREFIX}{where_}:{full}"));
    let last: Option<Last> = ws
        .vault()
        .setting(&last_key)?
        .and_then(|v| serde_json::from_str(&v).ok())
        .filter(|l: &Last| l.repo == where_ && l.branch == full);
    let tip = repo
        .try_find_reference(name.as_ref())
        .map_err(|e| git_error("reading the branch", e))?
        .map(|mut r| r.peel_to_id().map(|id| id.detach()))
        .transpose()
        .map_err(|e| git_error("reading the branch", e))?;
    if checked_out(&repo).contains(&full) {
        return Err(Error::invalid(format!(
            "branch `{full}` is checked out in the repository's worktree: hand back to another branch (git refuses to move a checked-out branch too)"
        )));
    }
    if tip.is_none() {
        check_branch_free(&repo, &full)?;
    }
    let (parent, expected) = match (tip, &last) {
        (Some(tip), Some(l)) if tip.to_string() == l.commit => (
            Some(tip),
            PreviousValue::MustExistAndMatch(gix::refs::Target::Object(tip)),
        ),
        (Some(tip), l) => {
            return Err(Error::BranchMoved {
                branch: full,
                found: tip.to_string(),
                expected: l.as_ref().map(|l| l.commit.clone()),
            });
        }
        (None, _) => {
            let recorded = ws
                .origin()?
                .and_then(|o| o.git_commit)
                .and_then(|c| gix::ObjectId::from_hex(c.as_bytes()).ok())
                .filter(|id| repo.find_object(*id).is_ok());
            let head = || repo.head_id().ok().map(|id| id.detach());
            (recorded.or_else(head), PreviousValue::MustNotExist)
        }
    };
    let parent_tree = parent.and_then(|p| {
        repo.find_object(p)
            .ok()?
            .try_into_commit()
            .ok()?
            .tree_id()
            .ok()
            .map(|t| t.detach())
    });
    // The repository's files are where the workspace took them from: the import's
    // workspace path when it came from this repository, else the workspace's root.
    let top = match ws.origin()? {
        Some(o) if same_dir(&o.host, &repo) => VPath::parse(&o.prefix)?,
        _ => VPath::root(),
    };
    let mut count = TreeCount::default();
    let tree = ws.read(|view| {
        let rules = IgnoreRules::new(view);
        write_tree(&repo, view, &rules, &top, parent_tree, true, &mut count)
    })?;
    let tree = tree.expect("the root is always a tree");
    let mut report = HandbackReport {
        repo: where_.clone(),
        branch: full.clone(),
        commit: None,
        parent: parent.map(|p| p.to_string()),
        tree: tree.to_string(),
        created: false,
        files: count.files,
        skipped: count.skipped,
        submodules: count.submodules,
        note: None,
    };
    if parent_tree == Some(tree) {
        report.note =
            Some("the fork's files equal the parent commit's tree: nothing to commit".into());
        return Ok(report);
    }
    let sig = signature(&repo, ws);
    let commit = gix::objs::Commit {
        tree,
        parents: parent.into_iter().collect(),
        author: sig.clone(),
        committer: sig,
        encoding: None,
        message: message
            .map(|m| format!("{}\n", m.trim_end()))
            .unwrap_or_else(|| format!("avfs: hand back {}\n", ws.name()))
            .into(),
        extra_headers: Vec::new(),
    };
    let id = repo
        .write_object(&commit)
        .map_err(|e| git_error("writing the commit", e))?
        .detach();
    repo.reference(
        name,
        id,
        expected,
        format!("avfs handback of {}", ws.name()),
    )
    .map_err(|e| match tip {
        // Someone moved the branch between our look and our update.
        _ if e.to_string().contains("expected") || e.to_string().contains("exist") => {
            Error::BranchMoved {
                branch: full.clone(),
                found: "(changed while handing back)".into(),
                expected: tip.map(|t| t.to_string()),
            }
        }
        _ => git_error("updating the branch", e),
    })?;
    let rec = Last {
        repo: where_,
        branch: full,
        commit: id.to_string(),
    };
    let json = serde_json::to_string(&rec).map_err(|e| Error::Storage(e.to_string()))?;
    ws.vault().set_setting(&last_key, Some(&json))?;
    report.created = tip.is_none();
    report.commit = Some(id.to_string());
    Ok(report)
}

/// `REPO[@REV]`: the repository path and the revision (default `HEAD`). A path that exists
/// as given is the repository, even with an `@` in it.
pub fn split_spec(spec: &str) -> (PathBuf, String) {
    if Path::new(spec).exists() {
        return (PathBuf::from(spec), "HEAD".into());
    }
    match spec.rsplit_once('@') {
        Some((repo, rev)) if !rev.is_empty() => (PathBuf::from(repo), rev.to_string()),
        _ => (PathBuf::from(spec), "HEAD".into()),
    }
}

/// Import exactly the tracked files of commit `rev` of the repository at `repo_dir` into
/// `dest`, in one operation, and record the repository and commit as the origin.
pub fn import_commit(
    ws: &Workspace,
    repo_dir: &Path,
    rev: &str,
    dest: &VPath,
) -> Result<GitImportReport> {
    let repo = open(repo_dir)?;
    let commit = repo
        .rev_parse_single(rev.as_bytes().as_bstr())
        .map_err(|e| git_error(&format!("revision `{rev}`"), e))?
        .object()
        .map_err(|e| git_error(&format!("revision `{rev}`"), e))?
        .peel_to_commit()
        .map_err(|e| git_error(&format!("revision `{rev}` is no commit"), e))?;
    let commit_id = commit.id;
    let tree = commit
        .tree_id()
        .map_err(|e| git_error("reading the commit", e))?
        .detach();
    let mut report = GitImportReport {
        repo: repo_path(&repo).display().to_string(),
        commit: commit_id.to_string(),
        files: 0,
        symlinks: 0,
        dirs: 0,
        bytes: 0,
        skipped: Vec::new(),
    };
    let label = format!("{}@{}", report.repo, &report.commit[..12]);
    ws.edit("import", &[dest], |e| {
        e.describe(format!("import {label}"));
        e.mkdir(dest, true, 0o755)?;
        let mut stack = vec![(tree, dest.clone())];
        while let Some((tree, at)) = stack.pop() {
            let object = repo
                .find_object(tree)
                .map_err(|e| git_error("reading a tree", e))?
                .try_into_tree()
                .map_err(|e| git_error("reading a tree", e))?;
            let decoded = object
                .decode()
                .map_err(|e| git_error("reading a tree", e))?;
            for entry in decoded.entries {
                let name = entry.filename.to_str().map_err(|_| {
                    Error::invalid(format!(
                        "{}: a name that is not UTF-8 ({:?})",
                        at.display(),
                        entry.filename
                    ))
                })?;
                let path = at.join(name);
                VPath::parse(&path.display())?;
                let data = |oid: &gix::oid| -> Result<Vec<u8>> {
                    Ok(repo
                        .find_object(oid.to_owned())
                        .map_err(|e| git_error("reading a blob", e))?
                        .detach()
                        .data)
                };
                match entry.mode.kind() {
                    EntryKind::Tree => {
                        e.mkdir(&path, true, 0o755)?;
                        report.dirs += 1;
                        stack.push((entry.oid.to_owned(), path));
                    }
                    EntryKind::Blob | EntryKind::BlobExecutable => {
                        let bytes = data(entry.oid)?;
                        let mode = if entry.mode.kind() == EntryKind::BlobExecutable {
                            0o755
                        } else {
                            0o644
                        };
                        let opts = WriteOptions {
                            mode: Some(mode),
                            parents: true,
                            append: false,
                        };
                        e.write_file(&path, &bytes, opts)?;
                        // An existing file keeps its mode on write: git's mode wins.
                        e.update(&path, |n| {
                            n.attrs.mode = mode;
                            Ok(())
                        })?;
                        report.files += 1;
                        report.bytes += bytes.len() as u64;
                    }
                    EntryKind::Link => {
                        let target = String::from_utf8(data(entry.oid)?).map_err(|_| {
                            Error::invalid(format!(
                                "{}: a symlink target that is not UTF-8",
                                path.display()
                            ))
                        })?;
                        e.symlink(&path, &target)?;
                        report.symlinks += 1;
                    }
                    EntryKind::Commit => {
                        report
                            .skipped
                            .push(format!("{}: a submodule", path.display()));
                    }
                }
            }
        }
        Ok(())
    })?;
    ws.set_origin_git(
        &report.repo,
        &dest.display(),
        ws.snapshot_root()?,
        "import",
        Some(report.commit.clone()),
    )?;
    Ok(report)
}
