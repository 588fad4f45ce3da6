import { Ajv, type ValidateFunction } from 'ajv';
import { Ajv2019 } from 'ajv/dist/2019.js';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { LRUCache } from 'lru-cache';
import { invalid } from '../errors.ts';

/**
 * The JSON Schemas a chat request carries (each tool's `parameters`, `response_format`'s
 * schema): their limits, and compiling them with Ajv. A schema is hostile input, so its shape
 * is checked first, by an iterative walk that stops at the first limit it passes (no
 * recursion, so a schema nested 10,000 deep cannot overflow the stack, and no serializing of
 * a schema that is already too big); only a schema within the limits is compiled.
 */

/** OpenAI's limit on the number of tools in one request. */
export const MAX_TOOLS = 128;
/** The largest one schema may be, serialized as JSON. */
export const MAX_SCHEMA_BYTES = 64 * 1024;
/** The deepest a schema may nest objects and arrays (the schema itself is depth 1). */
export const MAX_SCHEMA_DEPTH = 32;

/**
 * What is wrong with a schema's shape, if anything: nested deeper than MAX_SCHEMA_DEPTH or
 * bigger than MAX_SCHEMA_BYTES serialized. The size is summed during the walk from a lower
 * bound of each node's serialized length, so the walk stops early on a huge schema; a schema
 * that passes is serialized once to check the exact size.
 */
export function schemaShapeProblem(schema: unknown): string | undefined {
  const stack: [unknown, number][] = [[schema, 1]];
  let bytes = 0;
  while (stack.length > 0) {
    const [node, depth] = stack.pop()!;
    if (node === null || typeof node !== 'object') {
      bytes += typeof node === 'string' ? node.length + 2 : String(node).length;
    } else {
      if (depth > MAX_SCHEMA_DEPTH) return `nests deeper than ${MAX_SCHEMA_DEPTH} levels`;
      bytes += 2;
      const isArray = Array.isArray(node);
      for (const key in node) {
        // A key is written quoted with a colon; every value but the last is followed by a comma.
        bytes += (isArray ? 0 : key.length + 3) + 1;
        if (bytes > MAX_SCHEMA_BYTES) return `is larger than ${MAX_SCHEMA_BYTES / 1024} KiB as JSON`;
        stack.push([(node as Record<string, unknown>)[key], depth + 1]);
      }
    }
    if (bytes > MAX_SCHEMA_BYTES) return `is larger than ${MAX_SCHEMA_BYTES / 1024} KiB as JSON`;
  }
  if (Buffer.byteLength(JSON.stringify(schema)) > MAX_SCHEMA_BYTES) return `is larger than ${MAX_SCHEMA_BYTES / 1024} KiB as JSON`;
  return undefined;
}

const DRAFTS = { draft7: Ajv, draft2019: Ajv2019, draft2020: Ajv2020 };

/**
 * A new Ajv for a schema, of its `$schema`'s draft (2020-12, 2019-09, or draft-07 when
 * absent): one instance per schema, so that two requests' `$id`s never collide and nothing is
 * kept once the validator is dropped. strict: false, as OpenAI: unknown keywords are
 * annotations, not errors; a schema that is not valid against its meta-schema still fails.
 */
function ajvFor(schema: Record<string, unknown>) {
  const dialect = typeof schema.$schema === 'string' ? schema.$schema : '';
  const Draft = dialect.includes('2020-12') ? DRAFTS.draft2020 : dialect.includes('2019-09') ? DRAFTS.draft2019 : DRAFTS.draft7;
  // optimize: false: Ajv's code optimisation passes cost more than they save on a schema used a few times.
  const ajv = new Draft({ strict: false, logger: false, code: { optimize: false } });
  addFormats.default(ajv);
  return ajv;
}

/** Frameworks send the same tools on every turn of an agent loop: validators are kept by their schema's JSON. */
const compiled = new LRUCache<string, ValidateFunction>({ max: 200 });

/**
 * A validator of the schema, or a 400 naming `param` when Ajv cannot compile it (not a valid
 * JSON Schema, or a `$ref` to a schema it does not have: nothing is fetched).
 */
export function compileSchema(schema: Record<string, unknown>, param: string): ValidateFunction {
  const key = JSON.stringify(schema);
  const known = compiled.get(key);
  if (known) return known;
  let validate: ValidateFunction;
  try {
    validate = ajvFor(schema).compile(schema);
  } catch (err) {
    throw invalid(param, `Invalid value for '${param}': not a valid JSON Schema (${(err as Error).message.slice(0, 300)}).`, 'invalid_schema');
  }
  compiled.set(key, validate);
  return validate;
}
