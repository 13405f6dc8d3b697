//! The execution sandbox: each proxied command runs in its own mount and pid namespaces, on
//! a root assembled for it (the workspace at a stable path, read-only system directories, a
//! minimal /dev, fresh /proc, private /tmp and home, nothing else), so a symlink or a path a
//! program builds cannot reach a host file it was not granted.
//!
//! The pieces: `spec` (what the supervisor hands the init), `init` (the init process, a
//! fresh start of the host program, see `maybe_init`), `ingest` (an overlay's upper layer
//! into the fork) and, here, the supervisor's side: modes, the policy's `[sandbox]` table,
//! the run's private directory and the launch.

pub mod ingest;
pub mod init;
mod join;
pub mod kept;
mod spec;
pub mod trees;

use std::io::BufRead;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use spec::{Join, Spec, Status, WorkspaceFs};

use super::confine::Confinement;
use super::mount::MountFs;
use super::mounter::{Mounter, ServedMount};
use super::runner::{self, RunResult, RunSpec};
use crate::error::{Error, Result};
use crate::model::path::VPath;

/// Set once the host program called `maybe_init`: it can then start sandbox inits.
static ENTRY: AtomicBool = AtomicBool::new(false);

/// Call first thing in `main` of a program that runs proxied commands. In a sandbox's init
/// (started as `PROGRAM __avfs-sandbox-init SPEC`) it runs the init and returns its exit
/// code; otherwise it notes that this program can start sandboxes and returns `None`.
pub fn maybe_init() -> Option<i32> {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() == Some(std::ffi::OsStr::new(init::INIT_ARG)) {
        let spec = args.next().map(PathBuf::from).unwrap_or_default();
        return Some(init::main(&spec));
    }
    ENTRY.store(true, Ordering::SeqCst);
    None
}

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
const SYSTEM_DIRS: &[&str] = &[
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
fn expand(raw: &str, env: &[(String, String)]) -> Option<PathBuf> {
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

/// Why this process cannot make sandboxes, if it cannot.
pub fn unavailable_reason() -> Option<String> {
    if !ENTRY.load(Ordering::SeqCst) {
        return Some(
            "this program does not start sandboxes (it must call sandbox::maybe_init first)".into(),
        );
    }
    if rustix::process::geteuid().is_root() {
        return None;
    }
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return Some("user namespaces are disabled (user.max_user_namespaces is 0)".into());
    }
    if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return Some(
            "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone is 0)"
                .into(),
        );
    }
    None
}

/// Why `program` did not start, in words a person can act on.
pub(crate) fn spawn_reason(program: &str, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::NotFound && program.contains('/') {
        let interp = std::fs::read(program)
            .ok()
            .filter(|b| b.starts_with(b"#!"))
            .and_then(|b| {
                let line = b.split(|c| *c == b'\n').next().unwrap_or_default().to_vec();
                String::from_utf8(line).ok()
            });
        if let Some(line) = interp {
            return format!("its interpreter `{}` was not found", line[2..].trim());
        }
    }
    e.to_string()
}

