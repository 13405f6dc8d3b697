#!/usr/bin/env node
// The `avfs` command of the npm package: runs this platform's avfs binary (or AVFS_BIN) with
// the same arguments, stdio and exit status.

import { spawn } from "node:child_process";
import { AvfsError } from "./errors";
import { resolveBinary } from "./binary";

function main(): void {
  let bin: string;
  try {
    bin = resolveBinary();
  } catch (err) {
    process.stderr.write(`avfs: ${err instanceof AvfsError ? err.message : String(err)}\n`);
    process.exit(1);
  }
  const child = spawn(bin, process.argv.slice(2), { stdio: "inherit" });
  // Signals sent to this process (not to the whole process group) are passed on.
  const forward = (signal: NodeJS.Signals) => () => {
    child.kill(signal);
  };
  const signals: NodeJS.Signals[] = ["SIGINT", "SIGTERM", "SIGHUP"];
  const handlers = signals.map((s) => [s, forward(s)] as const);
  for (const [s, h] of handlers) process.on(s, h);
  child.on("error", (err) => {
    process.stderr.write(`avfs: cannot run ${bin}: ${err.message}\n`);
    process.exit(1);
  });
  child.on("exit", (code, signal) => {
    for (const [s, h] of handlers) process.off(s, h);
    if (signal) {
      // Die of the same signal, so our parent sees what the binary's would have.
      process.kill(process.pid, signal);
      return;
    }
    process.exit(code ?? 1);
  });
}

main();
