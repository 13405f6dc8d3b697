// The client: one method per avfs command, each running `avfs --json …` asynchronously and
// returning the command's typed `data`, or throwing the typed error of its failure document.
// The binary is the contract; nothing here re-implements a rule of its own.

import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { resolveBinary } from "./binary";
import { AvfsError, ClientError, errorFromBody } from "./errors";
import type {
  AvfsResponse,
  CatOutput,
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
  PathsOutput,
  SessionRecord,
  StopReport,
  StreamEvent,
  Target,
  VaultInfo,
  VaultListEntry,
  WriteOutput,
} from "./types";

/** Environment variables as `process.env` holds them. */
export type Env = Record<string, string | undefined>;

/** What the client knew about the avfs run that printed a document. */
export interface ResponseInfo {
  /** The arguments avfs was run with (after the binary). */
  args: string[];
  /** avfs's exit code (for `proxy exec`: the command's, or 124, 125, 126). */
  exitCode: number | null;
  /** The signal that ended avfs, if one did. */
  signal: string | null;
  stderr: string;
}

export interface AvfsOptions {
  /** The avfs executable. Default: `AVFS_BIN`, else the binary of this platform's package. */
  bin?: string;
  /** `AVFS_HOME`: where the registry and default vault files live (default `~/.avfs`). */
  home?: string;
  /**
   * The workspace to act on (`AVFS_WORKSPACE`): a registered vault or fork name, or a vault
   * file path.
   */
  workspace?: string;
  /** @deprecated The earlier name of `workspace`. */
  vault?: string;
  /** `AVFS_ACTOR`: who the audit log records (default `$USER`). */
  actor?: string;
  /** Environment for avfs, on top of `process.env` (a value of `undefined` removes one). */
  env?: Env;
  /** Host working directory for avfs (matters for relative `--path`/`--policy` files). */
  cwd?: string;
  /**
   * Called with every JSON document avfs prints, before it is turned into a result or an
   * error. An exception thrown here rejects the call (tests use this to validate each one).
   */
  onResponse?: (response: AvfsResponse, info: ResponseInfo) => void;
}

/** Options every call takes. */
export interface CallOptions {
  /** Act on this workspace (a vault or a fork) instead of the client's. */
  workspace?: string;
  /** @deprecated The earlier name of `workspace`. */
  vault?: string;
  /** Abort the call: avfs is killed and the call rejects with kind `aborted`. */
  signal?: AbortSignal;
  /**
   * Apply this call's changes only while the workspace's newest operation is this id
   * (`--if-head`; `head()` reads it, 0 for none), as a compare-and-swap with the change.
   * One that finds the workspace moved on rejects with kind `head_moved` (a
   * `ConflictError`) and changes nothing. Taken by changes only (write, mkdir, rm, cp, mv,
   * checkpoint save/restore/delete, undo, redo, rollback); any other call rejects with
   * `invalid_argument`. `undefined` or `null`: unconditional.
   */
  ifHead?: number | null;
}

export interface OpLogOptions extends CallOptions {
  /** At most this many entries, newest first. */
  limit?: number;
}

export interface AtOptions extends CallOptions {
  /** Read as of this checkpoint instead of the live state. */
  at?: string;
}

export interface LsOptions extends AtOptions {
  /** Include entries whose names start with `.`. */
  all?: boolean;
}

export interface WriteOptions extends CallOptions {
  /** Create missing parent directories. */
  parents?: boolean;
  /** Append instead of replacing. */
  append?: boolean;
  /** Permission bits for a new file: a number (`0o755`) or an octal string (`"755"`). */
  mode?: number | string;
}

export interface MkdirOptions extends CallOptions {
  /** Create parents as needed; an existing directory is not an error. */
  parents?: boolean;
  /** Permission bits: a number (`0o700`) or an octal string (`"700"`). */
  mode?: number | string;
}

export interface RmOptions extends CallOptions {
  recursive?: boolean;
  /** Ignore paths that do not exist. */
  force?: boolean;
}

