import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { restAdapter } from '../../adapters/rest/rest.ts';
import { png, seededRandom } from '../../adapters/providers/media/formats.ts';
import { makeAccount, makeKey, silentLogger, testDeps } from '../support/db.ts';
import { bearer } from '../support/http.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';

/**
 * The OpenAPI document stays current (every route of the REST API is in it, and nothing
 * else), and real responses match it.
 */
let h: JobHarness;
let doc: any;
beforeAll(async () => {
  h = await startJobHarness();
  doc = await (await fetch(`${h.base}/api/v1/openapi.json`)).json();
});
afterAll(() => h.close());

/** Every (method, path) the express app serves under /api/v1, in OpenAPI's path syntax. */
function servedRoutes(): string[] {
  const { router } = restAdapter(testDeps(h.orm), { logger: silentLogger, publicBaseUrl: 'http://localhost' });
  const out = new Set<string>();
  const walk = (stack: any[]) => {
    for (const layer of stack) {
      if (layer.route) {
        for (const method of Object.keys(layer.route.methods).filter((m) => m !== '_all')) {
          out.add(`${method} ${String(layer.route.path).replace(/\/\*(\w+)/g, '/{$1}').replace(/:(\w+)/g, '{$1}')}`);
        }
      } else if (layer.handle?.stack) walk(layer.handle.stack);
    }
  };
  walk(router.stack);
  for (const ops of ['get /healthz', 'get /readyz', 'get /metrics']) out.delete(ops);
  return [...out].sort();
}

