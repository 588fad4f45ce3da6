import { context, trace } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { replicateProvider } from '../../adapters/providers/media/replicate.ts';
import { createMediaProviderRegistry } from '../../adapters/providers/registry.ts';
import { setTracing } from '../../core/telemetry.ts';
import { MediaProviderError, type InputReader, type MediaJobSpec, type MediaProvider } from '../../core/ports.ts';
import { startFakeReplicate, type FakeReplicate } from '../fakes/replicate-upstream.ts';

/**
 * The Replicate-style adapter against the fake predictions server: what the upstream says when
 * it refuses a call or fails a prediction goes to the operator's log (and the call's span), and
 * every failure the job sees is our code and our words.
 */
let fake: FakeReplicate;
let logged: { fields: Record<string, unknown>; message: string }[];
const inputs: InputReader = { read: async () => new Uint8Array(), url: (v) => v };
const SECRET = 'secret-internal-detail';

function provider(key = 'replicate-secret'): MediaProvider {
  return replicateProvider({
    baseUrl: fake.url,
    apiKey: key,
    timeoutMs: 5_000,
    download: async (url) => new Uint8Array(await (await fetch(url)).arrayBuffer()),
    log: { warn: (fields, message) => logged.push({ fields: fields as Record<string, unknown>, message }) },
  });
}

const spec = (version: string): MediaJobSpec => ({ jobId: `gen_${Math.random().toString(36).slice(2)}`, model: version, type: 'image', prompt: 'a red kite', settings: {}, inputs: {} });

async function refusal(promise: Promise<unknown>): Promise<MediaProviderError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(MediaProviderError);
  return err as MediaProviderError;
}

beforeAll(async () => {
  fake = await startFakeReplicate();
});
afterAll(async () => {
  await fake.close();
});
beforeEach(() => {
  logged = [];
});

describe('Replicate-style upstream errors', () => {
  it('a 5xx, a 429, a 422 and a refused key are our codes and words; the upstream body goes only to the log', async () => {
    const cases = [
      { version: 'broken', kind: 'retryable', code: 'provider_unavailable', status: 500 },
      { version: 'busy', kind: 'retryable', code: 'provider_rate_limited', status: 429 },
      { version: 'invalid', kind: 'refused', code: 'invalid_input', status: 422 },
    ] as const;
    for (const c of cases) {
      logged = [];
      const err = await refusal(provider().submit(spec(c.version), inputs));
      expect({ kind: err.kind, code: err.code }).toEqual({ kind: c.kind, code: c.code });
      expect(err.message).not.toContain(SECRET);
      expect(err.message).not.toMatch(/throttled|worker pool|less than or equal/);
      expect(logged).toHaveLength(1);
      expect(logged[0]!.fields).toMatchObject({ call: 'submit', status: c.status });
      expect(String(logged[0]!.fields.upstream_error)).toContain(SECRET);
    }
    // The 429's Retry-After (400 s) is what the step waits for, or finds past the job's deadline.
    expect((await refusal(provider().submit(spec('busy'), inputs))).retryAfterMs).toBe(400_000);

    logged = [];
    const auth = await refusal(provider('a-wrong-key').submit(spec('ok'), inputs));
    expect({ kind: auth.kind, code: auth.code }).toEqual({ kind: 'refused', code: 'provider_auth_failed' });
    expect(auth.message).not.toContain('Unauthenticated');
    expect(JSON.stringify(logged)).not.toContain('a-wrong-key');
  });

  it('a failed prediction: provider_failed in our words, the upstream reason in the log', async () => {
    const p = provider();
    const handle = await p.submit(spec('fail'), inputs);
    const state = await p.poll(handle);
    expect(state).toEqual({ status: 'failed', code: 'provider_failed', message: 'The provider failed to make the result. Nothing was charged.' });
    expect(logged.map((l) => l.message)).toEqual(['the upstream failed the prediction']);
    expect(logged[0]!.fields.upstream_error).toContain('NSFW content detected');
  });

  it('an unreachable upstream is retryable provider_unavailable, not the socket error', async () => {
    const down = replicateProvider({ baseUrl: 'http://127.0.0.1:9/v1', timeoutMs: 2_000, download: () => Promise.reject(new Error('no')) });
    const err = await refusal(down.submit(spec('ok'), inputs));
    expect({ kind: err.kind, code: err.code, message: err.message }).toEqual({ kind: 'retryable', code: 'provider_unavailable', message: 'The provider could not be reached.' });
  });
});

describe("the upstream's words in the trace", () => {
  let tracer: NodeTracerProvider;
  const exporter = new InMemorySpanExporter();
  beforeAll(() => {
    tracer = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
    tracer.register();
    setTracing({ on: true });
  });
  afterAll(async () => {
    setTracing({ on: false });
    await tracer.shutdown();
    trace.disable();
    context.disable();
  });

  const media = () =>
    createMediaProviderRegistry(
      { 'replicate-x': { kind: 'replicate', base_url: fake.url, api_key_env: 'X_REPLICATE_KEY', timeout_seconds: 5 } },
      { download: () => Promise.reject(new Error('no')), env: { X_REPLICATE_KEY: 'replicate-secret' }, log: { warn: (fields) => warned.push(fields) } },
    );
  let warned: unknown[] = [];

  it("a refused submit: the upstream body in the log; an event on the submit span naming the call, whose status is only the code; the body on it only with content capture", async () => {
    for (const capture of [false, true]) {
      setTracing({ on: true, captureContent: capture });
      warned = [];
      exporter.reset();
      const err = await refusal(media().get('replicate-x')!.submit(spec('broken'), inputs));
      expect(err.code).toBe('provider_unavailable');
      expect(warned).toEqual([expect.objectContaining({ provider: 'replicate-x', status: 500, upstream_error: expect.stringContaining(SECRET) })]);
      const span = exporter.getFinishedSpans().find((s) => s.name === 'generate_content submit')!;
      expect(span.status.message).toBe('provider_unavailable');
      const event = span.events.find((e) => e.name === 'the upstream refused a call')!;
      expect(event.attributes).toMatchObject({ 'mas.upstream.provider': 'replicate-x', 'mas.upstream.call': 'submit', 'mas.upstream.status': 500 });
      if (capture) expect(String(event.attributes!['mas.upstream.upstream_error'])).toContain(SECRET);
      else expect(JSON.stringify({ attributes: span.attributes, events: span.events, status: span.status })).not.toContain(SECRET);
    }
  });
});