/// A run's private directory: made fresh (never an existing path) under the 0700 runtime
/// directory, removed when dropped. Directories left by a supervisor that died are
/// removed by the next run.
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    pub fn create(runtime: &Path) -> Result<RunDir> {
        // The runtime directory itself must be ours alone and a real directory: a symlink
        // planted in its place would move every run (and its mounts) elsewhere.
        use std::os::unix::fs::MetadataExt;
        let meta =
            std::fs::symlink_metadata(runtime).map_err(|e| Error::io("reading", runtime, e))?;
        let euid = rustix::process::geteuid().as_raw();
        if !meta.is_dir() || meta.uid() != euid || meta.mode() & 0o077 != 0 {
            return Err(Error::SandboxFailed {
                reason: format!(
                    "{} must be a directory owned by uid {euid} with mode 0700 (it is {}, owned by uid {}, mode {:o})",
                    runtime.display(),
                    if meta.file_type().is_symlink() {
                        "a symlink"
                    } else if meta.is_dir() {
                        "a directory"
                    } else {
                        "a file"
                    },
                    meta.uid(),
                    meta.mode() & 0o7777
                ),
            });
        }
        remove_stale(runtime);
        let mut seed = [0u8; 8];
        let _ = rustix::rand::getrandom(&mut seed, rustix::rand::GetRandomFlags::empty());
        let name = format!(
            "{}-{:016x}",
            std::process::id(),
            u64::from_le_bytes(seed) ^ crate::model::now_ns() as u64
        );
        let path = runtime.join(name);
        // create_dir fails on anything already there, a planted symlink included.
        std::fs::create_dir(&path).map_err(|e| Error::io("creating", &path, e))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| Error::io("restricting", &path, e))?;
        Ok(RunDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Remove run directories whose supervisor is gone.
pub(crate) fn remove_stale(runtime: &Path) {
    let Ok(entries) = std::fs::read_dir(runtime) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // A zombie is gone too (a killed daemon nobody reaped yet).
        if !super::mounts::pid_alive(pid as u32) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// A file system of the run's own, limited to what the workspace's quota has left: the
/// overlay's upper layer or the copy live on it, so the write that crosses the quota
/// fails there and then (ENOSPC), not afterwards. A detached mount (new mount API): it
/// exists only through this descriptor, and in the sandbox it is attached to.
pub struct Layer {
    fd: OwnedFd,
    /// The inodes a command may make on it, once the overlay made its own.
    inodes: Option<u64>,
}

impl Layer {
    /// A tmpfs of at most `bytes` bytes (at least a page) on which a command may make
    /// `inodes` inodes; `None`: no limit. It starts with room to spare for the overlay's
    /// own (its work directories, and the files it makes to probe what the file system
    /// can do), and the sandbox narrows it to `inodes` more than those once the overlay is
    /// mounted.
    pub fn sized(bytes: Option<u64>, inodes: Option<u64>) -> Result<Layer> {
        const SPARE: u64 = 64;
        use rustix::mount::{
            FsMountFlags, FsOpenFlags, MountAttrFlags, fsconfig_create, fsconfig_set_string,
            fsmount, fsopen,
        };
        let failed = |what: &str, e: rustix::io::Errno| Error::SandboxFailed {
            reason: format!("making the run's quota-sized file system ({what}): {e}"),
        };
        let fs = fsopen("tmpfs", FsOpenFlags::FSOPEN_CLOEXEC).map_err(|e| failed("fsopen", e))?;
        // Zero is how tmpfs spells "no limit"; a number past what it holds is refused.
        for (key, value) in [
            ("size", bytes.map_or(0, |b| b.max(4096)).to_string()),
            (
                "nr_inodes",
                inodes.map_or(0, |i| i.saturating_add(SPARE)).to_string(),
            ),
            ("mode", "0700".to_string()),
        ] {
            fsconfig_set_string(&fs, key, value.as_str()).map_err(|e| failed(key, e))?;
        }
        fsconfig_create(&fs).map_err(|e| failed("create", e))?;
        let fd = fsmount(&fs, FsMountFlags::FSMOUNT_CLOEXEC, MountAttrFlags::empty())
            .map_err(|e| failed("fsmount", e))?;
        Ok(Layer { fd, inodes })
    }

    /// `rel` inside the layer, as this process reaches it.
    pub fn path(&self, rel: &str) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}/{rel}", self.fd.as_raw_fd()))
    }
}

/// The file system the sandbox gives the command at the workspace path.
pub enum Served {
    /// This mount, read-write (or read-only), over FUSE.
    Fuse(Arc<MountFs>),
    /// A kernel overlay whose lower layer is this read-only mount; the upper layer is the
    /// run directory's `upper`.
    Overlay(Arc<MountFs>),
    /// A kernel overlay whose lower layer is this materialized tree (see `trees`), with
    /// its secrets' placeholders covered by `refuser`, if given.
    OverlayOn {
        tree: PathBuf,
        refuser: Option<Refuser>,
    },
    /// A host directory bound as it is (read-only, or not), with secrets' placeholders
    /// covered by `refuser`, if given.
    Bind {
        dir: PathBuf,
        readonly: bool,
        refuser: Option<Refuser>,
    },
    /// A session's command in the session's kept namespace (see `kept`); a layer given to
    /// `run` is attached in that namespace at `layer_at`.
    Joined { join: Join, layer_at: PathBuf },
}

/// What covers a tree's placeholders for secrets: a read-only FUSE view of the same root
/// that shows only the secrets (unreadable) and the directories above them
/// (`MountFs::showing_only`).
pub struct Refuser {
    pub view: Arc<MountFs>,
}

