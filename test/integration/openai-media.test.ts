import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { seedModels, validateCatalog } from '../../core/catalog/catalog.ts';
import { randomBase62 } from '../../core/ids.ts';
import { png, seededRandom } from '../../adapters/providers/media/formats.ts';
import { startFakeElevenLabs, type FakeElevenLabs } from '../fakes/elevenlabs-upstream.ts';
import { FAKE_MP3, FAKE_MP4, startFakeOpenAIMedia, type FakeOpenAIMedia } from '../fakes/openai-media-upstream.ts';
import { makeAccount, makeKey } from '../support/db.ts';
import { bearer, getJson } from '../support/http.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';
import { capturedFor, expectSettledWallet } from '../support/ledger.ts';

/**
 * OpenAI (images, Sora video) and ElevenLabs jobs end to end: the REST API, a real Temporal
 * worker, the adapters against the mocks, and the ledger.
 */
let h: JobHarness;
let orm: MikroORM;
let openai: FakeOpenAIMedia;
let eleven: FakeElevenLabs;
let base: string;
const tag = randomBase62(6).toLowerCase();
const IMAGE = `test/oai-image-${tag}`;
const VIDEO = `test/oai-sora-${tag}`;
const VOICE = `test/eleven-${tag}`;

beforeAll(async () => {
  openai = await startFakeOpenAIMedia();
  eleven = await startFakeElevenLabs();
  const providers = {
    'openai-fake': { kind: 'openai', base_url: openai.url, api_key_env: 'FAKE_OPENAI_KEY', timeout_seconds: 5, max_result_mb: 16 },
    'elevenlabs-fake': { kind: 'elevenlabs', base_url: eleven.url, api_key_env: 'FAKE_ELEVENLABS_KEY', timeout_seconds: 5, max_result_mb: 16 },
  } as const;
  h = await startJobHarness({ mediaProviders: providers });
  ({ orm, base } = h);
  const catalog = validateCatalog(
    {
      providers,
      models: [
        {
          id: IMAGE,
          name: 'gpt-image-1 (mock)',
          type: 'image',
          generation_types: ['text-to-image', 'image-to-image'],
          provider: { name: 'openai-fake', model: 'gpt-image-1' },
          settings: {
            size: { type: 'enum', options: ['1024x1024', '1536x1024', '1024x1536'], default: '1024x1024' },
            quality: { type: 'enum', options: ['low', 'medium', 'high'], default: 'medium' },
          },
          inputs: { image: { accepts: ['image'] } },
          pricing: { base: 1, factors: { quality: { low: 11, medium: 42, high: 167 }, size: { '1024x1024': 1, '1536x1024': 1.5, '1024x1536': 1.5 } } },
          deadline_seconds: 120,
        },
        {
          id: VIDEO,
          name: 'Sora 2 (mock)',
          type: 'video',
          generation_types: ['text-to-video'],
          provider: { name: 'openai-fake', model: 'sora-2' },
          settings: { seconds: { type: 'enum', options: [4, 8, 12], default: 4 }, size: { type: 'enum', options: ['720x1280', '1280x720'], default: '720x1280' } },
          pricing: { base: 0, per_unit: { seconds: 100 } },
          deadline_seconds: 120,
        },
        {
          id: VOICE,
          name: 'ElevenLabs Multilingual v2 (mock)',
          type: 'audio',
          generation_types: ['text-to-speech'],
          provider: { name: 'elevenlabs-fake', model: 'eleven_multilingual_v2' },
          settings: { voice: { type: 'enum', options: ['rachel'], default: 'rachel' } },
          pricing: { base: 30 },
          deadline_seconds: 120,
        },
      ],
    },
    50n,
  );
  await seedModels(orm.em.fork(), catalog);
});
afterAll(async () => {
  await h.close();
  await openai.close();
  await eleven.close();
});

