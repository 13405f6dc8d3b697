// The JSON shapes `avfs --json` prints, one interface per schema type in
// schema/avfs.schema.json. Keys and optionality follow the schema exactly (a key the schema
// does not list as required is optional here); the package's tests compare every interface
// below with the schema and validate every document the client receives against it.
//
// Integers are JavaScript numbers. Nanosecond timestamps (`created_at`, `mtime`, `since`, …)
// are larger than 2^53, so they keep about a quarter-microsecond of precision; each comes
// also as an exact RFC 3339 string beside it (`mtime_iso`).

// ---------------------------------------------------------------------------------------
// The document every command prints

/** A successful command: `data` is the command's own type. */
export interface AvfsSuccess<T = unknown> {
  ok: true;
  command: string;
  data: T;
}

/** The `error` member of a failed command's document. */
export interface ErrorBody {
  /** A stable, snake_case error kind, e.g. `vault_not_found` (see `ErrorKind`). */
  kind: string;
  message: string;
  /** The data needed to act on the error, e.g. `{ path }` or `{ name, suggestions }`. */
  details: Record<string, unknown>;
}

/** A failed command. The client throws these as `AvfsError`. */
export interface AvfsFailure {
  ok: false;
  command: string;
  error: ErrorBody;
}

/** Exactly one of these is printed on stdout by every `avfs --json …` run. */
export type AvfsResponse<T = unknown> = AvfsSuccess<T> | AvfsFailure;

/** Error kinds the CLI reports (README.md, "JSON contract"). New kinds may appear. */
export type ErrorKind =
  | "vault_not_found"
  | "no_vault_selected"
  | "not_a_vault"
  | "unsupported_format"
  | "unsupported_engine"
  | "corrupt_vault"
  | "fork_not_found"
  | "already_exists"
  | "vault_replaced"
  | "path_not_found"
  | "not_a_directory"
  | "is_a_directory"
  | "directory_not_empty"
  | "hard_link_not_allowed"
  | "invalid_path"
  | "invalid_name"
  | "invalid_argument"
  | "quota_exceeded"
  | "checkpoint_not_found"
  | "checkpoint_gone"
  | "branch_moved"
  | "host_path_exists"
  | "merge_conflict"
  | "apply_conflict"
  | "nothing_to_undo"
  | "nothing_to_redo"
  | "nothing_to_roll_back"
  | "operation_not_found"
  | "mount_failed"
  | "fuse_unavailable"
  | "confinement_unavailable"
  | "sandbox_unavailable"
  | "sandbox_failed"
  | "workspace_busy"
  | "head_moved"
  | "session_not_found"
  | "session_failed"
  | "io_error"
  | "store_unavailable"
  | "revert_conflict"
  | "file_too_large"
  | "secret_refused"
  | "disk_full"
  | "storage_error"
  | "usage";

// ---------------------------------------------------------------------------------------
// Vaults

/** What a selector resolved to (`vault create`, `vault use`). */
export interface Target {
  /** The registered name, or the path as given. */
  name: string;
  path: string;
  workspace: string;
}

/** One row of `vault list`. */
export interface VaultListEntry {
  name: string;
  path: string;
  workspace: string;
  current: boolean;
  /** False if the vault file has gone missing. */
  exists: boolean;
}

/** A fork as reported by `vault info` and `vault fork`. */
export interface ForkInfo {
  name: string;
  parent?: string | null;
  created_at: number;
  /** `created_at` as an RFC 3339 UTC time (nanosecond precision, exact). */
  created_at_iso: string;
  /** The checkpoint of the parent the fork was taken at, if any. */
  forked_at_checkpoint?: string | null;
  /** Root id the fork started from (its merge base). */
  base_root?: string | null;
  files: number;
  bytes: number;
}

/** Limits that apply to each workspace's live tree; `null` means unlimited. */
export interface Quota {
  /** Total bytes of regular files, in MiB. */
  max_size_mb?: number | null;
  /** Number of regular files. */
  max_files?: number | null;
  /** Size of any one file, in MiB. */
  max_file_size_mb?: number | null;
}

/** `vault info`. */
export interface VaultInfo {
  name: string;
  path: string;
  format_version: number;
  /** The storage engine the vault is kept in. */
  engine: Engine;
  disk_bytes: number;
  workspace: ForkInfo;
  checkpoints: number;
  /** Paths changed since the last checkpoint (or since the fork began, if none). */
  pending_changes: number;
  /** Forks whose parent is this workspace. */
  forks: string[];
  quota: Quota;
  /** The host directory the workspace (or the one it was forked from) was imported from or
   * last applied to, and the state it then held; `apply` starts there. */
  origin?: Origin | null;
}

