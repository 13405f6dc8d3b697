//! Ingest: after a command ran on a kernel overlay, bring its upper layer into the fork as
//! one change (one transaction, one op-log entry). The upper layer holds exactly what the
//! command wrote: new and changed files (whole, as copied up), directories it touched,
//! whiteouts for deletions (character devices 0:0) and opaque directories for replaced
//! ones. So the cost is O(what the command wrote), never O(the tree).

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use crate::error::{Error, Result};
use crate::model::buffer::ContentBuffer;
use crate::model::id::ObjectId;
use crate::model::node::{Attrs, Node, NodeKind};
use crate::model::path::VPath;
use crate::model::{Edit, LoggedOp, Workspace};
use crate::service::secrets::SecretPaths;

/// The overlay's own extended attributes: `trusted.overlay.*` as root, `user.overlay.*` in
/// a user namespace (`userxattr`). They are bookkeeping, not the command's data; the other
/// namespace's names are the command's own.
fn overlay_prefix(userxattr: bool) -> &'static str {
    if userxattr {
        "user.overlay."
    } else {
        "trusted.overlay."
    }
}

use crate::service::transfer::xattrs;

fn is_opaque(path: &Path, userxattr: bool) -> bool {
    let name = format!("{}opaque", overlay_prefix(userxattr));
    matches!(xattrs::get(path, &name).as_deref(), Some(b"y") | Some(b"x"))
}

fn is_whiteout(meta: &fs::Metadata) -> bool {
    meta.file_type().is_char_device() && meta.rdev() == 0
}

fn attrs_of(meta: &fs::Metadata) -> Attrs {
    crate::service::transfer::host_attrs(meta)
}

fn xattrs_of(path: &Path, userxattr: bool) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let names = xattrs::names(path).unwrap_or_default();
    for name in names.into_iter().filter_map(|n| String::from_utf8(n).ok()) {
        if name.starts_with(overlay_prefix(userxattr)) {
            continue;
        }
        if let Some(value) = xattrs::get(path, &name) {
            out.insert(name, value);
        }
    }
    out
}

/// Counts of what an ingest brought in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ingested {
    pub entries: u64,
    pub bytes: u64,
    /// Paths the command wrote that the policy hides (secrets): not taken into the fork,
    /// which keeps its own.
    pub refused: Vec<String>,
}

struct Walk<'e, 'w> {
    e: &'e mut Edit<'w>,
    secrets: &'e SecretPaths,
    /// A whole copy of the fork (copy mode), not an upper layer: entries equal to the
    /// fork's are unchanged, and the fork's entries missing from it were deleted, except
    /// those the copy left out (secrets, device nodes).
    full: Option<&'e CopyMade>,
    /// The root the command started from: what "unchanged" is measured against.
    before: ObjectId,
    /// The overlay ran in a user namespace: its bookkeeping is `user.overlay.*`.
    userxattr: bool,
    /// Upper files with several names, by inode: the first name brought in.
    linked: HashMap<u64, VPath>,
    /// Upper files with several links, by inode: their names in the upper layer. More
    /// links than names: the overlay's index holds one (a copied-up hard link of the fork).
    upper_names: UpperNames,
    /// Names brought in ahead of their turn (see `through_first`).
    early: std::collections::HashSet<VPath>,
    /// Directories whose times to put back once their children are in.
    dirs: Vec<(VPath, Node)>,
    counts: Ingested,
}

/// Bring `upper` (an overlay's upper directory, over the fork's state at `root` inside the
/// sandbox) into `ws` as one op-log entry of `kind`, described as `description`. Returns
/// the entry's id and counts; nothing is written if any entry fails.
pub fn ingest(
    ws: &Workspace,
    upper: &Path,
    start: Start<'_>,
    kind: &str,
    description: &str,
) -> Result<(Ingested, LoggedOp)> {
    ingest_walk(ws, upper, start, None, kind, description)
}