export interface CpOptions extends CallOptions {
  recursive?: boolean;
}

export interface VaultCreateOptions extends CallOptions {
  /** Where to put the vault file (default `$AVFS_HOME/vaults/NAME.avfs`). */
  path?: string;
}

export interface VaultForkOptions extends CallOptions {
  /** Fork at this checkpoint of the source instead of its live state. */
  at?: string;
  /** Make the new fork the current vault. */
  use?: boolean;
}

export interface CheckpointSaveOptions extends CallOptions {
  message?: string;
}

export interface DiffOptions extends CallOptions {
  /** Include a unified patch in `patch`. */
  patch?: boolean;
  /** List the changes the ignore rules leave out (`.gitignore`, `.avfsignore`,
   * `.git/info/exclude`, `.git/`) instead of counting them in `ignored`. */
  includeIgnored?: boolean;
}

export interface MergeOptions extends CallOptions {
  /** The vault or fork to merge into (default: the fork's parent). */
  into?: string;
  /** Resolve every conflict with one side instead of failing with `merge_conflict`. */
  strategy?: "ours" | "theirs";
  /** Report what would happen without changing anything. */
  dryRun?: boolean;
  /** Also carry the fork's changes the ignore rules leave out (`.gitignore`, `.avfsignore`,
   * `.git/info/exclude`, `.git/`) (by default they stay in the fork). */
  includeIgnored?: boolean;
}

export interface SessionStartOptions extends CallOptions {
  /** The session's name (default: the fork's). */
  name?: string;
  /** A TOML policy file for every command in the session. */
  policy?: string;
  /** How its commands run: `overlay` keeps one sandbox namespace for them all, `copy` gives
   * each a namespace on a copy, `fuse` mounts the fork on the host (no namespace). */
  mode?: "auto" | "overlay" | "fuse" | "copy";
}

/** How to run one command through the proxy. Give exactly one of `argv` and `shell`. */
export interface ProxyExecOptions extends CallOptions {
  /** The program and its arguments. */
  argv?: string[];
  /** Shell text for `/bin/sh -c` (the policy parses it like a shell would). */
  shell?: string;
  /** Working directory inside the workspace (default `/`). */
  cwd?: string;
  /** Kill the command after this: seconds as a number, or avfs's form (`"30s"`, `"500ms"`). */
  timeout?: number | string;
  /** Mount the workspace read-only for this command. */
  readonly?: boolean;
  /** When to checkpoint first (default `auto`: when the policy says it may change things). */
  checkpoint?: "auto" | "always" | "never";
  /** A TOML policy file instead of the built-in policy (or the session's). */
  policy?: string;
  /** Run a command the policy answered `ask` for, with the envelope's `approval_token`. */
  approve?: string;
  /** Pass these environment variables even if they look secret. */
  allowEnv?: string[];
  /** Keep at most this many bytes of stdout and of stderr each. */
  maxOutput?: number;
  /** Make the `fork` from this workspace on first use. */
  forkFrom?: string;
  /** The fork to run in, made from `forkFrom` on first use and reused after. */
  fork?: string;
  /** @deprecated The earlier name of `fork`. */
  task?: string;
  /** Run in this session (`sessionStart`) instead of setting up a sandbox for this call. */
  session?: string;
  /** Landlock: the command may write only inside the workspace and a private TMPDIR. */
  confine?: boolean;
  /** No network: a fresh network namespace with only loopback (needs root). */
  offline?: boolean;
  /** How the command's file system is made (see the envelope's `mode` and `sandbox`). */
  mode?: "auto" | "overlay" | "fuse" | "copy";
  /** Where the workspace appears inside the command's sandbox (default `/workspace`). */
  workspacePath?: string;
  /** Where an overlay's lower layer comes from: `tree` (the fork written out, cached by
   * root) or `fuse` (a FUSE view of it); default: the policy's `[sandbox] lower`. */
  lower?: "tree" | "fuse";
  /** stdout and stderr as one stream in the order written (in `stdout`). */
  interleave?: boolean;
  /** List the changes the ignore rules leave out (`.gitignore`, `.avfsignore`,
   * `.git/info/exclude`, `.git/`) instead of counting them in `ignored`. */
  includeIgnored?: boolean;
}

