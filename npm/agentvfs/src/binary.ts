// Finding the avfs binary. Like esbuild, the binary ships in one package per platform
// (`@agentvfs/linux-x64`, …), each listed in this package's optionalDependencies with `os`,
// `cpu` and `libc` fields so npm installs only the one that fits. `AVFS_BIN` overrides it.

import { accessSync, chmodSync, constants, statSync } from "node:fs";
import { BinaryNotFoundError } from "./errors";

/** Platforms a binary package is published for, as `${process.platform}-${process.arch}`. */
export const SUPPORTED_PLATFORMS: readonly string[] = Object.freeze(["linux-x64", "linux-arm64"]);

/** The npm package holding the binary for a platform, e.g. `@agentvfs/linux-x64`. */
export function platformPackage(
  platform: string = process.platform,
  arch: string = process.arch,
): string {
  return `@agentvfs/${platform}-${arch}`;
}

/**
 * The path of the avfs binary: `AVFS_BIN` from `env` if set, else the binary of this
 * platform's package. Throws `BinaryNotFoundError` when neither is there.
 */
export function resolveBinary(env: Record<string, string | undefined> = process.env): string {
  const override = env.AVFS_BIN;
  if (override) {
    return override;
  }
  const pkg = platformPackage();
  let path: string;
  try {
    path = require.resolve(`${pkg}/bin/avfs`);
  } catch (cause) {
    const key = `${process.platform}-${process.arch}`;
    const why = SUPPORTED_PLATFORMS.includes(key)
      ? `the optional dependency ${pkg} is not installed (was npm run with --no-optional or --omit=optional?)`
      : `no avfs binary is published for ${key} (supported: ${SUPPORTED_PLATFORMS.join(", ")})`;
    throw new BinaryNotFoundError({
      kind: "binary_not_found",
      message: `cannot find the avfs binary: ${why}; set AVFS_BIN to an avfs executable to use another`,
      details: { package: pkg, platform: key },
      cause,
    });
  }
  ensureExecutable(path);
  return path;
}

// Some package managers and archive tools drop the executable bit; put it back if we may.
function ensureExecutable(path: string): void {
  try {
    accessSync(path, constants.X_OK);
  } catch {
    try {
      chmodSync(path, statSync(path).mode | 0o111);
    } catch {
      // Spawning will report the real problem (EACCES) with the path.
    }
  }
}