/// What an ingest measures the command's writes against.
#[derive(Clone, Copy)]
pub struct Start<'s> {
    /// The root the command started from.
    pub before: ObjectId,
    /// The policy's secrets: never replaced or removed by a command.
    pub secrets: &'s SecretPaths,
    /// The overlay ran in a user namespace.
    pub userxattr: bool,
}

/// A copy of the fork as it was made: what it left out, and each entry's inode and
/// change time then. An entry with another inode or change time was touched, whatever
/// its modification time says (a file renamed over another, `touch -d`).
#[derive(Debug, Default)]
pub struct CopyMade {
    pub left_out: Vec<VPath>,
    stamps: HashMap<VPath, (u64, i64)>,
}

impl CopyMade {
    /// Note every entry of the copy at `dir` as made.
    pub fn stamp(dir: &Path, left_out: Vec<VPath>) -> Result<CopyMade> {
        let mut stamps = HashMap::new();
        let mut stack = vec![(dir.to_path_buf(), VPath::root())];
        while let Some((host, at)) = stack.pop() {
            for entry in fs::read_dir(&host).map_err(|e| Error::io("reading", &host, e))? {
                let entry = entry.map_err(|e| Error::io("reading", &host, e))?;
                let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                    continue;
                };
                let path = at.join(&name);
                let meta = fs::symlink_metadata(entry.path())
                    .map_err(|e| Error::io("reading", entry.path(), e))?;
                let ctime = attrs_of(&meta).ctime;
                stamps.insert(path.clone(), (meta.ino(), ctime));
                if meta.is_dir() {
                    stack.push((entry.path(), path));
                }
            }
        }
        Ok(CopyMade { left_out, stamps })
    }
}

/// Bring a whole copy of the fork (copy mode) into `ws` as one op-log entry: what differs
/// from the fork is written, and what the copy lacks is deleted, except what it was made
/// without. Costs O(the tree): the copy mode's price.
pub fn ingest_copy(
    ws: &Workspace,
    copy: &Path,
    start: Start<'_>,
    made: &CopyMade,
    kind: &str,
    description: &str,
) -> Result<(Ingested, LoggedOp)> {
    ingest_walk(ws, copy, start, Some(made), kind, description)
}

fn ingest_walk(
    ws: &Workspace,
    upper: &Path,
    start: Start<'_>,
    full: Option<&CopyMade>,
    kind: &str,
    description: &str,
) -> Result<(Ingested, LoggedOp)> {
    // The layer itself, never what a symlink put in its place points at.
    if !fs::symlink_metadata(upper).is_ok_and(|m| m.is_dir()) {
        return Err(Error::SandboxFailed {
            reason: format!("{} is not the run's layer directory", upper.display()),
        });
    }
    let upper_names = linked_names(upper)?;
    let (counts, id) = ws.edit_logged(kind, &[], |e| {
        e.describe(description.to_string());
        let mut walk = Walk {
            e,
            secrets: start.secrets,
            full,
            before: start.before,
            userxattr: start.userxattr,
            linked: HashMap::new(),
            upper_names,
            early: Default::default(),
            dirs: Vec::new(),
            counts: Ingested::default(),
        };
        walk.dir(upper, &VPath::root(), false)?;
        // Adding children moved the directories' times: put the command's back, deepest
        // first.
        for (path, node) in walk.dirs.drain(..).rev() {
            walk.e.update(&path, |n| {
                n.attrs = node.attrs.clone();
                n.xattrs = node.xattrs.clone();
                Ok(())
            })?;
        }
        Ok(walk.counts)
    })?;
    Ok((counts, id))
}