/** The process exit code `avfs proxy exec` ends with for an envelope (README, "Exit codes"). */
export function proxyExitCode(envelope: Envelope): number {
  if (envelope.outcome === "spawn_failed") {
    return 127;
  }
  if (!envelope.ran) {
    return envelope.decision.action === "ask" ? 125 : 126;
  }
  if (envelope.timed_out) {
    return 124;
  }
  if (envelope.exit_code !== null && envelope.exit_code !== undefined) {
    return envelope.exit_code;
  }
  if (envelope.signal !== null && envelope.signal !== undefined) {
    return 128 + envelope.signal;
  }
  return 1;
}

interface InvokeOptions extends CallOptions {
  /** Bytes for avfs's stdin (otherwise stdin is /dev/null). */
  input?: string | Uint8Array;
}

interface Invocation<T> {
  data: T;
  exitCode: number | null;
}

/** A client for one AVFS_HOME (and optionally one workspace). Methods mirror the CLI. */
export class Avfs {
  readonly options: Readonly<AvfsOptions>;
  private resolvedBin: string | undefined;

  constructor(options: AvfsOptions = {}) {
    this.options = { ...options };
  }

  /** The avfs executable this client runs (resolved on first use). */
  get bin(): string {
    if (this.resolvedBin === undefined) {
      this.resolvedBin = this.options.bin ?? resolveBinary({ ...process.env, ...this.options.env });
    }
    return this.resolvedBin;
  }

  /** A client like this one acting on another workspace (a vault or a fork). */
  withWorkspace(workspace: string): Avfs {
    return new Avfs({ ...this.options, workspace, vault: undefined });
  }

  /** @deprecated The earlier name of `withWorkspace`. */
  withVault(vault: string): Avfs {
    return this.withWorkspace(vault);
  }

  // -- vaults ----------------------------------------------------------------------------

  /** `vault create NAME [--path P]`; the new vault becomes the current one. */
  vaultCreate(name: string, options: VaultCreateOptions = {}): Promise<Target> {
    return this.data(["vault", "create"], [...opt("--path", options.path), "--", name], options);
  }

  /** `vault list`: registered vaults and forks. */
  vaultList(options: CallOptions = {}): Promise<VaultListEntry[]> {
    return this.data(["vault", "list"], [], options);
  }

  /** `vault use NAME`: make a vault or fork the current one. */
  vaultUse(name: string, options: CallOptions = {}): Promise<Target> {
    return this.data(["vault", "use"], ["--", name], options);
  }

  /** `vault info [NAME]` (default: the selected vault). */
  vaultInfo(name?: string, options: CallOptions = {}): Promise<VaultInfo> {
    return this.data(["vault", "info"], name === undefined ? [] : ["--", name], options);
  }

  /** `vault delete NAME --yes`: the vault file with all its forks, or a single fork. */
  vaultDelete(name: string, options: CallOptions = {}): Promise<DeleteReport> {
    return this.data(["vault", "delete"], ["--yes", "--", name], options);
  }

  /** `vault fork SOURCE NAME [--at CP] [--use]`: O(1), nothing is copied. */
  vaultFork(source: string, name: string, options: VaultForkOptions = {}): Promise<ForkOutput> {
    const args = [...opt("--at", options.at), ...flag("--use", options.use), "--", source, name];
    return this.data(["vault", "fork"], args, options);
  }

  // -- checkpoints -----------------------------------------------------------------------

  /** `checkpoint save [NAME] [-m MSG]` (a name `cp-N` is generated when absent). */
  checkpointSave(name?: string, options: CheckpointSaveOptions = {}): Promise<CheckpointInfo> {
    const args = [...opt("--message", options.message), ...(name === undefined ? [] : ["--", name])];
    return this.data(["checkpoint", "save"], args, options);
  }

