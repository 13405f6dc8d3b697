// agentvfs: a typed client for the `avfs` CLI (single-file vaults for AI agent workspaces).
//
//   import { Avfs } from "agentvfs";
//   const avfs = new Avfs({ home: "/tmp/avfs-home" });
//   await avfs.vaultCreate("proj");
//   await avfs.write("/hello.txt", "hi\n");
//   const env = await avfs.proxyExec(["sh", "-c", "echo more >> hello.txt"]);
//   env.changes; // [{ path: "/hello.txt", status: "modified", … }]

export * from "./types";
export * from "./errors";
export { Avfs, proxyExitCode } from "./client";
export type {
  AtOptions,
  AvfsOptions,
  CallOptions,
  CheckpointSaveOptions,
  CpOptions,
  DiffOptions,
  Env,
  LsOptions,
  MergeOptions,
  MkdirOptions,
  OpLogOptions,
  ProxyExecOptions,
  ResponseInfo,
  RmOptions,
  SessionStartOptions,
  VaultCreateOptions,
  VaultForkOptions,
  WriteOptions,
} from "./client";
export { platformPackage, resolveBinary, SUPPORTED_PLATFORMS } from "./binary";
