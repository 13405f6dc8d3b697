//! Moving trees between the host and a workspace: `import` (recursive, modes, symlinks,
//! hard links and times preserved, optional .gitignore rules, one transaction per batch)
//! and `export`. Writing a state out to a host directory is `write`; a host file's
//! extended attributes, `xattrs`.

mod write;
pub(crate) mod xattrs;

pub(crate) use write::{
    Donor, Skip, make_special, materialize, materialize_entry, set_dir_attrs, set_times_ns,
};
use write::{Writing, write_view};

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::model::node::{Attrs, Node, NodeKind};
use crate::model::path::VPath;
use crate::model::{BatchEnd, Edit, Workspace};

/// Entries per import transaction, and the byte budget that also closes a batch.
const BATCH_ENTRIES: usize = 4096;
const BATCH_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct TransferReport {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// FIFOs, device nodes and sockets.
    pub special: u64,
    /// Extra names of nodes already counted above (hard links), kept as hard links.
    pub hard_links: u64,
    pub bytes: u64,
    /// Host entries that were not transferred (a file type avfs does not keep), with the
    /// reason.
    pub skipped: Vec<String>,
}

/// Progress callback: (entries so far, bytes so far).
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// What `export` and `apply` say of a device node they do not make.
pub(crate) const DEVICE_SKIPPED: &str = "a device node, not made on the host (see --devices)";

/// How `export` writes the host tree.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExportOptions {
    /// Write into a non-empty directory, overwriting what is there.
    pub force: bool,
    /// Make device nodes (see `ApplyOptions::devices`); otherwise they are listed in
    /// `skipped`.
    pub devices: bool,
}

/// `import` prints a transfer report, or with `--git` what it took from the commit.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum ImportOutput {
    Tree(TransferReport),
    Git(crate::service::git::GitImportReport),
}

/// What `import` takes. By default everything under the directory: dotfiles, `.git/`,
/// ignored files, FIFOs and device nodes (as metadata), with modes, owners, times, xattrs
/// and hard links. Symlinks are copied as links, never followed.
#[derive(Debug, Clone, Copy, Default)]
pub struct ImportOptions {
    /// Skip what `.gitignore`, `.ignore` and `.git/info/exclude` exclude (a virtualenv,
    /// `node_modules`, build output). `.git/` itself is still taken.
    pub gitignore: bool,
    /// Leave `.git/` directories out.
    pub skip_git_dir: bool,
}

fn ns(secs: i64, nsec: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsec)
}

/// A host entry's mode, owner and times as the vault keeps them.
pub(crate) fn host_attrs(meta: &fs::Metadata) -> Attrs {
    Attrs {
        mode: meta.mode() & 0o7777,
        uid: meta.uid(),
        gid: meta.gid(),
        atime: ns(meta.atime(), meta.atime_nsec()),
        mtime: ns(meta.mtime(), meta.mtime_nsec()),
        ctime: ns(meta.ctime(), meta.ctime_nsec()),
    }
}

/// A host entry read and ready to write.
enum Staged {
    Dir(VPath, Attrs),
    File(VPath, Attrs, Vec<u8>),
    Symlink(VPath, Attrs, String),
    /// A FIFO, device node or socket.
    Special(VPath, Attrs, NodeKind),
    /// Another name of the file imported at the second path.
    HardLink(VPath, VPath),
}

/// Import the contents of host directory `host` into `dest` (created if missing).
pub fn import(
    ws: &Workspace,
    host: &Path,
    dest: &VPath,
    opts: ImportOptions,
    progress: Progress<'_>,
) -> Result<TransferReport> {
    let meta = fs::metadata(host).map_err(|e| Error::io("reading", host, e))?;
    if !meta.is_dir() {
        return Err(Error::invalid(format!(
            "{} is not a directory",
            host.display()
        )));
    }
    let mut walker = ignore::WalkBuilder::new(host);
    walker
        .standard_filters(false)
        .hidden(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b));
    if opts.gitignore {
        walker
            .git_ignore(true)
            .git_exclude(true)
            .ignore(true)
            .require_git(false);
    }
    if opts.skip_git_dir {
        walker.filter_entry(|e| e.file_name() != ".git");
    }
    // The batches below are one operation: a batch the vault records when it ends, or,
    // if this process dies part-way, at the next change anyone logs.
    let label = dest.display();
    let start = ws.last_op_id()?.unwrap_or(0);
    ws.begin_batch("import", &label)?;
    let walked = import_entries(ws, host, dest, walker, progress);
    match walked {
        Ok(report) => {
            ws.record_batch("import", &label, BatchEnd::Always)?;
            // Where the workspace came from: `apply` compares the host with this state.
            let host = fs::canonicalize(host).map_err(|e| Error::io("resolving", host, e))?;
            ws.set_origin_git(
                &host.to_string_lossy(),
                &label,
                ws.snapshot_root()?,
                "import",
                crate::service::git::head_commit(&host),
            )?;
            Ok(report)
        }
        Err(e) => {
            // Nothing half-imported stays: record what got in, then revert exactly the
            // import's own entries (other writers' changes meanwhile stay). A change
            // made to an imported file meanwhile keeps that part (revert_conflict).
            ws.record_batch("import", &label, BatchEnd::IfChanged)?;
            let mine: Vec<i64> = ws
                .op_log(usize::MAX >> 1)?
                .into_iter()
                .take_while(|o| o.id > start)
                .filter(|o| o.kind == "import" && o.description == label)
                .map(|o| o.id)
                .collect();
            for id in mine {
                if ws.rollback("import", Some(id)).is_err() {
                    break;
                }
            }
            Err(e)
        }
    }
}

