import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openaiCompatibleProvider } from '../../adapters/providers/openai-compatible.ts';
import { ProviderError, type ProviderEvent } from '../../core/ports.ts';

/**
 * What each upstream answer becomes in the openai-compatible adapter: the ProviderError kind
 * core fails over on, its delay, our words for the message, and the upstream's body in the
 * operator's log only. A local HTTP server answers as OpenAI-style upstreams do.
 */
type Reply = { status: number; headers?: Record<string, string>; body: string };
let reply: Reply;
let server: http.Server;
let url: string;
const logged: { fields: Record<string, unknown>; message: string }[] = [];

beforeAll(async () => {
  server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(reply.status, { 'content-type': 'application/json', ...reply.headers }).end(reply.body));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
});
afterAll(() => new Promise((r) => server.close(r)));

const provider = () => openaiCompatibleProvider({ baseUrl: url, apiKey: 'sk-operator-key', timeoutMs: 2000, log: (fields, message) => logged.push({ fields, message }) });

async function failure(r: Reply): Promise<ProviderError> {
  reply = r;
  logged.length = 0;
  try {
    for await (const _ of provider().stream({ model: 'm', messages: [{ role: 'user', content: 'hi' }], maxTokens: 5, options: {} }, new AbortController().signal)) void _;
  } catch (err) {
    expect(err).toBeInstanceOf(ProviderError);
    return err as ProviderError;
  }
  throw new Error('no failure');
}
const body = (error: Record<string, unknown>) => JSON.stringify({ error: { message: 'upstream secret words, key sk-operator-key', ...error } });

describe('openai-compatible: what each upstream error becomes', () => {
  it.each([
    [{ status: 429, headers: { 'retry-after': '3' }, body: body({}) }, { kind: 'failed', status: 429, retryAfterMs: 3000, retryable: true }],
    [{ status: 429, headers: { 'retry-after-ms': '250', 'retry-after': '9' }, body: body({}) }, { kind: 'failed', retryAfterMs: 250 }],
    [{ status: 429, body: body({}) }, { kind: 'failed', retryAfterMs: undefined }],
    [{ status: 503, headers: { 'retry-after': '2' }, body: body({}) }, { kind: 'failed', status: 503, retryAfterMs: 2000, message: 'it is overloaded' }],
    [{ status: 529, body: body({ type: 'overloaded_error' }) }, { kind: 'failed', message: 'it is overloaded' }],
    [{ status: 500, body: body({}) }, { kind: 'failed', message: 'it answered with an error (500)' }],
    [{ status: 401, body: body({}) }, { kind: 'failed', message: "it refused this service's key" }],
    [{ status: 403, body: body({}) }, { kind: 'failed', status: 403 }],
    [{ status: 404, body: body({ code: 'model_not_found' }) }, { kind: 'failed', message: 'it does not know the model' }],
    [{ status: 400, body: body({ code: 'content_policy_violation' }) }, { kind: 'refused', code: 'content_policy', retryable: false }],
    [{ status: 400, body: body({ code: 'content_filter' }) }, { kind: 'refused', code: 'content_policy' }],
    [{ status: 422, body: body({ type: 'content_filter' }) }, { kind: 'refused', code: 'content_policy' }],
    [{ status: 400, body: body({ code: 'invalid_value' }) }, { kind: 'refused', code: 'invalid_input', message: 'it refused the request as invalid' }],
    [{ status: 413, body: 'too large' }, { kind: 'refused', code: 'invalid_input' }],
    [{ status: 422, body: body({}) }, { kind: 'refused', code: 'invalid_input' }],
  ] as [Reply, Record<string, unknown>][])('%o → %o', async (r, expected) => {
    const err = await failure(r);
    expect(err).toMatchObject(expected);
    expect(err.message).not.toMatch(/secret|sk-operator/);
    expect(logged).toHaveLength(1);
    expect(logged[0]!.fields).toMatchObject({ status: r.status });
    // The body reaches the operator's log, with the key blanked.
    expect(String(logged[0]!.fields.upstreamBody)).toContain(r.body.includes('upstream secret') ? 'upstream secret words' : r.body);
    expect(JSON.stringify(logged)).not.toContain('sk-operator-key');
  });

  it('a Retry-After as an HTTP date', async () => {
    const err = await failure({ status: 429, headers: { 'retry-after': new Date(Date.now() + 60_000).toUTCString() }, body: body({}) });
    expect(err.retryAfterMs).toBeGreaterThan(50_000);
    expect(err.retryAfterMs).toBeLessThanOrEqual(60_000);
  });

  it('an error event in the stream: overloaded is a retryable failure, a content filter a refusal; the text stays in the log', async () => {
    const sse = (error: Record<string, unknown>) => ({ status: 200, headers: { 'content-type': 'text/event-stream' }, body: `data: ${JSON.stringify({ error: { message: 'upstream secret words', ...error } })}\n\n` });
    expect(await failure(sse({ type: 'overloaded_error' }))).toMatchObject({ kind: 'failed', message: 'it is overloaded' });
    expect(await failure(sse({ code: 'content_filter' }))).toMatchObject({ kind: 'refused', code: 'content_policy' });
    const other = await failure(sse({ type: 'server_error' }));
    expect(other).toMatchObject({ kind: 'failed', message: 'it failed while answering' });
    expect(String(logged[0]!.fields.upstreamBody)).toContain('upstream secret words');
  });

  it('a refused connection: a failure in our words, with no address', async () => {
    const closed = openaiCompatibleProvider({ baseUrl: 'http://127.0.0.1:1/v1', timeoutMs: 2000, log: (fields, message) => logged.push({ fields, message }) });
    logged.length = 0;
    const err = await (async () => {
      for await (const _ of closed.stream({ model: 'm', messages: [], maxTokens: 5, options: {} }, new AbortController().signal)) void _;
    })().catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: 'failed', status: undefined, message: 'it could not be reached' });
    expect(logged[0]).toMatchObject({ message: 'chat upstream: unreachable' });
  });

  it("reads usage.cost (USD) from the usage chunk; a negative or missing one is left out", async () => {
    const events = async (usage: Record<string, unknown>) => {
      reply = {
        status: 200,
        headers: { 'content-type': 'text/event-stream' },
        body: `data: ${JSON.stringify({ choices: [{ delta: { content: 'x' }, finish_reason: 'stop' }] })}\n\ndata: ${JSON.stringify({ choices: [], usage })}\n\ndata: [DONE]\n\n`,
      };
      const out: ProviderEvent[] = [];
      for await (const e of provider().stream({ model: 'm', messages: [], maxTokens: 5, options: {} }, new AbortController().signal)) out.push(e);
      return out.filter((e) => e.type === 'usage');
    };
    expect(await events({ prompt_tokens: 3, completion_tokens: 1, cost: 0.0001 })).toEqual([{ type: 'usage', promptTokens: 3, completionTokens: 1, costUsd: 0.0001 }]);
    expect(await events({ prompt_tokens: 3, completion_tokens: 1, cost: -1 })).toEqual([{ type: 'usage', promptTokens: 3, completionTokens: 1 }]);
    expect(await events({ prompt_tokens: 3, completion_tokens: 1 })).toEqual([{ type: 'usage', promptTokens: 3, completionTokens: 1 }]);
  });
});
