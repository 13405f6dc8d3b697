// The shipped TypeScript types against the schema: every interface in the installed
// agentvfs/dist/types.d.ts has exactly the keys of its schema type, optional exactly where
// the schema does not require them; literal unions equal the schema's enums; and a strict
// consumer program type-checks against the installed package.

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { ERROR_CLASSES } from "agentvfs";
import { schema } from "./schema.mjs";

const require = createRequire(import.meta.url);
const ts = require("typescript");
const run = promisify(execFile);
const here = dirname(fileURLToPath(import.meta.url));
const dtsPath = join(dirname(require.resolve("agentvfs/package.json")), "dist", "types.d.ts");

/** Interface name → where its schema type is. */
const INTERFACES = {
  AvfsSuccess: ["envelope", "oneOf", 0],
  AvfsFailure: ["envelope", "oneOf", 1],
  ErrorBody: ["envelope", "oneOf", 1, "properties", "error"],
  Target: ["commands", "vault create"],
  VaultListEntry: ["commands", "vault list", "$defs", "VaultListEntry"],
  ForkInfo: ["commands", "vault info", "$defs", "ForkInfo"],
  Quota: ["commands", "vault info", "$defs", "Quota"],
  VaultInfo: ["commands", "vault info"],
  Origin: ["commands", "vault info", "$defs", "Origin"],
  ForkOutput: ["commands", "vault fork"],
  DeleteReport: ["commands", "vault delete"],
  CheckpointInfo: ["commands", "checkpoint save"],
  NodeInfo: ["commands", "stat"],
  CatOutput: ["commands", "cat"],
  WriteOutput: ["commands", "write"],
  PathsOutput: ["commands", "mkdir"],
  MoveOutput: ["commands", "mv"],
  Change: ["commands", "diff", "$defs", "Change"],
  DiffSummary: ["commands", "diff", "$defs", "DiffSummary"],
  DiffOutput: ["commands", "diff"],
  Conflict: ["commands", "merge", "$defs", "Conflict"],
  MergeReport: ["commands", "merge"],
  OpInfo: ["commands", "undo"],
  Decision: ["commands", "proxy exec", "$defs", "Decision"],
  Captured: ["commands", "proxy exec", "$defs", "Captured"],
  Confinement: ["commands", "proxy exec", "$defs", "Confinement"],
  SandboxReport: ["commands", "proxy exec", "$defs", "SandboxReport"],
  ExecRequest: ["commands", "proxy exec", "$defs", "ExecRequest"],
  Envelope: ["commands", "proxy exec"],
  SessionRecord: ["commands", "session start"],
  StopReport: ["commands", "session stop"],
  HandbackReport: ["commands", "handback"],
  Grant: ["commands", "approvals grant"],
};

/** Commands whose data has the same type (checked by title), so one mapping covers them. */
const SAME_TYPE = {
  "vault use": "vault create",
  "vault list": null,
  "checkpoint list": null,
  "checkpoint info": "checkpoint save",
  "checkpoint restore": "checkpoint save",
  "checkpoint delete": "checkpoint save",
  ls: null,
  rm: "mkdir",
  cp: "mv",
  redo: "undo",
  rollback: "undo",
  "op log": null,
  "session list": null,
  "approvals list": null,
  "approvals revoke": "approvals grant",
};

/** Literal-union type alias → where its schema enum is. */
const UNIONS = {
  ChangeStatus: ["commands", "diff", "$defs", "ChangeStatus"],
  Action: ["commands", "proxy exec", "$defs", "Action"],
  Category: ["commands", "proxy exec", "$defs", "Category"],
  Engine: ["commands", "vault info", "$defs", "Engine"],
};

function at(path) {
  let node = schema;
  for (const step of path) {
    node = node?.[step];
  }
  assert.ok(node, `schema has ${path.join(" / ")}`);
  return node;
}

