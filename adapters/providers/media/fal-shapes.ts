import type { MediaJobSpec } from '../../../core/ports.ts';

/**
 * Reading fal's answers: where a model's requests live, which file a result holds, and what a
 * refusal was about, said in this service's words (the upstream's own text goes to the log).
 */

/** `fal-ai/flux/dev` → `fal-ai/flux`: status, result and cancel live under the app, without the subpath. */
export function falAppId(model: string): string {
  return model.split('/').slice(0, 2).join('/');
}

/** The keys fal's models put their file under, in the order they are looked for. */
const FILE_KEYS = ['images', 'image', 'video', 'videos', 'audio', 'audio_file', 'audio_url', 'model_mesh', 'model_glb', 'model_file', 'mesh', 'file', 'files', 'output'];

/** The first file-like value (`{url, content_type?}`, a list of them, or a URL string) under a known key. */
export function falResultFile(answer: unknown): { url: string; contentType?: string | undefined } | undefined {
  if (!answer || typeof answer !== 'object') return undefined;
  const record = answer as Record<string, unknown>;
  for (const key of FILE_KEYS) {
    const found = fileOf(record[key]);
    if (found) return found;
  }
  return undefined;
}

function fileOf(value: unknown): { url: string; contentType?: string | undefined } | undefined {
  if (Array.isArray(value)) return fileOf(value[0]);
  if (typeof value === 'string') return /^https?:\/\//.test(value) ? { url: value } : undefined;
  if (value && typeof value === 'object') {
    const { url, content_type } = value as { url?: unknown; content_type?: unknown };
    if (typeof url === 'string' && /^https?:\/\//.test(url)) return { url, contentType: typeof content_type === 'string' ? content_type : undefined };
  }
  return undefined;
}

/** fal's validation error types (FastAPI/pydantic, and fal's own), as a few words of ours. */
const PHRASES: [RegExp, string][] = [
  [/content_policy/, 'was refused by the provider\'s content policy'],
  [/^missing$/, 'is required'],
  [/(greater|less)_than|too_(short|long|large|small)|out_of_range|image_too/, 'is out of the range the provider accepts'],
  [/literal_error|enum/, 'is not one of the values the provider accepts'],
  [/file_download|download/, 'could not be downloaded by the provider'],
  [/(string|int|float|bool|dict|list|url)_(type|parsing)|type_error/, 'has a type the provider does not accept'],
];

/**
 * A 400 or 422 from fal, as the job's error: which of the request's fields it was about (named as
 * the customer named them: `prompt`, `settings.x`, `inputs.y`) and what kind of problem, never
 * the upstream's own text.
 */
export function falInputProblem(body: unknown, spec: Pick<MediaJobSpec, 'settings' | 'inputs'> | undefined): { code: string; message: string } {
  const detail = body && typeof body === 'object' ? (body as { detail?: unknown }).detail : undefined;
  const items = Array.isArray(detail) ? detail.filter((d): d is { loc?: unknown; type?: unknown } => !!d && typeof d === 'object') : [];
  const parts: string[] = [];
  let policy = false;
  for (const item of items.slice(0, 5)) {
    const type = typeof item.type === 'string' ? item.type : '';
    if (/content_policy/.test(type)) policy = true;
    const field = Array.isArray(item.loc) ? item.loc.filter((p) => p !== 'body').map(String)[0] : undefined;
    const phrase = PHRASES.find(([re]) => re.test(type))?.[1] ?? 'is not valid';
    parts.push(`${field ? paramOf(field, spec) : 'the input'} ${phrase}`);
  }
  if (policy) return { code: 'content_policy', message: `The provider refused the request under its content policy: ${parts.join('; ')}. Nothing was charged.` };
  if (parts.length === 0) return { code: 'invalid_input', message: 'The provider refused the input as invalid. Nothing was charged.' };
  return { code: 'invalid_input', message: `The provider refused the input: ${parts.join('; ')}. Nothing was charged.` };
}

/** An upstream input field as the customer named it; names outside the request are only shown if they look like a field name. */
function paramOf(field: string, spec: Pick<MediaJobSpec, 'settings' | 'inputs'> | undefined): string {
  if (field === 'prompt') return 'prompt';
  if (spec && field in spec.settings) return `settings.${field}`;
  if (spec && field in spec.inputs) return `inputs.${field}`;
  return /^[a-z][a-z0-9_]{0,40}$/.test(field) ? `the provider's field ${field}` : 'the input';
}