async function run(model: string, prompt: string, settings: Record<string, unknown> = {}, upload?: Uint8Array) {
  const account = await makeAccount(orm, { coins: '1000' });
  const { key } = await makeKey(orm, account.id);
  let inputs = {};
  if (upload) {
    const form = new FormData();
    form.append('file', new Blob([upload]), 'photo.png');
    const file = await getJson(`${base}/api/v1/files`, { method: 'POST', headers: bearer(key), body: form });
    expect(file.status).toBe(200);
    inputs = { image: file.body.id as string };
  }
  const res = await getJson(`${base}/api/v1/generations`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt, settings, inputs }),
  });
  expect(res.status).toBe(202);
  return { account, key, id: res.body.id as string, price: res.body.price_coins as number };
}

async function ended(key: string, id: string) {
  let job: any;
  await vi.waitFor(
    async () => {
      job = (await getJson(`${base}/api/v1/generations/${id}`, { headers: bearer(key) })).body;
      expect(['succeeded', 'failed', 'canceled']).toContain(job.status);
    },
    { timeout: 45_000, interval: 100 },
  );
  return job;
}

async function resultBytes(job: any): Promise<Buffer> {
  const url = new URL(job.output.url);
  return Buffer.from(await (await fetch(`${base}${url.pathname}${url.search}`)).arrayBuffer());
}

async function refundedOnce(accountId: string, id: string) {
  expect(await capturedFor(orm, id)).toBe(0n);
  const [row] = await orm.em.fork().execute<{ n: string }[]>(`select count(*)::text as n from ledger_entries where reference = ? and kind = 'release' and pocket = 'held'`, [id]);
  expect(Number(row!.n)).toBe(1);
  expect((await expectSettledWallet(orm, accountId)).balance.purchased).toBe(1_000_000_000n);
}

const calls = (prompt: string) => openai.requests.filter((r) => (r.json?.prompt ?? r.form?.prompt) === prompt).length;

describe('OpenAI image jobs', () => {
  it('size and quality drive the price; succeeds with the decoded PNG, charged once at that price', async () => {
    const { account, key, id, price } = await run(IMAGE, 'a lighthouse at dusk', { size: '1024x1536', quality: 'high' });
    // 1 × 167 (high) × 1.5 (portrait) = 250.5 in-app, at the API's 50%.
    expect(price).toBe(125.25);
    const job = await ended(key, id);
    expect(job).toMatchObject({ status: 'succeeded', cost_coins: price, output: { mime_type: 'image/png' } });
    expect((await resultBytes(job)).subarray(1, 4).toString()).toBe('PNG');
    expect(await capturedFor(orm, id)).toBe(125_250_000n);
    expect(calls('a lighthouse at dusk')).toBe(1);
    await expectSettledWallet(orm, account.id);
  });

  it('an edit: the uploaded file is read from storage in the result step and sent to /images/edits as a multipart file', async () => {
    const photo = png(6, 6, seededRandom(Buffer.from(tag)));
    const prompt = `make it night ${tag}`;
    const { account, key, id, price } = await run(IMAGE, prompt, { quality: 'low' }, photo);
    const job = await ended(key, id);
    expect(job).toMatchObject({ status: 'succeeded', cost_coins: price });
    const sent = openai.requests.find((r) => r.path === '/v1/images/edits' && r.form?.prompt === prompt);
    expect(sent?.form).toMatchObject({ model: 'gpt-image-1', quality: 'low', image: { bytes: photo.length } });
    await expectSettledWallet(orm, account.id);
  });

  it('a content-policy refusal: failed in our words, not retried, refunded once', async () => {
    const prompt = `a forbidden thing [policy] ${tag}`;
    const { account, key, id } = await run(IMAGE, prompt);
    const job = await ended(key, id);
    expect(job).toMatchObject({ status: 'failed', cost_coins: 0, error: { code: 'content_policy', message: 'The provider refused the prompt under its content policy.' } });
    expect(JSON.stringify(job)).not.toContain('upstream-secret-detail');
    expect(calls(prompt)).toBe(1);
    await refundedOnce(account.id, id);
  });

  it('a 429 with Retry-After: 3 is retried after 3 s, not sooner, then succeeds, charged once', async () => {
    const prompt = `busy [429once] ${tag}`;
    const { account, key, id, price } = await run(IMAGE, prompt, { quality: 'low' });
    const job = await ended(key, id);
    expect(job).toMatchObject({ status: 'succeeded', cost_coins: price });
    const [first, second] = openai.requests.filter((r) => r.json?.prompt === prompt);
    // Temporal's own first retry would come after 1 s: the 3 s are the upstream's Retry-After.
    expect(second!.at - first!.at).toBeGreaterThanOrEqual(2900);
    expect(calls(prompt)).toBe(2);
    expect(await capturedFor(orm, id)).toBe(BigInt(Math.round(price * 1e6)));
    await expectSettledWallet(orm, account.id);
  });
});

