import { Worker } from 'node:worker_threads';
import { LRUCache } from 'lru-cache';
import { CoreError, invalid } from '../errors.ts';
import { refLoop } from './schema-checks.ts';

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
 * bigger than MAX_SCHEMA_BYTES serialized, or a `$ref` loop no value can end (schema-checks.ts).
 * The size is summed during the walk from a lower bound of each node's serialized length, so the
 * walk stops early on a huge schema; a schema that passes is serialized once to check the exact
 * size.
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
  return refLoop(schema);
}

/**
 * Ajv runs in a worker thread of its own (schema-worker.ts), started on first use: compiling a
 * large schema takes it hundreds of milliseconds, which must not hold the event loop. Schemas
 * known to compile are remembered here, so that an agent loop's tools cost one round trip once.
 */
let worker: Worker | undefined;
let nextId = 0;
const pending = new Map<number, { worker: Worker; resolve: (answer: { error?: string; valid?: boolean }) => void; reject: (err: Error) => void }>();
const compiles = new LRUCache<string, true>({ max: 1000 });

function schemaWorker(): Worker {
  if (worker) return worker;
  // From the sources (tests, tsx) the worker is the .ts file, which Node runs by stripping types; from dist/ the .js.
  const file = new URL(import.meta.url.endsWith('.ts') ? './schema-worker.ts' : './schema-worker.js', import.meta.url);
  const started = new Worker(file);
  started.unref();
  started.on('message', (answer: { id: number; error?: string; valid?: boolean }) => {
    const waiting = pending.get(answer.id);
    pending.delete(answer.id);
    // Idle, the worker does not keep the process alive; while a question waits, it does.
    if (![...pending.values()].some((p) => p.worker === started)) started.unref();
    waiting?.resolve(answer);
  });
  const fail = (err: Error) => {
    if (worker === started) worker = undefined;
    for (const [id, waiting] of pending) {
      if (waiting.worker !== started) continue;
      pending.delete(id);
      waiting.reject(err);
    }
  };
  started.on('error', fail);
  started.on('exit', (code) => fail(new Error(`the schema worker exited (${code})`)));
  worker = started;
  return started;
}

/** The longest one compilation may take: a schema Ajv needs longer for is refused, and the worker replaced. */
export const COMPILE_TIMEOUT_MS = 10_000;

class SchemaTimeout extends Error {}

function ask(schema: Record<string, unknown>, instance?: { value: unknown }): Promise<{ error?: string; valid?: boolean }> {
  const id = nextId++;
  return new Promise((resolve, reject) => {
    const w = schemaWorker();
    const timer = setTimeout(() => {
      // Ajv is stuck on this schema: the worker is replaced; what else waited on it fails too (503).
      pending.delete(id);
      reject(new SchemaTimeout());
      if (worker === w) worker = undefined;
      void w.terminate();
    }, COMPILE_TIMEOUT_MS);
    timer.unref();
    const settle = <T>(f: (v: T) => void) => (v: T) => {
      clearTimeout(timer);
      f(v);
    };
    pending.set(id, { worker: w, resolve: settle(resolve), reject: settle(reject) });
    w.ref();
    w.postMessage({ id, schema, instance: instance?.value, hasInstance: instance !== undefined });
  });
}

/** The worker's answer, or the error a client gets when there is none. */
async function answerFor(schema: Record<string, unknown>, param: string, instance?: { value: unknown }): Promise<{ error?: string; valid?: boolean }> {
  try {
    return await ask(schema, instance);
  } catch (err) {
    if (err instanceof SchemaTimeout) {
      throw invalid(param, `Invalid value for '${param}': the schema could not be compiled within ${COMPILE_TIMEOUT_MS / 1000} s.`, 'invalid_schema');
    }
    throw new CoreError('unavailable', 'The schema compiler stopped while checking this request. Retry.', { reason: 'schema_compiler_unavailable' });
  }
}

/**
 * Resolves when Ajv compiles the schema; a 400 naming `param` when it cannot (not a valid
 * JSON Schema, or a `$ref` to a schema it does not have: nothing is fetched).
 */
export async function compileSchema(schema: Record<string, unknown>, param: string): Promise<void> {
  const key = JSON.stringify(schema);
  if (compiles.has(key)) return;
  const answer = await answerFor(schema, param);
  if (answer.error !== undefined) {
    // A loop the $ref walk (schema-checks.ts) does not follow (an anchor, a remote $id) still overflows Ajv's stack: say what it means.
    const why = /maximum call stack/i.test(answer.error) ? 'it refers to itself ($ref) in a loop too deep to compile' : answer.error;
    throw invalid(param, `Invalid value for '${param}': not a valid JSON Schema (${why}).`, 'invalid_schema');
  }
  compiles.set(key, true);
}

/** Whether `value` is valid against the schema (compiled by Ajv, in its worker). A schema Ajv cannot compile validates nothing. */
export async function isValidAgainst(schema: Record<string, unknown>, value: unknown): Promise<boolean> {
  const answer = await answerFor(schema, 'schema', { value });
  return answer.valid === true;
}