  /** `checkpoint list`, oldest first. */
  checkpointList(options: CallOptions = {}): Promise<CheckpointInfo[]> {
    return this.data(["checkpoint", "list"], [], options);
  }

  /** `checkpoint info NAME`. */
  checkpointInfo(name: string, options: CallOptions = {}): Promise<CheckpointInfo> {
    return this.data(["checkpoint", "info"], ["--", name], options);
  }

  /** `checkpoint restore NAME`: atomically return the workspace to a checkpoint. */
  checkpointRestore(name: string, options: CallOptions = {}): Promise<CheckpointInfo> {
    return this.data(["checkpoint", "restore"], ["--", name], options);
  }

  /** `checkpoint delete NAME`. */
  checkpointDelete(name: string, options: CallOptions = {}): Promise<CheckpointInfo> {
    return this.data(["checkpoint", "delete"], ["--", name], options);
  }

  // -- files -----------------------------------------------------------------------------

  /** `ls [-a] [--at CP] [PATH]`: the entries of a directory (default `/`). */
  ls(path = "/", options: LsOptions = {}): Promise<NodeInfo[]> {
    const args = [...flag("--all", options.all), ...opt("--at", options.at), "--", path];
    return this.data(["ls"], args, options);
  }

  /** `cat PATH [--at CP]`: the file's bytes (binary-safe: avfs sends non-UTF-8 as base64). */
  async cat(path: string, options: AtOptions = {}): Promise<Buffer> {
    const out = await this.data<CatOutput>(["cat"], [...opt("--at", options.at), "--", path], options);
    return Buffer.from(out.content, out.encoding === "base64" ? "base64" : "utf8");
  }

  /** The same as `cat`, by its Node.js name. */
  readFile(path: string, options: AtOptions = {}): Promise<Buffer> {
    return this.cat(path, options);
  }

  /** A file's content as UTF-8 text. */
  async readText(path: string, options: AtOptions = {}): Promise<string> {
    return (await this.cat(path, options)).toString("utf8");
  }

  /** `write PATH` with `content` on stdin (binary-safe). */
  write(path: string, content: string | Uint8Array, options: WriteOptions = {}): Promise<WriteOutput> {
    const args = [
      ...flag("--parents", options.parents),
      ...flag("--append", options.append),
      ...opt("--mode", octal(options.mode)),
      "--",
      path,
    ];
    return this.data(["write"], args, { ...options, input: content });
  }

  /** `mkdir [-p] [--mode M] PATHS…`: the directories created. */
  async mkdir(paths: string | string[], options: MkdirOptions = {}): Promise<string[]> {
    const args = [...flag("--parents", options.parents), ...opt("--mode", octal(options.mode))];
    return (await this.data<PathsOutput>(["mkdir"], [...args, "--", ...list(paths)], options)).paths;
  }

  /** `rm [-r] [-f] PATHS…`: the paths removed. */
  async rm(paths: string | string[], options: RmOptions = {}): Promise<string[]> {
    const args = [...flag("--recursive", options.recursive), ...flag("--force", options.force)];
    return (await this.data<PathsOutput>(["rm"], [...args, "--", ...list(paths)], options)).paths;
  }

  /** `mv SRC DST`, like rename(2). */
  mv(src: string, dst: string, options: CallOptions = {}): Promise<MoveOutput> {
    return this.data(["mv"], ["--", src, dst], options);
  }

  /** `cp [-r] SRC DST`: content is shared, not duplicated. */
  cp(src: string, dst: string, options: CpOptions = {}): Promise<MoveOutput> {
    return this.data(["cp"], [...flag("--recursive", options.recursive), "--", src, dst], options);
  }

  /** `stat PATH [--at CP]`. */
  stat(path: string, options: AtOptions = {}): Promise<NodeInfo> {
    return this.data(["stat"], [...opt("--at", options.at), "--", path], options);
  }

