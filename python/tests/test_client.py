"""The client against a real vault and a real `avfs` (the one the wheel installed)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from conftest import SchemaValidator

import agentvfs
from agentvfs import Client


def changes_of(changes: list[agentvfs.Change]) -> set[tuple[str, str]]:
    return {(c.path, c.status) for c in changes}


def test_vaults(avfs: Client) -> None:
    created = avfs.vault_create("proj")
    assert created.name == "proj" and created.workspace == "main"
    assert os.path.isfile(created.path)
    avfs.vault_create("other")
    assert avfs.vault_use("other").name == "other"
    assert [(v.name, v.current) for v in avfs.vault_list()] == [("other", True), ("proj", False)]
    assert avfs.vault_use("proj").name == "proj"
    info = avfs.vault_info()
    assert (info.name, info.workspace.name, info.checkpoints, info.forks) == ("proj", "main", 0, [])
    assert info.quota == agentvfs.Quota()

    fork = avfs.vault_fork("proj", "task-1")
    assert (fork.target.name, fork.target.workspace, fork.fork.parent) == (
        "task-1",
        "task-1",
        "main",
    )
    assert avfs.vault_info("proj").forks == ["task-1"]

    gone = avfs.vault_delete("task-1")
    assert (gone.name, gone.file_deleted) == ("task-1", False)
    gone = avfs.vault_delete("other")
    assert gone.file_deleted and gone.unregistered == ["other"]
    assert [v.name for v in avfs.vault_list()] == ["proj"]


def test_files(vault: Client) -> None:
    assert vault.read_text("/a.txt") == "one\n"
    blob = bytes(range(256)) * 3
    out = vault.write("/bin/blob", blob, parents=True)
    assert (out.path, out.size) == ("/bin/blob", len(blob))
    assert vault.cat("/bin/blob") == blob
    vault.write("/run.sh", "#!/bin/sh\n", mode=0o755)
    assert vault.stat("/run.sh").mode == 0o755
    vault.write("/a.txt", "two\n", append=True)
    assert vault.cat("/a.txt") == b"one\ntwo\n"

    assert vault.mkdir("/src/deep", parents=True) == ["/src/deep"]
    moved = vault.mv("/run.sh", "/src/run.sh")
    assert (moved.from_, moved.to) == ("/run.sh", "/src/run.sh")
    vault.cp("/src", "/src2", recursive=True)
    node = vault.stat("/src2/run.sh")
    assert (node.type, node.size, node.mode_string) == ("file", 10, "-rwxr-xr-x")
    assert [n.name for n in vault.ls("/")] == ["a.txt", "bin", "src", "src2"]
    assert vault.rm("/src2", recursive=True) == ["/src2"]
    assert vault.rm("/nope", force=True) == []
    with pytest.raises(agentvfs.PathNotFound):
        vault.stat("/src2")


def test_checkpoints(vault: Client) -> None:
    base = vault.checkpoint_save("base", message="first")
    assert (base.name, base.message, base.files) == ("base", "first", 1)
    vault.write("/a.txt", "changed\n")
    vault.write("/b.txt", "new\n")
    auto = vault.checkpoint_save()
    assert auto.name.startswith("cp-")
    assert [c.name for c in vault.checkpoint_list()] == ["base", auto.name]

    restored = vault.checkpoint_restore("base")
    assert restored.name == "base"
    assert vault.read_text("/a.txt") == "one\n"
    assert [n.name for n in vault.ls()] == ["a.txt"]
    assert vault.read_text("/b.txt", at=auto.name) == "new\n"

    assert vault.checkpoint_delete(auto.name).name == auto.name
    assert [c.name for c in vault.checkpoint_list()] == ["base"]
    with pytest.raises(agentvfs.CheckpointNotFound) as e:
        vault.checkpoint_restore(auto.name)
    assert (e.value.kind, e.value.exit_code, e.value.details["name"]) == (
        "checkpoint_not_found",
        3,
        auto.name,
    )


def test_fork_isolation(vault: Client) -> None:
    vault.vault_fork("proj", "task-1")
    task = vault.with_workspace("task-1")
    task.write("/a.txt", "fork\n")
    task.write("/only-fork.txt", "x")
    vault.write("/only-main.txt", "y")
    assert vault.read_text("/a.txt") == "one\n"
    assert [n.name for n in vault.ls()] == ["a.txt", "only-main.txt"]
    assert [n.name for n in task.ls()] == ["a.txt", "only-fork.txt"]
    assert task.read_text("/a.txt") == "fork\n"


def test_diff(vault: Client) -> None:
    vault.write("/gone.txt", "bye\n")
    vault.checkpoint_save("base")
    vault.write("/a.txt", "one\nmore\n")
    vault.rm("/gone.txt")
    vault.write("/new.txt", "hi\n")

    diff = vault.diff()
    assert (diff.from_, diff.to) == ("main:base", "main@live")
    assert changes_of(diff.changes) == {
        ("/a.txt", "modified"),
        ("/gone.txt", "deleted"),
        ("/new.txt", "added"),
    }
    assert (diff.summary.added, diff.summary.modified, diff.summary.deleted) == (1, 1, 1)
    assert diff.patch is None

    vault.checkpoint_save("after")
    named = vault.diff("base", "after", patch=True)
    assert changes_of(named.changes) == changes_of(diff.changes)
    assert named.patch is not None and "+more" in named.patch
    assert vault.diff("after").changes == []


def test_merge(vault: Client) -> None:
    vault.vault_fork("proj", "task-1")
    task = vault.with_workspace("task-1")
    task.write("/feature.txt", "done\n")
    task.write("/a.txt", "one\nfrom fork\n")

    preview = vault.merge("task-1", dry_run=True)
    assert (preview.dry_run, preview.applied) == (True, False)
    assert [n.name for n in vault.ls()] == ["a.txt"]

    report = vault.merge("task-1")
    assert (report.fork, report.applied, report.conflicts) == ("task-1", True, [])
    assert changes_of(report.changes) == {("/a.txt", "modified"), ("/feature.txt", "added")}
    assert vault.read_text("/feature.txt") == "done\n"

    # Both sides replace the same line: a conflict, applied only with a strategy.
    other = vault.vault_fork("proj", "task-2").target.name
    vault.with_workspace(other).write("/a.txt", "theirs\n")
    vault.write("/a.txt", "ours\n")
    with pytest.raises(agentvfs.MergeConflict) as e:
        vault.merge(other)
    assert e.value.exit_code == 4
    assert [c["path"] for c in e.value.details["conflicts"]] == ["/a.txt"]
    resolved = vault.merge(other, strategy="theirs")
    assert resolved.conflicts == [
        agentvfs.Conflict(path="/a.txt", ours="modified", theirs="modified")
    ]
    assert vault.read_text("/a.txt") == "theirs\n"


def test_undo_redo(vault: Client) -> None:
    vault.write("/a.txt", "two\n")
    undone = vault.undo()
    assert undone.kind == "undo" and undone.target is not None
    assert vault.read_text("/a.txt") == "one\n"
    redone = vault.redo()
    assert redone.kind == "redo"
    assert vault.read_text("/a.txt") == "two\n"
    vault.undo()
    vault.undo()  # the initial write of /a.txt
    with pytest.raises(agentvfs.PathNotFound):
        vault.cat("/a.txt")


def test_if_head_changes_only_the_state_it_read(vault: Client) -> None:
    head = vault.head()
    assert head == vault.op_log(limit=1)[0].id and head > 0
    ids = [op.id for op in vault.op_log()]
    assert ids == sorted(ids, reverse=True)
    # Two agents read the same head; the first write lands, the second changes nothing.
    first = vault.if_head(head).write("/a.txt", "mine\n")
    assert first.size == 5
    with pytest.raises(agentvfs.HeadMoved) as moved:
        vault.if_head(head).write("/a.txt", "theirs\n")
    e = moved.value
    assert (e.kind, e.exit_code, e.command) == ("head_moved", 4, "write")
    assert e.details == {"workspace": "main", "expected": head, "head": vault.head()}
    assert isinstance(e, agentvfs.ConflictError)
    assert vault.read_text("/a.txt") == "mine\n"
    # On the new head it applies; checkpoints and undo take it too.
    saved = vault.if_head(vault.head()).checkpoint_save("cas")
    assert saved.name == "cas"
    with pytest.raises(agentvfs.HeadMoved):
        vault.if_head(head).undo()
    assert vault.if_head(vault.head()).undo().kind == "undo"
    # A command that changes nothing refuses it rather than ignoring it.
    with pytest.raises(agentvfs.InvalidArgument):
        vault.if_head(vault.head()).ls()
    with pytest.raises(TypeError):
        vault.if_head("7")  # type: ignore[arg-type]
    # The log reads unconditionally on a conditional client; a streaming exec refuses it
    # in its finished event, as it answers every refusal.
    stale = vault.if_head(head)
    assert stale.head() == vault.head() and stale.op_log(limit=1) == vault.op_log(limit=1)
    events = list(stale.proxy_exec_stream(["true"]))
    assert [e["event"] for e in events] == ["finished"]
    assert events[0]["error"]["kind"] == "invalid_argument"
    # None: unconditional again, and the original client was never conditional.
    assert vault.if_head(head).if_head(None).write("/b.txt", "b\n").size == 2
    assert vault.expected_head is None


def test_typed_errors(avfs: Client, vault: Client) -> None:
    with pytest.raises(agentvfs.VaultNotFound) as e:
        avfs.with_workspace("missing").ls()
    err = e.value
    assert (err.kind, err.exit_code, err.command) == ("vault_not_found", 3, "ls")
    assert err.details["name"] == "missing" and "missing" in err.message
    assert isinstance(err, agentvfs.NotFoundError) and isinstance(err, agentvfs.AvfsError)

    with pytest.raises(agentvfs.VaultNotFound):
        avfs.vault_info("missing")
    with pytest.raises(agentvfs.PathNotFound) as p:
        vault.cat("/nope.txt")
    assert p.value.details == {"path": "/nope.txt"}
    with pytest.raises(agentvfs.AlreadyExists) as a:
        avfs.vault_create("proj")
    assert a.value.exit_code == 4
    with pytest.raises(agentvfs.InvalidPath) as i:
        vault.write("../escape", "x")
    assert (i.value.kind, i.value.exit_code) == ("invalid_path", 5)
    with pytest.raises(agentvfs.SessionNotFound):
        avfs.session_stop("nope")
    with pytest.raises(agentvfs.UsageError):
        avfs.run("no-such-command")

    vault.run("quota", "set", "--max-files", "1")
    with pytest.raises(agentvfs.QuotaExceeded) as q:
        vault.write("/second.txt", "x")
    assert q.value.exit_code == 6
    assert q.value.details == {"quota": "max_files", "limit": 1, "attempted": 2}


def test_old_keywords_still_select(avfs: Client, vault: Client) -> None:
    """`vault=` and `with_vault` were the names of `workspace=` and `with_workspace`."""
    vault.vault_fork("proj", "task-1")
    vault.with_workspace("task-1").write("/only-fork.txt", "x")
    with pytest.deprecated_call():
        old = Client(home=avfs.home, vault="task-1")
    assert old.workspace == "task-1" and old.read_text("/only-fork.txt") == "x"
    with pytest.deprecated_call():
        assert avfs.with_vault("task-1").read_text("/only-fork.txt") == "x"
    with pytest.deprecated_call():
        assert old.vault == "task-1"
    with pytest.raises(TypeError):
        Client(home=avfs.home, workspace="proj", vault="task-1")


# -- the proxy and sessions: real FUSE mounts -------------------------------------------


@pytest.mark.usefixtures("fuse")
def test_proxy_exec_allowed(vault: Client, validator: SchemaValidator) -> None:
    vault.write("/old.txt", "old\n")
    env = vault.proxy_exec(
        ["sh", "-c", "echo hi > new.txt; echo two >> a.txt; rm old.txt; cat a.txt; echo err >&2"]
    )
    assert env.ran and env.exit_code == 0 and env.status == validator.last_exit_code == 0
    assert env.decision.action == "checkpoint_then_run" and env.checkpoint is not None
    assert env.stdout == agentvfs.Captured(text="one\ntwo\n", bytes=8, truncated=False)
    assert env.stderr.text == "err\n"
    assert changes_of(env.changes) == {
        ("/new.txt", "added"),
        ("/a.txt", "modified"),
        ("/old.txt", "deleted"),
    }
    assert (env.summary.added, env.summary.modified, env.summary.deleted) == (1, 1, 1)
    assert env.request.argv is not None and env.request.argv[0] == "sh"
    assert vault.read_text("/new.txt") == "hi\n"

    # A failing command is not an error: its code is in the envelope.
    failed = vault.proxy_exec(shell="echo nope >&2; exit 3", cwd="/")
    assert (failed.ran, failed.exit_code, failed.status, validator.last_exit_code) == (
        True,
        3,
        3,
        3,
    )
    assert failed.request.shell is not None and failed.stderr.text == "nope\n"


@pytest.mark.usefixtures("fuse")
def test_proxy_exec_in_a_fork_made_on_first_use(vault: Client) -> None:
    env = vault.proxy_exec(["sh", "-c", "echo f > f.txt"], fork_from="proj", fork="t1")
    assert (env.ran, env.exit_code, env.request.workspace) == (True, 0, "t1")
    assert vault.with_workspace("t1").read_text("/f.txt") == "f\n"
    assert [n.name for n in vault.ls()] == ["a.txt"]
    # `task=` is the deprecated name of `fork=`.
    with pytest.deprecated_call():
        again = vault.proxy_exec(["cat", "f.txt"], task="t1")
    assert (again.request.workspace, again.stdout.text) == ("t1", "f\n")
    with pytest.raises(TypeError):
        vault.proxy_exec(["true"], fork="t1", task="t1")


@pytest.mark.usefixtures("fuse")
def test_proxy_exec_denied(vault: Client, validator: SchemaValidator) -> None:
    env = vault.proxy_exec(["rm", "-rf", "/"])
    assert (env.ran, env.exit_code, env.denied, env.status) == (False, None, True, 126)
    assert validator.last_exit_code == 126
    assert env.decision.action == "deny" and "host_escape" in env.decision.categories
    assert env.changes == [] and env.exec_id is None
    assert vault.read_text("/a.txt") == "one\n"


@pytest.mark.usefixtures("fuse")
def test_proxy_exec_timeout(vault: Client, validator: SchemaValidator) -> None:
    env = vault.proxy_exec(["sleep", "30"], timeout=0.5)
    assert env.ran and env.timed_out and env.exit_code is None
    assert env.status == validator.last_exit_code == 124
    assert env.signal is not None


@pytest.mark.usefixtures("fuse")
def test_proxy_exec_approval(vault: Client, validator: SchemaValidator) -> None:
    vault.write("/x.o", "obj")
    asked = vault.proxy_exec(shell="find . -name '*.o' | xargs rm")
    assert (asked.needs_approval, asked.ran, asked.status) == (True, False, 125)
    assert validator.last_exit_code == 125 and asked.approval_token
    ran = vault.proxy_exec(shell="find . -name '*.o' | xargs rm", approve=asked.approval_token)
    assert ran.ran and ran.exit_code == 0
    assert changes_of(ran.changes) == {("/x.o", "deleted")}


@pytest.mark.usefixtures("fuse")
def test_rollback(vault: Client) -> None:
    first = vault.proxy_exec(["sh", "-c", "echo first > f.txt"])
    second = vault.proxy_exec(["sh", "-c", "echo second >> a.txt; rm f.txt"])
    assert first.exec_id is not None and second.exec_id is not None
    op = vault.rollback()  # the last proxied command
    assert (op.kind, op.target) == ("rollback", second.exec_id)
    assert vault.read_text("/a.txt") == "one\n" and vault.read_text("/f.txt") == "first\n"
    vault.rollback(first.exec_id)
    with pytest.raises(agentvfs.PathNotFound):
        vault.stat("/f.txt")


@pytest.fixture
def session(fuse: None, vault: Client) -> Iterator[str]:
    vault.vault_fork("proj", "task-1")
    record = vault.session_start("task-1", name="s1")
    try:
        assert (record.name, record.vault, record.workspace) == ("s1", "task-1", "task-1")
        if os.geteuid() == 0:
            # As root the default is an overlay session: one kept namespace, no host mount.
            assert (record.mode, record.dir) == ("overlay", None)
        yield record.name
    finally:
        try:
            vault.session_stop(record.name)
        except agentvfs.SessionNotFound:
            pass  # the test stopped it


@pytest.mark.usefixtures("fuse")
def test_session(vault: Client, session: str, validator: SchemaValidator) -> None:
    [listed] = vault.session_list()
    assert (listed.name, listed.alive) == (session, True)
    task = vault.with_workspace("task-1")
    env = task.proxy_exec(["sh", "-c", "echo s > s.txt; cat a.txt"], session=session)
    assert env.request.session == session and env.stdout.text == "one\n"
    assert changes_of(env.changes) == {("/s.txt", "added")}
    assert task.read_text("/s.txt") == "s\n" and [n.name for n in vault.ls()] == ["a.txt"]
    denied = task.proxy_exec(["rm", "-rf", "/"], session=session)
    assert denied.status == validator.last_exit_code == 126

    stopped = vault.session_stop(session)
    assert (stopped.stopped, stopped.stale) == (True, False)
    assert vault.session_list() == []
    with pytest.raises(agentvfs.SessionNotFound):
        task.proxy_exec(["true"], session=session)


def test_proxy_exec_modes_run_sandboxed(vault: Client, validator: SchemaValidator) -> None:
    for mode in ("overlay", "fuse", "copy"):
        shell = f"echo {mode} > {mode}.txt; pwd"
        env = vault.proxy_exec(shell=shell, mode=mode, workspace_path="/src/app")
        assert env.mode == mode
        assert env.sandbox.kind == "namespace"
        assert env.sandbox.workspace_path == "/src/app"
        assert env.stdout.text == "/src/app\n"
        assert [(c.path, c.status) for c in env.changes] == [(f"/{mode}.txt", "added")]
    with pytest.raises(agentvfs.InvalidArgument):
        vault.proxy_exec(["true"], workspace_path="relative")


@pytest.mark.usefixtures("fuse")
def test_proxy_exec_stream(vault: Client, validator: SchemaValidator) -> None:
    script = "echo out; echo err >&2; echo more"
    events = list(vault.proxy_exec_stream(shell=script))
    kinds = [e["event"] for e in events]
    assert kinds[0] == "started" and kinds[-1] == "finished", kinds
    streamed = "".join(e.get("text", "") for e in events if e["event"] == "stdout")
    assert "out\n" in streamed and "more\n" in streamed
    assert any(e["event"] == "stderr" for e in events)
    # The last event is the whole document: its data is the envelope, checked by the schema.
    env = agentvfs.from_json(agentvfs.Envelope, events[-1]["data"])
    assert env.exit_code == 0 and validator.last_exit_code == 0
    assert (env.stdout.text, env.stderr.text) == ("out\nmore\n", "err\n")
    one = list(vault.proxy_exec_stream(shell=script, interleave=True))[-1]["data"]
    assert one["interleaved"] and one["stdout"]["text"] == "out\nerr\nmore\n"
    # A request avfs refuses still ends with a finished event, holding the error.
    denied = list(vault.proxy_exec_stream(["rm", "-rf", "/"]))
    assert denied[-1]["event"] == "finished" and denied[-1]["data"]["outcome"] == "denied"
    with pytest.raises(ValueError):
        list(vault.proxy_exec_stream())


def test_handback(vault: Client, tmp_path: os.PathLike[str]) -> None:
    import subprocess

    repo = os.path.join(os.fspath(tmp_path), "repo")
    os.makedirs(repo)

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=repo,
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    git("init", "-q", "-b", "main")
    git("commit", "-q", "--allow-empty", "-m", "base")
    r = vault.handback(repo, "agent/t", message="from python")
    assert r.created and r.branch == "refs/heads/agent/t" and r.commit is not None
    assert r.files == 1 and r.submodules == [] and r.skipped == []
    assert git("show", "agent/t:a.txt") == "one\n"
    assert git("log", "-1", "--format=%s", "agent/t").strip() == "from python"
    again = vault.handback(repo, "agent/t")
    assert again.commit is None and again.note is not None
    git("branch", "other")
    with pytest.raises(agentvfs.BranchMoved):  # a branch this fork did not make
        vault.handback(repo, "other")
    with pytest.raises(agentvfs.InvalidArgument):  # the checked-out one
        vault.handback(repo, "main")


def test_approvals(vault: Client) -> None:
    g = vault.approvals_grant("pip install *", for_="30m")
    assert (g.pattern, g.workspace) == ("pip install *", "main")
    assert g.expires_at - g.created_at == 30 * 60 * 10**9
    assert [x.id for x in vault.approvals_list()] == [g.id]
    assert vault.approvals_revoke(g.id).id == g.id
    assert vault.approvals_list() == []
    with pytest.raises(agentvfs.InvalidArgument):
        vault.approvals_grant("pip install *", for_="1000y")
    with pytest.raises(agentvfs.InvalidArgument):
        vault.approvals_revoke(g.id)
