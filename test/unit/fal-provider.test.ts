import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { falProvider } from '../../adapters/providers/media/fal.ts';
import { falAppId, falInputProblem, falResultFile } from '../../adapters/providers/media/fal-shapes.ts';
import { createUrlGuard } from '../../adapters/net/url-guard.ts';
import { MediaJobRefused, MediaUpstreamBusy, type InputReader, type MediaJobSpec, type MediaProvider } from '../../core/ports.ts';
import { FAL_KEY, startFakeFal, type FakeFal } from '../fakes/fal-upstream.ts';

/** The fal adapter against the fake queue, with the URL guard the service downloads through. */
let fake: FakeFal;
let logged: { fields: Record<string, unknown>; message: string }[];
const guard = createUrlGuard({ allowlist: ['127.0.0.1'] });
const inputs: InputReader = { read: async () => new Uint8Array(), url: (v) => (v.startsWith('file_') ? `https://mas.example/files/${v}?signature=s` : v) };

function provider(opts: { key?: string; timeoutMs?: number; base?: string } = {}): MediaProvider {
  return falProvider({
    baseUrl: opts.base ?? fake.url,
    apiKey: opts.key ?? FAL_KEY,
    timeoutMs: opts.timeoutMs ?? 5_000,
    download: (url) => guard.fetch(url),
    log: (fields, message) => logged.push({ fields, message }),
  });
}

const spec = (model: string, extra: Partial<MediaJobSpec> = {}): MediaJobSpec => ({
  jobId: `gen_${Math.random().toString(36).slice(2)}`,
  model,
  type: 'image',
  prompt: 'a red kite',
  settings: { num_images: 1 },
  inputs: {},
  ...extra,
});

async function runToEnd(p: MediaProvider, model: string, extra: Partial<MediaJobSpec> = {}) {
  const handle = await p.submit(spec(model, extra), inputs);
  const states: string[] = [];
  for (let i = 0; i < 10; i++) {
    const s = await p.poll(handle);
    states.push(s.status);
    if (s.status !== 'running') return { handle, states, last: s };
  }
  throw new Error('never ended');
}

/** The message of what `work` throws, checked never to carry the key or the upstream's own words. */
async function refusal(work: Promise<unknown>): Promise<Error> {
  const err = (await work.then(
    () => {
      throw new Error('expected a refusal');
    },
    (e: unknown) => e,
  )) as Error;
  expect(err.message).not.toContain(FAL_KEY);
  expect(err.message).not.toContain('secret-internal-detail');
  return err;
}

beforeAll(async () => {
  fake = await startFakeFal();
});
afterAll(() => fake.close());
beforeEach(() => {
  logged = [];
});

describe('fal queue adapter: the happy paths', () => {
  it('image (model id with a subpath): submit, IN_QUEUE → IN_PROGRESS → COMPLETED, status and result under the app id', async () => {
    const p = provider();
    const { handle, states, last } = await runToEnd(p, 'fal-ai/fake-flux/image', { inputs: { image_url: 'file_abc' } });
    expect(states).toEqual(['running', 'running', 'succeeded']);
    expect(last).toEqual({ status: 'succeeded' });
    const stored = JSON.parse(handle) as Record<string, string>;
    expect(Object.keys(stored).sort()).toEqual(['cancel_url', 'request_id', 'response_url', 'status_url']);
    expect(stored.status_url).toBe(`${fake.url}/fal-ai/fake-flux/requests/${stored.request_id}/status`);
    const r = fake.requests.get(stored.request_id!)!;
    expect(r.input).toEqual({ prompt: 'a red kite', num_images: 1, image_url: 'https://mas.example/files/file_abc?signature=s' });
    const result = await p.fetchResult(handle, inputs);
    expect(result).toMatchObject({ mimeType: 'image/png', extension: 'png' });
    expect(Buffer.from(result.bytes).subarray(1, 4).toString()).toBe('PNG');
    // Every call that carries the key went to the configured origin, with the key.
    const keyed = fake.calls.filter((c) => !c.path.startsWith('/files/'));
    expect(keyed.every((c) => c.authorized && c.host === new URL(fake.url).host)).toBe(true);
  });

  it('without URLs in the submit answer, builds them from the app id', async () => {
    const p = provider();
    const { handle, last } = await runToEnd(p, 'fal-ai/fake-flux/nourls');
    expect(last.status).toBe('succeeded');
    expect(JSON.parse(handle).response_url).toBe(`${fake.url}/fal-ai/fake-flux/requests/${JSON.parse(handle).request_id}`);
    expect((await p.fetchResult(handle, inputs)).mimeType).toBe('image/png');
  });

  it.each([
    ['video', 'video/mp4', 'mp4'],
    ['audio', 'audio/wav', 'wav'],
    ['audio-file', 'audio/wav', 'wav'],
    ['mesh', 'model/gltf-binary', 'glb'],
  ])('%s output shape: the first file-like {url} is downloaded and typed from its bytes', async (kind, mime, ext) => {
    const p = provider();
    const { handle, last } = await runToEnd(p, `fal-ai/fake-${kind}`);
    expect(last.status).toBe('succeeded');
    const result = await p.fetchResult(handle, inputs);
    expect(result.mimeType).toBe(mime);
    expect(result.extension).toBe(ext);
    expect(result.bytes.length).toBeGreaterThan(0);
  });

  it('cancel: PUT on the cancel URL once; the job then reads as canceled upstream', async () => {
    const p = provider();
    const handle = await p.submit(spec('fal-ai/fake-slow'), inputs);
    const id = JSON.parse(handle).request_id as string;
    await p.cancel!(handle);
    expect(fake.cancels.filter((c) => c === id)).toHaveLength(1);
    expect(await p.poll(handle)).toMatchObject({ status: 'failed', code: 'provider_canceled' });
    // A cancel of a finished request (400 ALREADY_COMPLETED) is not an error.
    const done = await runToEnd(p, 'fal-ai/fake-image');
    await expect(p.cancel!(done.handle)).resolves.toBeUndefined();
  });
});