/** Where a workspace's contents came from on the host. */
export interface Origin {
  /** The host directory (absolute). */
  host: string;
  /** The workspace path it maps to. */
  prefix: string;
  /** The root id of the state the host directory matched. */
  root: string;
  /** `import` or `apply`. */
  recorded_by: string;
  at: number;
  /** `at` as an RFC 3339 UTC time (nanosecond precision, exact). */
  at_iso: string;
  /** The workspace that recorded it. */
  workspace: string;
  /** The git commit imported (`import --git`, or the directory's HEAD), if any. */
  git_commit?: string | null;
}

/** `vault fork`. */
export interface ForkOutput {
  target: Target;
  fork: ForkInfo;
}

/** What `vault delete` removed. */
export interface DeleteReport {
  name: string;
  /** True if the whole vault file was deleted; false if only a fork. */
  file_deleted: boolean;
  /** Registered names that went with it. */
  unregistered: string[];
}

// ---------------------------------------------------------------------------------------
// Checkpoints

/** One checkpoint (`checkpoint save|list|info|restore|delete`). */
export interface CheckpointInfo {
  name: string;
  message?: string | null;
  created_at: number;
  /** `created_at` as an RFC 3339 UTC time (nanosecond precision, exact). */
  created_at_iso: string;
  root: string;
  files: number;
  bytes: number;
  /** Taken by the proxy before a command; retention keeps the newest `keep_auto`. */
  auto: boolean;
}

// ---------------------------------------------------------------------------------------
// Files

/** `file`, `dir`, `symlink`, `fifo`, `chardev`, `blockdev` or `socket`. */
export type NodeType = "file" | "dir" | "symlink" | "fifo" | "chardev" | "blockdev" | "socket";

/** A node as `ls` and `stat` show it. */
export interface NodeInfo {
  path: string;
  name: string;
  /** `file`, `dir`, `symlink`, `fifo`, `chardev`, `blockdev` or `socket`. */
  type: NodeType | (string & {});
  size: number;
  /** Permission bits, e.g. 493 for 0o755. */
  mode: number;
  /** Number of names: more than 1 for a hard-linked file. */
  nlink: number;
  /** `ls -l` style, e.g. `-rwxr-xr-x`. */
  mode_string: string;
  uid: number;
  gid: number;
  /** Nanoseconds since the Unix epoch. */
  atime: number;
  /** `atime` as an RFC 3339 UTC time (nanosecond precision, exact). */
  atime_iso: string;
  mtime: number;
  /** `mtime` as an RFC 3339 UTC time (nanosecond precision, exact). */
  mtime_iso: string;
  ctime: number;
  /** `ctime` as an RFC 3339 UTC time (nanosecond precision, exact). */
  ctime_iso: string;
  content_id?: string | null;
  /** Symlink target. */
  target?: string | null;
  /** A device node's number; null for anything else. */
  device?: { major: number; minor: number } | null;
  tags: string[];
  meta: Record<string, string>;
  /** Extended attribute names and base64 values. */
  xattrs: Record<string, string>;
}

/** `cat`: text content as is, anything that is not UTF-8 as base64. */
export interface CatOutput {
  path: string;
  size: number;
  /** `utf8` or `base64`. */
  encoding: "utf8" | "base64" | (string & {});
  content: string;
}

/** `write`. */
export interface WriteOutput {
  path: string;
  size: number;
  content_id?: string | null;
}

/** `mkdir`, `rm`. */
export interface PathsOutput {
  paths: string[];
}

/** `mv`, `cp`. */
export interface MoveOutput {
  from: string;
  to: string;
}

// ---------------------------------------------------------------------------------------
// History: diff, merge, op log

/** How a path differs. */
export type ChangeStatus = "added" | "modified" | "deleted" | "renamed" | "type_changed";

/** One changed path. */
export interface Change {
  path: string;
  status: ChangeStatus;
  /** `file`, `dir`, `symlink`, `fifo`, `chardev`, `blockdev` or `socket` (the new type; the old one for deletions). */
  type: NodeType | (string & {});
  /** For renames: where it came from. */
  old_path?: string | null;
  old_size?: number | null;
  new_size?: number | null;
  old_mode?: number | null;
  new_mode?: number | null;
  /** True if the permission bits differ. */
  mode_changed: boolean;
  old_content_id?: string | null;
  new_content_id?: string | null;
}

/** Counts per status. */
export interface DiffSummary {
  added: number;
  modified: number;
  deleted: number;
  renamed: number;
  type_changed: number;
}

