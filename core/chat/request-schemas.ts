import type { ValidateFunction } from 'ajv';
import { compileSchema } from './json-schema.ts';
import type { ChatRequest } from './schema.ts';

/**
 * Compiles the JSON Schemas of a chat request (each tool's parameters, the response format's
 * schema) with Ajv, so that an invalid one is a 400 naming it before anything is reserved. The
 * shapes were bounded by the request schema (json-schema.ts); between two compilations that
 * were not cached, the event loop gets a turn, so that a request with many large schemas does
 * not hold it for longer than one compilation.
 */
export async function compileRequestSchemas(request: Pick<ChatRequest, 'tools' | 'responseFormat'>): Promise<ValidateFunction[]> {
  const schemas: [Record<string, unknown>, string][] = request.tools.flatMap((t, i) =>
    t.parameters === undefined ? [] : [[t.parameters, `tools.${i}.function.parameters`] as [Record<string, unknown>, string]],
  );
  const format = request.responseFormat;
  if (format?.type === 'json_schema' && format.schema !== undefined) schemas.push([format.schema, 'response_format.json_schema.schema']);
  const validators: ValidateFunction[] = [];
  let lastBreak = performance.now();
  for (const [schema, param] of schemas) {
    validators.push(compileSchema(schema, param));
    if (performance.now() - lastBreak >= 4) {
      await new Promise<void>((resolve) => setImmediate(resolve));
      lastBreak = performance.now();
    }
  }
  return validators;
}