  // -- history ---------------------------------------------------------------------------

  /**
   * `diff [FROM] [TO]`. States: a checkpoint, a fork, `FORK:CHECKPOINT`, `@base` or `@`.
   * Default: the last checkpoint (else `@base`) to the live state.
   */
  async diff(from?: string, to?: string, options: DiffOptions = {}): Promise<DiffOutput> {
    if (from === undefined && to !== undefined) {
      throw new TypeError("diff: give `from` when giving `to`");
    }
    const states = [from, to].filter((s): s is string => s !== undefined);
    const args = [
      ...flag("--patch", options.patch),
      ...flag("--include-ignored", options.includeIgnored),
      ...(states.length ? ["--", ...states] : []),
    ];
    return this.data(["diff"], args, options);
  }

  /** `merge FORK [--into X] [--strategy S] [--dry-run]`: three-way, nothing half-applied. */
  merge(fork: string, options: MergeOptions = {}): Promise<MergeReport> {
    const args = [
      ...opt("--into", options.into),
      ...opt("--strategy", options.strategy),
      ...flag("--dry-run", options.dryRun),
      ...flag("--include-ignored", options.includeIgnored),
      "--",
      fork,
    ];
    return this.data(["merge"], args, options);
  }

  /** `op log [--limit N]`: the workspace's operations, newest first. */
  opLog(options: OpLogOptions = {}): Promise<OpInfo[]> {
    return this.data(["op", "log"], opt("--limit", options.limit?.toString()), options);
  }

  /** The id of the workspace's newest operation, 0 for none: what `ifHead` compares. */
  async head(options: CallOptions = {}): Promise<number> {
    const newest = await this.opLog({ ...options, ifHead: undefined, limit: 1 });
    return newest.length === 0 ? 0 : newest[0].id;
  }

  /** `undo`: return to the state before the latest change (itself an op, so redoable). */
  undo(options: CallOptions = {}): Promise<OpInfo> {
    return this.data(["undo"], [], options);
  }

  /** `redo`: redo the most recent undo. */
  redo(options: CallOptions = {}): Promise<OpInfo> {
    return this.data(["redo"], [], options);
  }

  /** `rollback [EXEC_ID]`: restore the state before a proxied command (default: the last). */
  rollback(execId?: number, options: CallOptions = {}): Promise<OpInfo> {
    return this.data(["rollback"], execId === undefined ? [] : ["--", String(execId)], options);
  }

  // -- proxy and sessions ----------------------------------------------------------------

  /**
   * `proxy exec`: classify, checkpoint, mount, run with a timeout and report exactly what
   * changed. Resolves with the envelope whatever the command's fate: a denial, a request for
   * approval, a timeout or a non-zero exit are in the envelope, not errors. It rejects only
   * when avfs itself fails (e.g. `vault_not_found`, `mount_failed`).
   */
  proxyExec(argv: string[], options?: Omit<ProxyExecOptions, "argv" | "shell">): Promise<Envelope>;
  proxyExec(options: ProxyExecOptions): Promise<Envelope>;
  async proxyExec(
    first: string[] | ProxyExecOptions,
    rest: Omit<ProxyExecOptions, "argv" | "shell"> = {},
  ): Promise<Envelope> {
    const o: ProxyExecOptions = Array.isArray(first) ? { ...rest, argv: first } : first;
    const args = execArgs("proxyExec", o);
    const { data } = await this.invoke<Envelope>(["proxy", "exec"], args, o);
    return data;
  }

