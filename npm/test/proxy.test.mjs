// proxyExec and sessions against a real vault and a real FUSE mount. Without /dev/fuse the
// mounting tests fail, unless AVFS_CI_ALLOW_NO_FUSE=1 skips them (visibly).

import { test } from "node:test";
import assert from "node:assert/strict";
import { PathNotFoundError, SessionNotFoundError, VaultNotFoundError, proxyExitCode } from "agentvfs";
import { changeSet, fuse, newClient, newVault, requireFuse } from "./helpers.mjs";

/** The envelope's claim about the exit code must be the CLI's real exit code. */
function assertExit(c, envelope, expected) {
  assert.equal(c.lastExit(), expected, "avfs proxy exec exit code");
  assert.equal(proxyExitCode(envelope), expected, "proxyExitCode(envelope)");
}

test("proxyExec of an allowed command: output, exit code and the exact changes", fuse, async (t) => {
  requireFuse();
  const c = await newVault(t);
  const { avfs } = c;
  await avfs.write("/old.txt", "old\n");
  await avfs.write("/edit.txt", "one\n");
  await avfs.write("/mv-me.txt", "move\n");

  const env = await avfs.proxyExec(
    ["sh", "-c", "echo out; echo err >&2; mkdir d && echo b > d/b.txt && echo two >> edit.txt && rm old.txt && chmod 755 mv-me.txt && exit 3"],
    { timeout: 60 },
  );
  assert.equal(env.ran, true);
  assert.equal(env.decision.action, "checkpoint_then_run");
  assert.ok(env.decision.categories.includes("mutating"));
  assert.equal(env.exit_code, 3, "a failing command is an envelope, not an error");
  assert.equal(env.timed_out, false);
  assert.equal(env.signal, null);
  assert.deepEqual(env.stdout, { text: "out\n", bytes: 4, truncated: false });
  assert.deepEqual(env.stderr, { text: "err\n", bytes: 4, truncated: false });
  assert.deepEqual(changeSet(env.changes), [
    { path: "/d", status: "added", type: "dir" },
    { path: "/d/b.txt", status: "added", type: "file" },
    { path: "/edit.txt", status: "modified", type: "file" },
    { path: "/mv-me.txt", status: "modified", type: "file" },
    { path: "/old.txt", status: "deleted", type: "file" },
  ]);
  const chmodded = env.changes.find((ch) => ch.path === "/mv-me.txt");
  assert.equal(chmodded.mode_changed, true);
  assert.equal(chmodded.old_mode, 0o644);
  assert.equal(chmodded.new_mode, 0o755);
  assert.deepEqual(env.summary, { added: 2, modified: 2, deleted: 1, renamed: 0, type_changed: 0 });
  assert.equal(typeof env.exec_id, "number");
  assert.equal(typeof env.audit_id, "number");
  assert.match(env.checkpoint, /^cp-\d+$/);
  assert.deepEqual(env.request.argv.slice(0, 2), ["sh", "-c"]);
  assert.equal(env.request.selected, "proj");
  assert.equal(env.request.workspace, "main");
  assertExit(c, env, 3);
  // The changes are in the vault.
  assert.equal(await avfs.readText("/edit.txt"), "one\ntwo\n");
  assert.equal(await avfs.readText("/d/b.txt"), "b\n");

  // A read-only command: allowed, no checkpoint, no changes, exit 0, cwd inside the workspace.
  const ls = await avfs.proxyExec({ argv: ["ls"], cwd: "/d" });
  assert.equal(ls.decision.action, "allow");
  assert.equal(ls.checkpoint, null);
  assert.equal(ls.stdout.text, "b.txt\n");
  assert.deepEqual(ls.changes, []);
  assertExit(c, ls, 0);

  // Shell text, and output capped at maxOutput.
  const sh = await avfs.proxyExec({ shell: "seq 1 1000", maxOutput: 10 });
  assert.equal(sh.request.shell, "seq 1 1000");
  assert.equal(sh.stdout.truncated, true);
  assert.equal(sh.stdout.text.length, 10);
  assert.equal(sh.stdout.bytes, 3893);
});

test("proxyExec of a denied `rm -rf /`: not run, exit 126, nothing changed", async (t) => {
  const c = await newVault(t);
  await c.avfs.write("/keep.txt", "safe");
  const env = await c.avfs.proxyExec(["rm", "-rf", "/"]);
  assert.equal(env.ran, false);
  assert.equal(env.decision.action, "deny");
  assert.ok(env.decision.categories.includes("host_escape"));
  assert.equal(env.decision.offending, "/");
  assert.equal(env.exit_code, null);
  assert.equal(env.exec_id, null);
  assert.deepEqual(env.changes, []);
  assertExit(c, env, 126);
  assert.equal(await c.avfs.readText("/keep.txt"), "safe");
});