/// One command to run in a sandbox.
pub struct Launch<'a> {
    pub config: &'a SandboxConfig,
    /// Host paths the command must not see even inside a bound directory.
    pub hide: Vec<PathBuf>,
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: &'a VPath,
    pub timeout: Duration,
    pub cap: usize,
    pub confinement: Confinement,
}

/// The host paths bound read-only and writable, the private home and the environment a
/// command gets.
struct Layout {
    ro: Vec<PathBuf>,
    rw: Vec<PathBuf>,
    home: PathBuf,
    env: Vec<(String, String)>,
}

impl Launch<'_> {
    /// What the root assembled for this launch depends on, as text: equal for two launches
    /// that may share a kept namespace.
    fn fingerprint(&self) -> Result<String> {
        let l = self.layout()?;
        Ok(format!(
            "{:?}|{:?}|{:?}|{:?}|{}",
            l.ro, l.rw, l.home, self.hide, self.config.workspace_path
        ))
    }

    fn layout(&self) -> Result<Layout> {
        let mut ro: Vec<PathBuf> = SYSTEM_DIRS
            .iter()
            .map(PathBuf::from)
            .filter(|p| std::fs::symlink_metadata(p).is_ok())
            .collect();
        let extra = |list: &[String]| -> Vec<PathBuf> {
            list.iter()
                .filter_map(|raw| expand(raw, &self.env))
                .filter(|p| p.exists())
                .collect()
        };
        for p in extra(&self.config.ro) {
            if !ro.contains(&p) {
                ro.push(p);
            }
        }
        let rw = extra(&self.config.rw);
        let home = self
            .env
            .iter()
            .rev()
            .find(|(k, _)| k == "HOME")
            .map(|(_, v)| PathBuf::from(v))
            .filter(|h| h.is_absolute() && h != Path::new("/"))
            .unwrap_or_else(|| PathBuf::from("/home/agent"));
        let ws = Path::new(&self.config.workspace_path);
        let cwd = if self.cwd.is_root() {
            ws.to_path_buf()
        } else {
            ws.join(self.cwd.as_str().trim_start_matches('/'))
        };
        let mut env: Vec<(String, String)> = self
            .env
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "HOME" | "PWD" | "TMPDIR" | "OLDPWD"))
            .cloned()
            .collect();
        env.push(("HOME".into(), home.display().to_string()));
        env.push(("PWD".into(), cwd.display().to_string()));
        env.push(("TMPDIR".into(), "/tmp".into()));
        // The workspace must be the fork: not the home, not inside a bound host path, and
        // holding none (a bind would cover the workspace or land in it).
        let clash = ro
            .iter()
            .chain(&rw)
            .find(|b| ws.starts_with(b) || b.starts_with(ws));
        if let Some(b) = clash {
            return Err(Error::invalid(format!(
                "sandbox workspace_path `{}` overlaps the bound host path `{}`",
                ws.display(),
                b.display()
            )));
        }
        if ws == home {
            return Err(Error::invalid(format!(
                "sandbox workspace_path `{}` is the command's home, which the sandbox makes itself; use a directory inside it",
                ws.display()
            )));
        }
        Ok(Layout { ro, rw, home, env })
    }
}

/// Where the overlay's upper layer of a run is, as this process reaches it.
pub fn upper_dir(dir: &RunDir, layer: Option<&Layer>) -> PathBuf {
    match layer {
        Some(l) => l.path("upper"),
        None => dir.path().join("upper"),
    }
}

