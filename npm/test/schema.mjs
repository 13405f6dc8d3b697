// Validates every JSON document the client receives against schema/avfs.schema.json (copied
// next to this file by scripts/test_npm.sh): the `envelope` first, then, for a success, the
// `data` against `commands[command]`. A document the schema does not accept fails the test.

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import assert from "node:assert/strict";

const require = createRequire(import.meta.url);
const Ajv2020 = require("ajv/dist/2020");

export const schema = JSON.parse(readFileSync(new URL("./avfs.schema.json", import.meta.url), "utf8"));

const ajv = new Ajv2020({ strict: true, allowUnionTypes: true, allErrors: true });
// The integer formats schemars emits; checked, not just tolerated.
const ranges = {
  int32: [-(2 ** 31), 2 ** 31 - 1],
  uint32: [0, 2 ** 32 - 1],
  int64: [-(2 ** 63), 2 ** 63],
  uint64: [0, 2 ** 64],
  uint: [0, 2 ** 64],
};
for (const [name, [lo, hi]] of Object.entries(ranges)) {
  ajv.addFormat(name, { type: "number", validate: (n) => Number.isInteger(n) && n >= lo && n <= hi });
}

// `<time>_iso`: an RFC 3339 UTC time to the nanosecond, as avfs prints it.
ajv.addFormat("date-time", {
  type: "string",
  validate: (s) => /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{9}Z$/.test(s) && !Number.isNaN(Date.parse(s)),
});

const envelope = ajv.compile(schema.envelope);
const commands = new Map();
function commandValidator(command) {
  if (!commands.has(command)) {
    const s = schema.commands[command];
    commands.set(command, s === undefined ? null : ajv.compile(s));
  }
  return commands.get(command);
}

let validated = 0;
/** How many documents passed validation in this process. */
export function validatedCount() {
  return validated;
}

/** Throws (failing the calling test) unless `doc` matches the schema. */
export function validateResponse(doc) {
  if (!envelope(doc)) {
    assert.fail(`document does not match the envelope schema: ${ajv.errorsText(envelope.errors)}\n${JSON.stringify(doc)}`);
  }
  if (doc.ok) {
    const validate = commandValidator(doc.command);
    assert.ok(validate, `the schema has no entry for command \`${doc.command}\``);
    if (!validate(doc.data)) {
      assert.fail(
        `\`${doc.command}\` data does not match its schema: ${ajv.errorsText(validate.errors)}\n${JSON.stringify(doc.data)}`,
      );
    }
  }
  validated += 1;
}
