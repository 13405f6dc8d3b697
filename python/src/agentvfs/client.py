"""`Client`: runs the `avfs` binary with `--json` and turns its one document into types."""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from .errors import AvfsError, ProtocolError, error_from
from .types import (
    CheckpointInfo,
    DeleteReport,
    DiffOutput,
    Envelope,
    ForkOutput,
    Grant,
    HandbackReport,
    MergeReport,
    MoveOutput,
    NodeInfo,
    OpInfo,
    SessionRecord,
    StopReport,
    Target,
    VaultInfo,
    VaultListEntry,
    WriteOutput,
    from_json,
)

T = TypeVar("T")
Document = dict[str, Any]
StrPath = str | os.PathLike[str]

BINARY = "avfs"


def find_binary(explicit: StrPath | None = None) -> str:
    """The `avfs` to run: `explicit`, else `$AVFS_BIN`, else the one this package's wheel
    installed into the environment's scripts directory, else `avfs` on `$PATH`."""
    chosen = explicit or os.environ.get("AVFS_BIN")
    if chosen:
        return os.fspath(chosen)
    exe = BINARY + (".exe" if os.name == "nt" else "")
    dirs = [sysconfig.get_path("scripts"), str(Path(sys.executable).parent)]
    try:
        dirs.append(sysconfig.get_path("scripts", sysconfig.get_preferred_scheme("user")))
    except KeyError:  # no user scheme on this platform
        pass
    for d in dirs:
        candidate = Path(d) / exe
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(BINARY)
    if found:
        return found
    raise AvfsError(
        "binary_not_found",
        "cannot find the avfs binary: install the agentvfs wheel, or set AVFS_BIN",
        {"searched": [str(d) for d in dirs]},
    )


