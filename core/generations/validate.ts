import { jobSeconds, jobTimeLimit, type MediaModel, type SettingSpec } from '../catalog/schema.ts';
import { invalid } from '../errors.ts';
import type { UrlGuard } from '../ports.ts';

/**
 * Checks a job's settings and inputs against its model. Every setting key must be known and
 * its value within its options or bounds; left-out settings take their defaults. Every input
 * key must be known, each value a public http(s) URL (a list only for multi-file inputs), and
 * required inputs present. Each error names the key.
 */
export function validateSettings(model: MediaModel, settings: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(settings)) {
    if (!Object.hasOwn(model.settings, key)) {
      throw invalid(`settings.${key}`, `Unknown setting 'settings.${key}' for '${model.id}'. Known settings: ${Object.keys(model.settings).join(', ') || 'none'}.`, 'unknown_setting');
    }
  }
  for (const [key, spec] of Object.entries(model.settings)) {
    const value = Object.hasOwn(settings, key) ? settings[key] : spec.default;
    if (value === undefined) continue;
    const problem = settingProblem(spec, value) ?? deadlineProblem(model, spec, value as number);
    if (problem) throw invalid(`settings.${key}`, `Invalid value for 'settings.${key}': ${problem}.`);
    out[key] = value;
  }
  return out;
}

/**
 * A setting that is time the job takes (`job_time`), as long as the model's deadline or longer:
 * the job could never finish in time. The catalog refuses such bounds at load; a model stored
 * before that rule, or edited since, still has them, so the value is checked here too.
 */
function deadlineProblem(model: MediaModel, spec: SettingSpec, value: number): string | undefined {
  const limit = jobTimeLimit(spec, model.deadline_seconds);
  if (limit === undefined || value < limit) return undefined;
  return `the job would take ${jobSeconds(spec, value)} s, and it could never finish within the model's deadline of ${model.deadline_seconds} s: must be below ${limit}`;
}

function settingProblem(spec: SettingSpec, value: unknown): string | undefined {
  switch (spec.type) {
    case 'enum': {
      if (spec.options.includes(value as string | number)) return undefined;
      return `must be one of ${optionsKind(spec.options, value)}${spec.options.map((o) => JSON.stringify(o)).join(', ')}, got ${described(value)}`;
    }
    case 'integer':
    case 'number':
      if (typeof value !== 'number' || !Number.isFinite(value)) return `must be a number, got ${described(value)}`;
      if (spec.type === 'integer' && !Number.isInteger(value)) return `must be a whole number, got ${described(value)}`;
      if (!/^-?\d+(\.\d{1,6})?$/.test(String(value))) return 'has more than 6 decimals';
      return value < spec.min || value > spec.max ? `must be between ${spec.min} and ${spec.max}, got ${described(value)}` : undefined;
    case 'boolean':
      return typeof value === 'boolean' ? undefined : `must be true or false, got ${described(value)}`;
    case 'string':
      if (typeof value !== 'string') return `must be a string, got ${described(value)}`;
      // Kept in the job's JSONB settings, which cannot hold U+0000.
      if (value.includes('\u0000')) return 'must not contain the NUL character (\\u0000)';
      return value.length > spec.max_length ? `must be at most ${spec.max_length} characters, got ${value.length}` : undefined;
  }
}

/**
 * When every option is of one JSON type and the value is of another (the string "256" for the
 * number 256, a common slip of clients that send every setting as text), names the options'
 * type: "the numbers ". Empty otherwise.
 */
function optionsKind(options: (string | number)[], value: unknown): string {
  const kinds = new Set(options.map((o) => typeof o));
  if (kinds.size !== 1 || kinds.has(typeof value as 'string')) return '';
  return kinds.has('number') ? 'the numbers ' : 'the strings ';
}

/** A JSON value as an error message names it, with its type: the string "256", the number 3.5, null, a list. */
export function described(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'string') return `the string ${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)}`;
  if (typeof value === 'number') return `the number ${value}`;
  if (typeof value === 'boolean') return `the boolean ${value}`;
  return 'an object'; // settings come from JSON: nothing else is left
}

/** What an input value may name besides a URL: one of the account's uploaded files. */
export type FileLookup = (id: string) => Promise<{ type: string } | undefined>;

export async function validateInputs(
  model: MediaModel,
  inputs: Record<string, unknown>,
  guard: UrlGuard,
  findFile: FileLookup,
): Promise<Record<string, string | string[]>> {
  const out: Record<string, string | string[]> = {};
  for (const key of Object.keys(inputs)) {
    if (!Object.hasOwn(model.inputs, key)) {
      throw invalid(`inputs.${key}`, `Unknown input 'inputs.${key}' for '${model.id}'. Known inputs: ${Object.keys(model.inputs).join(', ') || 'none'}.`, 'unknown_input');
    }
  }
  for (const [key, spec] of Object.entries(model.inputs)) {
    const value = Object.hasOwn(inputs, key) ? inputs[key] : undefined;
    if (value === undefined || value === null) {
      if (spec.required) throw invalid(`inputs.${key}`, `Missing required input 'inputs.${key}'.`, 'missing_field');
      continue;
    }
    const urls = Array.isArray(value) ? value : [value];
    if (Array.isArray(value) && !spec.multiple) throw invalid(`inputs.${key}`, `Input 'inputs.${key}' takes one file, not a list.`);
    if (urls.length === 0) throw invalid(`inputs.${key}`, `Input 'inputs.${key}' is an empty list.`);
    if (urls.length > 20) throw invalid(`inputs.${key}`, `Input 'inputs.${key}' takes at most 20 files.`);
    for (const [i, url] of urls.entries()) {
      const param = Array.isArray(value) ? `inputs.${key}.${i}` : `inputs.${key}`;
      if (typeof url !== 'string') throw invalid(param, `Invalid value for '${param}': must be a URL or a file id.`);
      if (/^file_[0-9A-Za-z]{1,64}$/.test(url)) {
        const file = await findFile(url);
        if (!file) throw invalid(param, `Invalid value for '${param}': no file ${url}.`, 'file_not_found');
        if (!(spec.accepts as string[]).includes(file.type)) {
          throw invalid(param, `Invalid value for '${param}': ${url} is a ${file.type} file; this input accepts ${spec.accepts.join(', ')}.`, 'wrong_file_type');
        }
        continue;
      }
      try {
        await guard.check(url);
      } catch (err) {
        throw invalid(param, `Invalid value for '${param}': ${(err as Error).message}.`, 'invalid_url');
      }
    }
    out[key] = Array.isArray(value) ? (value as string[]) : (value as string);
  }
  return out;
}