test("proxyExec timeout: killed, timed_out, exit 124", fuse, async (t) => {
  requireFuse();
  const c = await newVault(t);
  const env = await c.avfs.proxyExec(["sleep", "30"], { timeout: "1s" });
  assert.equal(env.ran, true);
  assert.equal(env.timed_out, true);
  assert.equal(env.exit_code, null);
  assert.equal(typeof env.signal, "number");
  assertExit(c, env, 124);
});

test("proxyExec approval: ask (exit 125) then run with the token", fuse, async (t) => {
  requireFuse();
  const c = await newVault(t);
  const asked = await c.avfs.proxyExec({ shell: "kill -0 $$ && echo alive" });
  assert.equal(asked.ran, false);
  assert.equal(asked.decision.action, "ask");
  assert.equal(typeof asked.approval_token, "string");
  assertExit(c, asked, 125);
  const ran = await c.avfs.proxyExec({ shell: "kill -0 $$ && echo alive", approve: asked.approval_token });
  assert.equal(ran.ran, true);
  assert.equal(ran.stdout.text, "alive\n");
  assertExit(c, ran, 0);
});

test("rollback undoes a proxied command", fuse, async (t) => {
  requireFuse();
  const { avfs } = await newVault(t);
  await avfs.write("/f.txt", "before\n");
  const first = await avfs.proxyExec({ shell: "echo first > f.txt && echo x > x.txt" });
  const second = await avfs.proxyExec({ shell: "echo second > f.txt && rm x.txt" });
  assert.equal(await avfs.readText("/f.txt"), "second\n");

  // Default: the last proxied command.
  const op = await avfs.rollback();
  assert.equal(op.kind, "rollback");
  assert.equal(op.target, second.exec_id);
  assert.equal(await avfs.readText("/f.txt"), "first\n");
  assert.equal(await avfs.readText("/x.txt"), "x\n");

  // By exec id: the state before that command.
  const back = await avfs.rollback(first.exec_id);
  assert.equal(back.target, first.exec_id);
  assert.equal(await avfs.readText("/f.txt"), "before\n");
  await assert.rejects(avfs.stat("/x.txt"), PathNotFoundError);
});

test("proxyExec in a fork made on first use; `task` is the old name of `fork`", fuse, async (t) => {
  requireFuse();
  const c = await newVault(t, "proj");
  const { avfs } = c;
  const env = await avfs.proxyExec({ shell: "echo f > f.txt", forkFrom: "proj", fork: "t1" });
  assertExit(c, env, 0);
  assert.equal(env.request.workspace, "t1");
  assert.equal(await avfs.readText("/f.txt", { workspace: "t1" }), "f\n");
  await assert.rejects(avfs.stat("/f.txt"), PathNotFoundError);
  const again = await avfs.proxyExec(["cat", "f.txt"], { task: "t1" });
  assert.equal(again.request.workspace, "t1");
  assert.equal(again.stdout.text, "f\n");
  await assert.rejects(avfs.proxyExec(["true"], { fork: "t1", task: "t1" }), TypeError);
});

test("sessions: start, exec in the session, list, stop", fuse, async (t) => {
  requireFuse();
  const c = await newVault(t, "proj");
  const { avfs } = c;
  await avfs.write("/base.txt", "base\n");
  await avfs.vaultFork("proj", "task-1");

  const started = await avfs.sessionStart("task-1", { name: "s1" });
  let stopped = false;
  try {
    await sessionChecks(c, started);
    const stop = await avfs.sessionStop("s1");
    stopped = true;
    assert.deepEqual(stop, { name: "s1", stopped: true, stale: false });
  } finally {
    // Never leave a daemon (and its mount) behind, whatever failed.
    if (!stopped) await avfs.sessionStop("s1").catch(() => {});
  }
  assert.deepEqual(await avfs.sessionList(), []);
  await assert.rejects(avfs.proxyExec(["true"], { session: "s1" }), (e) => e instanceof SessionNotFoundError);
});

async function sessionChecks(c, started) {
  const { avfs } = c;
  assert.equal(started.name, "s1");
  assert.equal(started.vault, "task-1");
  assert.equal(started.workspace, "task-1");
  assert.ok(started.pid > 0);
  // As root the default is an overlay session: one kept namespace, no host mount.
  if (process.getuid() === 0) assert.equal(started.mode, "overlay");
  if (started.mode !== "fuse") assert.equal(started.dir ?? null, null);

  const listed = await avfs.sessionList();
  assert.deepEqual(listed.map((s) => [s.name, s.alive]), [["s1", true]]);

  const env = await avfs.proxyExec({ argv: ["sh", "-c", "cat base.txt; echo s > s.txt"], session: "s1" });
  assertExit(c, env, 0);
  assert.equal(env.request.session, "s1");
  assert.equal(env.request.workspace, "task-1");
  assert.equal(env.stdout.text, "base\n");
  assert.deepEqual(changeSet(env.changes), [{ path: "/s.txt", status: "added", type: "file" }]);
  const again = await avfs.proxyExec(["cat", "s.txt"], { session: "s1" });
  assert.equal(again.stdout.text, "s\n");
  // Written to the fork only.
  assert.equal(await avfs.readText("/s.txt", { workspace: "task-1" }), "s\n");
  await assert.rejects(avfs.stat("/s.txt"), PathNotFoundError);

  // A rollback between commands is seen by the session's next command.
  await avfs.rollback(env.exec_id, { workspace: "task-1" });
  const after = await avfs.proxyExec({ shell: "ls", session: "s1" });
  assert.equal(after.stdout.text, "base.txt\n");
}