describe('OpenAPI document', () => {
  it('is OpenAPI 3.1 with the bearer scheme and the error shape', () => {
    expect(doc.openapi).toBe('3.1.0');
    expect(doc.components.securitySchemes.bearerAuth).toMatchObject({ type: 'http', scheme: 'bearer' });
    expect(doc.components.schemas.Error.properties.error.required.sort()).toEqual(['code', 'message', 'param', 'type']);
    expect(doc.paths['/openapi.json'].get.security).toEqual([]);
  });

  it('lists exactly the routes the REST API serves', () => {
    const documented = Object.entries(doc.paths).flatMap(([p, ops]) => Object.keys(ops as object).map((m) => `${m} ${p}`)).sort();
    expect(documented).toEqual(servedRoutes());
  });

  it('gives every operation a unique operationId', () => {
    const ids = Object.values(doc.paths).flatMap((ops) => Object.values(ops as Record<string, any>).map((op) => op.operationId));
    for (const id of ids) expect(id).toMatch(/^[a-z][A-Za-z]+$/);
    expect(new Set(ids).size).toBe(ids.length);
  });

  /** The links schemathesis's stateful phase follows (`npm run test:schema`), as `source status -> target`. */
  it('links each created or listed object to the operations that take its id, by real operationIds and real fields', () => {
    const operations = new Map<string, any>();
    for (const [p, ops] of Object.entries(doc.paths)) for (const [m, op] of Object.entries(ops as Record<string, any>)) operations.set(op.operationId, { ...op, key: `${m} ${p}` });
    const found: string[] = [];
    for (const source of operations.values()) {
      for (const [status, response] of Object.entries(source.responses as Record<string, any>)) {
        for (const link of Object.values((response.links ?? {}) as Record<string, any>)) {
          const target = operations.get(link.operationId);
          expect(target, `${source.operationId} ${status} links to ${link.operationId}, an operation of the document`).toBeDefined();
          const pathParams = (target.parameters ?? []).filter((p: any) => p.in === 'path').map((p: any) => p.name);
          const bodyProps = Object.keys(target.requestBody?.content?.['application/json']?.schema?.properties ?? {});
          const uses = [
            ...Object.entries((link.parameters ?? {}) as Record<string, string>).map(([name, expression]) => ({ name, expression, takes: pathParams })),
            ...Object.entries((link.requestBody ?? {}) as Record<string, string>).map(([name, expression]) => ({ name, expression, takes: bodyProps })),
          ];
          expect(uses.length, `${source.operationId} ${status} -> ${link.operationId} passes something`).toBeGreaterThan(0);
          for (const { name, expression, takes } of uses) {
            expect(takes, `${link.operationId} takes ${name}`).toContain(name);
            expect(expression).toMatch(/^\$response\.body#\/[\w/]+$/);
            // The pointer names a string property of the source response's schema.
            const deref = (node: any) => (node?.$ref ? doc.components.schemas[node.$ref.split('/').at(-1)] : node);
            let node = deref(response.content['application/json'].schema);
            for (const step of expression.slice('$response.body#/'.length).split('/')) node = deref(/^\d+$/.test(step) ? node?.items : node?.properties?.[step]);
            expect(node, `${source.key} ${status} has ${expression}`).toMatchObject({ type: 'string' });
          }
          found.push(`${source.key} ${status} -> ${target.key}`);
        }
      }
    }
    expect(found.sort()).toEqual(
      [
        'get /models 200 -> get /models/{id}',
        'get /generations 200 -> get /generations/{id}',
        'post /chat/completions 200 -> get /chat/completions/{id}',
        'post /responses 200 -> get /responses/{id}',
        'post /generations 200 -> get /generations/{id}',
        'post /generations 200 -> post /generations/{id}/cancel',
        'post /generations 200 -> get /generations/{id}/output',
        'post /generations 202 -> get /generations/{id}',
        'post /generations 202 -> post /generations/{id}/cancel',
        'post /generations 202 -> get /generations/{id}/output',
        'get /generations/{id} 200 -> post /generations/{id}/cancel',
        'get /generations/{id} 200 -> get /generations/{id}/output',
        'post /generations/{id}/cancel 200 -> get /generations/{id}',
        'post /files 200 -> get /files/{id}',
        'post /files 200 -> get /files/{id}/content',
        'get /files/{id} 200 -> get /files/{id}/content',
      ].sort(),
    );
  });

  it('describes the real responses of the API', async () => {
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    addFormats.default(ajv);
    ajv.addSchema({ $id: 'openapi', components: doc.components });
    const check = async (method: string, path: string, template: string, init: RequestInit = {}): Promise<any> => {
      const res = await fetch(`${h.base}/api/v1${path}`, { method: method.toUpperCase(), ...init });
      const body = await res.json();
      const op = doc.paths[template]?.[method];
      expect(op, `${method} ${template} is documented`).toBeDefined();
      const response = op.responses[String(res.status)];
      expect(response, `${method} ${template} documents status ${res.status}: ${JSON.stringify(body)}`).toBeDefined();
      const schema = JSON.parse(JSON.stringify(response.content['application/json'].schema).replaceAll('"#/components/', '"openapi#/components/'));
      const valid = ajv.validate(schema, body);
      expect(valid, `${method} ${path} ${res.status}: ${ajv.errorsText()}`).toBe(true);
      return body;
    };

    const account = await makeAccount(h.orm, { coins: '50' });
    const { key } = await makeKey(h.orm, account.id);
    const auth = { headers: bearer(key) };
    const post = (body: unknown, extra: Record<string, string> = {}) => ({ headers: { ...bearer(key), 'content-type': 'application/json', ...extra }, body: JSON.stringify(body) });

    await check('get', '/balance', '/balance', auth);
    await check('get', '/balance', '/balance');
    await check('get', '/wallet/history', '/wallet/history', auth);
    await check('get', '/wallet/history?limit=0', '/wallet/history', auth);
    await check('get', '/models', '/models', auth);
    await check('get', '/models/mas/echo', '/models/{id}', auth);
    await check('get', '/models/nobody/none', '/models/{id}', auth);
    const completion = await check('post', '/chat/completions', '/chat/completions', post({ model: 'mas/echo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 16 }));
    await check('get', `/chat/completions/${completion.id}`, '/chat/completions/{id}', auth);
    await check('get', '/chat/completions/chatcmpl-nope', '/chat/completions/{id}', auth);
    await check('get', `/chat/completions/${'x'.repeat(101)}`, '/chat/completions/{id}', auth);
    await check('post', '/chat/completions', '/chat/completions', post({ model: 'mas/echo', messages: [] }));
    await check('post', '/responses', '/responses', post({ model: 'mas/echo', input: 'hi', max_output_tokens: 16 }));
    await check('post', '/responses', '/responses', post({ model: 'mas/echo', instructions: 'Be brief.', input: [{ role: 'user', content: [{ type: 'input_text', text: 'hi' }] }] }));
    await check('post', '/responses', '/responses', post({ model: 'mas/echo', input: 'hi', store: true }));
    const job = await check('post', '/generations', '/generations', post({ model: 'mas/image-demo', prompt: 'x', settings: { size: 128 } }, { prefer: 'wait=20' }));
    await check('get', `/generations/${job.id}`, '/generations/{id}', auth);
    await check('get', '/generations', '/generations', auth);
    await check('get', '/generations?status=succeeded&limit=1', '/generations', auth);
    await check('get', `/generations?starting_after=${job.id}`, '/generations', auth);
    await check('get', '/generations?starting_after=gen_unknown', '/generations', auth);
    await check('get', '/generations?limit=0', '/generations', auth);
    await check('post', `/generations/${job.id}/cancel`, '/generations/{id}/cancel', auth);
    const slow = await check('post', '/generations', '/generations', post({ model: 'mas/image-demo', prompt: 'x', settings: { delay_ms: 10_000 } }));
    await check('post', `/generations/${slow.id}/cancel`, '/generations/{id}/cancel', auth);
    await check('post', '/generations', '/generations', post({ model: 'mas/video-demo', prompt: 'x', settings: { duration: 10, resolution: 128 } }));
    const form = new FormData();
    form.append('file', new Blob([png(8, 8, seededRandom(new Uint8Array([1])))]), 'a.png');
    const file = await check('post', '/files', '/files', { method: 'POST', headers: bearer(key), body: form });
    await check('get', `/files/${file.id}`, '/files/{id}', auth);
    await check('get', '/webhook_secret', '/webhook_secret', auth);
  });

  it('describes each server-sent event of a streamed completion (schemathesis validates every event: ST108)', async () => {
    const account = await makeAccount(h.orm, { coins: '50' });
    const { key } = await makeKey(h.orm, account.id);
    const res = await fetch(`${h.base}/api/v1/chat/completions`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mas/echo', messages: [{ role: 'user', content: 'hi' }], stream: true }),
    });
    expect(res.status).toBe(200);
    const schema = doc.paths['/chat/completions'].post.responses['200'].content['text/event-stream'].schema;
    const ajv = new Ajv2020({ strict: false });
    // Each event as an SSE parser hands it over: its fields by name.
    const events = (await res.text())
      .split('\n\n')
      .filter((block) => block.trim())
      .map((block) => Object.fromEntries(block.split('\n').map((line) => [line.slice(0, line.indexOf(':')), line.slice(line.indexOf(':') + 1).trimStart()])));
    expect(events.length).toBeGreaterThan(1);
    expect(events.at(-1)).toEqual({ data: '[DONE]' });
    for (const event of events) expect(ajv.validate(schema, event), `${JSON.stringify(event)}: ${ajv.errorsText()}`).toBe(true);
  });

  it('describes each server-sent event of a streamed response', async () => {
    const account = await makeAccount(h.orm, { coins: '50' });
    const { key } = await makeKey(h.orm, account.id);
    const res = await fetch(`${h.base}/api/v1/responses`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mas/echo', input: 'hi', stream: true }),
    });
    expect(res.status).toBe(200);
    const schema = doc.paths['/responses'].post.responses['200'].content['text/event-stream'].schema;
    const ajv = new Ajv2020({ strict: false });
    const events = (await res.text())
      .split('\n\n')
      .filter((block) => block.trim())
      .map((block) => Object.fromEntries(block.split('\n').map((line) => [line.slice(0, line.indexOf(':')), line.slice(line.indexOf(':') + 1).trimStart()])));
    expect(events[0]!.event).toBe('response.created');
    expect(events.at(-1)!.event).toBe('response.completed');
    for (const event of events) {
      expect(ajv.validate(schema, event), `${JSON.stringify(event)}: ${ajv.errorsText()}`).toBe(true);
      expect(JSON.parse(event.data!).type).toBe(event.event);
    }
    // The completed response is the document's Response.
    const completed = JSON.parse(events.at(-1)!.data!).response;
    const full = new Ajv2020({ strict: false, allErrors: true });
    addFormats.default(full);
    full.addSchema({ $id: 'openapi', components: doc.components });
    const responseSchema = JSON.parse(JSON.stringify(doc.paths['/responses'].post.responses['200'].content['application/json'].schema).replaceAll('"#/components/', '"openapi#/components/'));
    expect(full.validate(responseSchema, completed), full.errorsText()).toBe(true);
  });

  it('serves a readable reference page with its assets from the service itself', async () => {
    const page = await fetch(`${h.base}/api/v1/docs`);
    expect(page.headers.get('content-type')).toMatch(/text\/html/);
    const html = await page.text();
    expect(html).not.toMatch(/https?:\/\/(?!localhost)/);
    for (const asset of ['docs/assets/swagger-ui.css', 'docs/assets/swagger-ui-bundle.js']) {
      expect(html).toContain(asset);
      expect((await fetch(`${h.base}/api/v1/${asset}`)).status).toBe(200);
    }
  });
});

/**
 * The document and the server agree on what a request may be: a request the document allows
 * is never refused with 400, and one it forbids is refused. Each case below is a mismatch
 * schemathesis found (`npm run test:schema`: ST202 "schema-valid request rejected", ST103
 * "status not documented", negative data accepted).
 */
describe('OpenAPI document and server agree on requests', () => {
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats.default(ajv);

  interface Sample {
    method: 'get' | 'post';
    template: string;
    path: string;
    params?: Record<string, string>;
    headers?: Record<string, string>;
    body?: unknown;
    /** The body as sent, when not JSON.stringify(body) with application/json. */
    raw?: { type: string; data: Uint8Array };
  }

  /** Whether the document allows this request: its parameters, headers and body. */
  function documentAllows(s: Sample): boolean {
    const op = doc.paths[s.template][s.method];
    const query = new URL(s.path, 'http://x').searchParams;
    for (const p of op.parameters ?? []) {
      const value = p.in === 'path' ? s.params?.[p.name] : p.in === 'header' ? s.headers?.[p.name] : p.in === 'query' ? queryValue(query.get(p.name), p.schema) : undefined;
      if (value === undefined) {
        if (p.required) return false;
        continue;
      }
      if (!ajv.validate(p.schema, value)) return false;
    }
    const body = op.requestBody;
    if (!body) return true;
    if (s.body === undefined) return !body.required;
    const media = s.raw?.type.split(';')[0] ?? 'application/json';
    return ajv.validate(body.content[media].schema, s.body);
  }

  /** A query value as a client sends it: text, read as a number where the parameter is one (as schemathesis generates it). */
  function queryValue(raw: string | null, schema: { type?: string }): unknown {
    if (raw === null) return undefined;
    return schema.type === 'integer' && /^-?[0-9]+$/.test(raw) ? Number(raw) : raw;
  }

  async function send(s: Sample, key: string) {
    const headers: Record<string, string> = { ...bearer(key), ...s.headers };
    let data: Uint8Array | string | undefined;
    if (s.raw) {
      headers['content-type'] = s.raw.type;
      data = s.raw.data;
    } else if (s.body !== undefined) {
      headers['content-type'] = 'application/json';
      data = JSON.stringify(s.body);
    }
    const res = await fetch(`${h.base}/api/v1${s.path}`, { method: s.method.toUpperCase(), headers, body: data });
    return { status: res.status, body: await res.json() };
  }

  const chat = (extra: Record<string, unknown>): Sample => ({
    method: 'post',
    template: '/chat/completions',
    path: '/chat/completions',
    body: { model: 'nobody/none', messages: [{ role: 'user', content: 'hi' }], ...extra },
  });
  const job = (body: Record<string, unknown>): Sample => ({ method: 'post', template: '/generations', path: '/generations', body: { prompt: 'a test', ...body } });
  const byId = (method: 'get' | 'post', template: string, id: string): Sample => ({ method, template, path: template.replace('{id}', id), params: { id } });
  const multipart = (parts: { name: string; filename?: string; data: string }[]): Sample => {
    const boundary = 'mas-doc-boundary';
    const text = parts
      .map((p) => `--${boundary}\r\nContent-Disposition: form-data; name="${p.name}"${p.filename ? `; filename="${p.filename}"` : ''}\r\n\r\n${p.data}\r\n`)
      .join('');
    return {
      method: 'post',
      template: '/files',
      path: '/files',
      body: Object.fromEntries(parts.map((p) => [p.name, p.data])),
      raw: { type: `multipart/form-data; boundary=${boundary}`, data: new TextEncoder().encode(`${text}--${boundary}--\r\n`) },
    };
  };

  const samples: [string, Sample][] = [
    ['a job id of 100 characters', byId('get', '/generations/{id}', 'g'.repeat(100))],
    ['a job id of 101 characters', byId('get', '/generations/{id}', 'g'.repeat(101))],
    ['a cancel with a job id of 101 characters', byId('post', '/generations/{id}/cancel', 'g'.repeat(101))],
    ['a result link with a job id of 101 characters', { ...byId('get', '/generations/{id}/output', 'g'.repeat(101)), path: `/generations/${'g'.repeat(101)}/output?expires=1&signature=x` }],
    ['jobs, a page of 100', { method: 'get', template: '/generations', path: '/generations?limit=100' }],
    ['jobs, a page of 101', { method: 'get', template: '/generations', path: '/generations?limit=101' }],
    ['jobs, a page of 1e1', { method: 'get', template: '/generations', path: '/generations?limit=1e1' }],
    ['jobs in a status', { method: 'get', template: '/generations', path: '/generations?status=canceled' }],
    ['jobs in an unknown status', { method: 'get', template: '/generations', path: '/generations?status=done' }],
    ['jobs after an unknown well-formed job id', { method: 'get', template: '/generations', path: `/generations?starting_after=gen_${'Z'.repeat(64)}` }],
    ['jobs after a job id of 65 characters', { method: 'get', template: '/generations', path: `/generations?starting_after=gen_${'Z'.repeat(65)}` }],
    ['jobs after a padded job id', { method: 'get', template: '/generations', path: '/generations?starting_after=%20gen_abc' }],
    ['jobs after an entry id', { method: 'get', template: '/generations', path: '/generations?starting_after=le_1' }],
    ['a file id of 100 characters', byId('get', '/files/{id}', 'f'.repeat(100))],
    ['a file id of 101 characters', byId('get', '/files/{id}', 'f'.repeat(101))],
    ['a model id of 200 characters', byId('get', '/models/{id}', 'm'.repeat(200))],
    ['a model id of 201 characters', byId('get', '/models/{id}', 'm'.repeat(201))],
    ['an empty Idempotency-Key', { method: 'post', template: '/generations', path: '/generations', headers: { 'Idempotency-Key': '' }, body: { model: 'nobody/none' } }],
    ['an Idempotency-Key with a space', { method: 'post', template: '/generations', path: '/generations', headers: { 'Idempotency-Key': 'a b' }, body: { model: 'nobody/none' } }],
    ['a job with no body', { method: 'post', template: '/generations', path: '/generations' }],
    ['a chat with no body', { method: 'post', template: '/chat/completions', path: '/chat/completions' }],
    ['max_tokens with max_completion_tokens', chat({ max_tokens: 5, max_completion_tokens: 5 })],
    ['max_tokens with max_completion_tokens null', chat({ max_tokens: 5, max_completion_tokens: null })],
    ['n = 2', chat({ n: 2 })],
    ['n = 1', chat({ n: 1 })],
    ['tools: []', chat({ tools: [] })],
    ['tools: null', chat({ tools: null })],
    ['logprobs: true', chat({ logprobs: true })],
    ['response_format json_object', chat({ response_format: { type: 'json_object' } })],
    ['response_format text', chat({ response_format: { type: 'text' } })],
    ['modalities audio', chat({ modalities: ['audio'] })],
    ['stream_options without stream', chat({ stream_options: {} })],
    ['stream_options with stream', chat({ stream: true, stream_options: { include_usage: true } })],
    ['an image content part', chat({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] })],
    ['a text content part', chat({ messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }] })],
    ['a seed past the safe integers', chat({ seed: 2 ** 60 })],
    ['a file part and another part with a control character in its name', multipart([{ name: 'file', filename: 'a.txt', data: 'x' }, { name: 'a\x13', data: 'y' }])],
    ['a file part without a filename', multipart([{ name: 'file', data: 'plain' }])],
    // The rules the issue-45 testers found missing from the document: each stated, from the server's own schemas.
    ['a message without content', chat({ messages: [{ role: 'user' }] })],
    ['a message with content null', chat({ messages: [{ role: 'user', content: null }] })],
    ['an assistant message with tool_calls and no content', chat({ messages: [{ role: 'user', content: 'x' }, { role: 'assistant', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }] }, { role: 'tool', tool_call_id: 'c1', content: 'ok' }] })],
    ['a tool message without tool_call_id', chat({ messages: [{ role: 'tool', content: 'x' }] })],
    ['tool_choice without tools', chat({ tool_choice: 'auto' })],
    ['parallel_tool_calls without tools', chat({ parallel_tool_calls: false })],
    ['tool_choice with tools', chat({ tools: [{ type: 'function', function: { name: 'f' } }], tool_choice: 'required' })],
    ['a response with tool_choice and no tools', { method: 'post', template: '/responses', path: '/responses', body: { model: 'nobody/none', input: 'hi', tool_choice: 'auto' } }],
    ['a job on a media model with its settings', job({ model: 'mas/image-demo', settings: { size: 128 } })],
    ['a job with a setting its model lacks', job({ model: 'mas/image-demo', settings: { colour: 'red' } })],
    ['a job with a setting out of its options', job({ model: 'mas/image-demo', settings: { size: 300 } })],
    ['a job with the setting "constructor"', job({ model: 'mas/image-demo', settings: { constructor: 1 } })],
    ['a job with the setting "__proto__"', job({ model: 'mas/image-demo', settings: JSON.parse('{"__proto__":{"size":512}}') })],
    ['a job with an input its model lacks', job({ model: 'mas/image-demo', inputs: { mask: 'file_x' } })],
    ['a job on a text model', job({ model: 'mas/echo' })],
    ['a top-up under the minimum', { method: 'post', template: '/credits/checkout', path: '/credits/checkout', body: { amount_usd: 1 } }],
    ['a top-up over the maximum', { method: 'post', template: '/credits/checkout', path: '/credits/checkout', body: { amount_usd: 20_000 } }],
    ['a top-up within the bounds', { method: 'post', template: '/credits/checkout', path: '/credits/checkout', body: { amount_usd: 20.5 } }],
  ];

  it.each(samples)('%s', async (_name, sample) => {
    const account = await makeAccount(h.orm, { coins: '50' });
    const { key } = await makeKey(h.orm, account.id);
    const allowed = documentAllows(sample);
    const res = await send(sample, key);
    const op = doc.paths[sample.template][sample.method];
    expect(op.responses[String(res.status)], `status ${res.status} is documented: ${JSON.stringify(res.body)}`).toBeDefined();
    if (allowed) expect(res.status, `the document allows it: ${JSON.stringify(res.body)}`).not.toBe(400);
    else expect(res.status, `the document forbids it: ${JSON.stringify(res.body)}`).toBe(400);
  });

  it('uses JavaScript patterns that Python reads the same (no \\d: Python takes any Unicode digit)', () => {
    const patterns = JSON.stringify(doc.paths).match(/"pattern":"(?:[^"\\]|\\.)*"/g) ?? [];
    expect(patterns.length).toBeGreaterThan(0);
    for (const p of patterns) expect(p).not.toMatch(/\\\\d/);
  });
});
