import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MediaProviderError, type InputReader, type MediaJobSpec, type MediaProvider } from '../../core/ports.ts';
import { openaiMediaProvider } from '../../adapters/providers/media/openai-media.ts';
import { retryAfterMs } from '../../adapters/providers/media/upstream-limits.ts';
import { png, seededRandom } from '../../adapters/providers/media/formats.ts';
import { FAKE_MP3, FAKE_MP4, startFakeOpenAIMedia, type FakeOpenAIMedia } from '../fakes/openai-media-upstream.ts';

/** The OpenAI media adapter against a mock speaking OpenAI's images, speech and videos protocols. */
let fake: FakeOpenAIMedia;
let provider: MediaProvider;
const logged: object[] = [];
const INPUT = png(4, 4, seededRandom(Buffer.from('input')));
const inputs: InputReader = { read: async (v) => (v === 'file_abc' ? INPUT : Promise.reject(new Error(`unknown input ${v}`))), url: (v) => v };
let n = 0;
const spec = (type: MediaJobSpec['type'], model: string, prompt: string, settings: Record<string, unknown> = {}, extra: Partial<MediaJobSpec> = {}): MediaJobSpec => ({
  jobId: `gen_test${++n}`,
  model,
  type,
  prompt,
  settings,
  inputs: {},
  ...extra,
});
const make = (overrides: Partial<Parameters<typeof openaiMediaProvider>[0]> = {}) =>
  openaiMediaProvider({ baseUrl: fake.url, apiKey: 'openai-secret', timeoutMs: 2000, maxResultBytes: 1_048_576, log: { warn: (f) => void logged.push(f) }, ...overrides });

/** Runs a job the way the workflow does: submit, poll until done, fetch. */
async function run(p: MediaProvider, s: MediaJobSpec) {
  const handle = await p.submit(s, inputs);
  for (let i = 0; i < 20; i++) {
    const state = await p.poll(handle);
    if (state.status === 'failed') return { handle, state };
    if (state.status === 'succeeded') return { handle, state, result: await p.fetchResult(handle, inputs) };
  }
  throw new Error('never finished');
}

async function refusal(work: Promise<unknown>): Promise<MediaProviderError> {
  const err = await work.then(() => undefined, (e: unknown) => e);
  expect(err).toBeInstanceOf(MediaProviderError);
  return err as MediaProviderError;
}

beforeAll(async () => {
  fake = await startFakeOpenAIMedia();
  provider = make();
});
afterAll(() => fake.close());

describe('OpenAI images', () => {
  it('generates: sends model, prompt, size and quality; decodes b64_json to PNG bytes; the handle is small JSON', async () => {
    const { handle, result } = await run(provider, spec('image', 'gpt-image-1', 'a lighthouse', { size: '1024x1536', quality: 'high' }));
    expect(handle.length).toBeLessThan(1000);
    expect(JSON.parse(handle)).toMatchObject({ family: 'image', model: 'gpt-image-1' });
    expect(result).toMatchObject({ mimeType: 'image/png', extension: 'png' });
    expect(Buffer.from(result!.bytes).subarray(1, 4).toString()).toBe('PNG');
    const sent = fake.requests.findLast((r) => r.path === '/v1/images/generations')!;
    expect(sent.json).toEqual({ model: 'gpt-image-1', prompt: 'a lighthouse', n: 1, size: '1024x1536', quality: 'high' });
  });

  it('edits: uploads the input image as a multipart file read through the input reader', async () => {
    const { result } = await run(provider, spec('image', 'gpt-image-1', 'make it night', { size: '1024x1024' }, { inputs: { image: 'file_abc' } }));
    expect(result?.mimeType).toBe('image/png');
    const sent = fake.requests.findLast((r) => r.path === '/v1/images/edits')!;
    expect(sent.form).toMatchObject({ model: 'gpt-image-1', prompt: 'make it night', size: '1024x1024', image: { bytes: INPUT.length } });
  });

  it('a retried result step on the same worker does not call the upstream twice', async () => {
    const s = spec('image', 'gpt-image-1', 'once only');
    const handle = await provider.submit(s, inputs);
    const before = fake.requests.length;
    await provider.fetchResult(handle, inputs);
    await provider.fetchResult(handle, inputs);
    expect(fake.requests.length - before).toBe(1);
  });
});

