// The client against a real vault: vaults, files, checkpoints, forks, diff, merge, undo and
// typed errors. Each test has its own AVFS_HOME; every document is schema-validated.

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import {
  AlreadyExistsError,
  AvfsError,
  CheckpointNotFoundError,
  ConflictError,
  ERROR_CLASSES,
  InvalidInputError,
  MergeConflictError,
  NotFoundError,
  NothingToUndoError,
  PathNotFoundError,
  VaultNotFoundError,
} from "agentvfs";
import { changeSet, newClient, newVault, tempDir } from "./helpers.mjs";

test("vaults: create, list, use, info, fork, delete", async (t) => {
  const { avfs, home } = newClient(t);
  const created = await avfs.vaultCreate("alpha");
  assert.deepEqual(created, { name: "alpha", path: `${home}/vaults/alpha.avfs`, workspace: "main" });
  assert.ok(existsSync(created.path));
  await avfs.vaultCreate("beta");

  // The first vault created becomes the current one.
  let list = await avfs.vaultList();
  assert.deepEqual(
    list.map((v) => [v.name, v.current, v.exists]),
    [["alpha", true, true], ["beta", false, true]],
  );
  assert.equal((await avfs.vaultUse("beta")).name, "beta");
  assert.equal((await avfs.vaultList()).find((v) => v.current).name, "beta");
  assert.deepEqual(await avfs.vaultUse("alpha"), created);
  list = await avfs.vaultList();
  assert.equal(list.find((v) => v.current).name, "alpha");

  await avfs.write("/a.txt", "one\n");
  const fork = await avfs.vaultFork("alpha", "alpha-task");
  assert.equal(fork.target.name, "alpha-task");
  assert.equal(fork.fork.parent, "main");
  assert.equal(fork.fork.files, 1);

  const info = await avfs.vaultInfo();
  assert.equal(info.name, "alpha");
  assert.equal(info.workspace.name, "main");
  assert.deepEqual(info.forks, ["alpha-task"]);
  assert.equal(info.pending_changes, 1);
  const forkInfo = await avfs.vaultInfo("alpha-task");
  assert.equal(forkInfo.workspace.parent, "main");

  const dropped = await avfs.vaultDelete("alpha-task");
  assert.deepEqual(dropped, { name: "alpha-task", file_deleted: false, unregistered: ["alpha-task"] });
  const gone = await avfs.vaultDelete("beta");
  assert.equal(gone.file_deleted, true);
  assert.deepEqual((await avfs.vaultList()).map((v) => v.name), ["alpha"]);
});