/** `diff`. */
export interface DiffOutput {
  from: string;
  to: string;
  summary: DiffSummary;
  changes: Change[];
  /** The unified patch, with `patch: true`. */
  patch?: string | null;
  /** Changes the ignore rules left out, per top-level name (`.venv`, `node_modules`). */
  ignored: Record<string, number>;
}

/** The earlier name of `Conflict`. @deprecated Use `Conflict`, as the Rust library names it. */
export type MergeConflict = Conflict;

/** A path changed on both sides of a merge in ways that do not combine. */
export interface Conflict {
  path: string;
  /** The target's change: `added`, `modified`, `deleted` or `type_changed`. */
  ours: string;
  /** The fork's change. */
  theirs: string;
}

/** `merge`. */
export interface MergeReport {
  fork: string;
  into: string;
  strategy: string;
  dry_run: boolean;
  /** True if the target now holds the merge result. */
  applied: boolean;
  /** How the target changes (or would change): its live state before vs. the result. */
  changes: Change[];
  /** Conflicts found; resolved by the strategy when it is `ours` or `theirs`. */
  conflicts: Conflict[];
  /** Text files whose edits on both sides were combined line by line. */
  text_merged: string[];
  /** Changes the ignore rules left out (they stay in the fork), per top-level name (`.venv`, `node_modules`). */
  ignored: Record<string, number>;
}

/** One op-log entry (`undo`, `redo`, `rollback`). */
export interface OpInfo {
  id: number;
  /** Nanoseconds since the Unix epoch. */
  at: number;
  /** `at` as an RFC 3339 UTC time (nanosecond precision, exact). */
  at_iso: string;
  /** The operation: `write`, `rm`, `checkpoint.save`, `undo`, `rollback`, … */
  kind: string;
  description: string;
  root_before?: string | null;
  root_after?: string | null;
  /** For undo/redo: the entry acted on. */
  target?: number | null;
  /** True if a later undo reverted this entry (and no redo re-applied it). */
  undone: boolean;
}

// ---------------------------------------------------------------------------------------
// The proxy

/** What the proxy does with a command. */
export type Action = "allow" | "checkpoint_then_run" | "readonly" | "ask" | "deny";

/** What a command does, as far as the policy can tell from its text. */
export type Category =
  | "readonly"
  | "mutating"
  | "destructive"
  | "networked"
  | "host_escape"
  | "privileged"
  | "interactive"
  | "unknown";

/** The policy's answer for one command. */
export interface Decision {
  action: Action;
  /** Every category found anywhere in the command, sorted. */
  categories: Category[];
  /** The rule that set the action: a `[[rule]]` name, or `builtin/…`. */
  rule?: string | null;
  /** Why, naming the offending token. */
  reason: string;
  /** The token (path, flag, program) that set the action, when there is one. */
  offending?: string | null;
}

/** Captured output of one stream. */
export interface Captured {
  /** The kept bytes as text (invalid UTF-8 replaced). */
  text: string;
  /** Every byte the stream produced, kept or not. */
  bytes: number;
  /** True if `text` holds only the first `max_output` bytes. */
  truncated: boolean;
}

/** The confinement a command ran under. */
export interface Confinement {
  /** Writes only inside the workspace mount and a private temp dir (Landlock). */
  landlock: boolean;
  /** No network: a fresh network namespace with only loopback. */
  offline: boolean;
}

/** The namespace a proxied command ran in, or `none` and why. */
export interface SandboxReport {
  kind: "namespace" | "none";
  /** Why there was no namespace. */
  reason?: string | null;
  /** Where the workspace was inside the sandbox. */
  workspace_path?: string | null;
  /** Host paths the command could read (at the same path). */
  ro: string[];
  /** Host paths the command could write (at the same path). */
  rw: string[];
  /** Paths the command wrote that the policy hides (secrets): not taken into the fork. */
  refused?: string[];
  /** An overlay's lower layer: `fuse`, or `tree (cached|updated|written)`. */
  lower?: string | null;
}

/** What was asked of the proxy. */
export interface ExecRequest {
  argv?: string[] | null;
  shell?: string | null;
  cwd: string;
  /** The name or vault file path the workspace was selected by. */
  selected: string;
  /** The workspace the command ran in. */
  workspace: string;
  /** `readwrite` or `readonly`. */
  access: "readwrite" | "readonly" | (string & {});
  /** The session the command ran in, if any. */
  session?: string | null;
}

/**
 * The result of one proxied command (`avfs proxy exec`). Returned for every decision:
 * a denial (`ran: false`, CLI exit 126), a request for approval (`approval_token`, 125),
 * a timeout (`timed_out: true`, 124) and any exit code of the command itself.
 */