describe('OpenAI speech', () => {
  it('sends input, voice and mp3 by default; answers the audio bytes', async () => {
    const { result } = await run(provider, spec('audio', 'gpt-4o-mini-tts', 'hello there', { voice: 'alloy' }));
    expect(result).toMatchObject({ mimeType: 'audio/mpeg', extension: 'mp3' });
    expect(Buffer.from(result!.bytes).equals(FAKE_MP3)).toBe(true);
    expect(fake.requests.findLast((r) => r.path === '/v1/audio/speech')!.json).toEqual({ model: 'gpt-4o-mini-tts', input: 'hello there', voice: 'alloy', response_format: 'mp3' });
  });

  it('another response_format gives its type', async () => {
    const { result } = await run(provider, spec('audio', 'tts-1', 'hi', { voice: 'nova', response_format: 'wav' }));
    expect(result).toMatchObject({ mimeType: 'audio/wav', extension: 'wav' });
  });
});

describe('OpenAI videos', () => {
  it('creates (multipart, with seconds and size and the job id as Idempotency-Key), polls queued → in_progress → completed, downloads', async () => {
    const s = spec('video', 'sora-2', 'a kite over the sea', { seconds: 8, size: '1280x720' });
    const { handle, result } = await run(provider, s);
    const id = (JSON.parse(handle) as { id: string }).id;
    expect(fake.videos.get(id)?.fields).toMatchObject({ model: 'sora-2', prompt: 'a kite over the sea', seconds: '8', size: '1280x720' });
    expect(fake.requests.find((r) => r.path === '/v1/videos' && r.form?.prompt === 'a kite over the sea')?.headers['idempotency-key']).toBe(s.jobId);
    expect(result).toMatchObject({ mimeType: 'video/mp4', extension: 'mp4' });
    expect(Buffer.from(result!.bytes).equals(FAKE_MP4)).toBe(true);
  });

  it('a video refused by moderation fails with our words; another failure is provider_failed; neither shows the upstream detail', async () => {
    const policy = await run(provider, spec('video', 'sora-2', 'x [video-policy]'));
    expect(policy.state).toEqual({ status: 'failed', code: 'content_policy', message: 'The provider refused the prompt under its content policy.' });
    const failed = await run(provider, spec('video', 'sora-2', 'x [video-fail]'));
    expect(failed.state).toMatchObject({ status: 'failed', code: 'provider_failed' });
    expect(JSON.stringify([policy.state, failed.state])).not.toContain('upstream-secret-detail');
  });

  it('cancel deletes the video upstream (OpenAI has no other stop)', async () => {
    const handle = await provider.submit(spec('video', 'sora-2', 'x [video-slow]'), inputs);
    expect((await provider.poll(handle)).status).toBe('running');
    await provider.cancel!(handle);
    expect(fake.deletes).toContain((JSON.parse(handle) as { id: string }).id);
  });

  it('a download that goes past the size limit is cut off while reading and refused', async () => {
    const err = await refusal(run(provider, spec('video', 'sora-2', 'x [video-oversized]')));
    expect(err).toMatchObject({ kind: 'refused', code: 'result_too_large' });
  });
});