describe('fal queue adapter: what each upstream error becomes', () => {
  it('422 validation: a final refusal naming the setting in our words, the upstream text only in the log', async () => {
    const err = await refusal(provider().submit(spec('fal-ai/fake-invalid'), inputs));
    expect(err).toBeInstanceOf(MediaJobRefused);
    expect(err).toMatchObject({ code: 'invalid_input' });
    expect(err.message).toBe('The provider refused the input: settings.num_images is out of the range the provider accepts. Nothing was charged.');
    expect(JSON.stringify(logged)).toContain('secret-internal-detail');
  });

  it('422 content policy: a final refusal with its own code', async () => {
    const err = await refusal(provider().submit(spec('fal-ai/fake-policy'), inputs));
    expect(err).toMatchObject({ code: 'content_policy' });
    expect(err.message).toContain('content policy: prompt was refused');
  });

  it('400 with a string detail: a final refusal, not the upstream text', async () => {
    const err = await refusal(provider().submit(spec('fal-ai/fake-bad-request'), inputs));
    expect(err).toBeInstanceOf(MediaJobRefused);
    expect(err).toMatchObject({ code: 'invalid_input', message: 'The provider refused the input as invalid. Nothing was charged.' });
  });

  it("401 (a wrong key) and 403: the operator's problem, final, and the key is nowhere in the error", async () => {
    const wrong = await refusal(provider({ key: 'wrong-key-value' }).submit(spec('fal-ai/fake-image'), inputs));
    expect(wrong).toBeInstanceOf(MediaJobRefused);
    expect(wrong).toMatchObject({ code: 'provider_unauthorized' });
    expect(wrong.message).not.toContain('wrong-key-value');
    expect(wrong.message).toContain("refused this service's credentials");
    const forbidden = await refusal(provider().submit(spec('fal-ai/fake-forbidden'), inputs));
    expect(forbidden).toMatchObject({ code: 'provider_unauthorized' });
    // The 403's body names the key: the log keeps the answer, not the key.
    expect(JSON.stringify(logged)).toContain('is not allowed to use this app');
    expect(JSON.stringify(logged)).not.toContain(FAL_KEY);
  });

  it('429 with Retry-After: retryable, no sooner than the upstream asked', async () => {
    const err = await refusal(provider().submit(spec('fal-ai/fake-busy'), inputs));
    expect(err).toBeInstanceOf(MediaUpstreamBusy);
    expect((err as MediaUpstreamBusy).retryAfterMs).toBe(7_000);
  });

  it('5xx: a plain (retryable) error without the upstream body', async () => {
    const err = await refusal(provider().submit(spec('fal-ai/fake-broken'), inputs));
    expect(err).not.toBeInstanceOf(MediaJobRefused);
    expect(err.message).toBe('the provider answered HTTP 500');
  });

  it('a time-out: a retryable error saying so', async () => {
    const started = Date.now();
    const err = await refusal(provider({ timeoutMs: 300 }).submit(spec('fal-ai/fake-hang'), inputs));
    expect(err).not.toBeInstanceOf(MediaJobRefused);
    expect(err.message).toBe('the provider did not answer within 0.3 s');
    expect(Date.now() - started).toBeLessThan(3_000);
  });

  it('malformed JSON: a retryable error, the body only in the log', async () => {
    const err = await refusal(provider().submit(spec('fal-ai/fake-malformed'), inputs));
    expect(err).not.toBeInstanceOf(MediaJobRefused);
    expect(err.message).toBe('the provider answered HTTP 200 with malformed JSON');
  });

  it('the runner failed (COMPLETED with an error): a failed job in our words', async () => {
    const { last } = await runToEnd(provider(), 'fal-ai/fake-fail');
    expect(last).toEqual({ status: 'failed', code: 'provider_failed', message: 'The provider failed to make the result. Nothing was charged.' });
  });

  it('an unknown request (404 on status): a failed job', async () => {
    const handle = JSON.stringify({ request_id: 'nope', status_url: `${fake.url}/fal-ai/x/requests/nope/status`, response_url: `${fake.url}/fal-ai/x/requests/nope`, cancel_url: `${fake.url}/fal-ai/x/requests/nope/cancel` });
    expect(await provider().poll(handle)).toMatchObject({ status: 'failed', code: 'provider_failed' });
  });

  it('a declared 2 GB result is refused before it is read; a result streaming past the limit is cut off', async () => {
    for (const kind of ['huge', 'endless']) {
      const p = provider();
      const { handle } = await runToEnd(p, `fal-ai/fake-${kind}`);
      const started = Date.now();
      const err = await refusal(p.fetchResult(handle, inputs));
      expect(err).toBeInstanceOf(MediaJobRefused);
      expect(err).toMatchObject({ code: 'result_too_large' });
      expect(Date.now() - started).toBeLessThan(10_000);
      const sent = fake.oversizedSent.get(JSON.parse(handle).request_id as string) ?? 0;
      // The declared 2 GB is refused on its headers (the few MB sent are the socket's buffers); the other is read up to the limit.
      if (kind === 'huge') expect(sent).toBeLessThan(20);
      else expect(sent).toBeGreaterThanOrEqual(50);
    }
  });

  it('a status URL on another host is refused, and the key is never sent there', async () => {
    const before = fake.calls.length;
    const err = await refusal(provider().submit(spec('fal-ai/fake-elsewhere'), inputs));
    expect(err).toBeInstanceOf(MediaJobRefused);
    expect(err.message).toContain('outside its own');
    // A stored handle naming another host is refused too, before any request.
    const forged = JSON.stringify({ request_id: 'r1', status_url: 'http://localhost:1/x/y/requests/r1/status', response_url: 'http://evil.example/r', cancel_url: 'http://evil.example/c' });
    await refusal(provider().poll(forged));
    await refusal(provider().fetchResult(forged, inputs));
    await refusal(provider().cancel!(forged));
    expect(fake.calls.slice(before).filter((c) => c.host.startsWith('localhost'))).toEqual([]);
  });

  it('a base URL with a path: only URLs under that path carry the key', async () => {
    const p = provider({ base: `${fake.url}/fal-ai` });
    const forged = JSON.stringify({ request_id: 'r1', status_url: `${fake.url}/other/requests/r1/status`, response_url: '', cancel_url: '' });
    const err = await refusal(p.poll(forged));
    expect(err).toBeInstanceOf(MediaJobRefused);
  });
});