/// Run `launch` in a sandbox whose workspace is `fs`, with `dir` as the run's private
/// directory (and `layer`, when given, holding the overlay's upper layer or the copy).
/// Returns how the command ended and what the envelope says of the sandbox.
pub fn run(
    dir: &RunDir,
    launch: &Launch<'_>,
    fs: Served,
    layer: Option<&Layer>,
    mounter: &dyn Mounter,
) -> Result<(RunResult, SandboxReport)> {
    let Layout { ro, rw, home, env } = launch.layout()?;
    let root = dir.path().join("root");
    std::fs::create_dir(&root).map_err(|e| Error::io("creating", &root, e))?;
    let (status_r, status_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| Error::io("creating a pipe in", dir.path(), e.into()))?;
    let mut pass = vec![status_w.as_raw_fd()];
    let mut layer_at = None;
    let mut refuse = None;
    let mut refuse_with = |refuser: Option<Refuser>,
                           pass: &mut Vec<i32>|
     -> Result<Option<(Arc<MountFs>, OwnedFd)>> {
        let Some(r) = refuser else { return Ok(None) };
        let dev = mounter.open_device()?;
        pass.push(dev.as_raw_fd());
        let [at, tree_at] = ["refuser", "tree"].map(|n| dir.path().join(n));
        for d in [&at, &tree_at] {
            std::fs::create_dir(d).map_err(|e| Error::io("creating", d, e))?;
        }
        refuse = Some(spec::Refuse {
            fd: dev.as_raw_fd(),
            at,
            tree_at,
        });
        Ok(Some((r.view, dev)))
    };
    let (workspace, serve): (WorkspaceFs, Option<(Arc<MountFs>, OwnedFd)>) = match fs {
        Served::Fuse(session) => {
            let dev = mounter.open_device()?;
            pass.push(dev.as_raw_fd());
            let readonly = session.readonly();
            (
                WorkspaceFs::Fuse {
                    fd: dev.as_raw_fd(),
                    readonly,
                },
                Some((session, dev)),
            )
        }
        Served::Overlay(_) | Served::OverlayOn { .. } => {
            let (fd, tree, lower) = match fs {
                Served::Overlay(lower) => {
                    let dev = mounter.open_device()?;
                    pass.push(dev.as_raw_fd());
                    (Some(dev), None, Some(lower))
                }
                Served::OverlayOn { tree, refuser } => {
                    let (view, dev) = refuse_with(refuser, &mut pass)?.unzip();
                    (dev, Some(tree), view)
                }
                _ => unreachable!("matched above"),
            };
            let l = dir.path().join("lower");
            std::fs::create_dir(&l).map_err(|e| Error::io("creating", &l, e))?;
            // Upper and work on the run's own file system when it has one (made here, seen
            // by the init where it attaches it).
            let (u, w) = match layer {
                Some(layer) => {
                    for (n, mode) in [("upper", 0o755), ("work", 0o700)] {
                        let d = layer.path(n);
                        use std::os::unix::fs::DirBuilderExt;
                        std::fs::DirBuilder::new()
                            .mode(mode)
                            .create(&d)
                            .map_err(|e| Error::io("creating", &d, e))?;
                    }
                    let at = dir.path().join("layer");
                    (at.join("upper"), at.join("work"))
                }
                None => {
                    let [u, w] = ["upper", "work"].map(|n| dir.path().join(n));
                    for d in [&u, &w] {
                        std::fs::create_dir(d).map_err(|e| Error::io("creating", d, e))?;
                    }
                    (u, w)
                }
            };
            (
                WorkspaceFs::Overlay {
                    fd: fd
                        .as_ref()
                        .filter(|_| tree.is_none())
                        .map(|d| d.as_raw_fd()),
                    tree,
                    lower: l,
                    upper: u,
                    work: w,
                },
                lower.zip(fd),
            )
        }
        Served::Bind {
            dir,
            readonly,
            refuser,
        } => (
            WorkspaceFs::Bind { dir, readonly },
            refuse_with(refuser, &mut pass)?,
        ),
        Served::Joined { join, layer_at: at } => {
            pass.push(join.holder);
            layer_at = Some(at);
            (WorkspaceFs::Joined(join), None)
        }
    };
    let ws_path = PathBuf::from(&launch.config.workspace_path);
    let cwd = env
        .iter()
        .find(|(k, _)| k == "PWD")
        .map(|(_, v)| PathBuf::from(v))
        .unwrap_or_else(|| ws_path.clone());
    let euid = rustix::process::geteuid();
    if let Some(l) = layer {
        pass.push(l.fd.as_raw_fd());
    }
    let spec = Spec {
        root,
        workspace_path: ws_path.clone(),
        workspace,
        refuse,
        layer: layer.map(|l| {
            let at = layer_at.unwrap_or_else(|| dir.path().join("layer"));
            (l.fd.as_raw_fd(), at)
        }),
        layer_inodes: layer.and_then(|l| l.inodes),
        ro: ro.clone(),
        rw: rw.clone(),
        hide: launch.hide.clone(),
        home,
        program: launch.program.clone(),
        args: launch.args.clone(),
        env: env.clone(),
        cwd,
        offline: launch.confinement.offline,
        landlock: launch.confinement.landlock,
        userns: (!euid.is_root()).then(|| (euid.as_raw(), rustix::process::getegid().as_raw())),
        status_fd: status_w.as_raw_fd(),
    };
    let spec_path = dir.path().join("spec.json");
    let bytes = serde_json::to_vec(&spec).map_err(|e| Error::invalid(e.to_string()))?;
    std::fs::write(&spec_path, bytes).map_err(|e| Error::io("writing", &spec_path, e))?;
    let args = vec![init::INIT_ARG.to_string(), spec_path.display().to_string()];
    let (result, statuses, served) = std::thread::scope(|scope| {
        // Answer the FUSE mount once the init says it exists; collect what else it says.
        let listener = scope.spawn(move || {
            let mut serve = serve;
            let mut served: Option<Result<Box<dyn ServedMount>>> = None;
            let mut statuses = Vec::new();
            let reader = std::io::BufReader::new(std::fs::File::from(status_r));
            for line in reader.lines() {
                let Ok(line) = line else { break };
                let Ok(status) = serde_json::from_str::<Status>(&line) else {
                    continue;
                };
                if status == Status::Mounted {
                    if let Some((session, dev)) = serve.take() {
                        served = Some(mounter.serve_device(session, dev));
                    }
                } else {
                    statuses.push(status);
                }
            }
            (statuses, served)
        });
        let result = runner::run(&RunSpec {
            program: "/proc/self/exe",
            args: &args,
            cwd: Path::new("/"),
            env: env.clone(),
            timeout: launch.timeout,
            cap: launch.cap,
            confine: None,
            pass_fds: pass.clone(),
            die_with_parent: true,
        });
        // Our end of the status pipe: the listener sees its end once the sandbox is gone.
        drop(status_w);
        let (statuses, served) = listener.join().unwrap_or_default();
        (result, statuses, served)
    });
    // The namespace is gone, and its mounts with it: the FUSE session ends by itself.
    let ended = match served {
        Some(Ok(mount)) => mount.unmount().map_err(|e| Error::MountFailed {
            dir: ws_path.clone(),
            reason: format!("ending the sandbox's file system: {e}"),
        }),
        Some(Err(e)) => Err(e),
        None => Ok(()),
    };
    let mut result = result?;
    for status in statuses {
        match status {
            Status::SetupFailed { reason } => return Err(Error::SandboxFailed { reason }),
            Status::SpawnFailed { reason, os_error } => {
                return Err(Error::SpawnFailed {
                    program: launch.program.clone(),
                    reason,
                    os_error,
                });
            }
            Status::Signaled { signal } => {
                result.exit_code = None;
                result.signal = Some(signal);
            }
            Status::Mounted | Status::Ready => {}
        }
    }
    ended?;
    let report = SandboxReport {
        kind: SandboxKind::Namespace,
        reason: None,
        workspace_path: Some(ws_path.display().to_string()),
        ro: ro.iter().map(|p| p.display().to_string()).collect(),
        rw: rw.iter().map(|p| p.display().to_string()).collect(),
        refused: Vec::new(),
        lower: None,
    };
    Ok((result, report))
}