test("proxyExec rejects with a typed error when avfs itself fails", async (t) => {
  const { avfs } = newClient(t);
  await assert.rejects(avfs.proxyExec(["true"], { workspace: "missing" }), (e) => {
    assert.ok(e instanceof VaultNotFoundError);
    assert.equal(e.command, "proxy exec");
    assert.equal(e.exitCode, 3);
    return true;
  });
  await assert.rejects(avfs.proxyExec({}), TypeError);
  await assert.rejects(avfs.proxyExec({ argv: ["true"], shell: "true" }), TypeError);
  await assert.rejects(avfs.proxyExec([]), TypeError);
});

test("proxyExec modes: each runs in its own sandbox and says so; an impossible one is a typed error", fuse, async (t) => {
  requireFuse();
  const c = await newVault(t);
  const { avfs } = c;
  for (const mode of ["overlay", "fuse", "copy"]) {
    const env = await avfs.proxyExec({ shell: `echo ${mode} > ${mode}.txt; pwd`, mode, workspacePath: "/src/app" });
    assert.equal(env.mode, mode);
    assert.equal(env.sandbox.kind, "namespace");
    assert.equal(env.sandbox.workspace_path, "/src/app");
    assert.equal(env.stdout.text, "/src/app\n");
    assert.deepEqual(changeSet(env.changes), [{ path: `/${mode}.txt`, status: "added", type: "file" }]);
  }
  // A session runs its commands in its own mode; a fuse run needs a fuse session.
  const name = `s${process.pid}`;
  const started = await avfs.sessionStart("proj", { name });
  try {
    const inSession = await avfs.proxyExec({ argv: ["true"], session: name, mode: "auto" });
    assert.equal(inSession.mode, started.mode === "copy" ? "copy" : "overlay");
    assert.equal(inSession.sandbox.kind, "namespace");
    await assert.rejects(
      avfs.proxyExec({ argv: ["true"], session: name, mode: "fuse" }),
      (e) => e.kind === "invalid_argument",
    );
  } finally {
    await avfs.sessionStop(name);
  }
});

test("proxyExecStream: started, output as written, then the finished document", fuse, async (t) => {
  requireFuse();
  const c = await newVault(t);
  const events = [];
  for await (const e of c.avfs.proxyExecStream({ shell: "echo out; echo err >&2; echo more" })) {
    events.push(e);
  }
  assert.equal(events[0].event, "started");
  const last = events.at(-1);
  assert.equal(last.event, "finished");
  const out = events.filter((e) => e.event === "stdout").map((e) => e.text).join("");
  assert.equal(out, "out\nmore\n");
  assert.ok(events.some((e) => e.event === "stderr"));
  assert.equal(last.ok, true);
  assert.equal(last.data.exit_code, 0);
  assert.deepEqual(last.data.stderr, { text: "err\n", bytes: 4, truncated: false });
  assert.equal(c.lastExit(), 0);
  // A denied request ends with a finished event too; a bad call is a TypeError.
  const denied = [];
  for await (const e of c.avfs.proxyExecStream({ argv: ["rm", "-rf", "/"] })) denied.push(e);
  assert.equal(denied.at(-1).data.outcome, "denied");
  await assert.rejects(async () => {
    for await (const _ of c.avfs.proxyExecStream({})) {
      // never reached
    }
  }, TypeError);
});

test("standing approvals: grant, list, revoke; bad input is a typed error", async (t) => {
  const c = await newVault(t);
  const g = await c.avfs.approvalsGrant("pip install *", { for: "30m" });
  assert.equal(g.pattern, "pip install *");
  assert.equal(g.expires_at - g.created_at, 30 * 60 * 1e9);
  assert.deepEqual((await c.avfs.approvalsList()).map((x) => x.id), [g.id]);
  assert.equal((await c.avfs.approvalsRevoke(g.id)).id, g.id);
  assert.deepEqual(await c.avfs.approvalsList(), []);
  await assert.rejects(c.avfs.approvalsGrant("pip install *", { for: "1000y" }), { kind: "invalid_argument" });
});