test("files: write, read, ls, stat, mkdir, mv, cp, rm", async (t) => {
  const { avfs, responses } = await newVault(t);
  const w = await avfs.write("/src/main.rs", "fn main() {}\n", { parents: true });
  assert.equal(w.path, "/src/main.rs");
  assert.equal(w.size, 13);
  assert.equal(await avfs.readText("/src/main.rs"), "fn main() {}\n");
  await avfs.write("/src/main.rs", "// end\n", { append: true });
  assert.equal(await avfs.readText("/src/main.rs"), "fn main() {}\n// end\n");

  // Binary-safe both ways, including bytes that are not UTF-8.
  const bytes = Buffer.from([0, 1, 2, 0xff, 0xfe, 10, 0x80]);
  await avfs.write("/blob.bin", bytes);
  assert.deepEqual(await avfs.cat("/blob.bin"), bytes);
  const doc = responses.at(-1).doc;
  assert.equal(doc.command, "cat");
  assert.equal(doc.data.encoding, "base64");
  assert.equal(doc.data.size, bytes.length);
  assert.deepEqual(await avfs.readFile("/blob.bin"), bytes);
  const utf8 = Buffer.from("héllo ✓\0\n");
  await avfs.write("/utf8.txt", utf8);
  assert.deepEqual(await avfs.cat("/utf8.txt"), utf8);
  assert.equal(responses.at(-1).doc.data.encoding, "utf8");
  await avfs.write("/empty", "");
  assert.equal((await avfs.stat("/empty")).size, 0);

  await avfs.write("/run.sh", "#!/bin/sh\n", { mode: 0o755 });
  const st = await avfs.stat("/run.sh");
  assert.equal(st.type, "file");
  assert.equal(st.mode, 0o755);
  assert.equal(st.mode_string, "-rwxr-xr-x");

  assert.deepEqual(await avfs.mkdir(["/a/b/c", "/d"], { parents: true }), ["/a/b/c", "/d"]);
  assert.deepEqual(await avfs.mv("/run.sh", "/d/run.sh"), { from: "/run.sh", to: "/d/run.sh" });
  assert.deepEqual(await avfs.cp("/src", "/src2", { recursive: true }), { from: "/src", to: "/src2" });
  assert.equal(await avfs.readText("/src2/main.rs"), "fn main() {}\n// end\n");
  await avfs.write("/.hidden", "h");

  assert.deepEqual(
    (await avfs.ls()).map((n) => [n.name, n.type]),
    [["a", "dir"], ["blob.bin", "file"], ["d", "dir"], ["empty", "file"], ["src", "dir"], ["src2", "dir"], ["utf8.txt", "file"]],
  );
  assert.ok((await avfs.ls("/", { all: true })).some((n) => n.name === ".hidden"));
  assert.deepEqual((await avfs.ls("/d")).map((n) => n.path), ["/d/run.sh"]);

  assert.deepEqual(await avfs.rm("/src2", { recursive: true }), ["/src2"]);
  assert.deepEqual(await avfs.rm(["/nope", "/empty"], { force: true }), ["/empty"]);
  await assert.rejects(avfs.stat("/src2"), PathNotFoundError);
  await assert.rejects(avfs.rm("/a"), InvalidInputError);
});

test("checkpoints: save, list, info, restore, delete", async (t) => {
  const { avfs } = await newVault(t);
  await avfs.write("/f.txt", "v1");
  const cp = await avfs.checkpointSave("base", { message: "first" });
  assert.equal(cp.name, "base");
  assert.equal(cp.message, "first");
  assert.equal(cp.files, 1);
  await avfs.write("/f.txt", "v2");
  await avfs.write("/g.txt", "new");
  const auto = await avfs.checkpointSave();
  assert.match(auto.name, /^cp-\d+$/);
  assert.deepEqual((await avfs.checkpointList()).map((c) => c.name), ["base", auto.name]);
  assert.deepEqual(await avfs.checkpointInfo("base"), cp);

  assert.equal(await avfs.readText("/f.txt", { at: "base" }), "v1");
  const restored = await avfs.checkpointRestore("base");
  assert.equal(restored.name, "base");
  assert.equal(await avfs.readText("/f.txt"), "v1");
  await assert.rejects(avfs.stat("/g.txt"), PathNotFoundError);

  await avfs.checkpointDelete(auto.name);
  assert.deepEqual((await avfs.checkpointList()).map((c) => c.name), ["base"]);
  await assert.rejects(avfs.checkpointRestore(auto.name), (err) => {
    assert.ok(err instanceof CheckpointNotFoundError);
    assert.equal(err.kind, "checkpoint_not_found");
    assert.equal(err.exitCode, 3);
    return true;
  });
});

test("forks are isolated from their parent and from each other", async (t) => {
  const { avfs } = await newVault(t, "proj");
  await avfs.write("/shared.txt", "base\n");
  await avfs.checkpointSave("base");
  await avfs.vaultFork("proj", "task-a");
  await avfs.vaultFork("proj", "task-b");
  const a = avfs.withWorkspace("task-a");

  await a.write("/shared.txt", "changed in a\n");
  await a.write("/only-a.txt", "a");
  await avfs.write("/only-b.txt", "b", { workspace: "task-b" });

  assert.equal(await avfs.readText("/shared.txt"), "base\n");
  assert.equal(await avfs.readText("/shared.txt", { workspace: "task-b" }), "base\n");
  assert.equal(await a.readText("/shared.txt"), "changed in a\n");
  assert.deepEqual((await avfs.ls()).map((n) => n.name), ["shared.txt"]);
  assert.deepEqual((await a.ls()).map((n) => n.name), ["only-a.txt", "shared.txt"]);
  assert.deepEqual((await avfs.ls("/", { workspace: "task-b" })).map((n) => n.name), ["only-b.txt", "shared.txt"]);

  // A fork taken at a checkpoint starts there.
  await avfs.write("/shared.txt", "later\n");
  await avfs.vaultFork("proj", "task-c", { at: "base" });
  assert.equal(await avfs.readText("/shared.txt", { workspace: "task-c" }), "base\n");
});