/// A session's kept namespace, assembled and waiting for its commands (see `kept`).
pub(crate) struct Holder {
    child: std::process::Child,
    /// Names the holder for the commands' `setns`, whatever becomes of its pid.
    pidfd: OwnedFd,
    served: Box<dyn ServedMount>,
}

impl Holder {
    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None)) && !self.served.is_finished()
    }

    /// Kill the holder: its namespace, and every mount in it, goes.
    fn end(mut self) -> Result<()> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        runner::unkeep(self.child.id());
        self.served.unmount().map_err(|e| Error::SandboxFailed {
            reason: format!("ending the session's file system: {e}"),
        })
    }
}

/// Start a holder for `launch`'s root in `dir`: `lower` is served read-only at the stage's
/// `lower`, the host directory `uppers` bound at its `h`, and `store` attached at its `l`.
fn hold(
    dir: &RunDir,
    launch: &Launch<'_>,
    lower: Arc<MountFs>,
    uppers: &Path,
    store: &Layer,
    mounter: &dyn Mounter,
) -> Result<Holder> {
    let Layout { ro, rw, home, env } = launch.layout()?;
    let root = dir.path().join("root");
    std::fs::create_dir(&root).map_err(|e| Error::io("creating", &root, e))?;
    let (status_r, status_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| Error::io("creating a pipe in", dir.path(), e.into()))?;
    let dev = mounter.open_device()?;
    let ws_path = PathBuf::from(&launch.config.workspace_path);
    let euid = rustix::process::geteuid();
    let spec = Spec {
        root,
        workspace_path: ws_path.clone(),
        workspace: WorkspaceFs::Staged {
            fd: dev.as_raw_fd(),
            uppers: uppers.to_path_buf(),
        },
        refuse: None,
        layer: Some((store.fd.as_raw_fd(), PathBuf::from(join::STAGE).join("l"))),
        layer_inodes: None,
        ro,
        rw,
        hide: launch.hide.clone(),
        home,
        program: String::new(),
        args: Vec::new(),
        env: env.clone(),
        cwd: ws_path,
        offline: false,
        landlock: false,
        userns: (!euid.is_root()).then(|| (euid.as_raw(), rustix::process::getegid().as_raw())),
        status_fd: status_w.as_raw_fd(),
    };
    let spec_path = dir.path().join("hold.json");
    let bytes = serde_json::to_vec(&spec).map_err(|e| Error::invalid(e.to_string()))?;
    std::fs::write(&spec_path, bytes).map_err(|e| Error::io("writing", &spec_path, e))?;
    let args = vec![init::INIT_ARG.to_string(), spec_path.display().to_string()];
    let mut cmd = runner::command(&RunSpec {
        program: "/proc/self/exe",
        args: &args,
        cwd: Path::new("/"),
        env,
        timeout: Duration::MAX,
        cap: 0,
        confine: None,
        pass_fds: vec![status_w.as_raw_fd(), dev.as_raw_fd(), store.fd.as_raw_fd()],
        die_with_parent: true,
    })?;
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit());
    let mut child = cmd.spawn().map_err(|e| Error::SandboxFailed {
        reason: format!("starting the session's namespace: {e}"),
    })?;
    // Not a leftover of the runs that follow: they must not kill it.
    runner::keep(child.id());
    drop(status_w);
    let pidfd = rustix::process::Pid::from_raw(child.id() as i32)
        .ok_or_else(|| Error::invalid("no pid"))
        .and_then(|p| {
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).map_err(|e| {
                Error::SandboxFailed {
                    reason: format!("pidfd_open: {e}"),
                }
            })
        });
    let (mut dev, mut served, mut ready, mut failed) = (Some(dev), None, false, None);
    for line in std::io::BufReader::new(std::fs::File::from(status_r)).lines() {
        let Ok(line) = line else { break };
        match serde_json::from_str::<Status>(&line) {
            Ok(Status::Mounted) => {
                if let Some(dev) = dev.take() {
                    served = Some(mounter.serve_device(lower.clone(), dev));
                }
            }
            Ok(Status::Ready) => ready = true,
            Ok(Status::SetupFailed { reason }) => failed = Some(reason),
            _ => {}
        }
    }
    let fail = |child: &mut std::process::Child, reason: String| {
        let _ = child.kill();
        let _ = child.wait();
        runner::unkeep(child.id());
        Error::SandboxFailed { reason }
    };
    let pidfd = match pidfd {
        Ok(fd) => fd,
        Err(e) => return Err(fail(&mut child, e.to_string())),
    };
    match (served, ready, failed) {
        (Some(Ok(served)), true, None) => Ok(Holder {
            child,
            pidfd,
            served,
        }),
        (Some(Err(e)), _, _) => Err(fail(&mut child, e.to_string())),
        (_, _, Some(reason)) => Err(fail(&mut child, reason)),
        _ => Err(fail(
            &mut child,
            "the session's namespace ended before it was ready".into(),
        )),
    }
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

    #[test]
    fn a_run_directory_is_fresh_private_and_removed_and_stale_ones_go() {
        let runtime = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        // A runtime directory others may enter, or a symlink in its place, is refused.
        std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = RunDir::create(runtime.path()).err().expect("0755 refused");
        assert_eq!(err.kind(), "sandbox_failed");
        std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let link = elsewhere.path().join("run");
        std::os::unix::fs::symlink(runtime.path(), &link).unwrap();
        let err = RunDir::create(&link).err().expect("a symlink refused");
        assert!(err.to_string().contains("a symlink"), "{err}");
        // A directory of a supervisor that is gone (pid far above pid_max).
        let stale = runtime.path().join("999999999-0000");
        std::fs::create_dir(&stale).unwrap();
        let dir = RunDir::create(runtime.path()).unwrap();
        assert!(!stale.exists(), "a dead supervisor's directory is removed");
        let mode = std::fs::metadata(dir.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let path = dir.path().to_path_buf();
        drop(dir);
        assert!(!path.exists());
    }
}
