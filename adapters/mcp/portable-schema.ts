/**
 * Tool schemas that strict clients take without a warning (the MCP Inspector's `--strict`
 * schema-portability lint, and clients that map tool schemas onto a one-`type` dialect such
 * as Gemini's function declarations). zod's JSON Schema has two spellings they warn about,
 * both rewritten here into an exact equivalent:
 *  - `additionalProperties: {}` (a record of unknown values): the schema that accepts
 *    anything, with no keyword; written `true`, its boolean form, which that keyword takes.
 *  - `type: ["string", "null"]` (a nullable value): split into `anyOf` branches of one type
 *    each; the node's other keywords stay beside it and still apply to every branch.
 * Any other schema without a validation keyword is left as it is, and test/unit/mcp-schemas
 * fails on it: the tool's zod schema should say what the value is.
 */

/** Keywords whose value is a schema that may be the boolean `true`. */
const BOOLEAN_VALUED = ['additionalProperties', 'unevaluatedProperties', 'additionalItems', 'unevaluatedItems'];
/** Keywords whose value is one schema, a map of schemas, or an array of schemas. */
const ONE = ['items', 'contains', 'not', 'propertyNames', 'if', 'then', 'else', 'contentSchema', ...BOOLEAN_VALUED];
const MAP = ['properties', 'patternProperties', 'dependentSchemas', '$defs', 'definitions'];
const LIST = ['allOf', 'anyOf', 'oneOf', 'prefixItems'];

/** What does not constrain a value: annotations. A schema with only these accepts anything. */
const ANNOTATIONS = new Set(['description', 'title', 'default', 'examples', 'deprecated', 'readOnly', 'writeOnly', '$comment', '$schema', '$id']);

type Schema = Record<string, unknown>;
const isSchema = (v: unknown): v is Schema => typeof v === 'object' && v !== null && !Array.isArray(v);

/** True when the schema has no keyword but annotations: it accepts every value. */
export function acceptsAnything(schema: Schema): boolean {
  return Object.keys(schema).every((k) => ANNOTATIONS.has(k));
}

/** A copy of `schema`, rewritten as the module comment says. */
export function portableSchema(schema: Schema): Schema {
  const out: Schema = {};
  for (const [key, value] of Object.entries(schema)) {
    if (BOOLEAN_VALUED.includes(key) && isSchema(value) && acceptsAnything(value)) out[key] = true;
    else if (ONE.includes(key) && isSchema(value)) out[key] = portableSchema(value);
    else if (MAP.includes(key) && isSchema(value)) out[key] = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, isSchema(v) ? portableSchema(v) : v]));
    else if (LIST.includes(key) && Array.isArray(value)) out[key] = value.map((v) => (isSchema(v) ? portableSchema(v) : v));
    else out[key] = value;
  }
  const type = out.type;
  if (Array.isArray(type)) {
    delete out.type;
    const branches = { anyOf: type.map((t) => ({ type: t })) };
    if (out.anyOf === undefined) Object.assign(out, branches);
    else out.allOf = [...((out.allOf as unknown[] | undefined) ?? []), branches];
  }
  return out;
}
