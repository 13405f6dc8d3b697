//! The one error type of the library. Every variant has a stable snake_case `kind`, a
//! human message, machine-readable details and a documented exit code, so every adapter
//! (CLI, mount, proxy) reports failures the same way.

use std::path::PathBuf;

use serde_json::{Value, json};

// The conflict types are defined here, with the errors that carry them, so this module
// needs nothing from the layers above it (merge and apply re-export them).

/// A path changed on both sides in ways that do not combine.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct Conflict {
    pub path: String,
    /// The target's change: `added`, `modified`, `deleted` or `type_changed`.
    pub ours: String,
    /// The fork's change.
    pub theirs: String,
}

/// A host path that does not match the base the change was made against.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct HostConflict {
    pub path: String,
    pub reason: String,
}

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong, with the data a caller needs to act on it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("vault `{name}` not found{}", suggest(.suggestions))]
    VaultNotFound {
        name: String,
        suggestions: Vec<String>,
    },
    #[error(
        "no workspace selected: pass --workspace NAME|PATH, set AVFS_WORKSPACE, or run `avfs vault use NAME`"
    )]
    NoVaultSelected,
    #[error("`{path}` is not an agentvfs vault ({reason}); `avfs vault create NAME` makes one")]
    NotAVault { path: PathBuf, reason: String },
    #[error(
        "vault `{path}` has format version {found}; this avfs supports up to {supported}: upgrade avfs"
    )]
    UnsupportedFormat {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error(
        "vault `{path}` is kept in the {engine} engine, which this build of avfs lacks: build it with `--features {feature}`"
    )]
    UnsupportedEngine {
        path: PathBuf,
        engine: String,
        feature: String,
    },
    #[error(
        "vault `{path}` was replaced while this command waited to write (`avfs vault migrate`); nothing was written: run the command again"
    )]
    VaultReplaced { path: PathBuf },
    #[error(
        "the vault's database server cannot be reached or gave up the command ({reason}); {}",
        store_outcome(*.maybe_applied, *.writes_kept)
    )]
    StoreUnavailable {
        reason: String,
        /// The server stopped answering after a write's commit was sent: the write is in the
        /// vault only if the server committed it before it stopped.
        maybe_applied: bool,
        /// Writes this command (its vault handle) had committed before: they stay. A
        /// command that writes in steps (an import, a prune, a proxied command's checkpoint
        /// and ingest) can fail after some of them.
        writes_kept: u64,
    },
    #[error("vault is damaged: {reason}; `avfs vault check` reports what is damaged")]
    CorruptVault { reason: String },
    #[error("vault check found {} problem(s):\n  {}", .problems.len(), .problems.join("\n  "))]
    VaultDamaged { problems: Vec<String> },
    #[error("fork `{name}` not found in this vault; `avfs vault list` shows the forks")]
    ForkNotFound { name: String },
    #[error("`{name}` already exists")]
    AlreadyExists { name: String },
    #[error("no such file or directory: `{path}`")]
    PathNotFound { path: String },
    #[error("not a directory: `{path}`")]
    NotADirectory { path: String },
    #[error("is a directory: `{path}` (use -r for directories)")]
    IsADirectory { path: String },
    #[error("directory not empty: `{path}` (use -r to remove it with its contents)")]
    DirectoryNotEmpty { path: String },
    #[error("invalid path `{path}`: {reason}")]
    InvalidPath { path: String, reason: String },
    #[error("cannot hard-link `{path}`: {reason}")]
    HardLinkNotAllowed { path: String, reason: String },
    #[error("invalid name `{name}`: {reason}")]
    InvalidName { name: String, reason: String },
    #[error("invalid argument: {message}")]
    InvalidArgument { message: String },
    #[error("`{path}` is a secret under the policy: its content is not given to agents")]
    SecretRefused { path: String },
    #[error("invalid argument: {option} `{value}` is out of range; it takes {limit}")]
    OutOfRange {
        option: String,
        value: String,
        limit: String,
    },
    #[error(
        "quota `{quota}` exceeded: limit {limit}, this change would make it {attempted}; raise it with `avfs quota set` or free space"
    )]
    QuotaExceeded {
        quota: String,
        limit: u64,
        attempted: u64,
    },
    #[error("file too large: {size} bytes; the largest file avfs holds is {limit} bytes")]
    FileTooLarge { size: u64, limit: u64 },
    #[error("nothing to undo in this workspace's operation log")]
    NothingToUndo,
    #[error("nothing to redo: no undo since the last change")]
    NothingToRedo,
    #[error("nothing to roll back: {reason}")]
    NothingToRollBack { id: Option<i64>, reason: String },
    #[error("operation {id} not found in this workspace's operation log (see `avfs op log`)")]
    OperationNotFound { id: i64 },
    #[error("merge has {} conflict(s): {}; nothing was applied (see --strategy ours|theirs)", .conflicts.len(), .conflicts.iter().map(|c| c.path.as_str()).collect::<Vec<_>>().join(", "))]
    MergeConflict { conflicts: Vec<Conflict> },
    #[error("{} host path(s) changed since the workspace's base: {}; nothing was written (use --force to overwrite)", .conflicts.len(), .conflicts.iter().map(|c| c.path.as_str()).collect::<Vec<_>>().join(", "))]
    ApplyConflict { conflicts: Vec<HostConflict> },
    #[error("cannot revert operation #{id}: {} path(s) changed again since: {}; nothing was applied", .conflicts.len(), .conflicts.iter().map(|c| c.path.as_str()).collect::<Vec<_>>().join(", "))]
    RevertConflict { id: i64, conflicts: Vec<Conflict> },
    #[error("cannot mount at `{dir}`: {reason}")]
    MountFailed { dir: PathBuf, reason: String },
    #[error(
        "this avfs was built without the `fuse` feature; rebuild with default features to mount"
    )]
    FuseUnavailable,
    #[error(
        "checkpoint `{name}` not found; `avfs checkpoint list` shows this workspace's checkpoints"
    )]
    CheckpointNotFound { name: String },
    #[error("branch `{branch}` is at {found}, not where this fork left it ({}): hand back to a new branch, or move it back",
        expected.as_deref().unwrap_or("the fork never handed back to it"))]
    BranchMoved {
        branch: String,
        found: String,
        /// The commit this fork's last hand-back left the branch at, if any.
        expected: Option<String>,
    },
    #[error("checkpoint `{name}` is gone: automatic checkpoints are pruned to the newest {keep} (`avfs checkpoint retention`); {}",
        match operation {
            Some(id) => format!("its state is still the one after operation {id}: `avfs op restore {id}`"),
            None => "the operation that saved it is pruned too, so its state is gone".to_string(),
        })]
    CheckpointGone {
        name: String,
        keep: u64,
        /// The operation that saved it, if the op log still has it: `op restore` reaches it.
        operation: Option<i64>,
    },
    #[error("`{path}` already exists on the host; pass --force to overwrite")]
    HostPathExists { path: PathBuf },
    #[error("{context} `{path}`: {source}")]
    Io {
        context: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{program}` could not be started: {reason}")]
    SpawnFailed {
        program: String,
        reason: String,
        os_error: Option<i32>,
    },
    #[error("no space left {}: {reason}; {}", .path.as_ref().map(|p| format!("for `{}`", p.display())).unwrap_or_else(|| "for the vault".into()), if *.maybe_applied { "the change may or may not be in the vault: free space, then look before running it again" } else { "free space (or raise the disk's quota) and retry: nothing was changed" })]
    DiskFull {
        /// The host path being written, or `None` for the vault file itself.
        path: Option<PathBuf>,
        reason: String,
        /// The engine stopped writing part way through a commit (sled on a full disk): the
        /// change is in the vault only if its whole record reached the disk.
        maybe_applied: bool,
    },
    #[error("vault storage error: {0}")]
    Storage(String),
    #[error("confinement is not available here: {reason}")]
    ConfinementUnavailable { reason: String },
    /// The command's own namespace cannot be made here (asked for with `--mode`).
    #[error("the execution sandbox is not available here: {reason}")]
    SandboxUnavailable { reason: String },
    /// The sandbox was tried and could not be assembled; the command did not run.
    #[error("the execution sandbox could not be set up: {reason}")]
    SandboxFailed { reason: String },
    /// Another command running in the fork excludes this one; nothing was changed.
    #[error("workspace {workspace} is busy: {reason}")]
    WorkspaceBusy { workspace: String, reason: String },
    /// A conditional change (`--if-head`) found the workspace's history moved past the
    /// operation it was made against; nothing was changed.
    #[error(
        "workspace `{workspace}` has moved on: its newest operation is #{head}, not #{expected} (--if-head); nothing was changed: look at `avfs op log`, then try again"
    )]
    HeadMoved {
        workspace: String,
        expected: i64,
        /// The workspace's newest operation now (0: none).
        head: i64,
    },
    #[error("no session `{name}`{}; start one with `avfs session start FORK --name {name}`", suggest(.suggestions))]
    SessionNotFound {
        name: String,
        suggestions: Vec<String>,
    },
    #[error("session `{name}`: {reason}; `avfs session stop {name}` cleans up a broken session")]
    SessionFailed { name: String, reason: String },
    /// An error raised in another avfs process (a session daemon), passed on as it was.
    #[error("{message}")]
    Forwarded {
        kind: &'static str,
        message: String,
        details: Value,
        exit_code: i32,
    },
}

/// Error kinds are a small fixed set: keep one static copy of each forwarded one.
fn intern(kind: &str) -> &'static str {
    static SEEN: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(k) = seen.iter().find(|k| **k == kind) {
        return k;
    }
    let k: &'static str = Box::leak(kind.to_string().into_boxed_str());
    seen.push(k);
    k
}

fn suggest(names: &[String]) -> String {
    if names.is_empty() {
        String::new()
    } else {
        format!("; did you mean {}?", names.join(", "))
    }
}

/// Stable process exit codes, documented in README.md.
pub mod exit {
    pub const OK: i32 = 0;
    pub const FAILURE: i32 = 1;
    pub const USAGE: i32 = 2;
    pub const NOT_FOUND: i32 = 3;
    pub const CONFLICT: i32 = 4;
    pub const INVALID: i32 = 5;
    pub const QUOTA: i32 = 6;
    pub const CORRUPT: i32 = 7;
    pub const IO: i32 = 8;
    pub const DISK_FULL: i32 = 9;
    /// A command could not be started (as a shell reports a command it cannot run).
    pub const SPAWN_FAILED: i32 = 127;
}

/// What a `store_unavailable` error says was kept, and so whether to run the command again.
fn store_outcome(maybe_applied: bool, writes_kept: u64) -> String {
    let earlier = match writes_kept {
        0 => String::new(),
        1 => "; 1 earlier write of this command was kept".into(),
        n => format!("; {n} earlier writes of this command were kept"),
    };
    if maybe_applied {
        format!(
            "its last change had been sent and was not acknowledged, so it may have been made{earlier}: look before running the command again"
        )
    } else if writes_kept > 0 {
        format!("the write it was making was not kept{earlier}: look before running it again")
    } else {
        "nothing of an unfinished write was kept: run the command again once it is back".into()
    }
}

impl Error {
    /// The stable machine-readable name of this error.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::VaultNotFound { .. } => "vault_not_found",
            Error::NoVaultSelected => "no_vault_selected",
            Error::NotAVault { .. } => "not_a_vault",
            Error::UnsupportedFormat { .. } => "unsupported_format",
            Error::UnsupportedEngine { .. } => "unsupported_engine",
            Error::VaultReplaced { .. } => "vault_replaced",
            Error::StoreUnavailable { .. } => "store_unavailable",
            Error::CorruptVault { .. } | Error::VaultDamaged { .. } => "corrupt_vault",
            Error::ForkNotFound { .. } => "fork_not_found",
            Error::AlreadyExists { .. } => "already_exists",
            Error::PathNotFound { .. } => "path_not_found",
            Error::NotADirectory { .. } => "not_a_directory",
            Error::IsADirectory { .. } => "is_a_directory",
            Error::DirectoryNotEmpty { .. } => "directory_not_empty",
            Error::InvalidPath { .. } => "invalid_path",
            Error::HardLinkNotAllowed { .. } => "hard_link_not_allowed",
            Error::InvalidName { .. } => "invalid_name",
            Error::InvalidArgument { .. } | Error::OutOfRange { .. } => "invalid_argument",
            Error::SecretRefused { .. } => "secret_refused",
            Error::QuotaExceeded { .. } => "quota_exceeded",
            Error::FileTooLarge { .. } => "file_too_large",
            Error::CheckpointNotFound { .. } => "checkpoint_not_found",
            Error::CheckpointGone { .. } => "checkpoint_gone",
            Error::BranchMoved { .. } => "branch_moved",
            Error::NothingToUndo => "nothing_to_undo",
            Error::NothingToRollBack { .. } => "nothing_to_roll_back",
            Error::MergeConflict { .. } => "merge_conflict",
            Error::RevertConflict { .. } => "revert_conflict",
            Error::MountFailed { .. } => "mount_failed",
            Error::FuseUnavailable => "fuse_unavailable",
            Error::ApplyConflict { .. } => "apply_conflict",
            Error::NothingToRedo => "nothing_to_redo",
            Error::OperationNotFound { .. } => "operation_not_found",
            Error::HostPathExists { .. } => "host_path_exists",
            Error::Io { .. } => "io_error",
            Error::SpawnFailed { .. } => "spawn_failed",
            Error::DiskFull { .. } => "disk_full",
            Error::Storage(_) => "storage_error",
            Error::ConfinementUnavailable { .. } => "confinement_unavailable",
            Error::SandboxUnavailable { .. } => "sandbox_unavailable",
            Error::SandboxFailed { .. } => "sandbox_failed",
            Error::WorkspaceBusy { .. } => "workspace_busy",
            Error::HeadMoved { .. } => "head_moved",
            Error::SessionNotFound { .. } => "session_not_found",
            Error::SessionFailed { .. } => "session_failed",
            Error::Forwarded { kind, .. } => kind,
        }
    }

    /// The data a caller needs to act on the error, as JSON.
    pub fn details(&self) -> Value {
        match self {
            Error::VaultNotFound { name, suggestions } => {
                json!({ "name": name, "suggestions": suggestions })
            }
            Error::NotAVault { path, reason } => json!({ "path": path, "reason": reason }),
            Error::UnsupportedFormat {
                path,
                found,
                supported,
            } => json!({ "path": path, "found": found, "supported": supported }),
            Error::UnsupportedEngine {
                path,
                engine,
                feature,
            } => json!({ "path": path, "engine": engine, "feature": feature }),
            Error::VaultReplaced { path } => json!({ "path": path }),
            Error::StoreUnavailable {
                reason,
                maybe_applied,
                writes_kept,
            } => json!({
                "reason": reason,
                "maybe_applied": maybe_applied,
                "writes_kept": writes_kept,
            }),
            Error::CorruptVault { reason } => json!({ "reason": reason }),
            Error::BranchMoved {
                branch,
                found,
                expected,
            } => json!({ "branch": branch, "found": found, "expected": expected }),
            Error::CheckpointGone {
                name,
                keep,
                operation,
            } => json!({ "name": name, "keep": keep, "operation": operation }),
            Error::VaultDamaged { problems } => json!({ "problems": problems }),
            Error::ForkNotFound { name }
            | Error::AlreadyExists { name }
            | Error::CheckpointNotFound { name } => json!({ "name": name }),
            Error::PathNotFound { path }
            | Error::NotADirectory { path }
            | Error::IsADirectory { path }
            | Error::DirectoryNotEmpty { path } => json!({ "path": path }),
            Error::InvalidPath { path, reason } | Error::HardLinkNotAllowed { path, reason } => {
                json!({ "path": path, "reason": reason })
            }
            Error::InvalidName { name, reason } => json!({ "name": name, "reason": reason }),
            Error::OutOfRange {
                option,
                value,
                limit,
            } => json!({ "option": option, "value": value, "limit": limit }),
            Error::QuotaExceeded {
                quota,
                limit,
                attempted,
            } => json!({ "quota": quota, "limit": limit, "attempted": attempted }),
            Error::FileTooLarge { size, limit } => json!({ "size": size, "limit": limit }),
            Error::HostPathExists { path } => json!({ "path": path }),
            Error::SecretRefused { path } => json!({ "path": path }),
            Error::Io { path, source, .. } => {
                json!({ "path": path, "os_error": source.raw_os_error() })
            }
            Error::OperationNotFound { id } => json!({ "id": id }),
            Error::DiskFull {
                path,
                reason,
                maybe_applied,
            } => json!({ "path": path, "reason": reason, "maybe_applied": maybe_applied }),
            Error::SpawnFailed {
                program,
                reason,
                os_error,
            } => json!({ "program": program, "reason": reason, "os_error": os_error }),
            Error::MountFailed { dir, reason } => json!({ "dir": dir, "reason": reason }),
            Error::ConfinementUnavailable { reason }
            | Error::SandboxUnavailable { reason }
            | Error::SandboxFailed { reason } => json!({ "reason": reason }),
            Error::SessionFailed { name, reason } => json!({ "name": name, "reason": reason }),
            Error::WorkspaceBusy { workspace, reason } => {
                json!({ "workspace": workspace, "reason": reason })
            }
            Error::HeadMoved {
                workspace,
                expected,
                head,
            } => json!({ "workspace": workspace, "expected": expected, "head": head }),
            Error::SessionNotFound { name, suggestions } => {
                json!({ "name": name, "suggestions": suggestions })
            }
            Error::Forwarded { details, .. } => details.clone(),
            Error::MergeConflict { conflicts } => json!({ "conflicts": conflicts }),
            Error::RevertConflict { id, conflicts } => json!({ "id": id, "conflicts": conflicts }),
            Error::NothingToRollBack { id, reason } => json!({ "id": id, "reason": reason }),
            Error::ApplyConflict { conflicts } => json!({ "conflicts": conflicts }),
            Error::NoVaultSelected
            | Error::NothingToUndo
            | Error::NothingToRedo
            | Error::FuseUnavailable
            | Error::InvalidArgument { .. }
            | Error::Storage(_) => {
                json!({})
            }
        }
    }

    /// The process exit code an adapter should use for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::VaultNotFound { .. }
            | Error::NoVaultSelected
            | Error::ForkNotFound { .. }
            | Error::PathNotFound { .. }
            | Error::CheckpointNotFound { .. }
            | Error::CheckpointGone { .. }
            | Error::OperationNotFound { .. }
            | Error::SessionNotFound { .. } => exit::NOT_FOUND,
            Error::NothingToUndo
            | Error::NothingToRedo
            | Error::NothingToRollBack { .. }
            | Error::BranchMoved { .. }
            | Error::MergeConflict { .. }
            | Error::RevertConflict { .. }
            | Error::ApplyConflict { .. } => exit::CONFLICT,
            Error::AlreadyExists { .. } | Error::HostPathExists { .. } => exit::CONFLICT,
            Error::NotADirectory { .. }
            | Error::IsADirectory { .. }
            | Error::DirectoryNotEmpty { .. }
            | Error::InvalidPath { .. }
            | Error::HardLinkNotAllowed { .. }
            | Error::InvalidName { .. }
            | Error::InvalidArgument { .. }
            | Error::SecretRefused { .. }
            | Error::OutOfRange { .. } => exit::INVALID,
            Error::QuotaExceeded { .. } | Error::FileTooLarge { .. } => exit::QUOTA,
            Error::NotAVault { .. }
            | Error::UnsupportedFormat { .. }
            | Error::UnsupportedEngine { .. }
            | Error::CorruptVault { .. }
            | Error::VaultDamaged { .. } => exit::CORRUPT,
            Error::Io { .. } | Error::StoreUnavailable { .. } => exit::IO,
            Error::DiskFull { .. } => exit::DISK_FULL,
            Error::SpawnFailed { .. } => exit::SPAWN_FAILED,
            Error::Storage(_)
            | Error::MountFailed { .. }
            | Error::FuseUnavailable
            | Error::ConfinementUnavailable { .. }
            | Error::SandboxUnavailable { .. }
            | Error::SandboxFailed { .. }
            | Error::SessionFailed { .. } => exit::FAILURE,
            Error::WorkspaceBusy { .. } | Error::VaultReplaced { .. } | Error::HeadMoved { .. } => {
                exit::CONFLICT
            }
            Error::Forwarded { exit_code, .. } => *exit_code,
        }
    }

    pub fn io(context: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        if matches!(source.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)) {
            return Error::DiskFull {
                path: Some(path.into()),
                reason: source.to_string(),
                maybe_applied: false,
            };
        }
        Error::Io {
            context,
            path: path.into(),
            source,
        }
    }

    /// An error another avfs process reported (by kind, message, details and exit code).
    pub fn forwarded(kind: &str, message: String, details: Value, exit_code: i32) -> Self {
        Error::Forwarded {
            kind: intern(kind),
            message,
            details,
            exit_code,
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Error::InvalidArgument {
            message: message.into(),
        }
    }
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode;
        match e.sqlite_error_code() {
            Some(ErrorCode::NotADatabase) => Error::CorruptVault {
                reason: "file is not a SQLite database".into(),
            },
            Some(ErrorCode::DatabaseCorrupt) => Error::CorruptVault {
                reason: e.to_string(),
            },
            Some(ErrorCode::DiskFull) => Error::DiskFull {
                path: None,
                reason: e.to_string(),
                maybe_applied: false,
            },
            // A row whose value is not of the type the vault wrote there: damage.
            _ if matches!(
                e,
                rusqlite::Error::FromSqlConversionFailure(..)
                    | rusqlite::Error::InvalidColumnType(..)
                    | rusqlite::Error::IntegralValueOutOfRange(..)
            ) =>
            {
                Error::CorruptVault {
                    reason: format!("a stored value has the wrong type: {e}"),
                }
            }
            _ => Error::Storage(e.to_string()),
        }
    }
}

impl From<postcard::Error> for Error {
    fn from(e: postcard::Error) -> Self {
        Error::CorruptVault {
            reason: format!("undecodable object: {e}"),
        }
    }
}