class Client:
    """One avfs installation and, optionally, one workspace (a vault or a fork) to act on.

    `home` sets `AVFS_HOME` (default: inherited, else `~/.avfs`); `workspace` is passed as
    `--workspace` to every command (default: `$AVFS_WORKSPACE`, then `$AVFS_VAULT`, then
    the current one). `vault=` is the deprecated name of `workspace=`.
    `on_document(doc, exit_code)` sees every JSON document the binary prints before it is
    interpreted (the tests validate each one against the schema through it).
    Failures raise `AvfsError` subclasses; `proxy_exec` returns an `Envelope` whatever the
    command's exit code.
    """

    def __init__(
        self,
        home: StrPath | None = None,
        workspace: str | None = None,
        *,
        binary: StrPath | None = None,
        env: Mapping[str, str] | None = None,
        on_document: Callable[[Document, int], None] | None = None,
        vault: str | None = None,
    ) -> None:
        self.binary = find_binary(binary)
        self.home = os.fspath(home) if home is not None else None
        self.workspace = _renamed("vault", vault, "workspace", workspace)
        self.env = dict(env) if env is not None else None
        self.on_document = on_document
        self.expected_head: int | None = None

    def with_workspace(self, workspace: str | None) -> Client:
        """A client like this one acting on another workspace (a vault or a fork)."""
        other = copy.copy(self)
        other.workspace = workspace
        return other

    def if_head(self, op: int | None) -> Client:
        """A client like this one whose changes apply only while the workspace's newest
        operation is `op` (`avfs --if-head OP`), as a compare-and-swap with the change: one
        that finds the workspace moved on raises `HeadMoved` and changes nothing. Read the
        head (`head()`, 0 for none) before you read what your change depends on, then
        change through `client.if_head(head)`. Each change applied moves the head, so a
        conditional client serves one change; for the next, take `if_head(head())` anew.
        Only changes take it: `write`, `mkdir`, `rm`, `cp`, `mv`, checkpoint
        save/restore/delete, `undo`, `redo` and `rollback` (`op_log` and `head` read
        unconditionally); any other command refuses it (`InvalidArgument`). `None`:
        unconditional.
        """
        if op is not None and (isinstance(op, bool) or not isinstance(op, int)):
            raise TypeError(f"if_head: an operation id (int), not {op!r}")
        other = copy.copy(self)
        other.expected_head = op
        return other

    def with_vault(self, vault: str | None) -> Client:
        """Deprecated: the earlier name of `with_workspace`."""
        _deprecated("with_vault()", "with_workspace()")
        return self.with_workspace(vault)

    @property
    def vault(self) -> str | None:
        """Deprecated: the earlier name of `workspace`."""
        _deprecated("Client.vault", "Client.workspace")
        return self.workspace

    @vault.setter
    def vault(self, value: str | None) -> None:
        _deprecated("Client.vault", "Client.workspace")
        self.workspace = value

    # -- the runner -------------------------------------------------------------------

    def run_document(self, *args: str, stdin: bytes | None = None) -> tuple[Document, int]:
        """Run `avfs --json [--workspace W] ARGS…`; the parsed document and the exit code."""
        argv = [self.binary, "--json", *self._globals(), *args]
        env = dict(os.environ if self.env is None else self.env)
        if self.home is not None:
            env["AVFS_HOME"] = self.home
        # Daemons (`session start`) detach from these pipes, so waiting for EOF is safe.
        proc = subprocess.run(
            argv,
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            env=env,
            check=False,
        )
        try:
            doc = json.loads(proc.stdout)
            if not isinstance(doc, dict) or not isinstance(doc.get("ok"), bool):
                raise ValueError("not an avfs envelope")
        except ValueError as e:
            raise ProtocolError(
                "protocol",
                f"`avfs {' '.join(args)}` did not print one JSON document: {e}",
                {
                    "stdout": proc.stdout.decode(errors="replace")[-2000:],
                    "stderr": proc.stderr.decode(errors="replace")[-2000:],
                },
                proc.returncode,
            ) from None
        if self.on_document is not None:
            self.on_document(doc, proc.returncode)
        return doc, proc.returncode

    def _globals(self) -> list[str]:
        """The global options this client passes before every command."""
        head = None if self.expected_head is None else f"--if-head={self.expected_head}"
        return [*_opt("--workspace", self.workspace), *_opt(None, head)]

    def run(self, *args: str, stdin: bytes | None = None) -> Any:
        """Run any avfs command; its `data` on success, else raise its typed error."""
        doc, code = self.run_document(*args, stdin=stdin)
        if not doc["ok"]:
            raise error_from(doc.get("error") or {}, code, doc.get("command", ""))
        return doc["data"]

    def _one(self, cls: type[T], *args: str, stdin: bytes | None = None) -> T:
        return from_json(cls, self.run(*args, stdin=stdin))

    def _many(self, cls: type[T], *args: str) -> list[T]:
        return [from_json(cls, d) for d in self.run(*args)]

    # -- vaults -----------------------------------------------------------------------

    def vault_create(self, name: str, path: StrPath | None = None) -> Target:
        return self._one(Target, "vault", "create", name, *_opt("--path", path))

    def vault_list(self) -> list[VaultListEntry]:
        return self._many(VaultListEntry, "vault", "list")

    def vault_use(self, name: str) -> Target:
        return self._one(Target, "vault", "use", name)

    def vault_info(self, name: str | None = None) -> VaultInfo:
        return self._one(VaultInfo, "vault", "info", *_opt(None, name))

    def vault_delete(self, name: str) -> DeleteReport:
        return self._one(DeleteReport, "vault", "delete", name, "--yes")

    def vault_fork(
        self, source: str, name: str, *, at: str | None = None, use: bool = False
    ) -> ForkOutput:
        return self._one(
            ForkOutput, "vault", "fork", source, name, *_opt("--at", at), *_flag("--use", use)
        )

    # -- checkpoints ------------------------------------------------------------------

    def checkpoint_save(
        self, name: str | None = None, message: str | None = None
    ) -> CheckpointInfo:
        args = ["checkpoint", "save", *_opt(None, name), *_opt("-m", message)]
        return self._one(CheckpointInfo, *args)

    def checkpoint_list(self) -> list[CheckpointInfo]:
        return self._many(CheckpointInfo, "checkpoint", "list")

    def checkpoint_restore(self, name: str) -> CheckpointInfo:
        return self._one(CheckpointInfo, "checkpoint", "restore", name)

    def checkpoint_delete(self, name: str) -> CheckpointInfo:
        return self._one(CheckpointInfo, "checkpoint", "delete", name)

    # -- files ------------------------------------------------------------------------

    def ls(self, path: str = "/", *, all: bool = False, at: str | None = None) -> list[NodeInfo]:
        return self._many(NodeInfo, "ls", path, *_flag("-a", all), *_opt("--at", at))

    def cat(self, path: str, *, at: str | None = None) -> bytes:
        data = self.run("cat", path, *_opt("--at", at))
        if data["encoding"] == "base64":
            return base64.b64decode(data["content"])
        return str(data["content"]).encode()

    def read_text(self, path: str, *, at: str | None = None) -> str:
        return self.cat(path, at=at).decode()

    def write(
        self,
        path: str,
        content: bytes | str,
        *,
        parents: bool = False,
        append: bool = False,
        mode: int | None = None,
    ) -> WriteOutput:
        """Write `content` (sent on stdin, binary-safe); `mode` as an int, e.g. 0o755."""
        data = content.encode() if isinstance(content, str) else content
        args = ["write", path, *_flag("-p", parents), *_flag("--append", append)]
        args += _opt("--mode", None if mode is None else format(mode, "o"))
        return self._one(WriteOutput, *args, stdin=data)

    def mkdir(self, path: str, *, parents: bool = False) -> list[str]:
        return list(self.run("mkdir", path, *_flag("-p", parents))["paths"])

    def rm(self, *paths: str, recursive: bool = False, force: bool = False) -> list[str]:
        args = ["rm", *_flag("-r", recursive), *_flag("-f", force), "--", *paths]
        return list(self.run(*args)["paths"])

    def mv(self, src: str, dst: str) -> MoveOutput:
        return self._one(MoveOutput, "mv", src, dst)

    def cp(self, src: str, dst: str, *, recursive: bool = False) -> MoveOutput:
        return self._one(MoveOutput, "cp", *_flag("-r", recursive), src, dst)

    def stat(self, path: str, *, at: str | None = None) -> NodeInfo:
        return self._one(NodeInfo, "stat", path, *_opt("--at", at))

    # -- history ----------------------------------------------------------------------

    def diff(
        self,
        from_: str | None = None,
        to: str | None = None,
        *,
        patch: bool = False,
        include_ignored: bool = False,
    ) -> DiffOutput:
        """Changes from `from_` (default: last checkpoint) to `to` (default: live, `@`).

        Changes the workspace's ignore rules leave out are counted in `ignored` unless
        `include_ignored`.
        """
        if to is not None and from_ is None:
            raise ValueError("diff: give from_ together with to")
        args = [*_opt(None, from_), *_opt(None, to), *_flag("--patch", patch)]
        return self._one(DiffOutput, "diff", *args, *_flag("--include-ignored", include_ignored))

    def merge(
        self,
        fork: str,
        *,
        into: str | None = None,
        strategy: Literal["ours", "theirs"] | None = None,
        dry_run: bool = False,
        include_ignored: bool = False,
    ) -> MergeReport:
        args = ["merge", fork, *_opt("--into", into), *_opt("--strategy", strategy)]
        args += _flag("--include-ignored", include_ignored)
        return self._one(MergeReport, *args, *_flag("--dry-run", dry_run))

    def op_log(self, limit: int | None = None) -> list[OpInfo]:
        """The workspace's op log, newest first (at most `limit` entries)."""
        count = None if limit is None else str(limit)
        return self.if_head(None)._many(OpInfo, "op", "log", *_opt("--limit", count))

    def head(self) -> int:
        """The id of the workspace's newest operation, 0 for none: what `if_head` compares."""
        newest = self.op_log(limit=1)
        return newest[0].id if newest else 0

    def undo(self) -> OpInfo:
        return self._one(OpInfo, "undo")

    def redo(self) -> OpInfo:
        return self._one(OpInfo, "redo")

    def rollback(self, exec_id: int | None = None) -> OpInfo:
        """Restore the state before a proxied command (default: the last one)."""
        return self._one(OpInfo, "rollback", *_opt(None, None if exec_id is None else str(exec_id)))

    # -- proxy and sessions -----------------------------------------------------------

    def proxy_exec(
        self,
        argv: Sequence[str] | None = None,
        *,
        shell: str | None = None,
        cwd: str | None = None,
        timeout: float | str | None = None,
        session: str | None = None,
        readonly: bool = False,
        checkpoint: Literal["auto", "always", "never"] | None = None,
        policy: StrPath | None = None,
        approve: str | None = None,
        allow_env: Sequence[str] = (),
        max_output: int | None = None,
        fork_from: str | None = None,
        fork: str | None = None,
        confine: bool = False,
        offline: bool = False,
        task: str | None = None,
        mode: str | None = None,
        workspace_path: str | None = None,
        lower: Literal["tree", "fuse"] | None = None,
        include_ignored: bool = False,
        interleave: bool = False,
    ) -> Envelope:
        """Run `argv` (or `shell` text) through the policy-checked proxy.

        A command that fails, times out (124), needs approval (125) or is denied (126)
        still returns its `Envelope`; see `Envelope.status`. `timeout` is in seconds or a
        duration string such as "30s". `fork` runs it in that fork, made from `fork_from`
        on first use (`task=` is the deprecated name of `fork=`). `mode` is "overlay",
        "fuse", "copy" or "auto" (how the command's file system is made; see the envelope's
        `mode` and `sandbox`), `workspace_path` where the workspace appears inside the
        command's sandbox, and `lower` where an overlay's lower layer comes from ("tree":
        the fork written out and cached by root; "fuse": a FUSE view of it).
        `include_ignored` lists the changes the ignore rules leave out instead of counting
        them in `ignored`; `interleave` returns stdout and stderr as one stream in the order
        written (in `stdout`).
        """
        fork = _renamed("task", task, "fork", fork)
        args = _exec_args(
            argv, shell, cwd=cwd, timeout=timeout, session=session, readonly=readonly,
            checkpoint=checkpoint, policy=policy, approve=approve, allow_env=allow_env,
            max_output=max_output, fork_from=fork_from, fork=fork, confine=confine,
            offline=offline, mode=mode, workspace_path=workspace_path, lower=lower,
            include_ignored=include_ignored, interleave=interleave,
        )
        return self._one(Envelope, *args)

    def proxy_exec_stream(
        self,
        argv: Sequence[str] | None = None,
        *,
        shell: str | None = None,
        **options: Any,
    ) -> Iterator[Document]:
        """Run a command as `proxy_exec` does, yielding its output while it runs.

        Yields the NDJSON events of `avfs --json proxy exec --stream`, as dicts: first
        `{"event": "started", ...}`, then `{"event": "stdout"|"stderr", "text": ...}` (or
        `"base64"` for bytes that are not UTF-8) as the command writes, and last
        `{"event": "finished", ...}`, the whole document. `finished`'s `data` is the
        `Envelope` (see `Envelope` and `from_json`); a request avfs refuses ends with a
        `finished` event holding the error instead. Takes `proxy_exec`'s keyword options.
        """
        words = _exec_args(argv, shell, **options)
        words.insert(2, "--stream")  # after `proxy exec`, before the command
        argv_full = [self.binary, "--json", *self._globals(), *words]
        env = dict(os.environ if self.env is None else self.env)
        if self.home is not None:
            env["AVFS_HOME"] = self.home
        finished: Document | None = None
        with subprocess.Popen(
            argv_full, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                    if not isinstance(event, dict):
                        raise ValueError("not an object")
                except ValueError as e:
                    proc.kill()
                    raise ProtocolError(
                        "protocol",
                        f"`avfs proxy exec --stream` printed a line that is not an event: {e}",
                        {"line": line.decode(errors="replace")[-2000:]},
                        None,
                    ) from None
                if event.get("event") == "finished":
                    finished = event
                else:
                    yield event
            code = proc.wait()
        if finished is None:
            raise ProtocolError(
                "protocol",
                "`avfs proxy exec --stream` ended without a finished event",
                {},
                code,
            )
        if self.on_document is not None:
            self.on_document({k: v for k, v in finished.items() if k != "event"}, code)
        yield finished

    # -- git --------------------------------------------------------------------------

    def handback(self, git: StrPath, branch: str, message: str | None = None) -> HandbackReport:
        """Write the workspace's files as one commit on `branch` of the host repository
        `git`, through git's objects (its worktree, index and HEAD are not touched)."""
        args = ["handback", "--git", os.fspath(git), "--branch", branch]
        return self._one(HandbackReport, *args, *_opt("-m", message))

    # -- standing approvals ------------------------------------------------------------

    def approvals_grant(self, pattern: str, *, for_: str = "1h") -> Grant:
        """Let commands matching `pattern` (a glob over the command text, such as
        "pip install *") run in this fork without asking, for `for_` ("30m", "1h", "2d")."""
        return self._one(Grant, "approvals", "grant", pattern, "--for", for_)

    def approvals_list(self) -> list[Grant]:
        return self._many(Grant, "approvals", "list")

    def approvals_revoke(self, grant_id: int) -> Grant:
        return self._one(Grant, "approvals", "revoke", str(grant_id))

    def session_start(
        self,
        fork: str,
        *,
        name: str | None = None,
        policy: StrPath | None = None,
        mode: str | None = None,
    ) -> SessionRecord:
        """Start a background daemon for `fork` that runs `proxy_exec(..., session=NAME)`.

        `mode` is "overlay" (one sandbox namespace kept for every command), "copy", "fuse"
        (the fork mounted on the host, no namespace) or "auto" (the default).
        """
        return self._one(
            SessionRecord,
            "session",
            "start",
            fork,
            *_opt("--name", name),
            *_opt("--policy", policy),
            *_opt("--mode", mode),
        )

    def session_stop(self, name: str) -> StopReport:
        return self._one(StopReport, "session", "stop", name)

    def session_list(self) -> list[SessionRecord]:
        return self._many(SessionRecord, "session", "list")


def _exec_args(
    argv: Sequence[str] | None,
    shell: str | None,
    *,
    cwd: str | None = None,
    timeout: float | str | None = None,
    session: str | None = None,
    readonly: bool = False,
    checkpoint: str | None = None,
    policy: StrPath | None = None,
    approve: str | None = None,
    allow_env: Sequence[str] = (),
    max_output: int | None = None,
    fork_from: str | None = None,
    fork: str | None = None,
    confine: bool = False,
    offline: bool = False,
    mode: str | None = None,
    workspace_path: str | None = None,
    lower: str | None = None,
    include_ignored: bool = False,
    interleave: bool = False,
) -> list[str]:
    """`proxy exec …` words for a request, checked as `proxy_exec` documents."""
    if (argv is None) == (shell is None):
        raise ValueError("pass exactly one of argv and shell")
    if isinstance(argv, str):
        raise TypeError("argv must be a sequence of strings; use shell= for shell text")
    if isinstance(timeout, (int, float)):
        timeout = f"{round(timeout * 1000)}ms"
    args = ["proxy", "exec", *_opt("--cwd", cwd), *_opt("--timeout", timeout)]
    args += _opt("--session", session) + _flag("--readonly", readonly)
    args += _opt("--checkpoint", checkpoint) + _opt("--policy", policy)
    args += _opt("--approve", approve) + [a for n in allow_env for a in ("--allow-env", n)]
    args += _opt("--max-output", None if max_output is None else str(max_output))
    args += _opt("--fork-from", fork_from) + _opt("--fork", fork)
    args += _flag("--confine", confine) + _flag("--offline", offline)
    args += _opt("--mode", mode) + _opt("--workspace-path", workspace_path)
    args += _opt("--lower", lower) + _flag("--include-ignored", include_ignored)
    args += _flag("--interleave", interleave)
    args += ["--shell", shell] if shell is not None else ["--", *argv]  # type: ignore[misc]
    return args


def _opt(flag: str | None, value: StrPath | None) -> list[str]:
    """`[flag, value]` (or `[value]` for a positional) when value is set, else `[]`."""
    if value is None:
        return []
    return [os.fspath(value)] if flag is None else [flag, os.fspath(value)]


def _flag(flag: str, on: bool) -> list[str]:
    return [flag] if on else []


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"{old} is deprecated; use {new}", DeprecationWarning, stacklevel=3)


def _renamed(old: str, old_value: str | None, new: str, new_value: str | None) -> str | None:
    """The value of a keyword argument that was renamed, given under either name."""
    if old_value is None:
        return new_value
    if new_value is not None:
        raise TypeError(f"pass {new}= only ({old}= is its deprecated name)")
    warnings.warn(f"{old}= is deprecated; use {new}=", DeprecationWarning, stacklevel=3)
    return old_value