impl Walk<'_, '_> {
    /// Bring in directory `host` as `at`. `replaced`: the command replaced the directory
    /// it started with (an opaque one), so what that held and `host` lacks was deleted.
    fn dir(&mut self, host: &Path, at: &VPath, replaced: bool) -> Result<()> {
        let mut entries: Vec<_> = fs::read_dir(host)
            .map_err(|e| Error::io("reading", host, e))?
            .collect::<std::io::Result<_>>()
            .map_err(|e| Error::io("reading", host, e))?;
        entries.sort_by_key(|e| e.file_name());
        let mut seen = std::collections::HashSet::new();
        for entry in entries {
            let name = entry.file_name();
            // A name the vault cannot hold is left out, as the FUSE mount refuses it
            // (EINVAL), and listed; the rest of the run is taken in.
            let Some(name) = name.to_str() else {
                let shown = format!("{}/{}", at.display(), name.to_string_lossy());
                self.counts.refused.push(shown);
                continue;
            };
            let path = at.join(name);
            self.entry(&entry.path(), &path, replaced)?;
            seen.insert(name.to_string());
        }
        if self.full.is_some() || replaced {
            // What the copy (or the replaced directory) started with and no longer has was
            // deleted; what others added to the fork meanwhile was never in it and stays.
            let started: Vec<String> = match soft(self.e.view_at(self.before).find(at))? {
                Some(n) if n.is_dir() => self
                    .e
                    .view_at(self.before)
                    .list(at)?
                    .into_iter()
                    .map(|c| c.name)
                    .collect(),
                _ => Vec::new(),
            };
            for name in started {
                let path = at.join(&name);
                if !seen.contains(&name)
                    && self
                        .full
                        .is_none_or(|made| !made.left_out.iter().any(|l| path.starts_with(l)))
                    && soft(self.e.view().lookup(&path))?.is_some()
                {
                    self.counts.entries += 1;
                    self.remove(&path, true)?;
                }
            }
        }
        Ok(())
    }

    /// Remove `path`, but never a secret at or below it: a command never saw the secrets,
    /// so it cannot have meant to delete them. Around a secret, what the command could see
    /// goes, and the secret stays with the directories that hold it (as through fuse,
    /// where `rm -rf` removes all it sees and the directory stays, not empty). Returns
    /// whether `path` went; the secrets kept are listed.
    fn remove(&mut self, path: &VPath, recursive: bool) -> Result<bool> {
        if !self.secrets.is_empty() {
            let mut kept = Vec::new();
            let view = self.e.view();
            view.walk(path, &mut |p, n| {
                if self.secrets.refuses(&view, p, Some(n))? {
                    kept.push(p.clone());
                }
                Ok(())
            })?;
            if !kept.is_empty() {
                self.remove_around(path, &kept)?;
                self.counts.refused.extend(kept.iter().map(VPath::display));
                return Ok(false);
            }
        }
        self.e.remove(path, recursive)?;
        Ok(true)
    }

    /// Remove what is at or below `path`, except `kept` and the directories holding them.
    fn remove_around(&mut self, path: &VPath, kept: &[VPath]) -> Result<()> {
        if kept.contains(path) {
            return Ok(());
        }
        if !kept.iter().any(|k| k.starts_with(path)) {
            return self.e.remove(path, true);
        }
        for child in self.e.view().list(path)? {
            self.remove_around(&path.join(&child.name), kept)?;
        }
        Ok(())
    }

    /// Whether the names of upper file `ino` that were hard links of the fork when the
    /// command started were all one file of it (or none).
    fn one_fork_file(&self, ino: u64) -> Result<bool> {
        let mut files = std::collections::BTreeSet::new();
        for (_, name) in self.upper_names.get(&ino).into_iter().flatten() {
            let Some(name) = name else { continue };
            if let Some((n, _)) = soft(self.e.view_at(self.before).lookup(name))?
                && let Some(link) = n.link.filter(|l| l.nlink > 1)
            {
                files.insert(link.inode);
            }
        }
        Ok(files.len() <= 1)
    }

    /// How many names the upper file `ino` has in the upper layer.
    fn upper_count(&self, ino: u64) -> u64 {
        self.upper_names.get(&ino).map_or(1, |n| n.len() as u64)
    }