/** name → { keys: Map(key → optional) } and name → string literals, from the .d.ts. */
function readDeclarations() {
  const source = ts.createSourceFile(dtsPath, readFileSync(dtsPath, "utf8"), ts.ScriptTarget.Latest, true);
  const interfaces = new Map();
  const unions = new Map();
  for (const st of source.statements) {
    if (ts.isInterfaceDeclaration(st)) {
      assert.equal(st.heritageClauses, undefined, `${st.name.text} extends nothing, so its keys are its own`);
      const keys = new Map();
      for (const m of st.members) {
        assert.ok(ts.isPropertySignature(m), `${st.name.text}: only properties`);
        keys.set(m.name.text, Boolean(m.questionToken));
      }
      interfaces.set(st.name.text, keys);
    } else if (ts.isTypeAliasDeclaration(st) && ts.isUnionTypeNode(st.type)) {
      const literals = st.type.types
        .filter((n) => ts.isLiteralTypeNode(n) && ts.isStringLiteral(n.literal))
        .map((n) => n.literal.text);
      if (literals.length === st.type.types.length) unions.set(st.name.text, literals);
    }
  }
  return { interfaces, unions };
}

const decls = readDeclarations();

function assertMatches(name, path) {
  const keys = decls.interfaces.get(name);
  assert.ok(keys, `types.d.ts declares interface ${name}`);
  const s = at(path);
  const props = Object.keys(s.properties ?? {}).sort();
  const required = [...(s.required ?? [])].sort();
  assert.deepEqual([...keys.keys()].sort(), props, `${name}: keys vs ${path.join(" / ")}`);
  assert.deepEqual(
    [...keys].filter(([, optional]) => !optional).map(([k]) => k).sort(),
    required,
    `${name}: required keys vs ${path.join(" / ")}`,
  );
}

test("the Envelope type has exactly the keys of the schema's `proxy exec`", () => {
  const keys = decls.interfaces.get("Envelope");
  assert.deepEqual([...keys.keys()].sort(), Object.keys(schema.commands["proxy exec"].properties).sort());
  assertMatches("Envelope", INTERFACES.Envelope);
});

test("every interface matches its schema type: keys and required keys", () => {
  for (const [name, path] of Object.entries(INTERFACES)) {
    assertMatches(name, path);
  }
  // No interface escapes the check.
  assert.deepEqual([...decls.interfaces.keys()].sort(), Object.keys(INTERFACES).sort());
});

test("commands that share a data type share it in the schema too", () => {
  for (const [command, same] of Object.entries(SAME_TYPE)) {
    const s = schema.commands[command];
    assert.ok(s, command);
    if (typeof same === "string") {
      assert.equal(s.title, schema.commands[same].title, `${command} returns the type of ${same}`);
      assert.deepEqual(s.properties, schema.commands[same].properties, command);
    } else {
      // Lists: an array of a type checked above.
      assert.equal(s.type, "array", command);
    }
  }
  assert.deepEqual(schema.commands.ls.$defs.NodeInfo.properties, schema.commands.stat.properties);
  assert.deepEqual(
    schema.commands["checkpoint list"].$defs.CheckpointInfo.properties,
    schema.commands["checkpoint save"].properties,
  );
  assert.deepEqual(schema.commands["op log"].$defs.OpInfo.properties, schema.commands.undo.properties);
  assert.deepEqual(
    schema.commands["session list"].$defs.SessionRecord.properties,
    schema.commands["session start"].properties,
  );
});

test("literal unions equal the schema's enums", () => {
  for (const [name, path] of Object.entries(UNIONS)) {
    const s = at(path);
    const values = s.enum ?? s.oneOf.map((o) => o.const);
    assert.deepEqual([...decls.unions.get(name)].sort(), [...values].sort(), name);
  }
});

test("every error kind in the ErrorKind and ClientErrorKind types has its class", () => {
  const errorsDts = readFileSync(join(dirname(dtsPath), "errors.d.ts"), "utf8");
  const clientKinds = [...errorsDts.match(/type ClientErrorKind = ([^;]+);/)[1].matchAll(/"([a-z_]+)"/g)].map((m) => m[1]);
  const kinds = [...decls.unions.get("ErrorKind"), ...clientKinds].sort();
  assert.ok(kinds.includes("vault_not_found") && kinds.includes("binary_not_found"));
  assert.deepEqual(Object.keys(ERROR_CLASSES).sort(), kinds);
});

test("a strict TypeScript program type-checks against the installed package", async () => {
  const tsc = join(dirname(require.resolve("typescript/package.json")), "bin", "tsc");
  const result = await run(process.execPath, [tsc, "-p", join(here, "typecheck", "tsconfig.json")]).catch((e) => e);
  assert.equal(result.code ?? 0, 0, `tsc failed:\n${result.stdout}${result.stderr}`);
});