fn import_entries(
    ws: &Workspace,
    host: &Path,
    dest: &VPath,
    walker: ignore::WalkBuilder,
    progress: Progress<'_>,
) -> Result<TransferReport> {
    let mut report = TransferReport::default();
    let mut batch: Vec<Staged> = Vec::new();
    let mut batch_bytes = 0u64;
    let mut dirs: Vec<(VPath, Attrs)> = Vec::new();
    // Host files with several names, by (device, inode): the first name imported.
    let mut linked: HashMap<(u64, u64), VPath> = HashMap::new();
    ws.edit_batch("import", &[dest], |e| e.mkdir(dest, true, 0o755))?;
    for entry in walker.build() {
        let entry =
            entry.map_err(|e| Error::invalid(format!("walking {}: {e}", host.display())))?;
        let rel = entry.path().strip_prefix(host).unwrap_or(entry.path());
        if rel.as_os_str().is_empty() {
            continue;
        }
        let rel_str = rel.to_str().ok_or_else(|| Error::InvalidPath {
            path: rel.display().to_string(),
            reason: "host file name is not UTF-8".into(),
        })?;
        let path = VPath::parse(&format!("{}/{rel_str}", dest.as_str()))?;
        let meta = entry
            .path()
            .symlink_metadata()
            .map_err(|e| Error::io("reading", entry.path(), e))?;
        let attrs = host_attrs(&meta);
        let ft = meta.file_type();
        let staged = if ft.is_dir() {
            report.dirs += 1;
            dirs.push((path.clone(), attrs.clone()));
            Staged::Dir(path, attrs)
        } else if meta.nlink() > 1
            && let Some(first) = linked.get(&(meta.dev(), meta.ino()))
        {
            report.hard_links += 1;
            Staged::HardLink(path, first.clone())
        } else if ft.is_file() {
            if meta.nlink() > 1 {
                linked.insert((meta.dev(), meta.ino()), path.clone());
            }
            let data = fs::read(entry.path()).map_err(|e| Error::io("reading", entry.path(), e))?;
            report.files += 1;
            report.bytes += data.len() as u64;
            batch_bytes += data.len() as u64;
            Staged::File(path, attrs, data)
        } else if ft.is_symlink() {
            let target = fs::read_link(entry.path())
                .map_err(|e| Error::io("reading link", entry.path(), e))?;
            report.symlinks += 1;
            if meta.nlink() > 1 {
                linked.insert((meta.dev(), meta.ino()), path.clone());
            }
            Staged::Symlink(path, attrs, target.to_string_lossy().into_owned())
        } else {
            let Some(kind) = Node::special_kind(meta.mode(), meta.rdev()) else {
                report
                    .skipped
                    .push(format!("{rel_str}: a file type avfs does not keep"));
                continue;
            };
            if meta.nlink() > 1 {
                linked.insert((meta.dev(), meta.ino()), path.clone());
            }
            report.special += 1;
            Staged::Special(path, attrs, kind)
        };
        batch.push(staged);
        if batch.len() >= BATCH_ENTRIES || batch_bytes >= BATCH_BYTES {
            write_batch(ws, dest, std::mem::take(&mut batch))?;
            batch_bytes = 0;
            progress(report.files + report.dirs + report.symlinks, report.bytes);
        }
    }
    write_batch(ws, dest, batch)?;
    // Adding children moved the directories' times; put the host's back.
    ws.edit_batch("import", &[dest], |e| {
        for (path, attrs) in &dirs {
            e.update(path, |n| {
                n.attrs = attrs.clone();
                Ok(())
            })?;
        }
        Ok(())
    })?;
    progress(report.files + report.dirs + report.symlinks, report.bytes);
    Ok(report)
}