test("diff between checkpoints, forks and the live state", async (t) => {
  const { avfs } = await newVault(t, "proj");
  await avfs.write("/keep.txt", "same\n");
  await avfs.write("/edit.txt", "one\n");
  await avfs.write("/drop.txt", "x\n");
  await avfs.checkpointSave("base");
  await avfs.write("/edit.txt", "one\ntwo\n");
  await avfs.rm("/drop.txt");
  await avfs.write("/new.txt", "n\n");

  const d = await avfs.diff();
  assert.equal(d.from, "main:base");
  assert.deepEqual(d.summary, { added: 1, modified: 1, deleted: 1, renamed: 0, type_changed: 0 });
  assert.deepEqual(changeSet(d.changes), [
    { path: "/drop.txt", status: "deleted", type: "file" },
    { path: "/edit.txt", status: "modified", type: "file" },
    { path: "/new.txt", status: "added", type: "file" },
  ]);
  const edit = d.changes.find((c) => c.path === "/edit.txt");
  assert.equal(edit.old_size, 4);
  assert.equal(edit.new_size, 8);

  const p = await avfs.diff("base", "@", { patch: true });
  assert.match(p.patch, /\+two/);

  await avfs.checkpointSave("after");
  assert.deepEqual((await avfs.diff("after")).changes, []);
  assert.equal((await avfs.diff("base", "after")).changes.length, 3);

  await avfs.vaultFork("proj", "task");
  await avfs.write("/edit.txt", "fork\n", { workspace: "task" });
  const forkDiff = await avfs.diff("@base", "@", { workspace: "task" });
  assert.deepEqual(changeSet(forkDiff.changes), [{ path: "/edit.txt", status: "modified", type: "file" }]);
  await assert.rejects(avfs.diff(undefined, "base"), TypeError);
});

test("merge a fork back, line-merging text, and typed merge conflicts", async (t) => {
  const { avfs } = await newVault(t, "proj");
  await avfs.write("/notes.txt", "a\nb\nc\nd\ne\n");
  await avfs.write("/conf.txt", "base\n");
  await avfs.checkpointSave("base");
  await avfs.vaultFork("proj", "task");
  const task = avfs.withWorkspace("task");
  await task.write("/notes.txt", "A\nb\nc\nd\ne\n");
  await task.write("/added.txt", "from task\n");
  await avfs.write("/notes.txt", "a\nb\nc\nd\nE\n");

  const dry = await avfs.merge("task", { dryRun: true });
  assert.equal(dry.dry_run, true);
  assert.equal(dry.applied, false);
  await assert.rejects(avfs.stat("/added.txt"), PathNotFoundError);

  const merged = await avfs.merge("task");
  assert.equal(merged.applied, true);
  assert.equal(merged.fork, "task");
  assert.equal(merged.into, "main");
  assert.deepEqual(merged.conflicts, []);
  assert.deepEqual(merged.text_merged, ["/notes.txt"]);
  assert.deepEqual(changeSet(merged.changes), [
    { path: "/added.txt", status: "added", type: "file" },
    { path: "/notes.txt", status: "modified", type: "file" },
  ]);
  assert.equal(await avfs.readText("/notes.txt"), "A\nb\nc\nd\nE\n");

  // Both sides rewrite the same line: a conflict that applies nothing…
  await avfs.vaultFork("proj", "task2");
  await avfs.write("/conf.txt", "ours\n");
  await avfs.write("/conf.txt", "theirs\n", { workspace: "task2" });
  await assert.rejects(avfs.merge("task2"), (err) => {
    assert.ok(err instanceof MergeConflictError);
    assert.ok(err instanceof ConflictError);
    assert.equal(err.kind, "merge_conflict");
    assert.equal(err.exitCode, 4);
    assert.equal(err.command, "merge");
    assert.deepEqual(err.details.conflicts.map((c) => c.path), ["/conf.txt"]);
    return true;
  });
  assert.equal(await avfs.readText("/conf.txt"), "ours\n");
  // …unless a strategy picks a side.
  const theirs = await avfs.merge("task2", { strategy: "theirs" });
  assert.equal(theirs.strategy, "theirs");
  assert.deepEqual(theirs.conflicts.map((c) => c.path), ["/conf.txt"]);
  assert.equal(await avfs.readText("/conf.txt"), "theirs\n");
});