    /// The upper file `ino` is a copied-up hard link of the fork, and `path` (about to be
    /// brought in) is a name the command gave it: bring in first another of its names that
    /// the fork links, so the command's write goes through to every name of the fork's
    /// file and `path` joins them. (Taken in order, a new name sorting first became a file
    /// of its own, and the fork's other names kept the old content.)
    fn through_first(&mut self, ino: u64, path: &VPath) -> Result<()> {
        let names = self.upper_names.get(&ino).cloned().unwrap_or_default();
        for (host, name) in names {
            // (A name refused already, a secret, is not tried again.)
            let Some(name) = name.filter(|n| {
                n != path && !self.early.contains(n) && !self.counts.refused.contains(&n.display())
            }) else {
                continue;
            };
            let fork_links =
                soft(self.e.view().lookup(&name))?.is_some_and(|(n, _)| linked_file(&n));
            if fork_links {
                self.entry(&host, &name, false)?;
                self.early.insert(name);
                return Ok(());
            }
        }
        Ok(())
    }

    /// Bring in `host` as `path`. `in_replaced`: its parent replaced the directory the
    /// command started with, so everything below is the upper layer's alone.
    fn entry(&mut self, host: &Path, path: &VPath, in_replaced: bool) -> Result<()> {
        if self.early.remove(path) {
            return Ok(());
        }
        let meta = fs::symlink_metadata(host).map_err(|e| Error::io("reading", host, e))?;
        let existing = soft(self.e.view().lookup(path))?.map(|(n, _)| n);
        // The command never saw a secret (its lower layer hides them), so what it wrote
        // under a secret's name does not replace the secret.
        if !self.secrets.is_empty()
            && (self.secrets.hides_by_name(path)
                || self
                    .secrets
                    .refuses(&self.e.view(), path, existing.as_ref())?)
        {
            self.counts.refused.push(path.display());
            return Ok(());
        }
        // What the command started with here.
        let started = soft(self.e.view_at(self.before).lookup(path))?.map(|(n, _)| n);
        if let Some(made) = self.full
            && let Some(node) = &started
            && made.stamps.get(path) == Some(&(meta.ino(), attrs_of(&meta).ctime))
            && unchanged(host, &meta, node)
        {
            if node.is_dir() && existing.as_ref().is_some_and(Node::is_dir) {
                return self.dir(host, path, false);
            }
            // An unchanged name of a file with several names: the names the command gave
            // it elsewhere (a directory renamed) join this one, or this one joins the name
            // brought in before it, so they stay one file.
            if meta.is_file() && meta.nlink() > 1 && existing.as_ref().is_some_and(linked_file) {
                match self.linked.get(&meta.ino()).cloned() {
                    None => {
                        self.linked.insert(meta.ino(), path.clone());
                    }
                    Some(first) => {
                        self.counts.entries += 1;
                        if self.remove(path, false)? {
                            self.e.link(&first, path)?;
                        }
                    }
                }
            }
            return Ok(());
        }
        self.counts.entries += 1;
        if self.full.is_none() && is_whiteout(&meta) {
            if existing.is_some() {
                self.remove(path, true)?;
            }
            return Ok(());
        }
        let mut attrs = attrs_of(&meta);
        let ft = meta.file_type();
        if ft.is_dir() {
            // An opaque directory replaced the one the command started with, and so did
            // every directory below one (overlayfs marks only the top; below it all is the
            // upper layer's): the children the starting one had and this lacks were
            // deleted. Children others added to the fork since were never the command's
            // to delete, and stay. A directory made where there was none (overlayfs marks
            // it opaque too) replaced nothing.
            let replaced = (in_replaced || is_opaque(host, self.userxattr))
                && started.as_ref().is_some_and(Node::is_dir);
            let mut fresh = false;
            match &existing {
                Some(n) if n.is_dir() => {}
                Some(n) if !n.is_dir() && !self.remove(path, true)? => return Ok(()),
                _ => {
                    self.e
                        .put_node(path, Node::empty_dir(attrs.mode, self.e.now()))?;
                    fresh = true;
                }
            }
            self.dir(host, path, replaced)?;
            let xattrs = xattrs_of(host, self.userxattr);
            // A directory the command only added to keeps its own mode and owner, even
            // one changed by others meanwhile: only what differs from the start is the
            // command's.
            let same = started.as_ref().is_some_and(|n| {
                n.is_dir()
                    && n.attrs.mode == attrs.mode
                    && n.attrs.uid == attrs.uid
                    && n.attrs.gid == attrs.gid
                    && n.xattrs == xattrs
            });
            if fresh || !same {
                let mut node = Node::empty_dir(attrs.mode, 0);
                node.attrs = attrs;
                node.xattrs = xattrs;
                self.dirs.push((path.clone(), node));
            }
            return Ok(());
        }
        let mut existing = existing;
        if existing.as_ref().is_some_and(Node::is_dir) {
            if !self.remove(path, true)? {
                return Ok(());
            }
            existing = None;
        }
        // A hard link of the fork the command wrote through: the overlay (index=on) copied
        // the shared file up once and keeps its names together, so the file has more
        // links than this name. Written through, as the command saw it. A file with one
        // link where a linked name was is a new file: the command broke the link.
        // Only when the upper file's names the fork links are all one file of the fork
        // can the write go through: a name relinked to another file (`ln -f g1 b1`, b1
        // and b2 one file) must not carry the other file's content into b2.
        let indexed = ft.is_file()
            && meta.nlink() > self.upper_count(meta.ino())
            && self.one_fork_file(meta.ino())?;
        let through = indexed
            && !self.linked.contains_key(&meta.ino())
            && existing.as_ref().is_some_and(linked_file);
        if indexed && !through && !self.linked.contains_key(&meta.ino()) {
            self.through_first(meta.ino(), path)?;
        }
        if meta.nlink() > 1 {
            if let Some(first) = self.linked.get(&meta.ino()).cloned() {
                if existing.is_some() && !self.remove(path, false)? {
                    return Ok(());
                }
                self.e.link(&first, path)?;
                return Ok(());
            }
            self.linked.insert(meta.ino(), path.clone());
        }
        let kind = if ft.is_file() {
            let content = self.content(host, &meta)?;
            self.counts.bytes += meta.len();
            NodeKind::File {
                size: meta.len(),
                content,
            }
        } else if ft.is_symlink() {
            let target = fs::read_link(host).map_err(|e| Error::io("reading link", host, e))?;
            NodeKind::Symlink {
                target: target.to_string_lossy().into_owned(),
            }
        } else {
            match Node::special_kind(meta.mode(), meta.rdev()) {
                Some(kind) => kind,
                None => {
                    return Err(Error::invalid(format!(
                        "{}: a file type avfs does not keep",
                        path.display()
                    )));
                }
            }
        };
        // A symlink's mode is always 0777 on Linux; keep what the vault says symlinks have.
        if ft.is_symlink() {
            attrs.mode = 0o777;
        }
        let mut node = Node::new(kind, attrs);
        if !ft.is_symlink() {
            node.xattrs = xattrs_of(host, self.userxattr);
        }
        // Anything else replaces the name (a put over a linked name would write through).
        if existing.is_some() && !through && !self.remove(path, false)? {
            return Ok(());
        }
        self.e.put_node(path, node)
    }

