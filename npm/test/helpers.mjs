// Shared by the tests: a client on a fresh AVFS_HOME whose every response is validated
// against the schema, and the FUSE gate.

import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import assert from "node:assert/strict";
import { Avfs } from "agentvfs";
import { validateResponse } from "./schema.mjs";

/** A new empty directory, removed after the test (refusing if anything is still mounted in it). */
export function tempDir(t, prefix = "avfs-npm-") {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.after(() => {
    const mounted = readFileSync("/proc/self/mounts", "utf8")
      .split("\n")
      .map((line) => line.split(" ")[1])
      .filter((mp) => mp && (mp === dir || mp.startsWith(dir + "/")));
    assert.deepEqual(mounted, [], `mounts left behind under ${dir}`);
    rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

/**
 * A client on a fresh AVFS_HOME. `responses` collects every document with the process's exit
 * code; each is validated against schema/avfs.schema.json before the client sees it.
 */
export function newClient(t, options = {}) {
  const home = tempDir(t);
  const responses = [];
  const avfs = new Avfs({
    home,
    ...options,
    // The packaged binary, never one from the caller's environment.
    env: { AVFS_BIN: undefined, AVFS_WORKSPACE: undefined, AVFS_VAULT: undefined, ...options.env },
    onResponse(doc, info) {
      validateResponse(doc);
      responses.push({ doc, info });
    },
  });
  t.after(() => assert.ok(responses.length > 0, "the test received no avfs document"));
  return { avfs, home, responses, lastExit: () => responses.at(-1).info.exitCode };
}

/** A client with a vault `name` created and selected. */
export async function newVault(t, name = "proj", options = {}) {
  const c = newClient(t, options);
  await c.avfs.vaultCreate(name);
  return c;
}

// AVFS_NPM_TEST_FUSE_DEVICE only lets the gate itself be tested (point it at a missing path).
const hasFuse = existsSync(process.env.AVFS_NPM_TEST_FUSE_DEVICE || "/dev/fuse");
const allowNoFuse = process.env.AVFS_CI_ALLOW_NO_FUSE === "1";
if (!hasFuse && allowNoFuse) {
  console.warn("WARNING: /dev/fuse is missing; proxy and session tests are SKIPPED (AVFS_CI_ALLOW_NO_FUSE=1)");
}

/**
 * Test options for tests that mount: skipped (visibly) only without /dev/fuse and with
 * AVFS_CI_ALLOW_NO_FUSE=1; without /dev/fuse otherwise, `requireFuse` fails the test.
 */
export const fuse = { skip: !hasFuse && allowNoFuse ? "/dev/fuse missing (AVFS_CI_ALLOW_NO_FUSE=1)" : false };

export function requireFuse() {
  assert.ok(hasFuse, "/dev/fuse is missing: the proxy needs FUSE (set AVFS_CI_ALLOW_NO_FUSE=1 to skip these tests)");
}

/** Changes reduced to what a test pins down, sorted by path. */
export function changeSet(changes) {
  return changes
    .map((c) => ({ path: c.path, status: c.status, type: c.type }))
    .sort((a, b) => a.path.localeCompare(b.path));
}