  /**
   * `proxy exec --stream`: the same request as `proxyExec`, its output yielded while the
   * command runs. Events come in order: `started`, `stdout`/`stderr` chunks, and last
   * `finished`, the whole response document (`data` is the envelope, or `error` if avfs
   * refused the request).
   */
  async *proxyExecStream(options: ProxyExecOptions): AsyncGenerator<StreamEvent> {
    const args = ["--json", ...ifHead(options), "proxy", "exec", "--stream", ...execArgs("proxyExecStream", options)];
    const child = spawn(this.bin, args, {
      env: this.env(options) as NodeJS.ProcessEnv,
      cwd: this.options.cwd,
      stdio: ["ignore", "pipe", "pipe"],
      windowsHide: true,
    });
    const closed = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
    let finished: StreamEvent | undefined;
    try {
      for await (const line of createInterface({ input: child.stdout!, crlfDelay: Infinity })) {
        if (line.trim() === "") continue;
        let event: StreamEvent;
        try {
          event = JSON.parse(line) as StreamEvent;
        } catch (cause) {
          throw new ClientError({
            kind: "invalid_output",
            message: `avfs proxy exec --stream printed a line that is not JSON: ${line.slice(0, 200)}`,
            details: { line: line.slice(0, 4096) },
            command: "proxy exec",
            cause,
          });
        }
        if (event.event === "finished") {
          finished = event;
        } else {
          yield event;
        }
      }
      const exitCode = await closed;
      if (finished === undefined) {
        throw new ClientError({
          kind: "invalid_output",
          message: "avfs proxy exec --stream ended without a finished event",
          details: {},
          exitCode,
          command: "proxy exec",
        });
      }
      const { event: _event, ...doc } = finished as { event: "finished" } & AvfsResponse<Envelope>;
      this.options.onResponse?.(doc, { args, exitCode, signal: null, stderr: "" });
      yield finished;
    } finally {
      if (child.exitCode === null) child.kill("SIGTERM");
    }
  }

  // -- git and approvals -----------------------------------------------------------------

  /**
   * `handback --git REPO --branch B [-m MSG]`: write the workspace's files as one commit on
   * a branch of a host git repository, through git's objects (its worktree, index and HEAD
   * are not touched). A branch that moved since this fork left it rejects (`branch_moved`).
   */
  handback(repo: string, branch: string, options: CallOptions & { message?: string } = {}): Promise<HandbackReport> {
    return this.data(["handback"], ["--git", repo, "--branch", branch, ...opt("-m", options.message)], options);
  }

  /** `approvals grant PATTERN --for D`: let matching commands run in this fork without asking. */
  approvalsGrant(pattern: string, options: CallOptions & { for?: string } = {}): Promise<Grant> {
    return this.data(["approvals", "grant"], [...opt("--for", options.for), "--", pattern], options);
  }

  /** `approvals list`: the standing approvals in force, of every fork of the vault. */
  approvalsList(options: CallOptions = {}): Promise<Grant[]> {
    return this.data(["approvals", "list"], [], options);
  }

  /** `approvals revoke ID`. */
  approvalsRevoke(id: number, options: CallOptions = {}): Promise<Grant> {
    return this.data(["approvals", "revoke"], ["--", String(id)], options);
  }

  /** `session start FORK [--name S] [--policy F]`: keep a fork mounted in a daemon. */
  sessionStart(fork: string, options: SessionStartOptions = {}): Promise<SessionRecord> {
    const args = [
      ...opt("--name", options.name),
      ...opt("--policy", options.policy),
      ...opt("--mode", options.mode),
      "--",
      fork,
    ];
    return this.data(["session", "start"], args, options);
  }

  /** `session stop NAME`: the daemon unmounts and exits (cleans up after a killed one). */
  sessionStop(name: string, options: CallOptions = {}): Promise<StopReport> {
    return this.data(["session", "stop"], ["--", name], options);
  }

  /** `session list`. */
  sessionList(options: CallOptions = {}): Promise<SessionRecord[]> {
    return this.data(["session", "list"], [], options);
  }

  // -- anything else ---------------------------------------------------------------------

  /**
   * Any other avfs command, e.g. `run(["op", "log"])`: its `data`, untyped. `--json` is added;
   * a failure document is thrown as `AvfsError` like everywhere else.
   */
  async run<T = unknown>(args: string[], options: CallOptions & { input?: string | Uint8Array } = {}): Promise<T> {
    return (await this.invoke<T>([], args, options)).data;
  }

