import type { MikroORM } from '@mikro-orm/postgresql';
import { context, SpanKind, trace } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createLogger } from '../../config/logger.ts';
import { setTracing, tracingOn } from '../../core/telemetry.ts';
import { release, reserve, settle } from '../../core/money/holds.ts';
import { HoldBatcher } from '../../core/money/hold-batcher.ts';
import { statementPool } from '../../adapters/db/statement-pool.ts';
import { parseCoins } from '../../core/money/coins.ts';
import type { GenerationStarter } from '../../core/ports.ts';
import { tracingConfigured } from '../../config/telemetry.ts';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.ts';
import { useTestCatalog } from '../support/catalog.ts';
import { chargesWritten, makeAccount, makeKey, openTestOrm } from '../support/db.ts';
import { startTestApi } from '../support/http.ts';

/**
 * Tracing on, against the SDK's in-memory exporter (the real Jaeger run is `npm run
 * test:observability`): the spans of a chat through the real REST app, the MCP connector
 * link's route with its key nowhere in a span, and /metrics' GenAI, holds and spend series.
 */
let orm: MikroORM;
let upstream: FakeUpstream;
let api: Awaited<ReturnType<typeof startTestApi>>;
let provider: NodeTracerProvider;
const exporter = new InMemorySpanExporter();

beforeAll(async () => {
  provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  provider.register();
  setTracing({ on: true });
  orm = await openTestOrm();
  upstream = await startFakeUpstream();
  const providers = await useTestCatalog(orm, upstream.url);
  // Built with tracing on: the server span middleware is mounted.
  api = await startTestApi(orm, { providers });
});
afterAll(async () => {
  await api.close();
  await upstream.close();
  await orm.close();
  setTracing({ on: false });
  await provider.shutdown();
  trace.disable();
  context.disable();
});

const attr = (s: ReadableSpan, k: string) => s.attributes[k];