export interface Envelope {
  schema_version: number;
  request: ExecRequest;
  decision: Decision;
  /** False if the command was not run (denied, awaiting approval, or not startable). */
  ran: boolean;
  /** What became of the command. */
  outcome: "denied" | "approval_required" | "completed" | "timed_out" | "spawn_failed";
  /** Why the command could not be started, when `outcome` is `spawn_failed` (CLI exit 127). */
  spawn_error?: string | null;
  /** For `ask`: pass to `proxyExec({ approve })` (bound to this command, cwd and fork). */
  approval_token?: string | null;
  /** The checkpoint taken before the run. */
  checkpoint?: string | null;
  /** The command's own exit code; null if it did not run or was killed by a signal. */
  exit_code?: number | null;
  signal?: number | null;
  timed_out: boolean;
  duration_ms: number;
  stdout: Captured;
  stderr: Captured;
  /** True when `stdout` holds stdout and stderr in the order written (`interleave`). */
  interleaved?: boolean;
  /** Every path the command added, modified, deleted, renamed or re-moded, except those
   * the ignore rules leave out: they are counted in `ignored`. Rollback covers both. */
  changes: Change[];
  /** Changes the ignore rules left out, per top-level name (`.venv`, `node_modules`). */
  ignored?: Record<string, number>;
  summary: DiffSummary;
  /** The op-log entry of this run: `rollback(exec_id)` restores the state before it. */
  exec_id?: number | null;
  audit_id: number;
  /** The confinement the command ran under (policy `[confinement]` plus flags). */
  confinement?: Confinement;
  /** How the command's file system was made. */
  mode: "overlay" | "fuse" | "copy";
  /** The namespace the command ran in. */
  sandbox: SandboxReport;
}

// ---------------------------------------------------------------------------------------
// Sessions

/** A long-lived session (`session start`, `session list`). */
export interface SessionRecord {
  name: string;
  /** The vault or fork as named at `session start`. */
  vault: string;
  /** The vault file. */
  path: string;
  workspace: string;
  /** How its commands run: one kept sandbox namespace (`overlay`), a namespace each on a
   * copy (`copy`), or the fork's mount on the host (`fuse`). */
  mode: "overlay" | "fuse" | "copy";
  /** Where the fork is mounted on the host (`fuse` sessions only). */
  dir?: string | null;
  socket: string;
  pid: number;
  /** Nanoseconds since the Unix epoch. */
  since: number;
  /** `since` as an RFC 3339 UTC time (nanosecond precision, exact). */
  since_iso: string;
  /** The policy file the session decides with (null: the built-in policy). */
  policy?: string | null;
  /** Filled in by `session list`: the daemon runs and answers on its socket. */
  alive?: boolean;
}

/** What `session stop` found. */
export interface StopReport {
  name: string;
  /** True if a daemon was running and has ended. */
  stopped: boolean;
  /** True if the daemon was already gone and its leftovers were cleaned up. */
  stale: boolean;
}

/** What `handback` wrote: one commit on a branch of a host git repository. */
export interface HandbackReport {
  repo: string;
  /** The full branch name, `refs/heads/…`. */
  branch: string;
  /** The commit written, or null when the fork's files equal the parent's tree. */
  commit?: string | null;
  /** The branch's tip it moved on from, else the imported commit, else HEAD. */
  parent?: string | null;
  tree: string;
  /** True if the branch was made by this hand-back. */
  created: boolean;
  /** Files (blobs and symlinks) in the tree. */
  files: number;
  /** Paths git cannot hold (FIFOs, devices, sockets), left out. */
  skipped: string[];
  /** Submodules (gitlinks) kept at the commit the parent records. */
  submodules: string[];
  /** Why nothing was committed, when nothing was. */
  note?: string | null;
}

/** A standing approval: commands matching `pattern` run in `workspace` without asking. */
export interface Grant {
  id: number;
  workspace: string;
  /** A glob over the whole command text, e.g. `pip install *`. */
  pattern: string;
  created_at: number;
  /** `created_at` as an RFC 3339 UTC time. */
  created_at_iso: string;
  expires_at: number;
  /** `expires_at` as an RFC 3339 UTC time. */
  expires_at_iso: string;
  actor: string;
}

/**
 * One event of `proxy exec --stream`: `started`, then the command's output as it is
 * written (`text`, or `base64` for bytes that are not UTF-8), then `finished` carrying the
 * whole response document (its `data` is the `Envelope`).
 */
export type StreamEvent =
  | { event: "started" }
  | { event: "stdout" | "stderr"; text?: string; base64?: string }
  | ({ event: "finished" } & AvfsResponse<Envelope>);

/** The storage engine a vault is kept in. */
export type Engine = "sqlite" | "lmdb" | "sled" | "postgres";
