/**
 * Compiles JSON Schemas with Ajv off the main thread (started by json-schema.ts): compiling a
 * schema of a few thousand properties takes Ajv hundreds of milliseconds, which would hold
 * every other request of the process. Self-contained (npm packages only), so that Node runs
 * it as it is, from the sources (type stripping) or from dist/.
 *
 * Message in: `{ id, schema, instance? }`. Out: `{ id, error }` when Ajv cannot compile the
 * schema, else `{ id, valid }` (whether `instance`, when given, is valid against it).
 */
import { parentPort } from 'node:worker_threads';
import { Ajv, type Options, type ValidateFunction } from 'ajv';
import { Ajv2019 } from 'ajv/dist/2019.js';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

// strict: false, as OpenAI: unknown keywords are annotations, not errors; a schema that is not
// valid against its meta-schema still fails. optimize: false: Ajv's optimisation passes cost
// more than they save on a schema used a few times.
const OPTIONS: Options = { strict: false, logger: false, code: { optimize: false } };
const withFormats = <A extends Ajv>(ajv: A): A => {
  addFormats.default(ajv);
  return ajv;
};
const DRAFTS = { draft7: withFormats(new Ajv(OPTIONS)), draft2019: withFormats(new Ajv2019(OPTIONS)), draft2020: withFormats(new Ajv2020(OPTIONS)) };

/** The Ajv of the schema's `$schema`: 2020-12, 2019-09, or draft-07 when absent. */
function ajvFor(schema: Record<string, unknown>): Ajv {
  const dialect = typeof schema.$schema === 'string' ? schema.$schema : '';
  return dialect.includes('2020-12') ? DRAFTS.draft2020 : dialect.includes('2019-09') ? DRAFTS.draft2019 : DRAFTS.draft7;
}

/** Recently compiled validators, by their schema's JSON: agent loops send the same tools every turn. */
const compiled = new Map<string, ValidateFunction>();
const KEEP = 200;

function compile(schema: Record<string, unknown>): ValidateFunction {
  const key = JSON.stringify(schema);
  const known = compiled.get(key);
  if (known) return known;
  const ajv = ajvFor(schema);
  try {
    const validate = ajv.compile(schema);
    if (compiled.size >= KEEP) compiled.delete(compiled.keys().next().value!);
    compiled.set(key, validate);
    return validate;
  } finally {
    // The validator keeps what it needs; Ajv's registry forgets the schema and its $id, so
    // that requests never see each other's schemas and nothing accumulates.
    ajv.removeSchema(schema);
  }
}

parentPort!.on('message', (message: { id: number; schema: Record<string, unknown>; instance?: unknown; hasInstance: boolean }) => {
  let validate: ValidateFunction;
  try {
    validate = compile(message.schema);
  } catch (err) {
    parentPort!.postMessage({ id: message.id, error: String((err as Error).message ?? err).slice(0, 300) });
    return;
  }
  parentPort!.postMessage({ id: message.id, valid: message.hasInstance ? validate(message.instance) : true });
});