test("undo and redo", async (t) => {
  const { avfs } = await newVault(t);
  await assert.rejects(avfs.undo(), NothingToUndoError);
  await avfs.write("/f.txt", "one");
  await avfs.write("/f.txt", "two");
  const undone = await avfs.undo();
  assert.equal(undone.kind, "undo");
  assert.equal(typeof undone.target, "number");
  assert.equal(await avfs.readText("/f.txt"), "one");
  await avfs.undo();
  await assert.rejects(avfs.stat("/f.txt"), PathNotFoundError);
  const redone = await avfs.redo();
  assert.equal(redone.kind, "redo");
  assert.equal(await avfs.readText("/f.txt"), "one");
});

test("ifHead: a change applies only on the state it read; opLog and head", async (t) => {
  const { avfs } = await newVault(t);
  await avfs.write("/f.txt", "one");
  const head = await avfs.head();
  const log = await avfs.opLog();
  assert.equal(log[0].id, head);
  assert.deepEqual((await avfs.opLog({ limit: 1 })).map((op) => op.id), [head]);
  // Two agents read one head: the first change lands, the second changes nothing.
  await avfs.write("/f.txt", "mine", { ifHead: head });
  const err = await avfs.write("/f.txt", "theirs", { ifHead: head }).catch((e) => e);
  assert.ok(err instanceof ConflictError, `got ${err}`);
  assert.equal(err.kind, "head_moved");
  assert.equal(err.exitCode, 4);
  assert.deepEqual(err.details, { workspace: "main", expected: head, head: await avfs.head() });
  assert.equal(await avfs.readText("/f.txt"), "mine");
  // On the new head it applies; checkpoints and undo take it as well.
  const saved = await avfs.checkpointSave("cas", { ifHead: await avfs.head() });
  assert.equal(saved.name, "cas");
  await assert.rejects(avfs.undo({ ifHead: head }), (e) => e.kind === "head_moved");
  assert.equal((await avfs.undo({ ifHead: await avfs.head() })).kind, "undo");
  // A call that changes nothing refuses it; a non-integer never reaches avfs.
  await assert.rejects(avfs.ls("/", { ifHead: await avfs.head() }), (e) => e.kind === "invalid_argument");
  await assert.rejects(avfs.write("/f.txt", "x", { ifHead: 1.5 }), TypeError);
  // null, like undefined, is unconditional.
  assert.equal((await avfs.write("/g.txt", "g", { ifHead: null })).size, 1);
  // A streaming exec refuses it in its finished event, as it answers every refusal.
  const events = [];
  for await (const e of avfs.proxyExecStream({ argv: ["true"], ifHead: head })) events.push(e);
  assert.deepEqual(events.map((e) => e.event), ["finished"]);
  assert.equal(events[0].error.kind, "invalid_argument");
});

test("a missing vault is a typed VaultNotFoundError", async (t) => {
  const { avfs, responses } = newClient(t);
  await avfs.vaultCreate("project");
  const err = await avfs.ls("/", { workspace: "projct" }).catch((e) => e);
  assert.ok(err instanceof VaultNotFoundError, `got ${err}`);
  assert.ok(err instanceof NotFoundError);
  assert.ok(err instanceof AvfsError);
  assert.ok(err instanceof Error);
  assert.equal(err.name, "VaultNotFoundError");
  assert.equal(err.kind, "vault_not_found");
  assert.equal(err.exitCode, 3);
  assert.equal(err.command, "ls");
  assert.match(err.message, /projct/);
  assert.equal(err.details.name, "projct");
  assert.deepEqual(err.details.suggestions, ["project"]);
  // The document the error came from was a schema-valid failure.
  assert.equal(responses.at(-1).doc.ok, false);
  assert.equal(responses.at(-1).info.exitCode, 3);

  // And through the client's own `workspace` option.
  const other = newClient(t, { workspace: "nowhere" }).avfs;
  await assert.rejects(other.vaultInfo(), (e) => e instanceof VaultNotFoundError && e.details.name === "nowhere");
});