async function chat(key: string, model = 'test/ok') {
  const res = await fetch(`${api.url}/api/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', cookie: 'mas_session=COOKIESECRET' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 20 }),
  });
  return { status: res.status, body: (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } } };
}

describe('tracing on', () => {
  it('a chat is one trace: server span by route, core procedure with the caller, reservation, upstream call with GenAI attributes, settle with its cost', async () => {
    const account = await makeAccount(orm, { coins: '10' });
    const { key, id: keyId } = await makeKey(orm, account.id);
    exporter.reset();
    const { status, body } = await chat(key);
    expect(status).toBe(200);
    await vi.waitFor(() => expect(exporter.getFinishedSpans().some((s) => s.name === 'POST /api/v1/chat/completions')).toBe(true));
    // The settle's span ends when the charge is written, behind the answer.
    await chargesWritten();
    const spans = exporter.getFinishedSpans();
    const server = spans.find((s) => s.name === 'POST /api/v1/chat/completions')!;
    const traceId = server.spanContext().traceId;
    const inTrace = spans.filter((s) => s.spanContext().traceId === traceId);
    expect(attr(server, 'http.route')).toBe('/api/v1/chat/completions');
    expect(attr(server, 'http.response.status_code')).toBe(200);
    const core = inTrace.find((s) => s.name === 'core chat.complete')!;
    expect(core.parentSpanId).toBe(server.spanContext().spanId);
    expect(attr(core, 'mas.account_id')).toBe(account.id);
    expect(attr(core, 'mas.key_id')).toBe(keyId);
    const reserve = inTrace.find((s) => s.name === 'mas_reserve_many')!;
    expect(attr(reserve, 'db.system.name')).toBe('postgresql');
    expect(attr(reserve, 'mas.account_id')).toBe(account.id);
    const up = inTrace.find((s) => s.name === 'chat ok')!;
    expect(up.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'fake',
      'gen_ai.request.model': 'ok',
      'gen_ai.response.model': 'ok',
      // What the upstream reported (the fake's `ok`: 11 and 5); the bill clamps it to our own count of the input.
      'gen_ai.usage.input_tokens': 11,
      'gen_ai.usage.output_tokens': 5,
      'mas.route': 'fake/ok',
    });
    expect(up.attributes['gen_ai.input.messages']).toBeUndefined();
    const settle = inTrace.find((s) => s.name === 'mas_end_hold_many')!;
    expect(attr(settle, 'mas.hold.outcome')).toBe('settled');
    expect(attr(settle, 'mas.cost_coins')).toBeGreaterThan(0);
    expect(body.usage.completion_tokens).toBe(5);
    // Nothing secret in any span: the key, the upstream's key, the cookie.
    const dump = JSON.stringify(spans.map((s) => ({ name: s.name, attributes: s.attributes, events: s.events, status: s.status })));
    for (const secret of [key, 'upstream-secret', 'COOKIESECRET']) expect(dump).not.toContain(secret);
  });

  it('an upstream failure marks the upstream span with its error type, never its message', async () => {
    const account = await makeAccount(orm, { coins: '10' });
    const { key } = await makeKey(orm, account.id);
    exporter.reset();
    const { status } = await chat(key, 'test/error');
    expect(status).toBeGreaterThanOrEqual(500);
    await vi.waitFor(() => expect(exporter.getFinishedSpans().some((s) => s.name === 'chat error')).toBe(true));
    const up = exporter.getFinishedSpans().find((s) => s.name === 'chat error')!;
    expect(up.status.code).toBe(2);
    expect(typeof attr(up, 'error.type')).toBe('string');
    expect(up.events).toEqual([]);
    const core = exporter.getFinishedSpans().find((s) => s.name === 'core chat.complete')!;
    expect(attr(core, 'error.type')).toMatch(/^upstream_/);
  });

  it('OTEL_GENAI_CAPTURE_CONTENT puts the prompt and the completion on the upstream span, streamed or not; off, neither', async () => {
    const account = await makeAccount(orm, { coins: '10' });
    const { key } = await makeKey(orm, account.id);
    const upstreamSpans = async (stream: boolean) => {
      exporter.reset();
      const res = await fetch(`${api.url}/api/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'test/ok', stream, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 20 }),
      });
      const text = await res.text();
      expect(res.status).toBe(200);
      await vi.waitFor(() => expect(exporter.getFinishedSpans().some((s) => s.name === 'chat ok')).toBe(true));
      return { span: exporter.getFinishedSpans().find((s) => s.name === 'chat ok')!, text };
    };
    try {
      setTracing({ on: true, captureContent: true });
      for (const stream of [false, true]) {
        const { span, text } = await upstreamSpans(stream);
        expect(JSON.parse(String(attr(span, 'gen_ai.input.messages')))).toEqual([{ role: 'user', content: 'Say hello' }]);
        const [output] = JSON.parse(String(attr(span, 'gen_ai.output.messages'))) as { role: string; parts: { content: string }[] }[];
        expect(output!.role).toBe('assistant');
        // What the customer got is what the span recorded.
        const words = output!.parts[0]!.content.split(' ').filter(Boolean);
        expect(words.length).toBeGreaterThan(0);
        for (const w of words) expect(text).toContain(w);
      }
    } finally {
      setTracing({ on: true });
    }
    const { span } = await upstreamSpans(true);
    expect(attr(span, 'gen_ai.input.messages')).toBeUndefined();
    expect(attr(span, 'gen_ai.output.messages')).toBeUndefined();
  });

  it('a single reservation and its end (the media path) are database spans with their ids and amounts', async () => {
    const account = await makeAccount(orm, { coins: '10' });
    exporter.reset();
    const em = orm.em.fork();
    const soon = () => new Date(Date.now() + 60_000);
    const kept = await reserve(em, { accountId: account.id, amount: parseCoins('2'), reference: 'job_a', expiresAt: soon() });
    await settle(em, kept.holdId, parseCoins('1.5'));
    const given = await reserve(em, { accountId: account.id, amount: parseCoins('1'), reference: 'job_b', expiresAt: soon() });
    await release(em, given.holdId);
    const spans = exporter.getFinishedSpans();
    const reserves = spans.filter((s) => s.name === 'mas_reserve');
    expect(reserves.map((s) => s.attributes)).toEqual([
      expect.objectContaining({ 'db.system.name': 'postgresql', 'db.operation.name': 'mas_reserve', 'mas.hold_id': kept.holdId, 'mas.account_id': account.id, 'mas.reserved_coins': 2, 'mas.reference': 'job_a' }),
      expect.objectContaining({ 'mas.hold_id': given.holdId, 'mas.reserved_coins': 1, 'mas.reference': 'job_b' }),
    ]);
    const ends = spans.filter((s) => s.name === 'mas_end_hold');
    expect(ends.map((s) => s.attributes)).toEqual([
      expect.objectContaining({ 'db.operation.name': 'mas_end_hold', 'mas.hold_id': kept.holdId, 'mas.hold.outcome': 'settled', 'mas.cost_coins': 1.5 }),
      expect.objectContaining({ 'mas.hold_id': given.holdId, 'mas.hold.outcome': 'released', 'mas.cost_coins': 0 }),
    ]);
    for (const s of [...reserves, ...ends]) expect(s.kind).toBe(SpanKind.CLIENT);
  });

  it('a batched settle and release (the chat path) are database spans with their hold ids, outcomes and amounts', async () => {
    const account = await makeAccount(orm, { coins: '10' });
    const pool = statementPool(orm, { max: 2 });
    try {
      const holds = new HoldBatcher(pool.execute);
      const soon = () => new Date(Date.now() + 60_000);
      const kept = await holds.reserve({ accountId: account.id, amount: parseCoins('2'), reference: 'chatcmpl-a', expiresAt: soon() });
      const given = await holds.reserve({ accountId: account.id, amount: parseCoins('1'), reference: 'chatcmpl-b', expiresAt: soon() });
      exporter.reset();
      await holds.settle(kept.holdId, parseCoins('0.5'));
      await holds.release(given.holdId);
      const ends = exporter.getFinishedSpans().filter((s) => s.name === 'mas_end_hold_many');
      expect(ends.map((s) => s.attributes)).toEqual([
        expect.objectContaining({ 'db.operation.name': 'mas_end_hold_many', 'mas.hold_id': kept.holdId, 'mas.hold.outcome': 'settled', 'mas.cost_coins': 0.5 }),
        expect.objectContaining({ 'db.operation.name': 'mas_end_hold_many', 'mas.hold_id': given.holdId, 'mas.hold.outcome': 'released', 'mas.cost_coins': 0 }),
      ]);
      for (const s of ends) expect(s.kind).toBe(SpanKind.CLIENT);
    } finally {
      await pool.close();
    }
  });

  it("a job's submit names the job on its core span and stores the request's trace id on the job row", async () => {
    const account = await makeAccount(orm, { coins: '10' });
    const { key } = await makeKey(orm, account.id);
    const starter: GenerationStarter = { start: async (job) => `run-${job.jobId}`, cancel: async () => undefined, state: async () => 'open' as never, deliverWebhook: async () => undefined };
    const jobsApi = await startTestApi(orm, { generations: starter });
    try {
      exporter.reset();
      const res = await fetch(`${jobsApi.url}/api/v1/generations`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'test/image', prompt: 'a lighthouse' }),
      });
      const job = (await res.json()) as { id: string };
      expect(res.status).toBe(202);
      await vi.waitFor(() => expect(exporter.getFinishedSpans().some((s) => s.name === 'POST /api/v1/generations')).toBe(true));
      const server = exporter.getFinishedSpans().find((s) => s.name === 'POST /api/v1/generations')!;
      const core = exporter.getFinishedSpans().find((s) => s.name === 'core generations.create')!;
      expect(attr(core, 'mas.job_id')).toBe(job.id);
      expect(core.spanContext().traceId).toBe(server.spanContext().traceId);
      const [row] = await orm.em.fork().execute<{ trace_id: string | null }[]>('select trace_id from generations where id = ?', [job.id]);
      expect(row!.trace_id).toBe(server.spanContext().traceId);
    } finally {
      await jobsApi.close();
    }
  });

  it("the MCP connector link is traced under its route: the key is in no span's name or attributes", async () => {
    const account = await makeAccount(orm, { coins: '10' });
    const { key } = await makeKey(orm, account.id);
    exporter.reset();
    await fetch(`${api.url}/api/v1/mcp/${key}?k=${key}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }),
    }).then((r) => r.text());
    await vi.waitFor(() => expect(exporter.getFinishedSpans().some((s) => s.name === 'POST /api/v1/mcp/:key')).toBe(true));
    const server = exporter.getFinishedSpans().find((s) => s.name === 'POST /api/v1/mcp/:key')!;
    expect(attr(server, 'url.path')).toBe('/api/v1/mcp/[redacted]');
    expect(JSON.stringify(exporter.getFinishedSpans().map((s) => [s.name, s.attributes]))).not.toContain(key.slice(4));
  });

  it('log lines written inside a span carry its trace_id and span_id', () => {
    const lines: Record<string, unknown>[] = [];
    const before = process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
    process.env.OTEL_EXPORTER_OTLP_ENDPOINT = 'http://127.0.0.1:9';
    try {
      expect(tracingConfigured()).toBe(true);
      const logger = createLogger('info', { write: (s: string) => void lines.push(JSON.parse(s)) });
      logger.info('outside');
      trace.getTracer('t').startActiveSpan('inside', (span) => {
        logger.info('inside');
        span.end();
        expect(lines[1]).toMatchObject({ msg: 'inside', trace_id: span.spanContext().traceId, span_id: span.spanContext().spanId });
      });
      expect(lines[0]!.trace_id).toBeUndefined();
    } finally {
      if (before === undefined) delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
      else process.env.OTEL_EXPORTER_OTLP_ENDPOINT = before;
    }
  });

  it('/metrics has the GenAI series, upstream errors, holds open and spend', async () => {
    const first = await (await fetch(`${api.url}/metrics`)).text();
    expect(first).toMatch(/^gen_ai_client_operation_duration_seconds_count\{gen_ai_operation_name="chat",gen_ai_provider_name="fake",gen_ai_request_model="ok",error_type=""\} [1-9]/m);
    expect(first).toMatch(/^gen_ai_client_token_usage_sum\{gen_ai_operation_name="chat",gen_ai_provider_name="fake",gen_ai_request_model="ok",gen_ai_token_type="input"\} [1-9]/m);
    expect(first).toMatch(/^gen_ai_server_time_to_first_token_seconds_count\{.*gen_ai_request_model="ok"\} [1-9]/m);
    expect(first).toMatch(/^mas_upstream_errors_total\{provider="fake",route="fake\/error",error_type="[\w.-]+"\} [1-9]/m);
    expect(first).toMatch(/^mas_holds_open \d+$/m);
    expect(first).toMatch(/^mas_jobs_queued \d+$/m);
    expect(first).toMatch(/^# TYPE mas_job_run_time_seconds histogram$/m);
    // Spend counts the captures after the first scrape.
    const account = await makeAccount(orm, { coins: '10' });
    await chat((await makeKey(orm, account.id)).key);
    // Its charge is written behind the answer; /metrics reads what is written.
    await chargesWritten();
    const second = await (await fetch(`${api.url}/metrics`)).text();
    expect(Number(/^mas_spent_coins_total (\S+)$/m.exec(second)?.[1])).toBeGreaterThan(0);
  });
});

describe('tracing off', () => {
  it('is off without OTEL_EXPORTER_OTLP_ENDPOINT, or with OTEL_SDK_DISABLED', () => {
    expect(tracingConfigured({})).toBe(false);
    expect(tracingConfigured({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x:4318', OTEL_SDK_DISABLED: 'true' })).toBe(false);
    expect(tracingConfigured({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://x:4318/v1/traces' })).toBe(true);
    setTracing({ on: false });
    expect(tracingOn()).toBe(false);
    setTracing({ on: true });
  });
});