describe('OpenAI errors', () => {
  const image = (prompt: string, p = provider) => run(p, spec('image', 'gpt-image-1', prompt));

  it('moderation_blocked: refused under the content policy, in our words', async () => {
    const err = await refusal(image('a thing [policy]'));
    expect(err).toMatchObject({ kind: 'refused', code: 'content_policy', message: 'The provider refused the prompt under its content policy.' });
  });

  it('content_policy_violation (a video create) is the same refusal', async () => {
    const err = await refusal(provider.submit(spec('video', 'sora-2', 'x [policy-violation]'), inputs));
    expect(err).toMatchObject({ kind: 'refused', code: 'content_policy' });
  });

  it('invalid input: refused naming the parameter, never the upstream message; the body is logged', async () => {
    const err = await refusal(image('x [invalid]'));
    expect(err).toMatchObject({ kind: 'refused', code: 'invalid_input', message: "The provider refused the request as invalid (about 'size')." });
    expect(err.message).not.toContain('upstream-secret-detail');
    expect(JSON.stringify(logged)).toContain('upstream-secret-detail');
  });

  it('speech without a voice: 400 missing_required_parameter, an invalid request', async () => {
    const err = await refusal(run(provider, spec('audio', 'tts-1', 'no voice')));
    expect(err).toMatchObject({ kind: 'refused', code: 'invalid_input' });
  });

  it('401: an operator problem, refused, and the key appears nowhere in the error', async () => {
    const wrong = make({ apiKey: 'sk-wrong-key-123' });
    const err = await refusal(image('hello', wrong));
    expect(err).toMatchObject({ kind: 'refused', code: 'provider_auth_failed' });
    expect(JSON.stringify({ ...err, message: err.message, stack: err.stack })).not.toContain('sk-wrong-key-123');
    // The mock echoes the key in its body, as an upstream might: the log blanks it.
    expect(JSON.stringify(logged)).toContain('Incorrect API key provided: [redacted]');
    expect(JSON.stringify(logged)).not.toContain('sk-wrong-key-123');
  });

  it('429 with Retry-After: retryable after that delay', async () => {
    const err = await refusal(image('x [429]'));
    expect(err).toMatchObject({ kind: 'retryable', code: 'provider_rate_limited', retryAfterMs: 7000 });
  });

  it('5xx: retryable', async () => {
    expect(await refusal(image('x [500]'))).toMatchObject({ kind: 'retryable', code: 'provider_unavailable' });
  });

  it('malformed JSON: retryable, as a bad answer', async () => {
    expect(await refusal(image('x [malformed]'))).toMatchObject({ kind: 'retryable', code: 'provider_bad_response' });
  });

  it('a hang: a time-out after timeout_seconds, retryable', async () => {
    const quick = make({ timeoutMs: 300 });
    const started = Date.now();
    expect(await refusal(image('x [hang]', quick))).toMatchObject({ kind: 'retryable', code: 'provider_timeout' });
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it('a 2 GB Content-Length is refused before it is read', async () => {
    expect(await refusal(image('x [oversized]'))).toMatchObject({ kind: 'refused', code: 'result_too_large' });
  });

  it('a chunked answer that goes past the limit is cut off and refused', async () => {
    expect(await refusal(image('x [endless]'))).toMatchObject({ kind: 'refused', code: 'result_too_large' });
  });

  it('an unreachable upstream is retryable', async () => {
    const gone = make({ baseUrl: 'http://127.0.0.1:9/v1' });
    expect(await refusal(image('hello', gone))).toMatchObject({ kind: 'retryable', code: 'provider_unavailable' });
  });

  it('Retry-After in seconds, as a date, and retry-after-ms', () => {
    expect(retryAfterMs(new Headers({ 'retry-after': '2' }))).toBe(2000);
    expect(retryAfterMs(new Headers({ 'retry-after-ms': '150' }))).toBe(150);
    expect(retryAfterMs(new Headers({ 'retry-after': new Date(Date.UTC(2030, 0, 1, 0, 0, 30)).toUTCString() }), Date.UTC(2030, 0, 1))).toBe(30_000);
    expect(retryAfterMs(new Headers({ 'retry-after': 'soon' }))).toBeUndefined();
    expect(retryAfterMs(new Headers())).toBeUndefined();
  });
});