describe('OpenAI Sora video jobs', () => {
  it('created, polled to completed, downloaded; charged once per the seconds setting', async () => {
    const prompt = `a kite over the sea ${tag}`;
    const { account, key, id, price } = await run(VIDEO, prompt, { seconds: 8, size: '1280x720' });
    expect(price).toBe(400);
    const job = await ended(key, id);
    expect(job).toMatchObject({ status: 'succeeded', cost_coins: 400, output: { mime_type: 'video/mp4' } });
    expect((await resultBytes(job)).equals(FAKE_MP4)).toBe(true);
    expect([...openai.videos.values()].find((v) => v.prompt === prompt)?.fields).toMatchObject({ seconds: '8', size: '1280x720', model: 'sora-2' });
    expect(await capturedFor(orm, id)).toBe(400_000_000n);
    await expectSettledWallet(orm, account.id);
  });

  it('a failed video: failed, refunded once', async () => {
    const { account, key, id } = await run(VIDEO, `x [video-fail] ${tag}`);
    const job = await ended(key, id);
    expect(job).toMatchObject({ status: 'failed', cost_coins: 0, error: { code: 'provider_failed' } });
    await refundedOnce(account.id, id);
  });

  it('cancel reaches the mock: the video is deleted upstream, once', async () => {
    const prompt = `x [video-slow] ${tag}`;
    const { account, key, id } = await run(VIDEO, prompt);
    await vi.waitFor(() => expect([...openai.videos.values()].some((v) => v.prompt === prompt && v.status === 'in_progress')).toBe(true), { timeout: 20_000 });
    const videoId = [...openai.videos.values()].find((v) => v.prompt === prompt)!.id;
    const canceled = await getJson(`${base}/api/v1/generations/${id}/cancel`, { method: 'POST', headers: bearer(key) });
    expect(canceled.body.status).toBe('canceled');
    await vi.waitFor(() => expect(openai.deletes).toContain(videoId), { timeout: 15_000 });
    await new Promise((r) => setTimeout(r, 1000));
    expect(openai.deletes.filter((d) => d === videoId)).toHaveLength(1);
    await refundedOnce(account.id, id);
  });
});

describe('ElevenLabs jobs', () => {
  it('speaks with the voice setting; the audio is stored; charged once', async () => {
    const prompt = `Hello from the ledger ${tag}`;
    const { account, key, id, price } = await run(VOICE, prompt);
    const job = await ended(key, id);
    expect(job).toMatchObject({ status: 'succeeded', cost_coins: price, output: { mime_type: 'audio/mpeg' } });
    expect((await resultBytes(job)).equals(FAKE_MP3)).toBe(true);
    const sent = eleven.requests.find((r) => r.body.text === prompt)!;
    expect(sent).toMatchObject({ path: '/v1/text-to-speech/rachel', body: { model_id: 'eleven_multilingual_v2' } });
    expect(await capturedFor(orm, id)).toBe(15_000_000n);
    await expectSettledWallet(orm, account.id);
  });

  it('out of quota upstream: failed with our words, refunded once', async () => {
    const { account, key, id } = await run(VOICE, `x [quota] ${tag}`);
    const job = await ended(key, id);
    expect(job).toMatchObject({ status: 'failed', cost_coins: 0, error: { code: 'provider_quota_exceeded' } });
    expect(job.error.message).not.toContain('credits remaining');
    await refundedOnce(account.id, id);
  });
});
