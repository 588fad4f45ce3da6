import { invalid } from '../errors.ts';
import { compileSchema } from './json-schema.ts';
import type { ChatRequest } from './schema.ts';
import { unsatisfiable } from './schema-checks.ts';

/**
 * Compiles the JSON Schemas of a chat request (each tool's parameters, the response format's
 * schema) with Ajv, so that an invalid one is a 400 naming it before anything is reserved, as is
 * a response format's schema that no value can satisfy (schema-checks.ts). The shapes were
 * bounded by the request schema (json-schema.ts); Ajv runs in its worker thread.
 */
export async function compileRequestSchemas(request: Pick<ChatRequest, 'tools' | 'responseFormat'>): Promise<void> {
  const schemas: [Record<string, unknown>, string][] = request.tools.flatMap((t, i) =>
    t.parameters === undefined ? [] : [[t.parameters, `tools.${i}.function.parameters`] as [Record<string, unknown>, string]],
  );
  const format = request.responseFormat;
  if (format?.type === 'json_schema' && format.schema !== undefined) schemas.push([format.schema, 'response_format.json_schema.schema']);
  // One after the other, so that the first invalid schema is the one named.
  for (const [schema, param] of schemas) await compileSchema(schema, param);
  // An answer must be an instance of the response format's schema: one that admits no value is
  // the request's fault, never the model's (no model can answer it). A tool's parameters are
  // left alone: a tool the model cannot call is a tool it does not call.
  const why = format?.type === 'json_schema' && format.schema !== undefined ? unsatisfiable(format.schema) : undefined;
  if (why) {
    const param = 'response_format.json_schema.schema';
    throw invalid(param, `Invalid value for '${param}': no value can satisfy this schema (${why}), so no answer could follow it.`, 'invalid_schema');
  }
}