    /// Store a file's content; a sparse file's holes stay holes.
    fn content(
        &mut self,
        host: &Path,
        meta: &fs::Metadata,
    ) -> Result<Option<crate::model::id::ObjectId>> {
        let len = meta.len();
        if meta.blocks().saturating_mul(512) >= len {
            let data = fs::read(host).map_err(|e| Error::io("reading", host, e))?;
            return self.e.store_content(&data);
        }
        let file = fs::File::open(host).map_err(|e| Error::io("reading", host, e))?;
        // An empty buffer grown to the length: zeros, with the data written over them.
        let mut buf = ContentBuffer::new(0);
        buf.resize(usize::try_from(len).map_err(|_| {
            Error::invalid(format!("{}: too large for this machine", host.display()))
        })?);
        for (from, to) in data_ranges(&file, len).map_err(|e| Error::io("reading", host, e))? {
            let mut at = from;
            while at < to {
                let n = (to - at).min(1 << 20) as usize;
                let mut chunk = vec![0u8; n];
                use std::os::unix::fs::FileExt;
                file.read_exact_at(&mut chunk, at)
                    .map_err(|e| Error::io("reading", host, e))?;
                buf.write(at as usize, &chunk);
                at += n as u64;
            }
        }
        let changes = buf
            .changes(None)
            .map_err(|_| Error::invalid("a new file's buffer needs no base"))?;
        self.e.store_changes(&changes)
    }
}