fn write_batch(ws: &Workspace, dest: &VPath, batch: Vec<Staged>) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    ws.edit_batch("import", &[dest], |e| {
        for staged in batch {
            write_staged(e, staged)?;
        }
        Ok(())
    })
}

fn write_staged(e: &mut Edit<'_>, staged: Staged) -> Result<()> {
    match staged {
        Staged::Dir(path, attrs) => match e.view().lookup(&path)? {
            Some((n, _)) if n.is_dir() => {
                e.update(&path, |n| {
                    n.attrs = attrs;
                    Ok(())
                })?;
            }
            _ => {
                let mut node = Node::empty_dir(attrs.mode, e.now());
                node.attrs = attrs;
                e.put_node(&path, node)?;
            }
        },
        Staged::File(path, attrs, data) => {
            let content = e.store_content(&data)?;
            let kind = NodeKind::File {
                size: data.len() as u64,
                content,
            };
            e.put_node(&path, Node::new(kind, attrs))?;
        }
        Staged::Symlink(path, attrs, target) => {
            e.put_node(&path, Node::new(NodeKind::Symlink { target }, attrs))?;
        }
        Staged::Special(path, attrs, kind) => e.put_node(&path, Node::new(kind, attrs))?,
        Staged::HardLink(path, first) => {
            // Importing over an earlier import: the name is made anew.
            if e.view().lookup(&path)?.is_some() {
                e.remove(&path, false)?;
            }
            e.link(&first, &path)?;
        }
    }
    Ok(())
}

pub(super) fn system_time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

/// Export `src` (a directory or a single file) to `host`. Refuses to write into an existing
/// non-empty directory or over an existing file unless `force`. All or nothing: the tree
/// is written into a private staging directory beside `host` and moved into place only
/// when every entry was written, so a failure (a path the host cannot hold, a full disk)
/// leaves the host as it was and names the path that failed.
pub fn export(
    ws: &Workspace,
    src: &VPath,
    at: Option<&str>,
    host: &Path,
    opts: ExportOptions,
    progress: Progress<'_>,
) -> Result<TransferReport> {
    let ExportOptions { force, devices } = opts;
    if !force {
        match fs::symlink_metadata(host) {
            Ok(m) if m.is_dir() => {
                let mut it = fs::read_dir(host).map_err(|e| Error::io("reading", host, e))?;
                if it.next().is_some() {
                    return Err(Error::HostPathExists {
                        path: host.to_path_buf(),
                    });
                }
            }
            Ok(_) => {
                return Err(Error::HostPathExists {
                    path: host.to_path_buf(),
                });
            }
            Err(_) => {}
        }
    }
    if host
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(Error::invalid(format!(
            "export destination `{}` has a `..`: name the directory itself",
            host.display()
        )));
    }
    let host = std::path::absolute(host).map_err(|e| Error::io("resolving", host, e))?;
    // Stage in the nearest existing ancestor, so the final moves are renames within one
    // file system; missing parents are staged too.
    let anchor = host
        .ancestors()
        .skip(1)
        .find(|a| a.is_dir())
        .ok_or_else(|| Error::invalid(format!("no existing parent of {}", host.display())))?
        .to_path_buf();
    let below = host.strip_prefix(&anchor).unwrap_or(&host).to_path_buf();
    let stage = Staging::new(&anchor)?;
    // Errors name the host path the entry was going to, not its staging place.
    let unstaged = |path: PathBuf| {
        path.strip_prefix(&stage.dir)
            .map(|rest| anchor.join(rest))
            .unwrap_or(path)
    };
    let report = write_tree(ws, src, at, &stage.dir.join(&below), devices, progress).map_err(
        |e| match e {
            Error::Io {
                context,
                path,
                source,
            } => Error::Io {
                context,
                path: unstaged(path),
                source,
            },
            Error::DiskFull {
                path: Some(path),
                reason,
                maybe_applied,
            } => Error::DiskFull {
                path: Some(unstaged(path)),
                reason,
                maybe_applied,
            },
            e => e,
        },
    )?;
    check_move(&stage.dir, &anchor, force)?;
    move_into(&stage.dir, &anchor)?;
    Ok(report)
}