test("the old `vault` option and withVault still select a workspace", async (t) => {
  const { avfs, home } = await newVault(t, "proj");
  await avfs.vaultFork("proj", "task-1");
  await avfs.write("/only-fork.txt", "x", { workspace: "task-1" });
  // `vault` was the name of `workspace`, per call and per client.
  assert.equal(await avfs.readText("/only-fork.txt", { vault: "task-1" }), "x");
  assert.equal(await avfs.withVault("task-1").readText("/only-fork.txt"), "x");
  assert.equal(await newClient(t, { home, vault: "task-1" }).avfs.readText("/only-fork.txt"), "x");
  // A per-call workspace wins over the client's, whichever name either has.
  const onFork = avfs.withWorkspace("task-1");
  await assert.rejects(onFork.stat("/only-fork.txt", { vault: "proj" }), PathNotFoundError);
  // Both names at once is a mistake, not a silent choice.
  await assert.rejects(avfs.ls("/", { vault: "proj", workspace: "task-1" }), TypeError);
});

test("other failures map to their kinds and exit codes", async (t) => {
  const { avfs } = await newVault(t, "proj");
  await assert.rejects(avfs.vaultCreate("proj"), (e) => {
    assert.ok(e instanceof AlreadyExistsError);
    assert.equal(e.exitCode, 4);
    return true;
  });
  await assert.rejects(avfs.cat("/missing"), (e) => {
    assert.ok(e instanceof PathNotFoundError);
    assert.deepEqual(e.details, { path: "/missing" });
    assert.equal(e.exitCode, 3);
    return true;
  });
  await assert.rejects(avfs.vaultCreate("bad name!"), (e) => e.kind === "invalid_name" && e.exitCode === 5);
  await assert.rejects(avfs.run(["no-such-command"]), (e) => e.kind === "usage" && e.exitCode === 2);
  for (const [kind, Class] of Object.entries(ERROR_CLASSES)) {
    assert.ok(Class.prototype instanceof AvfsError, kind);
  }
});

test("run() reaches commands without a dedicated method", async (t) => {
  const { avfs } = await newVault(t);
  await avfs.write("/x", "1");
  const ops = await avfs.run(["op", "log"]);
  assert.ok(Array.isArray(ops));
  assert.ok(ops.some((op) => op.kind === "write"));
});

test("an aborted call rejects with kind aborted", async (t) => {
  const { avfs } = newClient(t);
  const controller = new AbortController();
  controller.abort();
  await assert.rejects(avfs.vaultList({ signal: controller.signal }), (e) => e.kind === "aborted");
  await avfs.vaultList();
});

test("handback: the workspace's files as one commit on a new branch; a moved branch is refused", async (t) => {
  const { avfs } = await newVault(t);
  await avfs.write("/a.txt", "one\n");
  const repo = join(tempDir(t), "repo");
  mkdirSync(repo);
  const git = (...args) =>
    execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...args], { cwd: repo, encoding: "utf8" });
  git("init", "-q", "-b", "main");
  git("commit", "-q", "--allow-empty", "-m", "base");
  const r = await avfs.handback(repo, "agent/t", { message: "from node" });
  assert.equal(r.created, true);
  assert.equal(r.branch, "refs/heads/agent/t");
  assert.equal(r.files, 1);
  assert.deepEqual(r.submodules, []);
  assert.equal(git("show", "agent/t:a.txt"), "one\n");
  assert.equal(git("log", "-1", "--format=%s", "agent/t").trim(), "from node");
  git("branch", "other");
  await assert.rejects(avfs.handback(repo, "other"), { kind: "branch_moved" });
  await assert.rejects(avfs.handback(repo, "main"), { kind: "invalid_argument" });
});
