// Validates generated JSON against its schema with ajv (JSON Schema 2020-12,
// formats from ajv-formats), an implementation independent of memra's
// grammar compiler. Reads the schema file and a JSONL file of memra-gen
// --json records ({"seed": .., "text": .., "finish_reason": ..}); every
// text must parse and validate. Prints "N of M valid" and, for each sample
// that is not, its seed, text and ajv's errors; exits 1 if any is not.
//
//   node ajv-validate.mjs SCHEMA.json SAMPLES.jsonl
import { readFileSync } from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const [schemaPath, samplesPath] = process.argv.slice(2);
if (!schemaPath || !samplesPath) {
  console.error("usage: node ajv-validate.mjs SCHEMA.json SAMPLES.jsonl");
  process.exit(2);
}
let validate;
try {
  const ajv = new Ajv2020({ allErrors: true, strict: true });
  addFormats(ajv);
  validate = ajv.compile(JSON.parse(readFileSync(schemaPath, "utf8")));
} catch (e) {
  console.error(`ajv-validate: ${schemaPath}: ${e.message}`);
  process.exit(1);
}
const lines = readFileSync(samplesPath, "utf8").split("\n").filter((l) => l.trim());
let valid = 0;
const bad = [];
lines.forEach((line, i) => {
  let rec;
  try {
    rec = JSON.parse(line);
  } catch (e) {
    bad.push(`${samplesPath}:${i + 1}: not a memra-gen --json record (${e.message}): ${line.slice(0, 200)}`);
    return;
  }
  const where = `seed ${rec.seed} (finish ${rec.finish_reason})`;
  let value;
  try {
    value = JSON.parse(rec.text);
  } catch (e) {
    bad.push(`${where}: not JSON (${e.message}): ${JSON.stringify(rec.text)}`);
    return;
  }
  if (validate(value)) {
    valid++;
    return;
  }
  const why = validate.errors.map((e) => `${e.instancePath || "/"} ${e.message}`).join("; ");
  bad.push(`${where}: ${why}: ${JSON.stringify(rec.text)}`);
});
console.log(`${valid} of ${lines.length} valid`);
for (const b of bad.slice(0, 10)) console.log(`  ${b}`);
if (bad.length > 10) console.log(`  ... and ${bad.length - 10} more`);
process.exit(bad.length || !lines.length ? 1 : 0);
