"""Exceptions raised for `{"ok": false, ...}` documents, one class per common error kind."""

from __future__ import annotations

from typing import Any


class AvfsError(Exception):
    """A failed avfs command: the `error` object of its JSON document plus the exit code."""

    kind: str = "error"

    def __init__(
        self,
        kind: str,
        message: str,
        details: dict[str, Any] | None = None,
        exit_code: int | None = None,
        command: str = "",
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.details: dict[str, Any] = details or {}
        self.exit_code = exit_code
        self.command = command

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(kind={self.kind!r}, message={self.message!r}, exit_code={self.exit_code})"


class ProtocolError(AvfsError):
    """The binary did not print one JSON document (crashed, killed, or not avfs)."""


# Grouped as the exit codes group them (README: exit 3, 4, 5).
class NotFoundError(AvfsError):
    """Exit code 3: a vault, fork, path, checkpoint, operation or session is missing."""


class ConflictError(AvfsError):
    """Exit code 4: already exists, merge/apply conflict, nothing to undo/redo."""


class InvalidInputError(AvfsError):
    """Exit code 5: a bad path or name, not a directory, ..."""


class UsageError(AvfsError): ...


class StorageError(AvfsError): ...


class VaultNotFound(NotFoundError): ...


class NoVaultSelected(NotFoundError): ...


class ForkNotFound(NotFoundError): ...


class PathNotFound(NotFoundError): ...


class CheckpointNotFound(NotFoundError): ...


class CheckpointGone(NotFoundError):
    """`checkpoint_gone`: an automatic checkpoint pruned by retention.

    `details["operation"]` is the operation whose state it was, for `op restore`, when the
    op log still has it.
    """


class BranchMoved(ConflictError):
    """`branch_moved`: a hand-back's branch moved since this fork left it (or is not its)."""


class OperationNotFound(NotFoundError): ...


class SessionNotFound(NotFoundError): ...


class AlreadyExists(ConflictError): ...


class VaultReplaced(ConflictError):
    """`vault migrate` replaced the vault while the command waited; nothing was written."""


class HostPathExists(ConflictError): ...


class MergeConflict(ConflictError): ...


class ApplyConflict(ConflictError): ...


class NothingToUndo(ConflictError): ...


class NothingToRedo(ConflictError): ...


class NothingToRollBack(ConflictError):
    """The command asked for changed nothing, or is already rolled back or undone;
    `details["reason"]` says which."""


class InvalidPath(InvalidInputError): ...


class InvalidName(InvalidInputError): ...


class InvalidArgument(InvalidInputError): ...


class NotADirectory(InvalidInputError): ...


class IsADirectory(InvalidInputError): ...


class DirectoryNotEmpty(InvalidInputError): ...


class HardLinkNotAllowed(InvalidInputError): ...


class QuotaExceeded(AvfsError): ...


class NotAVault(AvfsError): ...


class UnsupportedFormat(AvfsError): ...


class UnsupportedEngine(AvfsError):
    """The vault is kept in a storage engine this build of avfs lacks (see `feature`)."""


class CorruptVault(AvfsError): ...


class MountFailed(AvfsError): ...


class FuseUnavailable(AvfsError): ...


class ConfinementUnavailable(AvfsError): ...


class SandboxUnavailable(AvfsError):
    """The command's own namespace cannot be made here (asked for with `mode`)."""


class SandboxFailed(AvfsError):
    """The sandbox could not be set up; the command did not run."""


class SessionFailed(AvfsError): ...


class HostIOError(AvfsError): ...


class StoreUnavailable(HostIOError):
    """The vault's database server could not be reached or gave up; run the command again."""


class RevertConflict(ConflictError):
    """An undo or rollback whose paths changed again since: `details.conflicts`."""


class FileTooLarge(AvfsError):
    """Past the largest file avfs holds (8 TiB): `details.size`, `details.limit`."""


class SecretRefused(InvalidInputError):
    """A secret's content asked for through an agent-facing surface."""


class DiskFull(AvfsError):
    """No space left for the vault or an export (exit 9): `details.path`, `details.reason`.
    Nothing was changed unless `details.maybe_applied` (sled only: its log write stalled on
    the full disk, so the change is there only if sled wrote all of it)."""


class HeadMoved(ConflictError):
    """A change made with `--if-head OP` found the workspace's newest operation past OP
    (exit 4): `details.workspace`, `details.expected`, `details.head`; nothing was changed."""


class WorkspaceBusy(ConflictError):
    """Another command running in the fork excludes this one (a fuse-mode command runs
    alone): `details.workspace`, `details.reason`; nothing was changed."""


class SpawnFailed(AvfsError):
    """A command could not be started (exit 127)."""


ERRORS: dict[str, type[AvfsError]] = {
    "usage": UsageError,
    "storage_error": StorageError,
    "vault_not_found": VaultNotFound,
    "no_vault_selected": NoVaultSelected,
    "fork_not_found": ForkNotFound,
    "path_not_found": PathNotFound,
    "checkpoint_not_found": CheckpointNotFound,
    "checkpoint_gone": CheckpointGone,
    "branch_moved": BranchMoved,
    "operation_not_found": OperationNotFound,
    "session_not_found": SessionNotFound,
    "already_exists": AlreadyExists,
    "vault_replaced": VaultReplaced,
    "host_path_exists": HostPathExists,
    "merge_conflict": MergeConflict,
    "apply_conflict": ApplyConflict,
    "nothing_to_undo": NothingToUndo,
    "nothing_to_redo": NothingToRedo,
    "nothing_to_roll_back": NothingToRollBack,
    "invalid_path": InvalidPath,
    "invalid_name": InvalidName,
    "invalid_argument": InvalidArgument,
    "not_a_directory": NotADirectory,
    "is_a_directory": IsADirectory,
    "directory_not_empty": DirectoryNotEmpty,
    "hard_link_not_allowed": HardLinkNotAllowed,
    "quota_exceeded": QuotaExceeded,
    "not_a_vault": NotAVault,
    "unsupported_format": UnsupportedFormat,
    "unsupported_engine": UnsupportedEngine,
    "corrupt_vault": CorruptVault,
    "mount_failed": MountFailed,
    "fuse_unavailable": FuseUnavailable,
    "confinement_unavailable": ConfinementUnavailable,
    "sandbox_unavailable": SandboxUnavailable,
    "sandbox_failed": SandboxFailed,
    "session_failed": SessionFailed,
    "io_error": HostIOError,
    "store_unavailable": StoreUnavailable,
    "revert_conflict": RevertConflict,
    "file_too_large": FileTooLarge,
    "secret_refused": SecretRefused,
    "disk_full": DiskFull,
    "spawn_failed": SpawnFailed,
    "workspace_busy": WorkspaceBusy,
    "head_moved": HeadMoved,
}

_BY_EXIT_CODE: dict[int, type[AvfsError]] = {
    3: NotFoundError,
    4: ConflictError,
    5: InvalidInputError,
}


def error_from(error: dict[str, Any], exit_code: int | None, command: str = "") -> AvfsError:
    """The exception for one `error` object; unknown kinds fall back by exit code."""
    kind = str(error.get("kind", "error"))
    cls = ERRORS.get(kind) or _BY_EXIT_CODE.get(exit_code or 0, AvfsError)
    return cls(kind, str(error.get("message", "")), error.get("details") or {}, exit_code, command)