  private async data<T>(words: string[], args: string[], options: InvokeOptions): Promise<T> {
    return (await this.invoke<T>(words, args, options)).data;
  }

  private env(call: CallOptions): Env {
    const env: Env = { ...process.env, ...this.options.env };
    if (this.options.home !== undefined) env.AVFS_HOME = this.options.home;
    if (this.options.actor !== undefined) env.AVFS_ACTOR = this.options.actor;
    const selected =
      renamed("vault", call.vault, "workspace", call.workspace) ??
      renamed("vault", this.options.vault, "workspace", this.options.workspace);
    if (selected !== undefined) env.AVFS_WORKSPACE = selected;
    for (const key of Object.keys(env)) {
      if (env[key] === undefined) delete env[key];
    }
    return env;
  }

  private invoke<T>(words: string[], rest: string[], options: InvokeOptions): Promise<Invocation<T>> {
    const command = words.join(" ");
    return new Promise<Invocation<T>>((resolve, reject) => {
      let args: string[];
      try {
        args = ["--json", ...ifHead(options), ...words, ...rest];
      } catch (err) {
        reject(err);
        return;
      }
      let bin: string;
      try {
        bin = this.bin;
      } catch (err) {
        reject(err);
        return;
      }
      if (options.signal?.aborted) {
        reject(aborted(command));
        return;
      }
      const child = spawn(bin, args, {
        env: this.env(options) as NodeJS.ProcessEnv,
        cwd: this.options.cwd,
        stdio: [options.input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
        windowsHide: true,
      });
      const stdout: Buffer[] = [];
      const stderr: Buffer[] = [];
      let settled = false;
      const settle = (fn: () => void) => {
        if (!settled) {
          settled = true;
          options.signal?.removeEventListener("abort", onAbort);
          fn();
        }
      };
      const onAbort = () => {
        child.kill("SIGTERM");
        settle(() => reject(aborted(command)));
      };
      options.signal?.addEventListener("abort", onAbort, { once: true });
      child.stdout!.on("data", (chunk: Buffer) => stdout.push(chunk));
      child.stderr!.on("data", (chunk: Buffer) => stderr.push(chunk));
      child.on("error", (err: NodeJS.ErrnoException) => {
        settle(() =>
          reject(
            new ClientError({
              kind: "spawn_failed",
              message: `cannot run ${bin}: ${err.message}`,
              details: { bin, code: err.code ?? null },
              command,
              cause: err,
            }),
          ),
        );
      });
      if (child.stdin) {
        child.stdin.on("error", () => {
          // avfs exited without reading all of stdin; its answer says why.
        });
        child.stdin.end(options.input);
      }
      child.on("close", (code, signal) => {
        settle(() => {
          const out = Buffer.concat(stdout).toString("utf8");
          const err = Buffer.concat(stderr).toString("utf8");
          const info: ResponseInfo = { args, exitCode: code, signal, stderr: err };
          let doc: AvfsResponse<T>;
          try {
            doc = parseResponse<T>(out);
          } catch (cause) {
            reject(
              new ClientError({
                kind: "invalid_output",
                message: `avfs ${command} did not print one JSON document (exit ${code ?? signal}): ${err.trim() || out.slice(0, 200)}`,
                details: { stdout: out.slice(0, 4096) },
                exitCode: code,
                command,
                stderr: err,
                cause,
              }),
            );
            return;
          }
          try {
            this.options.onResponse?.(doc, info);
          } catch (hookError) {
            reject(hookError);
            return;
          }
          if (doc.ok) {
            resolve({ data: doc.data, exitCode: code });
          } else {
            reject(errorFromBody(doc.error, { exitCode: code, command: doc.command || command, stderr: err }));
          }
        });
      });
    });
  }
}

/** The words of `proxy exec` after `exec` for a request, checked. */
function execArgs(method: string, o: ProxyExecOptions): string[] {
  if ((o.argv === undefined) === (o.shell === undefined)) {
    throw new TypeError(`${method}: give exactly one of \`argv\` and \`shell\``);
  }
  if (o.argv !== undefined && o.argv.length === 0) {
    throw new TypeError(`${method}: \`argv\` is empty`);
  }
  return [
    ...opt("--cwd", o.cwd),
    ...opt("--timeout", duration(o.timeout)),
    ...flag("--readonly", o.readonly),
    ...opt("--checkpoint", o.checkpoint),
    ...opt("--policy", o.policy),
    ...opt("--approve", o.approve),
    ...(o.allowEnv ?? []).flatMap((name) => ["--allow-env", name]),
    ...opt("--max-output", o.maxOutput === undefined ? undefined : String(o.maxOutput)),
    ...opt("--fork-from", o.forkFrom),
    ...opt("--fork", renamed("task", o.task, "fork", o.fork)),
    ...opt("--session", o.session),
    ...flag("--confine", o.confine),
    ...flag("--offline", o.offline),
    ...opt("--mode", o.mode),
    ...opt("--workspace-path", o.workspacePath),
    ...opt("--lower", o.lower),
    ...flag("--include-ignored", o.includeIgnored),
    ...flag("--interleave", o.interleave),
    ...(o.shell !== undefined ? ["--shell", o.shell] : ["--", ...(o.argv as string[])]),
  ];
}

function parseResponse<T>(text: string): AvfsResponse<T> {
  const doc: unknown = JSON.parse(text);
  if (typeof doc !== "object" || doc === null || typeof (doc as { ok?: unknown }).ok !== "boolean") {
    throw new Error("not an avfs response document");
  }
  const d = doc as AvfsResponse<T>;
  if (!d.ok && (typeof d.error !== "object" || d.error === null)) {
    throw new Error("failure document without `error`");
  }
  return d;
}

function aborted(command: string): AvfsError {
  return new ClientError({ kind: "aborted", message: `avfs ${command} was aborted`, command });
}

/**
 * `--if-head=N` for a call that gives `ifHead` (`=`: a negative id is a value, not a flag);
 * `undefined` or `null`: unconditional.
 */
function ifHead(options: CallOptions): string[] {
  const head = options.ifHead;
  if (head === undefined || head === null) return [];
  if (!Number.isSafeInteger(head)) {
    throw new TypeError(`ifHead: an operation id (an integer), not ${String(head)}`);
  }
  return [`--if-head=${head}`];
}

function opt(name: string, value: string | undefined): string[] {
  return value === undefined ? [] : [name, value];
}

function flag(name: string, on: boolean | undefined): string[] {
  return on ? [name] : [];
}

const warned = new Set<string>();

/** An option that was renamed, given under either name (the old one warns, once). */
function renamed(oldName: string, oldValue: string | undefined, newName: string, newValue: string | undefined): string | undefined {
  if (oldValue === undefined) return newValue;
  if (newValue !== undefined) {
    throw new TypeError(`give \`${newName}\` only (\`${oldName}\` is its deprecated name)`);
  }
  if (!warned.has(oldName)) {
    warned.add(oldName);
    process.emitWarning(`\`${oldName}\` is deprecated; use \`${newName}\``, "DeprecationWarning");
  }
  return oldValue;
}

function list(paths: string | string[]): string[] {
  return typeof paths === "string" ? [paths] : paths;
}

function octal(mode: number | string | undefined): string | undefined {
  return typeof mode === "number" ? mode.toString(8) : mode;
}

function duration(timeout: number | string | undefined): string | undefined {
  if (typeof timeout === "number") {
    if (!(timeout > 0) || !Number.isFinite(timeout)) {
      throw new TypeError(`proxyExec: timeout must be a positive number of seconds, got ${timeout}`);
    }
    return `${Math.max(1, Math.round(timeout * 1000))}ms`;
  }
  return timeout;
}
