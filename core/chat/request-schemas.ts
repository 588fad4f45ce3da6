import { compileSchema } from './json-schema.ts';
import type { ChatRequest } from './schema.ts';

/**
 * Compiles the JSON Schemas of a chat request (each tool's parameters, the response format's
 * schema) with Ajv, so that an invalid one is a 400 naming it before anything is reserved. The
 * shapes were bounded by the request schema (json-schema.ts); Ajv runs in its worker thread.
 */
export async function compileRequestSchemas(request: Pick<ChatRequest, 'tools' | 'responseFormat'>): Promise<void> {
  const schemas: [Record<string, unknown>, string][] = request.tools.flatMap((t, i) =>
    t.parameters === undefined ? [] : [[t.parameters, `tools.${i}.function.parameters`] as [Record<string, unknown>, string]],
  );
  const format = request.responseFormat;
  if (format?.type === 'json_schema' && format.schema !== undefined) schemas.push([format.schema, 'response_format.json_schema.schema']);
  // One after the other, so that the first invalid schema is the one named.
  for (const [schema, param] of schemas) await compileSchema(schema, param);
}