/// Whether a copied-out entry is still what the fork holds: same type, mode, owner,
/// modification time and size (and link target). Writing a file changes its mtime, as for
/// make and git.
fn unchanged(host: &Path, meta: &fs::Metadata, node: &Node) -> bool {
    let a = attrs_of(meta);
    let ft = meta.file_type();
    let same_kind = match &node.kind {
        NodeKind::Symlink { target } => {
            ft.is_symlink() && fs::read_link(host).is_ok_and(|t| t.as_os_str() == target.as_str())
        }
        _ if node.is_dir() => ft.is_dir(),
        _ if node.is_file() => ft.is_file() && meta.len() == node.size(),
        _ => !ft.is_dir() && !ft.is_file() && !ft.is_symlink() && meta.rdev() == node.rdev(),
    };
    same_kind
        && a.uid == node.attrs.uid
        && a.gid == node.attrs.gid
        && a.mtime == node.attrs.mtime
        && (ft.is_symlink() || a.mode == node.attrs.mode)
}

/// A lookup where a file in place of a parent directory means "not there" (the command
/// replaced a file by a directory, or the fork changed meanwhile).
fn soft<T>(found: Result<Option<T>>) -> Result<Option<T>> {
    match found {
        Err(Error::NotADirectory { .. }) | Err(Error::PathNotFound { .. }) => Ok(None),
        other => other,
    }
}

/// Upper files with several links, by inode: each name's host path and vault path (`None`
/// for a name the vault cannot hold), in path order.
type UpperNames = HashMap<u64, Vec<(std::path::PathBuf, Option<VPath>)>>;

/// The names in `upper` of every file with more than one link.
fn linked_names(upper: &Path) -> Result<UpperNames> {
    let mut names: HashMap<u64, Vec<_>> = HashMap::new();
    let mut stack = vec![(upper.to_path_buf(), Some(VPath::root()))];
    while let Some((dir, at)) = stack.pop() {
        for entry in fs::read_dir(&dir).map_err(|e| Error::io("reading", &dir, e))? {
            let entry = entry.map_err(|e| Error::io("reading", &dir, e))?;
            let meta = fs::symlink_metadata(entry.path())
                .map_err(|e| Error::io("reading", entry.path(), e))?;
            // A name the vault cannot hold is counted, never brought in.
            let path = at
                .as_ref()
                .zip(entry.file_name().to_str())
                .map(|(at, name)| at.join(name));
            if meta.is_dir() {
                stack.push((entry.path(), path));
            } else if meta.nlink() > 1 {
                names
                    .entry(meta.ino())
                    .or_default()
                    .push((entry.path(), path));
            }
        }
    }
    for list in names.values_mut() {
        list.sort_by(|a, b| a.1.cmp(&b.1));
    }
    Ok(names)
}

/// A file of the fork with other names (a hard link).
fn linked_file(n: &Node) -> bool {
    n.link.is_some_and(|l| l.nlink > 1)
}

/// The byte ranges of `file` that hold data (SEEK_DATA / SEEK_HOLE).
pub(super) fn data_ranges(file: &fs::File, len: u64) -> std::io::Result<Vec<(u64, u64)>> {
    use rustix::fs::{SeekFrom, seek};
    let mut out = Vec::new();
    let mut at = 0u64;
    while at < len {
        let start = match seek(file, SeekFrom::Data(at)) {
            Ok(s) => s,
            Err(rustix::io::Errno::NXIO) => break,
            Err(e) => return Err(e.into()),
        };
        let end = seek(file, SeekFrom::Hole(start))?.min(len);
        out.push((start, end));
        at = end;
    }
    Ok(out)
}
