//! What the supervisor tells the sandbox's init process: the root to assemble, the
//! workspace's file system, and the command. Written as JSON into the run's private
//! directory and read by `init` after it starts.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where a session's kept namespace keeps its layers, inside it (a 0700 tmpfs at the
/// root).
pub const STAGE: &str = "/.avfs";

/// How the workspace directory inside the sandbox is made.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum WorkspaceFs {
    /// The vault served over FUSE on descriptor `fd`, mounted at the workspace path.
    Fuse { fd: i32, readonly: bool },
    /// A kernel overlay: lower = the vault's root served read-only over FUSE on `fd`
    /// (mounted at `lower`), or with no `fd` the materialized tree `tree` bound read-only
    /// at `lower`; upper and work directories on the host's disk.
    Overlay {
        fd: Option<i32>,
        #[serde(default)]
        tree: Option<PathBuf>,
        lower: PathBuf,
        upper: PathBuf,
        work: PathBuf,
    },
    /// A host directory (a materialized copy of the fork) bound at the workspace path.
    Bind { dir: PathBuf, readonly: bool },
    /// A session's kept namespace (the init assembles the root and stays, see `kept`): the
    /// fork's state served read-only over FUSE on `fd` at `STAGE/lower`, the session's
    /// host directory for its commands' upper layers `uppers` bound at `STAGE/h`, the
    /// file system of kept layers (`layer`) at `STAGE/l`, and the workspace path left
    /// empty for each command to cover.
    Staged { fd: i32, uppers: PathBuf },
    /// A command of a session: it joins the kept namespace and covers the workspace path
    /// with its own overlay there.
    Joined(Join),
}

/// Secrets over a materialized tree: a FUSE view of the fork's state on `fd` that shows
/// only the secrets (unreadable) and the directories above them, mounted at `at` and put
/// above the tree as the overlay's top lower layer, so a secret is listed and cannot be
/// opened, as on a FUSE lower. A read-only tree is bound at `tree_at` first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Refuse {
    pub fd: i32,
    pub at: PathBuf,
    pub tree_at: PathBuf,
}

/// Where a session's command finds its namespace and its overlay. Paths are inside the
/// kept namespace.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Join {
    /// A pidfd of the process that keeps the namespace.
    pub holder: i32,
    /// The overlay's lower layers, top first (the last is the fork's state over FUSE).
    pub lowers: Vec<PathBuf>,
    /// The upper and work directories; none: the workspace is read-only.
    pub upper: Option<(PathBuf, PathBuf)>,
}

/// Everything the init process needs; paths are host paths unless named otherwise.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    /// An empty directory that becomes the sandbox's root (a tmpfs is mounted on it).
    pub root: PathBuf,
    /// Where the workspace appears inside the sandbox.
    pub workspace_path: PathBuf,
    pub workspace: WorkspaceFs,
    /// Secrets to cover once the workspace is mounted (a tree lower, or a bound tree).
    #[serde(default)]
    pub refuse: Option<Refuse>,
    /// A file system made for this run (a tmpfs sized to the workspace's quota), passed
    /// as a detached mount on this descriptor and attached at `layer.1` before the
    /// workspace is made (the overlay's upper layer or the copy live on it).
    #[serde(default)]
    pub layer: Option<(i32, PathBuf)>,
    /// Once the workspace is mounted, the layer keeps room for only this many more inodes
    /// (the quota's `max_files` left).
    #[serde(default)]
    pub layer_inodes: Option<u64>,
    /// Host paths bound at the same path, read-only.
    pub ro: Vec<PathBuf>,
    /// Host paths bound at the same path, writable.
    pub rw: Vec<PathBuf>,
    /// Host paths that must not be seen even if a bind above contains them (the avfs home,
    /// the vault file): an empty read-only file system is mounted over each.
    pub hide: Vec<PathBuf>,
    /// The private home directory inside the sandbox (an empty tmpfs).
    pub home: PathBuf,
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Working directory inside the sandbox.
    pub cwd: PathBuf,
    pub offline: bool,
    pub landlock: bool,
    /// Run in a new user namespace, mapping this uid and gid to themselves (non-root).
    pub userns: Option<(u32, u32)>,
    /// Where the init reports progress and failures (JSON lines, see `Status`).
    pub status_fd: i32,
}

/// One line the init writes on the status descriptor.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The FUSE file system is mounted: the supervisor may start answering it.
    Mounted,
    /// The root could not be assembled; the command did not run.
    SetupFailed { reason: String },
    /// The command could not be started.
    SpawnFailed {
        reason: String,
        os_error: Option<i32>,
    },
    /// A kept namespace is assembled and held (sessions).
    Ready,
    /// The command ended by this signal (the init reports it, since a namespace's init
    /// process cannot die of a signal it sends itself).
    Signaled { signal: i32 },
}
