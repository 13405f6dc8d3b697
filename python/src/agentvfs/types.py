"""Typed views of the `data` that `avfs --json` prints, one dataclass per schema object.

Field names are the JSON keys of schema/avfs.schema.json, except that a key which is a
Python keyword gets a trailing underscore (`from` -> `from_`). The test suite checks every
dataclass here against the schema, so a key the CLI renames cannot drift unnoticed.
"""

import dataclasses
import keyword
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, Union

Action = Literal["allow", "checkpoint_then_run", "readonly", "ask", "deny"]
Category = Literal[
    "readonly",
    "mutating",
    "destructive",
    "networked",
    "host_escape",
    "privileged",
    "interactive",
    "unknown",
]
ChangeStatus = Literal["added", "modified", "deleted", "renamed", "type_changed"]
ExecOutcome = Literal["denied", "approval_required", "completed", "timed_out", "spawn_failed"]
# How a proxied command's file system is made (`auto` only as a request).
Mode = Literal["auto", "overlay", "fuse", "copy"]
SandboxKind = Literal["namespace", "none"]
# The storage engine a vault is kept in.
Engine = Literal["sqlite", "lmdb", "sled", "postgres"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """What a vault selector resolved to (`vault create`, `vault use`)."""

    name: str
    path: str
    workspace: str


@dataclass(frozen=True, slots=True, kw_only=True)
class VaultListEntry:
    name: str
    path: str
    workspace: str
    current: bool
    exists: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ForkInfo:
    name: str
    created_at: int
    created_at_iso: str  # `created_at` as an RFC 3339 UTC time
    files: int
    bytes: int
    base_root: str | None = None
    forked_at_checkpoint: str | None = None
    parent: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Quota:
    """Limits per workspace; None means unlimited."""

    max_size_mb: int | None = None
    max_files: int | None = None
    max_file_size_mb: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Origin:
    """The host directory a workspace was imported from (or last applied to)."""

    host: str
    prefix: str
    root: str
    recorded_by: str  # "import" or "apply"
    at: int
    at_iso: str  # `at` as an RFC 3339 UTC time
    workspace: str
    git_commit: str | None = None  # the git HEAD (or commit) imported, if any


@dataclass(frozen=True, slots=True, kw_only=True)
class VaultInfo:
    name: str
    path: str
    format_version: int
    engine: Engine
    disk_bytes: int
    workspace: ForkInfo
    checkpoints: int
    pending_changes: int
    forks: list[str]
    quota: Quota
    origin: Origin | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ForkOutput:
    target: Target
    fork: ForkInfo


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteReport:
    name: str
    file_deleted: bool
    unregistered: list[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointInfo:
    name: str
    created_at: int
    created_at_iso: str  # `created_at` as an RFC 3339 UTC time
    root: str
    files: int
    bytes: int
    auto: bool  # taken by the proxy before a command; pruned by retention
    message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceNumber:
    """A device node's number (`NodeInfo.device`)."""

    major: int
    minor: int


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeInfo:
    path: str
    name: str
    type: str
    size: int
    mode: int
    nlink: int
    mode_string: str
    uid: int
    gid: int
    atime: int
    atime_iso: str  # `atime` as an RFC 3339 UTC time
    mtime: int
    mtime_iso: str  # `mtime` as an RFC 3339 UTC time
    ctime: int
    ctime_iso: str  # `ctime` as an RFC 3339 UTC time
    tags: list[str]
    meta: dict[str, str]
    xattrs: dict[str, str]
    content_id: str | None = None
    target: str | None = None
    device: DeviceNumber | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteOutput:
    path: str
    size: int
    content_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MoveOutput:
    from_: str
    to: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    path: str
    status: ChangeStatus
    type: str
    mode_changed: bool
    old_path: str | None = None
    old_content_id: str | None = None
    new_content_id: str | None = None
    old_mode: int | None = None
    new_mode: int | None = None
    old_size: int | None = None
    new_size: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DiffSummary:
    added: int
    modified: int
    deleted: int
    renamed: int
    type_changed: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DiffOutput:
    from_: str
    to: str
    summary: DiffSummary
    changes: list[Change]
    patch: str | None = None
    # Changes the ignore rules left out (.gitignore, .avfsignore, .git/info/exclude,
    # .git/), per top-level name; empty with include_ignored.
    ignored: dict[str, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class Conflict:
    path: str
    ours: str
    theirs: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MergeReport:
    fork: str
    into: str
    strategy: str
    dry_run: bool
    applied: bool
    changes: list[Change]
    conflicts: list[Conflict]
    text_merged: list[str]
    # The fork's ignored changes, left in the fork; per top-level name.
    ignored: dict[str, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class OpInfo:
    """One op-log entry (`undo`, `redo`, `rollback`)."""

    id: int
    at: int
    at_iso: str  # `at` as an RFC 3339 UTC time
    kind: str
    description: str
    undone: bool
    root_before: str | None = None
    root_after: str | None = None
    target: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Captured:
    """One captured output stream of a proxied command."""

    text: str
    bytes: int
    truncated: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    action: Action
    categories: list[Category]
    reason: str
    offending: str | None = None
    rule: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Confinement:
    landlock: bool = False
    offline: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxReport:
    """The namespace a proxied command ran in (`kind` "namespace"), or "none" and why."""

    kind: SandboxKind
    ro: list[str]
    rw: list[str]
    reason: str | None = None
    workspace_path: str | None = None
    # Paths the command wrote that the policy hides (secrets): not taken into the fork.
    refused: list[str] = field(default_factory=list)
    # An overlay's lower layer: "fuse", or "tree (cached|updated|written)".
    lower: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecRequest:
    cwd: str
    selected: str  # the name or vault file path the workspace was selected by
    workspace: str
    access: str  # "readwrite" or "readonly"
    argv: list[str] | None = None
    shell: str | None = None
    session: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Envelope:
    """The result of one `proxy exec`, run or not (see `decision` and `ran`)."""

    schema_version: int
    request: ExecRequest
    decision: Decision
    ran: bool
    timed_out: bool
    duration_ms: int
    stdout: Captured
    stderr: Captured
    changes: list[Change]
    summary: DiffSummary
    audit_id: int
    # Ignored changes (not in `changes`) per top-level name; rollback covers them too.
    ignored: dict[str, int] = field(default_factory=dict)
    # True when `stdout` holds stdout and stderr in the order written (interleave=True).
    interleaved: bool = False
    exit_code: int | None = None
    signal: int | None = None
    checkpoint: str | None = None
    exec_id: int | None = None
    approval_token: str | None = None
    confinement: Confinement = field(default_factory=Confinement)
    # How the command's file system was made: "overlay", "fuse" or "copy".
    mode: Mode
    sandbox: SandboxReport
    # What became of the command.
    outcome: ExecOutcome
    spawn_error: str | None = None

    @property
    def denied(self) -> bool:
        return self.decision.action == "deny"

    @property
    def needs_approval(self) -> bool:
        return self.decision.action == "ask"

    @property
    def status(self) -> int:
        """The exit code `avfs proxy exec` exits with: the child's, 124, 125, 126 or 127."""
        if self.outcome == "spawn_failed":
            return 127
        if self.timed_out:
            return 124
        if self.needs_approval:
            return 125
        if self.denied:
            return 126
        if self.exit_code is not None:
            return self.exit_code
        return 128 + (self.signal or 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRecord:
    name: str
    vault: str
    path: str
    workspace: str
    mode: Mode
    socket: str
    pid: int
    since: int
    since_iso: str  # `since` as an RFC 3339 UTC time
    alive: bool = False
    policy: str | None = None
    dir: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReport:
    name: str
    stopped: bool
    stale: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class HandbackReport:
    """What `handback` wrote: one commit on a branch of a host git repository."""

    repo: str
    branch: str  # the full name, refs/heads/...
    tree: str
    created: bool  # the branch was made by this hand-back
    files: int
    skipped: list[str]  # paths git cannot hold (FIFOs, devices, sockets)
    submodules: list[str]  # gitlinks kept at the commit the parent records
    commit: str | None = None  # None when the fork's files equal the parent's tree
    parent: str | None = None
    note: str | None = None  # why nothing was committed, when nothing was


@dataclass(frozen=True, slots=True, kw_only=True)
class Grant:
    """A standing approval: commands matching `pattern` run in `workspace` without asking."""

    id: int
    workspace: str
    pattern: str
    created_at: int
    created_at_iso: str
    expires_at: int
    expires_at_iso: str
    actor: str


T = TypeVar("T")


def json_key(field_name: str) -> str:
    """The JSON key a dataclass field reads (`from_` -> `from`)."""
    stripped = field_name[:-1]
    return stripped if field_name.endswith("_") and keyword.iskeyword(stripped) else field_name


def _convert(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(inner, value)
    if origin is list:
        (item,) = typing.get_args(tp)
        return [_convert(item, v) for v in value]
    if origin is dict:
        _, item = typing.get_args(tp)
        return {k: _convert(item, v) for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return from_json(tp, value)  # type: ignore[arg-type]
    return value


def from_json(cls: type[T], data: dict[str, Any]) -> T:
    """Build `cls` from a JSON object; keys the dataclass does not know are ignored."""
    kwargs = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        key = json_key(f.name)
        if key in data:
            kwargs[f.name] = _convert(f.type, data[key])
    return cls(**kwargs)


# Earlier names of two types, kept so existing code keeps working: the types are named as
# the Rust library and the TypeScript client name them.
Checkpoint = CheckpointInfo
Diff = DiffOutput