/// A private directory (0700, a fresh name made with O_EXCL semantics), removed on drop.
struct Staging {
    dir: PathBuf,
}

impl Staging {
    fn new(parent: &Path) -> Result<Staging> {
        use std::os::unix::fs::DirBuilderExt;
        remove_stale_staging(parent);
        for attempt in 0u32.. {
            let name = format!(
                ".avfs-export-{}-{}",
                std::process::id(),
                blake3::hash(
                    &[
                        &crate::model::now_ns().to_le_bytes()[..],
                        &attempt.to_le_bytes()
                    ]
                    .concat()
                )
                .to_hex()
                .get(..12)
                .unwrap_or("0")
            );
            let dir = parent.join(name);
            match fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(Staging { dir }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 16 => continue,
                Err(e) => return Err(Error::io("creating a staging directory in", parent, e)),
            }
        }
        unreachable!("the loop returns")
    }
}

/// Staging directories an export killed before it could clean up left in `parent`: each
/// names its process, so one whose process is gone is removed.
fn remove_stale_staging(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(".avfs-export-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            continue;
        };
        let alive = rustix::process::Pid::from_raw(pid)
            .is_some_and(|p| rustix::process::test_kill_process(p).is_ok());
        if !alive {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Move everything in `from` into `to`: an entry whose name is free (or an empty
/// directory) is renamed in whole; a directory onto an existing directory is merged, then
/// given the staged directory's mode and times; with `force`, anything else in the way is
/// replaced.
fn move_into(from: &Path, to: &Path) -> Result<()> {
    for entry in fs::read_dir(from).map_err(|e| Error::io("reading", from, e))? {
        let entry = entry.map_err(|e| Error::io("reading", from, e))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let staged = fs::symlink_metadata(&src).map_err(|e| Error::io("reading", &src, e))?;
        let existing = fs::symlink_metadata(&dst).ok();
        match existing {
            None => rename(&src, &dst)?,
            Some(e) if e.is_dir() && staged.is_dir() => {
                if fs::rename(&src, &dst).is_err() {
                    move_into(&src, &dst)?;
                    fs::set_permissions(&dst, staged.permissions())
                        .map_err(|e| Error::io("setting mode of", &dst, e))?;
                    set_times_from(&dst, &staged)?;
                }
            }
            // `check_move` refused anything else before a first move.
            Some(_) => {
                fs::remove_file(&dst).map_err(|e| Error::io("replacing", &dst, e))?;
                rename(&src, &dst)?;
            }
        }
    }
    Ok(())
}

/// Refuse, before anything moves, what `move_into` could not do whole: a name the host
/// already uses (unless `force`), and a host directory in the way of a file or link, which
/// even `force` does not delete. Changes nothing.
fn check_move(from: &Path, to: &Path, force: bool) -> Result<()> {
    for entry in fs::read_dir(from).map_err(|e| Error::io("reading", from, e))? {
        let entry = entry.map_err(|e| Error::io("reading", from, e))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let staged = fs::symlink_metadata(&src).map_err(|e| Error::io("reading", &src, e))?;
        match fs::symlink_metadata(&dst).ok() {
            None => {}
            Some(e) if e.is_dir() && staged.is_dir() => check_move(&src, &dst, force)?,
            Some(e) if e.is_dir() => {
                return Err(Error::IsADirectory {
                    path: dst.display().to_string(),
                });
            }
            Some(_) if !force => return Err(Error::HostPathExists { path: dst }),
            Some(_) => {}
        }
    }
    Ok(())
}

fn rename(src: &Path, dst: &Path) -> Result<()> {
    fs::rename(src, dst).map_err(|e| Error::io("moving into place", dst, e))
}

fn set_times_from(path: &Path, meta: &fs::Metadata) -> Result<()> {
    set_times_ns(
        path,
        meta.atime() * 1_000_000_000 + meta.atime_nsec(),
        meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
    )
}

/// Write `src` as of `at` to `host`, which does not exist yet (it is in a staging tree).
fn write_tree(
    ws: &Workspace,
    src: &VPath,
    at: Option<&str>,
    host: &Path,
    devices: bool,
    progress: Progress<'_>,
) -> Result<TransferReport> {
    if let Some(parent) = host.parent() {
        fs::create_dir_all(parent).map_err(|e| Error::io("creating", parent, e))?;
    }
    ws.read_at(at, |view| {
        let how = Writing {
            devices,
            skip: &|_, _, _| false,
            donor: None,
            linked: &mut HashMap::new(),
        };
        write_view(view, src, host, how, progress)
    })
}
