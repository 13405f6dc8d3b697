// Typed errors. Every `{"ok": false, …}` document the CLI prints becomes an `AvfsError`
// (or the subclass registered for its kind), carrying the kind, message and details of the
// document and the process exit code. Problems on this side of the process boundary (no
// binary, output that is not one JSON document) use the client-only kinds below.

import type { ErrorBody, ErrorKind } from "./types";

/** Kinds raised by the client itself, never printed by the CLI. */
export type ClientErrorKind = "binary_not_found" | "spawn_failed" | "invalid_output" | "aborted";

export interface AvfsErrorInit {
  kind: string;
  message: string;
  details?: Record<string, unknown>;
  /** The avfs process's exit code (null if it never ran or died of a signal). */
  exitCode?: number | null;
  /** The avfs command, e.g. `checkpoint restore`. */
  command?: string;
  /** What avfs wrote on stderr, if anything. */
  stderr?: string;
  cause?: unknown;
}

/** An error reported by `avfs` (or by the client when avfs could not answer). */
export class AvfsError extends Error {
  /** Stable snake_case kind, e.g. `vault_not_found`. */
  readonly kind: ErrorKind | ClientErrorKind | (string & {});
  /** The data needed to act on the error, e.g. `{ name, suggestions }`. */
  readonly details: Record<string, unknown>;
  /** The avfs process's exit code (README.md, "Exit codes"); null if it did not exit. */
  readonly exitCode: number | null;
  /** The avfs command that failed, e.g. `cat`. */
  readonly command: string;
  /** What avfs wrote on stderr (normally empty under --json). */
  readonly stderr: string;

  constructor(init: AvfsErrorInit) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.kind = init.kind;
    this.details = init.details ?? {};
    this.exitCode = init.exitCode ?? null;
    this.command = init.command ?? "";
    this.stderr = init.stderr ?? "";
  }
}

// Categories, following the CLI's exit codes.

/** Exit 1: the vault's storage failed. */
export class StorageError extends AvfsError {}
/** Exit 2: bad arguments. */
export class UsageError extends AvfsError {}
/** Exit 3: a vault, fork, path, checkpoint, operation or session was not found. */
export class NotFoundError extends AvfsError {}
/** Exit 4: already exists, merge/apply conflict, nothing to undo/redo. */
export class ConflictError extends AvfsError {}
/** Exit 5: a bad path or name, not a directory, is a directory, directory not empty. */
export class InvalidInputError extends AvfsError {}
/** Exit 6. `details` has `quota`, `limit` and `attempted`. */
export class QuotaExceededError extends AvfsError {}
/** Exit 7: not a vault, a newer vault format, or damage found. */
export class VaultFormatError extends AvfsError {}
/** Exit 8: host I/O. */
export class IoError extends AvfsError {}
/** Mounting, FUSE, confinement or a session daemon failed. */
export class MountError extends AvfsError {}
/** The client could not run avfs or understand its answer (kinds in `ClientErrorKind`). */
export class ClientError extends AvfsError {}

// The kinds callers most often handle one by one.

/** `vault_not_found`: `details.suggestions` lists close names. */
export class VaultNotFoundError extends NotFoundError {}
export class ForkNotFoundError extends NotFoundError {}
export class PathNotFoundError extends NotFoundError {}
export class CheckpointNotFoundError extends NotFoundError {}
/** `checkpoint_gone`: an automatic checkpoint pruned by retention; `details.operation` is the
 * operation whose state it was, for `op restore`, when the op log still has it. */
export class CheckpointGoneError extends NotFoundError {}
/** `branch_moved`: a hand-back's branch moved since this fork left it (or is not its). */
export class BranchMovedError extends ConflictError {}
export class SessionNotFoundError extends NotFoundError {}
export class NoVaultSelectedError extends NotFoundError {}
export class AlreadyExistsError extends ConflictError {}
/** `merge_conflict`: `details.conflicts` lists each path with the change on each side. */
export class MergeConflictError extends ConflictError {}
export class NothingToUndoError extends ConflictError {}
export class NothingToRedoError extends ConflictError {}
/** `nothing_to_roll_back`: the command changed nothing, or is already rolled back or undone (`details.reason`). */
export class NothingToRollBackError extends ConflictError {}
/** `binary_not_found`: no platform package for this machine and no `AVFS_BIN`. */
export class BinaryNotFoundError extends ClientError {}

/** The class each known kind is thrown as; any other kind is a plain `AvfsError`. */
export const ERROR_CLASSES: Readonly<Record<string, new (init: AvfsErrorInit) => AvfsError>> =
  Object.freeze({
    usage: UsageError,
    storage_error: StorageError,
    vault_not_found: VaultNotFoundError,
    no_vault_selected: NoVaultSelectedError,
    fork_not_found: ForkNotFoundError,
    path_not_found: PathNotFoundError,
    checkpoint_not_found: CheckpointNotFoundError,
    checkpoint_gone: CheckpointGoneError,
    branch_moved: BranchMovedError,
    operation_not_found: NotFoundError,
    session_not_found: SessionNotFoundError,
    already_exists: AlreadyExistsError,
    vault_replaced: ConflictError,
    host_path_exists: ConflictError,
    merge_conflict: MergeConflictError,
    apply_conflict: ConflictError,
    nothing_to_undo: NothingToUndoError,
    nothing_to_redo: NothingToRedoError,
    nothing_to_roll_back: NothingToRollBackError,
    not_a_directory: InvalidInputError,
    is_a_directory: InvalidInputError,
    directory_not_empty: InvalidInputError,
    hard_link_not_allowed: InvalidInputError,
    invalid_path: InvalidInputError,
    invalid_name: InvalidInputError,
    invalid_argument: InvalidInputError,
    quota_exceeded: QuotaExceededError,
    not_a_vault: VaultFormatError,
    unsupported_format: VaultFormatError,
    unsupported_engine: VaultFormatError,
    corrupt_vault: VaultFormatError,
    io_error: IoError,
    store_unavailable: IoError,
    disk_full: IoError,
    revert_conflict: ConflictError,
    workspace_busy: ConflictError,
    head_moved: ConflictError,
    file_too_large: QuotaExceededError,
    secret_refused: InvalidInputError,
    mount_failed: MountError,
    fuse_unavailable: MountError,
    confinement_unavailable: MountError,
    sandbox_unavailable: MountError,
    sandbox_failed: MountError,
    session_failed: MountError,
    binary_not_found: BinaryNotFoundError,
    spawn_failed: ClientError,
    invalid_output: ClientError,
    aborted: ClientError,
  });

/** Builds the typed error for a failed command's `error` member. */
export function errorFromBody(
  body: ErrorBody,
  extra: { exitCode?: number | null; command?: string; stderr?: string } = {},
): AvfsError {
  const Class = Object.prototype.hasOwnProperty.call(ERROR_CLASSES, body.kind)
    ? ERROR_CLASSES[body.kind]
    : AvfsError;
  return new Class({
    kind: body.kind,
    message: body.message,
    details: body.details,
    exitCode: extra.exitCode,
    command: extra.command,
    stderr: extra.stderr,
  });
}
