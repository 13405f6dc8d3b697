// Compiled with `tsc --noEmit` (strict) against the installed package by types.test.mjs:
// the public API is typed, and the types are not `any` (each @ts-expect-error must fire).

import {
  Avfs,
  AvfsError,
  ERROR_CLASSES,
  MergeConflictError,
  VaultNotFoundError,
  proxyExitCode,
  type Action,
  type Change,
  type CheckpointInfo,
  type Envelope,
  type ErrorKind,
  type NodeInfo,
  type SessionRecord,
} from "agentvfs";

async function main(): Promise<void> {
  const avfs = new Avfs({ home: "/tmp/h", workspace: "proj", onResponse: (doc, info) => void [doc.ok, info.exitCode] });
  const target = await avfs.vaultCreate("proj", { path: "/tmp/proj.avfs" });
  const name: string = target.workspace;
  const cps: CheckpointInfo[] = await avfs.checkpointList();
  const nodes: NodeInfo[] = await avfs.ls("/", { all: true, at: cps[0]?.name });
  const bytes: Buffer = await avfs.cat("/a");
  const same: Buffer = await avfs.readFile("/a");
  const made: string[] = await avfs.mkdir("/m");
  const text: string = await avfs.readText("/a");
  await avfs.write("/a", new Uint8Array([1, 2]), { mode: 0o644, parents: true });
  await avfs.mkdir(["/x", "/y"], { parents: true, mode: "700" });

  const env: Envelope = await avfs.proxyExec(["make"], { timeout: 30, session: "s", checkpoint: "always" });
  const env2: Envelope = await avfs.proxyExec({ shell: "make test", cwd: "/src", allowEnv: ["TOKEN"], fork: "t1" });
  const action: Action = env.decision.action;
  const changes: Change[] = env2.changes;
  const code: number = proxyExitCode(env);
  const execId: number | null | undefined = env.exec_id;
  if (execId != null) await avfs.rollback(execId);
  const sessions: SessionRecord[] = await avfs.sessionList();
  const merged = await avfs.merge("task", { strategy: "theirs", dryRun: true });
  const applied: boolean = merged.applied;

  try {
    await avfs.vaultInfo("nope");
  } catch (err) {
    if (err instanceof VaultNotFoundError) {
      const suggestions = err.details.suggestions;
      const exit: number | null = err.exitCode;
      void [suggestions, exit];
    } else if (err instanceof MergeConflictError || err instanceof AvfsError) {
      const kind: string = err.kind;
      void kind;
    }
  }
  const known: ErrorKind = "vault_not_found";
  const Klass = ERROR_CLASSES[known];

  // @ts-expect-error: not a key of Envelope
  env.exitcode;
  // @ts-expect-error: action is a closed union
  const wrong: Action = "maybe";
  const ro: Action = "readonly";
  // @ts-expect-error: spelled `readonly` since envelope schema_version 2
  const oldRo: Action = "read_only";
  const fork: Avfs = avfs.withWorkspace("t1");
  // @ts-expect-error: argv must be strings
  await avfs.proxyExec([1, 2]);
  // @ts-expect-error: strategy is ours or theirs
  await avfs.merge("task", { strategy: "mine" });
  // @ts-expect-error: status is a closed union
  const status: Change["status"] = "copied";

  void [name, nodes, bytes, same, made, text, action, code, sessions, applied, Klass, wrong, status, ro, oldRo, fork];
}

void main;
