import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { freePort } from '../adapters/embedded/postgres.ts';
import { ensureJaeger } from './support/jaeger.ts';
import { killLeftoversOnExit, printServerErrors, root, sayer, sleep, startServer, stopServer, type Server } from './support/server.ts';

/**
 * `npm run test:observability` (docs/observability.md): the traces the service exports, read
 * back from a real trace backend.
 *
 * 1. Jaeger's v2 binary, built once under ~/.cache/mas (scripts/support/jaeger.ts), starts on
 *    free ports (OTLP/HTTP in, its query API out) with in-memory storage.
 * 2. The real server (scripts/support/server.ts: embedded PostgreSQL and Temporal, its worker a
 *    process of its own) starts with OTEL_EXPORTER_OTLP_ENDPOINT pointed at Jaeger, and a
 *    catalog with one more model whose first route is an OpenAI-compatible upstream that
 *    refuses connections (its key a secret of this run), then the demo echo model.
 * 3. Each scenario sends a W3C `traceparent` of its own, so its trace id is known, and reads
 *    the trace back through Jaeger's query API (/api/traces/<id>), waiting for the spans to
 *    arrive (the worker's come through the workflow sink and a batch processor):
 *    - a chat: the HTTP server span named by route, the core procedure, the reservation and
 *      the settle as database spans, the upstream `chat` client span with the GenAI attributes
 *      and the token counts the answer reported;
 *    - a media job: submit, StartWorkflow, RunWorkflow, the activities, the upstream calls and
 *      the settle, in one trace; the job's id on the spans; the admin API's `traceId`;
 *    - a fallback: both upstream attempts, the first failed, the second served;
 *    - a failed job: the refund (the hold released) in the job's trace.
 * 4. Every other surface is called once (MCP by the connector link, the pages, OAuth, the
 *    GraphQL admin API with a made-up token), then every span of the run is fetched
 *    (/api/traces?service=…) and the JSON is searched for each secret of the run: the demo
 *    key, its sign-in link's token, the upstream's key, the admin token sent, cookies.
 *
 * Exit 1 on any failed check. OBSERVABILITY_KEEP_DATA=1 keeps the temporary folder (the
 * server's and Jaeger's logs, the exported spans).
 */
