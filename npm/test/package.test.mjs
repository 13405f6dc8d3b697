// The installed packages: the binary comes from the platform package through the main
// package's optionalDependencies, AVFS_BIN overrides it, the `avfs` bin runs it, and the
// client loads from ESM and CommonJS alike.

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmodSync, cpSync, readFileSync, realpathSync, writeFileSync, existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import * as esm from "agentvfs";
import { Avfs, ClientError, platformPackage, resolveBinary, SUPPORTED_PLATFORMS } from "agentvfs";
import { newClient, tempDir } from "./helpers.mjs";
import { validateResponse } from "./schema.mjs";

const require = createRequire(import.meta.url);
const run = promisify(execFile);
const mainPkgJson = require.resolve("agentvfs/package.json");
const mainPkg = JSON.parse(readFileSync(mainPkgJson, "utf8"));
const platformName = `${process.platform}-${process.arch}`;
const noOverride = { ...process.env, AVFS_BIN: undefined };
/** process.env without AVFS_BIN, AVFS_WORKSPACE and AVFS_VAULT, for child processes. */
function noOverrideEnv() {
  const env = { ...process.env };
  delete env.AVFS_BIN;
  delete env.AVFS_WORKSPACE;
  delete env.AVFS_VAULT;
  return env;
}

test("the platform package is an optional dependency of agentvfs and fits this machine", () => {
  const name = platformPackage();
  assert.equal(name, `@agentvfs/${platformName}`);
  assert.ok(SUPPORTED_PLATFORMS.includes(platformName));
  assert.equal(mainPkg.optionalDependencies[name], mainPkg.version);
  for (const p of SUPPORTED_PLATFORMS) {
    assert.equal(mainPkg.optionalDependencies[`@agentvfs/${p}`], mainPkg.version, p);
  }
  // Resolved the way agentvfs resolves it: from its own directory.
  const fromMain = createRequire(mainPkgJson);
  const platPkg = JSON.parse(readFileSync(fromMain.resolve(`${name}/package.json`), "utf8"));
  assert.equal(platPkg.version, mainPkg.version);
  assert.deepEqual(platPkg.os, [process.platform]);
  assert.deepEqual(platPkg.cpu, [process.arch]);
  assert.equal(platPkg.bin, undefined, "only agentvfs declares the `avfs` bin");
});

test("the binary resolves from the platform package and reports the package's version", async () => {
  const bin = resolveBinary(noOverride);
  assert.ok(
    realpathSync(bin).includes(`/node_modules/@agentvfs/${platformName}/bin/avfs`),
    `resolved ${bin}`,
  );
  const { stdout } = await run(bin, ["--version"]);
  assert.match(stdout, new RegExp(`\\b${mainPkg.version.replace(/\./g, "\\.")}\\b`));
  assert.equal(new Avfs({ env: { AVFS_BIN: undefined } }).bin, bin);
});

test("AVFS_BIN overrides the packaged binary", async (t) => {
  const dir = tempDir(t);
  const log = join(dir, "calls.log");
  const wrapper = join(dir, "avfs-wrapper");
  const real = resolveBinary(noOverride);
  writeFileSync(wrapper, `#!/bin/sh\necho "$@" >> '${log}'\nexec '${real}' "$@"\n`);
  chmodSync(wrapper, 0o755);

  assert.equal(resolveBinary({ AVFS_BIN: wrapper }), wrapper);
  const { avfs } = newClient(t, { env: { AVFS_BIN: wrapper } });
  assert.equal(avfs.bin, wrapper);
  await avfs.vaultCreate("via-wrapper");
  assert.deepEqual((await avfs.vaultList()).map((v) => v.name), ["via-wrapper"]);
  assert.deepEqual(readFileSync(log, "utf8").trim().split("\n"), ["--json vault create -- via-wrapper", "--json vault list"]);

  // `bin` in the options wins over both; a binary that is not there is a typed error.
  const missing = new Avfs({ bin: join(dir, "nope"), home: dir });
  await assert.rejects(missing.vaultList(), (e) => e instanceof ClientError && e.kind === "spawn_failed");
});

test("without the platform package: BinaryNotFoundError naming the package and AVFS_BIN", async (t) => {
  // A copy of agentvfs with no @agentvfs/* beside it, as after `npm install --omit=optional`.
  const dir = tempDir(t);
  const copy = join(dir, "node_modules", "agentvfs");
  cpSync(dirname(mainPkgJson), copy, { recursive: true });
  const lonely = createRequire(join(copy, "package.json"))("agentvfs");
  assert.notEqual(lonely.Avfs, esm.Avfs, "a separate copy");
  assert.throws(
    () => lonely.resolveBinary({}),
    (e) => {
      assert.ok(e instanceof lonely.BinaryNotFoundError);
      assert.ok(e instanceof lonely.ClientError);
      assert.equal(e.kind, "binary_not_found");
      assert.equal(e.details.package, `@agentvfs/${platformName}`);
      assert.match(e.message, new RegExp(`@agentvfs/${platformName}`));
      assert.match(e.message, /AVFS_BIN/);
      return true;
    },
  );
  await assert.rejects(new lonely.Avfs({ home: dir, env: { AVFS_BIN: undefined } }).vaultList(), (e) => e.kind === "binary_not_found");
  // The launcher says the same and exits 1.
  const launched = await run(process.execPath, [join(copy, "dist", "cli.js"), "--version"], { env: noOverrideEnv() }).catch((e) => e);
  assert.equal(launched.code, 1);
  assert.match(launched.stderr, /cannot find the avfs binary/);
  // AVFS_BIN rescues it.
  const rescued = await run(process.execPath, [join(copy, "dist", "cli.js"), "--version"], {
    env: { ...noOverrideEnv(), AVFS_BIN: resolveBinary(noOverride) },
  });
  assert.match(rescued.stdout, /avfs/);
});

test("the `avfs` bin of the package runs the binary with its exit codes", async (t) => {
  const home = tempDir(t);
  const bin = join(dirname(dirname(mainPkgJson)), ".bin", "avfs");
  assert.ok(existsSync(bin), bin);
  const env = { ...noOverrideEnv(), AVFS_HOME: home };

  const created = await run(bin, ["--json", "vault", "create", "cli"], { env });
  const doc = JSON.parse(created.stdout);
  validateResponse(doc);
  assert.equal(doc.data.name, "cli");

  const failed = await run(bin, ["--json", "cat", "/missing"], { env }).catch((e) => e);
  assert.equal(failed.code, 3, "the binary's exit code passes through");
  const err = JSON.parse(failed.stdout);
  validateResponse(err);
  assert.equal(err.error.kind, "path_not_found");

  const denied = await run(bin, ["--json", "proxy", "exec", "--", "rm", "-rf", "/"], { env }).catch((e) => e);
  assert.equal(denied.code, 126);
  validateResponse(JSON.parse(denied.stdout));
});

test("ESM import and CommonJS require give the same client", () => {
  const cjs = require("agentvfs");
  assert.equal(cjs.Avfs, esm.Avfs);
  assert.equal(cjs.AvfsError, esm.AvfsError);
  for (const name of ["Avfs", "AvfsError", "VaultNotFoundError", "ERROR_CLASSES", "proxyExitCode", "resolveBinary"]) {
    assert.ok(name in esm, `ESM export ${name}`);
    assert.ok(name in cjs, `CJS export ${name}`);
  }
});
