import { jobTimeLimit, type SettingSpec } from '../catalog/schema.ts';

/**
 * A media model's `settings` and `inputs` as JSON Schema: what validateSettings and
 * validateInputs (validate.ts) accept for that model, for the documents that describe a job
 * request (the OpenAPI document of `POST /generations`). Beside the code it states, so that the
 * two change together.
 *
 * What JSON Schema cannot carry is said in words: a number with at most 6 decimals (multipleOf
 * would make binary floats such as 0.1 fail in the validators that read it), an input that is a
 * public http(s) URL or a file id of the account.
 */
export interface DocumentedModel {
  settings: Record<string, SettingSpec>;
  inputs: Record<string, { accepts: string[]; multiple: boolean; required: boolean; description?: string | undefined }>;
  deadline_seconds: number;
}

type Json = Record<string, unknown>;

export function settingsDocument(model: DocumentedModel): Json {
  const properties: Record<string, Json> = {};
  for (const [key, spec] of Object.entries(model.settings)) properties[key] = settingDocument(spec, model.deadline_seconds);
  return { type: 'object', properties, additionalProperties: false, description: 'this model’s settings (any other key is refused); left-out settings take their defaults' };
}

function settingDocument(spec: SettingSpec, deadlineSeconds: number): Json {
  const about = spec.description ? { description: spec.description } : {};
  switch (spec.type) {
    case 'enum':
      return { enum: spec.options, default: spec.default, ...about };
    case 'boolean':
      return { type: 'boolean', default: spec.default, ...about };
    case 'string':
      return { type: 'string', maxLength: spec.max_length, pattern: '^[^\\u0000]*$', ...(spec.default !== undefined ? { default: spec.default } : {}), ...about };
    case 'integer':
    case 'number': {
      // A job_time setting the deadline can never meet is refused (validate.ts, deadlineProblem).
      const limit = jobTimeLimit(spec, deadlineSeconds);
      const upper = limit !== undefined && limit <= spec.max ? { exclusiveMaximum: limit } : { maximum: spec.max };
      const decimals = spec.type === 'number' ? { description: `${spec.description ? `${spec.description}; ` : ''}at most 6 decimals` } : about;
      return { type: spec.type, minimum: spec.min, ...upper, default: spec.default, ...decimals };
    }
  }
}

export function inputsDocument(model: DocumentedModel): Json {
  const properties: Record<string, Json> = {};
  for (const [key, spec] of Object.entries(model.inputs)) {
    const one = { type: 'string', description: `a public http(s) URL or the id of one of the account’s files (${spec.accepts.join(', ')})${spec.description ? `: ${spec.description}` : ''}` };
    const alternatives: Json[] = spec.multiple ? [one, { type: 'array', items: one, minItems: 1, maxItems: 20 }] : [one];
    // null is taken as left out, which a required input may not be.
    if (!spec.required) alternatives.push({ type: 'null' });
    properties[key] = alternatives.length === 1 ? alternatives[0]! : { anyOf: alternatives };
  }
  const required = Object.entries(model.inputs).filter(([, spec]) => spec.required).map(([key]) => key);
  return { type: 'object', properties, additionalProperties: false, ...(required.length > 0 ? { required } : {}) };
}
