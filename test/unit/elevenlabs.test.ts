import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MediaProviderError, type InputReader, type MediaJobSpec, type MediaProvider } from '../../core/ports.ts';
import { elevenLabsProvider } from '../../adapters/providers/media/elevenlabs.ts';
import { startFakeElevenLabs, type FakeElevenLabs } from '../fakes/elevenlabs-upstream.ts';
import { FAKE_MP3 } from '../fakes/openai-media-upstream.ts';

/** The ElevenLabs adapter against a mock of its text-to-speech endpoint. */
let fake: FakeElevenLabs;
let provider: MediaProvider;
const logged: object[] = [];
const inputs: InputReader = { read: () => Promise.reject(new Error('no inputs')), url: (v) => v };
let n = 0;
const spec = (prompt: string, settings: Record<string, unknown> = { voice: 'rachel' }): MediaJobSpec => ({
  jobId: `gen_el${++n}`,
  model: 'eleven_multilingual_v2',
  type: 'audio',
  prompt,
  settings,
  inputs: {},
});
const make = (overrides: Partial<Parameters<typeof elevenLabsProvider>[0]> = {}) =>
  elevenLabsProvider({ baseUrl: fake.url, apiKey: 'eleven-secret', timeoutMs: 2000, maxResultBytes: 1_048_576, log: { warn: (f) => void logged.push(f) }, ...overrides });

async function speak(s: MediaJobSpec, p = provider) {
  const handle = await p.submit(s, inputs);
  expect(await p.poll(handle)).toEqual({ status: 'succeeded' });
  return p.fetchResult(handle, inputs);
}
async function refusal(work: Promise<unknown>): Promise<MediaProviderError> {
  const err = await work.then(() => undefined, (e: unknown) => e);
  expect(err).toBeInstanceOf(MediaProviderError);
  return err as MediaProviderError;
}

beforeAll(async () => {
  fake = await startFakeElevenLabs();
  provider = make();
});
afterAll(() => fake.close());

describe('ElevenLabs text-to-speech', () => {
  it('POSTs text, model_id and voice settings to the voice, with xi-api-key and output_format; answers the audio', async () => {
    const result = await speak(spec('Hello from the ledger.', { voice: 'rachel', stability: 0.4, similarity_boost: 0.8, output_format: 'mp3_44100_128' }));
    expect(result).toMatchObject({ mimeType: 'audio/mpeg', extension: 'mp3' });
    expect(Buffer.from(result.bytes).equals(FAKE_MP3)).toBe(true);
    const sent = fake.requests.at(-1)!;
    expect(sent.path).toBe('/v1/text-to-speech/rachel');
    expect(sent.query).toEqual({ output_format: 'mp3_44100_128' });
    expect(sent.headers['xi-api-key']).toBe('eleven-secret');
    expect(sent.body).toEqual({ text: 'Hello from the ledger.', model_id: 'eleven_multilingual_v2', voice_settings: { stability: 0.4, similarity_boost: 0.8 } });
  });

  it('a model setting overrides the catalog model; no voice settings, none sent', async () => {
    await speak(spec('hi', { voice: 'rachel', model: 'eleven_flash_v2_5' }));
    expect(fake.requests.at(-1)!.body).toEqual({ text: 'hi', model_id: 'eleven_flash_v2_5' });
  });

  it('an unknown voice: refused as invalid, naming the setting, not the upstream message', async () => {
    const err = await refusal(speak(spec('hi', { voice: 'nobody' })));
    expect(err).toMatchObject({ kind: 'refused', code: 'invalid_input', message: 'The provider does not know this voice (settings.voice).' });
  });

  it('no voice at all is refused before any call', async () => {
    const before = fake.requests.length;
    expect(await refusal(speak(spec('hi', {})))).toMatchObject({ kind: 'refused', code: 'invalid_input' });
    expect(fake.requests.length).toBe(before);
  });

  it('401 invalid_api_key: an operator problem; the key is in no error', async () => {
    const err = await refusal(speak(spec('hi'), make({ apiKey: 'xi-wrong-456' })));
    expect(err).toMatchObject({ kind: 'refused', code: 'provider_auth_failed' });
    expect(`${err.message} ${err.stack} ${JSON.stringify(err)}`).not.toContain('xi-wrong-456');
    expect(JSON.stringify(logged)).toContain('Invalid API key: [redacted]');
    expect(JSON.stringify(logged)).not.toContain('xi-wrong-456');
  });

  it('401 quota_exceeded: refused, the operator must top up', async () => {
    expect(await refusal(speak(spec('x [quota]')))).toMatchObject({ kind: 'refused', code: 'provider_quota_exceeded' });
  });

  it('429 with Retry-After: retryable after it', async () => {
    expect(await refusal(speak(spec('x [429]')))).toMatchObject({ kind: 'retryable', code: 'provider_rate_limited', retryAfterMs: 3000 });
  });

  it('a validation error (422, a detail list) and max_character_limit_exceeded (400): invalid input, upstream words not shown', async () => {
    expect(await refusal(speak(spec('x [422]')))).toMatchObject({ kind: 'refused', code: 'invalid_input', message: 'The provider refused the request as invalid.' });
    const tooLong = await refusal(speak(spec('x [too-long]')));
    expect(tooLong).toMatchObject({ kind: 'refused', code: 'invalid_input' });
    expect(tooLong.message).not.toContain('upstream-secret-detail');
  });

  it('429 system_busy without Retry-After: retryable, no delay of its own', async () => {
    const err = await refusal(speak(spec('x [busy]')));
    expect(err).toMatchObject({ kind: 'retryable', code: 'provider_rate_limited' });
    expect(err.retryAfterMs).toBeUndefined();
  });

  it('5xx: retryable; the upstream body only in the log', async () => {
    const err = await refusal(speak(spec('x [500]')));
    expect(err).toMatchObject({ kind: 'retryable', code: 'provider_unavailable' });
    expect(err.message).not.toContain('upstream-secret-detail');
    expect(JSON.stringify(logged)).toContain('upstream-secret-detail');
  });

  it('a hang: a time-out, retryable', async () => {
    expect(await refusal(speak(spec('x [hang]'), make({ timeoutMs: 300 })))).toMatchObject({ kind: 'retryable', code: 'provider_timeout' });
  });

  it('an answer past the size limit is cut off and refused', async () => {
    expect(await refusal(speak(spec('x [oversized]')))).toMatchObject({ kind: 'refused', code: 'result_too_large' });
  });

  it('an unreachable upstream is retryable', async () => {
    expect(await refusal(speak(spec('hi'), make({ baseUrl: 'http://127.0.0.1:9' })))).toMatchObject({ kind: 'retryable', code: 'provider_unavailable' });
  });

  it('a non-audio model is refused at submit', async () => {
    expect(await refusal(provider.submit({ ...spec('hi'), type: 'image' }, inputs))).toMatchObject({ kind: 'refused', code: 'invalid_input' });
  });
});