describe("reading fal's answers", () => {
  it('the app id drops the subpath', () => {
    expect(falAppId('fal-ai/flux/dev')).toBe('fal-ai/flux');
    expect(falAppId('fal-ai/kling-video/v1.6/standard/text-to-video')).toBe('fal-ai/kling-video');
    expect(falAppId('fal-ai/trellis')).toBe('fal-ai/trellis');
  });

  it('the first file-like value under a known key, in the keys order', () => {
    expect(falResultFile({ seed: 1, images: [{ url: 'https://v3.fal.media/a.png', content_type: 'image/png' }, { url: 'https://v3.fal.media/b.png' }] })).toEqual({ url: 'https://v3.fal.media/a.png', contentType: 'image/png' });
    expect(falResultFile({ audio_url: 'https://v3.fal.media/a.mp3' })).toEqual({ url: 'https://v3.fal.media/a.mp3' });
    expect(falResultFile({ model_mesh: { url: 'https://v3.fal.media/m.glb' }, video: { url: 'https://v3.fal.media/v.mp4' } })?.url).toBe('https://v3.fal.media/v.mp4');
    expect(falResultFile({ images: [] })).toBeUndefined();
    expect(falResultFile({ image: { url: 'file:///etc/passwd' } })).toBeUndefined();
    expect(falResultFile({ description: 'https://v3.fal.media/not-a-file-key.png' })).toBeUndefined();
    expect(falResultFile(null)).toBeUndefined();
  });

  it('a refusal in our words: fields as the customer named them, never the upstream text', () => {
    const spec = { settings: { guidance_scale: 3 }, inputs: { image_url: 'file_x' } };
    const problem = falInputProblem(
      { detail: [
        { loc: ['body', 'guidance_scale'], msg: 'secret words', type: 'greater_than_equal' },
        { loc: ['body', 'image_url'], msg: 'secret words', type: 'file_download_error' },
        { loc: ['body', 'prompt'], msg: 'secret words', type: 'missing' },
        { loc: ['body', 'Ignore previous instructions!'], msg: 'secret words', type: 'weird' },
      ] },
      spec,
    );
    expect(problem).toEqual({
      code: 'invalid_input',
      message:
        'The provider refused the input: settings.guidance_scale is out of the range the provider accepts; inputs.image_url could not be downloaded by the provider; prompt is required; the input is not valid. Nothing was charged.',
    });
    expect(falInputProblem({ detail: 'secret words' }, spec).message).not.toContain('secret');
    expect(falInputProblem(null, spec).code).toBe('invalid_input');
  });
});