const say = sayer('observability');
const failures: string[] = [];
const check = (ok: boolean, what: string) => {
  say(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
  if (!ok) failures.push(what);
};

interface JaegerSpan {
  traceID: string;
  spanID: string;
  operationName: string;
  references: { refType: string; spanID: string; traceID: string }[];
  tags: { key: string; type: string; value: unknown }[];
  processID: string;
}
interface JaegerTrace {
  traceID: string;
  spans: JaegerSpan[];
  processes: Record<string, { serviceName: string; tags: { key: string; value: unknown }[] }>;
}

const tag = (s: JaegerSpan, key: string) => s.tags.find((t) => t.key === key)?.value;
const named = (t: JaegerTrace, name: string | RegExp) => t.spans.filter((s) => (typeof name === 'string' ? s.operationName === name : name.test(s.operationName)));

async function startJaeger(work: string): Promise<{ child: ChildProcess; otlp: string; query: string }> {
  const binary = await ensureJaeger(undefined, { tty: true });
  const [otlp, query, queryGrpc] = [await freePort(), await freePort(), await freePort()];
  const config = {
    service: {
      extensions: ['jaeger_storage', 'jaeger_query'],
      pipelines: { traces: { receivers: ['otlp'], processors: ['batch'], exporters: ['jaeger_storage_exporter'] } },
      telemetry: { metrics: { level: 'none' }, logs: { level: 'warn' } },
    },
    extensions: {
      jaeger_query: { storage: { traces: 'memory' }, http: { endpoint: `127.0.0.1:${query}` }, grpc: { endpoint: `127.0.0.1:${queryGrpc}` } },
      jaeger_storage: { backends: { memory: { memory: { max_traces: 100000 } } } },
    },
    receivers: { otlp: { protocols: { http: { endpoint: `127.0.0.1:${otlp}` } } } },
    processors: { batch: { timeout: '200ms' } },
    exporters: { jaeger_storage_exporter: { trace_storage: 'memory' } },
  };
  const file = path.join(work, 'jaeger.yaml');
  await fs.writeFile(file, YAML.stringify(config));
  const log = createWriteStream(path.join(work, 'jaeger.log'));
  const child = spawn(binary, ['--config', file], { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout!.pipe(log);
  child.stderr!.pipe(log);
  const base = `http://127.0.0.1:${query}`;
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) throw new Error(`Jaeger exited (code ${child.exitCode}); see ${path.join(work, 'jaeger.log')}`);
    const ok = await fetch(`${base}/api/services`).then((r) => r.ok, () => false);
    if (ok) break;
    if (i > 600) throw new Error('Jaeger did not answer on its query port within a minute');
    await sleep(100);
  }
  say(`Jaeger ${binary} listening: OTLP/HTTP 127.0.0.1:${otlp}, query ${base}`);
  return { child, otlp: `http://127.0.0.1:${otlp}`, query: base };
}

/** A traceparent of our own: the server continues this trace, so its id is known. */
function traceparent(): { header: string; traceId: string } {
  const traceId = randomBytes(16).toString('hex');
  return { header: `00-${traceId}-${randomBytes(8).toString('hex')}-01`, traceId };
}

/** The trace once `ready` says it is complete (spans arrive in batches, from two processes). */
async function readTrace(query: string, traceId: string, ready: (t: JaegerTrace) => boolean, what: string): Promise<JaegerTrace | undefined> {
  let last: JaegerTrace | undefined;
  for (let i = 0; i < 600; i++) {
    const res = await fetch(`${query}/api/traces/${traceId}`);
    if (res.ok) {
      const body = (await res.json()) as { data?: JaegerTrace[] };
      last = body.data?.[0];
      if (last && ready(last)) return last;
    }
    await sleep(250);
  }
  say(`${what}: the trace was still incomplete after 150 s; its spans: ${last ? last.spans.map((s) => s.operationName).join(', ') : 'none'}`);
  return last;
}

async function main(): Promise<void> {
  const work = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-observability-'));
  const dataDir = path.join(work, 'data');
  const logFile = path.join(work, 'server.log');
  let server: Server | undefined;
  let jaeger: ChildProcess | undefined;
  killLeftoversOnExit(work, () => server);
  process.on('exit', () => jaeger?.kill('SIGKILL'));
  const service = `mas-observability-${randomBytes(3).toString('hex')}`;
  const upstreamKey = `sk-obs-${randomBytes(18).toString('hex')}`;
  const adminToken = `adm_${randomBytes(18).toString('hex')}`;
  try {
    const j = await startJaeger(work);
    jaeger = j.child;

    // The demo catalog, and a model whose first route refuses connections: the fallback.
    const catalog = YAML.parse(await fs.readFile(path.join(root, 'config/models.yaml'), 'utf8')) as { providers: Record<string, unknown>; models: Record<string, unknown>[] };
    catalog.providers.down = { kind: 'openai-compatible', base_url: `http://127.0.0.1:${await freePort()}/v1`, api_key_env: 'OBS_UPSTREAM_KEY', timeout_seconds: 2 };
    const echo = catalog.models.find((m) => m.id === 'mas/echo')!;
    const { provider: _p, example: _e, ...rest } = echo;
    catalog.models.push({ ...rest, id: 'obs/fallback', name: 'Fallback (observability test)', routes: [{ provider: 'down', model: 'echo' }, { provider: 'local', model: 'echo' }] });
    const catalogFile = path.join(work, 'models.yaml');
    await fs.writeFile(catalogFile, YAML.stringify(catalog));

    server = await startServer(say, work, dataDir, logFile, {
      OTEL_EXPORTER_OTLP_ENDPOINT: j.otlp,
      OTEL_SERVICE_NAME: service,
      OTEL_BSP_SCHEDULE_DELAY: '200',
      OTEL_TRACES_SAMPLER: 'parentbased_always_on',
      CATALOG_FILE: catalogFile,
      OBS_UPSTREAM_KEY: upstreamKey,
      LOG_LEVEL: 'info',
    });
    const { base, key, loginUrl } = server;
    const api = `${base}/api/v1`;
    const auth = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    say(`server listening at ${base}, exporting to ${j.otlp} as ${service}`);

    // 1. A chat.
    {
      const tp = traceparent();
      const res = await fetch(`${api}/chat/completions`, { method: 'POST', headers: { ...auth, traceparent: tp.header }, body: JSON.stringify({ model: 'mas/echo', messages: [{ role: 'user', content: 'Trace me' }], max_tokens: 16 }) });
      const body = (await res.json()) as { usage?: { prompt_tokens: number; completion_tokens: number } };
      check(res.status === 200, `chat answered 200 (${res.status})`);
      const t = await readTrace(j.query, tp.traceId, (t) => named(t, 'POST /api/v1/chat/completions').length === 1 && named(t, /^chat /).length === 1 && named(t, 'mas_end_hold_many').length === 1, 'chat');
      const server_ = t && named(t, 'POST /api/v1/chat/completions')[0];
      check(!!server_ && tag(server_, 'http.route') === '/api/v1/chat/completions' && tag(server_, 'span.kind') === 'server', 'chat: one server span named by its route');
      const core = t && named(t, 'core chat.complete')[0];
      check(!!core && typeof tag(core, 'mas.account_id') === 'string' && typeof tag(core, 'mas.key_id') === 'string', 'chat: the core procedure span, with mas.account_id and mas.key_id');
      check(!!t && named(t, 'mas_reserve_many').length === 1 && tag(named(t, 'mas_reserve_many')[0]!, 'db.system.name') === 'postgresql', 'chat: the reservation as a database span');
      const settle = t && named(t, 'mas_end_hold_many')[0];
      check(!!settle && tag(settle, 'mas.hold.outcome') === 'settled' && typeof tag(settle, 'mas.cost_coins') === 'number' && (tag(settle, 'mas.cost_coins') as number) > 0, 'chat: the settle as a database span with mas.cost_coins');
      const up = t && named(t, /^chat /)[0];
      check(
        !!up &&
          tag(up, 'span.kind') === 'client' &&
          tag(up, 'gen_ai.operation.name') === 'chat' &&
          tag(up, 'gen_ai.provider.name') === 'local' &&
          tag(up, 'gen_ai.request.model') === 'echo' &&
          tag(up, 'gen_ai.response.model') === 'echo' &&
          tag(up, 'mas.route') === 'local/echo' &&
          tag(up, 'gen_ai.usage.input_tokens') === body.usage?.prompt_tokens &&
          tag(up, 'gen_ai.usage.output_tokens') === body.usage?.completion_tokens,
        `chat: the upstream client span with the GenAI attributes and the answer's token counts (${body.usage?.prompt_tokens}/${body.usage?.completion_tokens})`,
      );
      check(!!up && tag(up, 'gen_ai.input.messages') === undefined && tag(up, 'gen_ai.output.messages') === undefined, 'chat: no prompt or completion on the span (content capture is off)');
      const ids = new Set(t?.spans.map((s) => s.spanID));
      check(!!t && t.spans.every((s) => s.references.every((r) => r.refType !== 'CHILD_OF' || ids.has(r.spanID) || r.spanID !== '')), 'chat: every span in one tree');
    }

    // 2. A media job, and 4. a failed one.
    const job = async (settings: Record<string, unknown>) => {
      const tp = traceparent();
      const res = await fetch(`${api}/generations`, { method: 'POST', headers: { ...auth, traceparent: tp.header }, body: JSON.stringify({ model: 'mas/image-demo', prompt: 'a traced lighthouse', settings: { size: 128, ...settings } }) });
      const created = (await res.json()) as { id: string };
      check(res.status === 202, `job ${created.id} accepted (${res.status})`);
      let status = '';
      for (let i = 0; i < 600 && !['succeeded', 'failed', 'canceled'].includes(status); i++) {
        await sleep(250);
        status = ((await (await fetch(`${api}/generations/${created.id}`, { headers: auth })).json()) as { status: string }).status;
      }
      return { id: created.id, status, traceId: tp.traceId };
    };
    {
      const ok = await job({});
      check(ok.status === 'succeeded', `media job ${ok.id} succeeded`);
      const t = await readTrace(j.query, ok.traceId, (t) => named(t, /RunActivity:chargeAndCompleteJob/).length > 0 && named(t, 'mas_end_hold').length > 0 && named(t, /^RunWorkflow:/).length > 0, 'media job');
      const has = (n: string | RegExp) => !!t && named(t, n).length > 0;
      check(has('POST /api/v1/generations') && has('core generations.create') && has('mas_reserve'), 'job: the submit (server span, core procedure, reservation)');
      check(has(/^StartWorkflow:/) && has(/^RunWorkflow:/), 'job: the workflow start and run in the same trace');
      check(has(/RunActivity:markJobRunning/) && has(/RunActivity:submitJobToProvider/) && has(/RunActivity:copyResultToStorage/), 'job: its activities');
      check(has('generate_content submit') && has('generate_content fetch_result'), 'job: the upstream calls as GenAI client spans');
      const settle = t && named(t, 'mas_end_hold').find((s) => tag(s, 'mas.hold.outcome') === 'settled');
      check(!!settle, 'job: the settle');
      check(!!t && named(t, /RunActivity:/).some((s) => tag(s, 'mas.job_id') === ok.id) && named(t, 'core generations.create').some((s) => tag(s, 'mas.job_id') === ok.id), 'job: the job id on the submit and activity spans');
      check(!!t && new Set(t.spans.map((s) => t.processes[s.processID]?.tags.find((x) => x.key === 'mas.role')?.value)).size >= 2, 'job: spans from the API process and the worker process');
      // The admin API: the job's trace id (the CLI makes an operator token, shown once).
      const token = await adminTokenFor(work, dataDir);
      if (token) {
        const gql = await fetch(`${base}/admin/graphql`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify({ query: `{ generation(id: "${ok.id}") { traceId } }` }) });
        const answer = (await gql.json()) as { data?: { generation?: { traceId?: string } }; errors?: unknown };
        check(answer.data?.generation?.traceId === ok.traceId, `job: the admin API's traceId is the trace's (${JSON.stringify(answer.data ?? answer.errors)})`);
      } else check(false, 'job: an admin token for the admin API');
    }
    {
      const failed = await job({ fail: true });
      check(failed.status === 'failed', `job ${failed.id} failed as asked`);
      const t = await readTrace(j.query, failed.traceId, (t) => named(t, /RunActivity:refundAndFailJob/).length > 0 && named(t, 'mas_end_hold').some((s) => tag(s, 'mas.hold.outcome') === 'released'), 'failed job');
      check(!!t && named(t, /RunActivity:refundAndFailJob/).length === 1, 'failed job: the refund activity in the trace');
      check(!!t && named(t, 'mas_end_hold').some((s) => tag(s, 'mas.hold.outcome') === 'released' && tag(s, 'mas.cost_coins') === 0), 'failed job: the hold released (nothing charged)');
    }

    // 3. A fallback.
    {
      const tp = traceparent();
      const res = await fetch(`${api}/chat/completions`, { method: 'POST', headers: { ...auth, traceparent: tp.header }, body: JSON.stringify({ model: 'obs/fallback', messages: [{ role: 'user', content: 'Fall back' }], max_tokens: 8 }) });
      check(res.status === 200, `fallback chat answered 200 (${res.status})`);
      const t = await readTrace(j.query, tp.traceId, (t) => named(t, /^chat /).length >= 2 && named(t, 'mas_end_hold_many').length === 1, 'fallback');
      const attempts = t ? named(t, /^chat /).sort((a, b) => Number((a as unknown as { startTime: number }).startTime) - Number((b as unknown as { startTime: number }).startTime)) : [];
      check(attempts.length === 2, `fallback: both upstream attempts (${attempts.length})`);
      check(attempts[0] !== undefined && tag(attempts[0], 'mas.route') === 'down/echo' && tag(attempts[0], 'error') === true && typeof tag(attempts[0], 'error.type') === 'string', 'fallback: the first route failed, with its error type');
      check(attempts[1] !== undefined && tag(attempts[1], 'mas.route') === 'local/echo' && tag(attempts[1], 'error') !== true, 'fallback: the second route served');
    }

    // Every other surface once, for the secret scan.
    const mcpHeaders = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
    const rpc = (method: string, params: unknown, id: number) => JSON.stringify({ jsonrpc: '2.0', id, method, params });
    await fetch(`${api}/mcp/${key}`, { method: 'POST', headers: mcpHeaders, body: rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'obs', version: '1' } }, 1) }).then((r) => r.text());
    await fetch(`${api}/mcp/${key}`, { method: 'POST', headers: mcpHeaders, body: rpc('tools/list', {}, 2) }).then((r) => r.text());
    await fetch(`${api}/mcp`, { method: 'POST', headers: { ...mcpHeaders, authorization: `Bearer ${key}` }, body: rpc('tools/call', { name: 'get_balance', arguments: {} }, 3) }).then((r) => r.text());
    const login = await fetch(loginUrl, { redirect: 'manual' });
    const cookie = login.headers.getSetCookie().map((c) => c.split(';')[0]).join('; ');
    await login.text();
    await fetch(`${base}/account`, { headers: { cookie }, redirect: 'manual' }).then((r) => r.text());
    await fetch(`${base}/models`).then((r) => r.text());
    await fetch(`${base}/.well-known/oauth-authorization-server`).then((r) => r.text());
    await fetch(`${base}/token`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `grant_type=refresh_token&refresh_token=mas_rt_${randomBytes(16).toString('hex')}&client_id=x` }).then((r) => r.text());
    await fetch(`${base}/admin/graphql`, { method: 'POST', headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' }, body: JSON.stringify({ query: '{ __typename }' }) }).then((r) => r.text());
    await fetch(`${api}/balance?api_key=${key}`, { headers: auth }).then((r) => r.text());

    // The secret scan over everything exported.
    const mcpSeen = async () => {
      const res = await fetch(`${j.query}/api/traces?service=${service}&operation=${encodeURIComponent('POST /api/v1/mcp/:key')}&limit=100`);
      return ((await res.json()) as { data?: JaegerTrace[] }).data?.length ?? 0;
    };
    for (let i = 0; i < 120 && (await mcpSeen()) < 2; i++) await sleep(250);
    check((await mcpSeen()) >= 2, 'MCP by connector link: traced under the route /api/v1/mcp/:key');
    await sleep(1000);
    const all = await (await fetch(`${j.query}/api/traces?service=${service}&limit=100000&lookback=2h`)).text();
    await fs.writeFile(path.join(work, 'exported-spans.json'), all);
    const spans = ((JSON.parse(all) as { data?: JaegerTrace[] }).data ?? []).reduce((n, t) => n + t.spans.length, 0);
    say(`${spans} spans exported in this run`);
    const loginToken = new URL(loginUrl).searchParams.get('token') ?? '';
    const secrets: [string, string][] = [
      ['the API key', key],
      ['the API key without its prefix', key.replace(/^mas_/, '')],
      ["the sign-in link's token", loginToken],
      ["the upstream's key", upstreamKey],
      ['the admin token sent', adminToken],
      ...cookie.split('; ').filter(Boolean).map((c): [string, string] => [`the cookie ${c.split('=')[0]}`, c.split('=').slice(1).join('=')]),
    ];
    for (const [what, value] of secrets) if (value.length >= 8) check(!all.includes(value), `secret scan: ${what} appears in no exported span`);
    check(!/mas_[A-Za-z0-9]{16,}/.test(all), 'secret scan: no mas_… token of any kind');
    // No header recorded at all: no attribute key names one (`http.request.header.authorization`, `cookie`, …).
    check(!/[Bb]earer [A-Za-z0-9]/.test(all) && !/"key":"[^"]*(authorization|cookie|header)[^"]*"/i.test(all), 'secret scan: no Authorization or Cookie header, no header at all');

    // Logs joined to traces.
    const logs = await fs.readFile(logFile, 'utf8');
    check(/"trace_id":"[0-9a-f]{32}","span_id":"[0-9a-f]{16}"/.test(logs), 'logs: lines written inside a span carry trace_id and span_id');
  } finally {
    // Jaeger first (its command line names this run's folder, which stopServer sweeps for leftovers).
    if (jaeger && jaeger.exitCode === null) {
      const exited = new Promise((resolve) => jaeger!.once('exit', resolve));
      jaeger.kill('SIGTERM');
      await Promise.race([exited, sleep(10_000)]);
    }
    if (server) await stopServer(say, server, work);
    if (failures.length > 0) await printServerErrors(say, logFile);
    if (process.env.OBSERVABILITY_KEEP_DATA === '1') say(`kept ${work}`);
    else await fs.rm(work, { recursive: true, force: true }).catch(() => undefined);
  }
  if (failures.length > 0) {
    say(`${failures.length} check(s) failed`);
    process.exitCode = 1;
  } else say('all checks passed');
}

/** A viewer token from the CLI (`mas admin token create`), against the server's own database. */
async function adminTokenFor(work: string, dataDir: string): Promise<string | undefined> {
  const out = await new Promise<string>((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'mas.ts', 'admin', 'token', 'create', '--name', 'observability', '--role', 'viewer'], {
      cwd: root,
      env: { ...process.env, DATA_DIR: dataDir, LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let text = '';
    child.stdout.on('data', (c: Buffer) => (text += c.toString()));
    child.stderr.on('data', (c: Buffer) => (text += c.toString()));
    child.on('exit', () => resolve(text));
  });
  void work;
  // The CLI prints the result as JSON: the token's id (adm_…) and the token itself, once.
  return /"token":\s*"([^"]+)"/.exec(out)?.[1];
}

await main();
