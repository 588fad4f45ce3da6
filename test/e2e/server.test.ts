import http from 'node:http';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createFreshDatabase } from '../support/db.ts';
import { entryArgs, freePort, serverArgs, spawnProject, type Spawned } from '../support/process.ts';

/** The real server as `npm start` runs it, over real HTTP, on a brand-new database. */
let db: Awaited<ReturnType<typeof createFreshDatabase>>;
let dataDir: string;
beforeAll(async () => {
  db = await createFreshDatabase();
  dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-e2e-'));
});
afterAll(async () => {
  await db.drop();
  await fs.rm(dataDir, { recursive: true, force: true });
});

async function startServer(extra: Record<string, string> = {}): Promise<{ proc: Spawned; base: string }> {
  const port = await freePort();
  const proc = spawnProject(serverArgs(), {
    DATABASE_URL: db.url,
    DATA_DIR: dataDir,
    PORT: String(port),
    HOST: '127.0.0.1',
    PUBLIC_BASE_URL: `http://api.test.example:${port}`,
    TEMPORAL_ADDRESS: inject('temporalAddress'),
    TEMPORAL_TASK_QUEUE: `e2e-server-${process.pid}`,
    ...extra,
  });
  await proc.waitFor(/listening on/);
  return { proc, base: `http://127.0.0.1:${port}` };
}

describe('the server process', () => {
  let first: { proc: Spawned; base: string };
  let demoKey: string;

  it('creates a demo account on the very first start and prints its key once, with a curl line', async () => {
    first = await startServer();
    const [, key] = await first.proc.waitFor(/\n {2}(mas_[0-9A-Za-z]+)\n/);
    demoKey = key!;
    expect(first.proc.output()).toContain(`curl -H "Authorization: Bearer ${demoKey}" http://api.test.example:`);
    const res = await fetch(`${first.base}/api/v1/balance`, { headers: { authorization: `Bearer ${demoKey}` } });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ object: 'balance', coins: 1000, paid_account: true });
  });

  it('prints a one-time sign-in link for the demo account that opens its account pages', async () => {
    const [, token] = await first.proc.waitFor(/\/login\/link\?token=([\w%-]+)/);
    const page = await fetch(`${first.base}/login/link?token=${token}`);
    const cookies = page.headers.getSetCookie().map((c) => c.split(';')[0]).join('; ');
    const csrf = /name="_csrf" value="([^"]+)"/.exec(await page.text())![1]!;
    const redeem = async () =>
      fetch(`${first.base}/login/link`, {
        method: 'POST',
        redirect: 'manual',
        headers: { cookie: cookies, 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ _csrf: csrf, token: decodeURIComponent(token!) }),
      });
    const signedIn = await redeem();
    expect(signedIn.status).toBe(303);
    expect(signedIn.headers.get('location')).toBe('/account');
    const session = signedIn.headers.getSetCookie().find((c) => c.startsWith('mas_session='))!.split(';')[0]!;
    const overview = await fetch(`${first.base}/account`, { headers: { cookie: session } });
    expect(await overview.text()).toContain('demo@example.com');
    // One use only.
    expect((await redeem()).status).toBe(401);
  });

  it('serves /healthz, /readyz and Prometheus /metrics publicly', async () => {
    expect(await (await fetch(`${first.base}/healthz`)).json()).toEqual({ status: 'ok' });
    expect(await (await fetch(`${first.base}/readyz`)).json()).toEqual({ status: 'ok', database: 'ok' });
    const metrics = await (await fetch(`${first.base}/metrics`)).text();
    expect(metrics).toMatch(/http_requests_total\{method="GET",route="\/api\/v1\/balance",status="200"\} 1/);
    expect(metrics).toMatch(/http_request_duration_seconds_bucket\{le="0.005",method="GET",route="\/api\/v1\/balance"\}/);
  });

  it('never writes a key, an Authorization header or a cookie to its logs', async () => {
    await fetch(`${first.base}/api/v1/balance?api_key=${demoKey}`, { headers: { cookie: `session=${demoKey}`, authorization: `Bearer ${demoKey}` } });
    await fetch(`${first.base}/api/v1/nope/${demoKey}`, { headers: { authorization: `Bearer ${demoKey}x` } });
    await fetch(`${first.base}/mcp/${demoKey}`);
    // The log destination is asynchronous: a request after these, told apart by its id, and its
    // line in the output, mean theirs are written too (one destination writes in order).
    const marker = `log-marker-${process.pid}-${Date.now()}`;
    await fetch(`${first.base}/healthz`, { headers: { 'x-request-id': marker } });
    await first.proc.waitFor(new RegExp(`"id":"${marker}"`));
    const out = first.proc.output();
    // Exactly the two lines of the one-time banner, nowhere in a log line.
    expect(out.split(demoKey).length - 1).toBe(2);
    for (const line of out.split('\n').filter((l) => l.startsWith('{'))) {
      expect(line).not.toMatch(/authorization|cookie|mas_[0-9A-Za-z]{10}/i);
    }
    expect(out).toMatch(/"req":\{"id":"req_\w+","method":"GET","path":"\/api\/v1\/balance"\}/);
    expect(out).toContain('"path":"/mcp/[redacted]"');
  });

  it('on SIGTERM stops accepting, finishes the request in flight, then exits cleanly', async () => {
    const url = new URL(`${first.base}/api/v1/wallet/history`);
    // A request whose body is still arriving when the signal comes.
    const inFlight = new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = http.request(
        { host: url.hostname, port: url.port, path: url.pathname, method: 'GET', headers: { authorization: `Bearer ${demoKey}`, 'content-type': 'application/json', 'content-length': '2' } },
        (res) => {
          let body = '';
          res.on('data', (c: Buffer) => (body += c.toString()));
          res.on('end', () => resolve({ status: res.statusCode!, body }));
        },
      );
      req.on('error', reject);
      req.write('{');
      setTimeout(() => {
        first.proc.child.kill('SIGTERM');
        setTimeout(() => req.end('}'), 500);
      }, 200);
    });
    await first.proc.waitFor(/shutting down/);
    const done = await inFlight;
    expect(done.status).toBe(200);
    expect(JSON.parse(done.body)).toMatchObject({ object: 'list' });
    expect(await first.proc.exited).toBe(0);
    expect(first.proc.output()).toMatch(/"msg":"stopped"/);
    await expect(fetch(`${first.base}/healthz`)).rejects.toThrow();
  });

  it('does not create a second demo account on the next start', async () => {
    const second = await startServer();
    // The banner, when there is one, is written to stdout before 'listening on' (config/entry.ts),
    // which startServer waited for: had it come, it would be in the output already.
    expect(second.proc.output()).not.toContain('Demo account created');
    second.proc.child.kill('SIGTERM');
    expect(await second.proc.exited).toBe(0);
  });

  it('mas catalog sync makes the database match the catalog file', async () => {
    const { runCli } = await import('../support/process.ts');
    const out = await runCli(['catalog', 'sync', '--json'], { DATABASE_URL: db.url, DATA_DIR: dataDir });
    expect(out.code).toBe(0);
    expect(JSON.parse(out.stdout)).toMatchObject({ object: 'catalog_sync', added: [], removed: [], updated: [] });
  });

  it('the CLI run beside the server without its PORT links to where the server serves (DATA_DIR/server.json)', async () => {
    const { runCli } = await import('../support/process.ts');
    const recorded = JSON.parse(await fs.readFile(path.join(dataDir, 'server.json'), 'utf8')) as { public_base_url: string };
    expect(recorded.public_base_url).toMatch(/^http:\/\/api\.test\.example:\d+$/);
    const out = await runCli(['account', 'login-link', '--account', 'demo@example.com', '--json'], { DATABASE_URL: db.url, DATA_DIR: dataDir });
    expect(out.stderr).toBe('');
    expect(JSON.parse(out.stdout).url).toMatch(new RegExp(`^${recorded.public_base_url.replace(/\./g, '\\.')}/login/link\\?token=`));
    // The CLI's own PORT wins over the record.
    const own = await runCli(['account', 'login-link', '--account', 'demo@example.com', '--json'], { DATABASE_URL: db.url, DATA_DIR: dataDir, PORT: '18124' });
    expect(JSON.parse(own.stdout).url).toMatch(/^http:\/\/localhost:18124\/login\/link\?token=/);
  });

  it('refuses a broken catalog file with one clear line', async () => {
    const file = path.join(dataDir, 'broken.yaml');
    await fs.writeFile(file, 'providers: {}\nmodels:\n  - id: a/b\n    type: text\n');
    const proc = spawnProject(serverArgs(), { CATALOG_FILE: file, DATABASE_URL: db.url });
    expect(await proc.exited).toBe(1);
    expect(proc.output().trim()).toMatch(/^catalog: models\.0\.\w+: /);
  });

  it('refuses a bad configuration value with one clear line', async () => {
    const proc = spawnProject(serverArgs(), { PORT: 'eighty', DATABASE_URL: db.url });
    expect(await proc.exited).toBe(1);
    expect(proc.output().trim()).toMatch(/^Invalid configuration: PORT: .*\(got "eighty"\)$/);
  });
});

describe('the server from its TypeScript sources', () => {
  // Every other test runs the built dist/ as production does; this one keeps the sources path
  // (`node --import tsx main.ts`, how a developer runs a change before building) working.
  it('starts through tsx on the same database and serves the API', async () => {
    const port = await freePort();
    const proc = spawnProject(entryArgs('main', 'sources'), {
      DATABASE_URL: db.url,
      DATA_DIR: dataDir,
      PORT: String(port),
      HOST: '127.0.0.1',
      TEMPORAL_ADDRESS: inject('temporalAddress'),
      TEMPORAL_TASK_QUEUE: `e2e-server-tsx-${process.pid}`,
      RUN_WORKER: 'false',
    });
    try {
      await proc.waitFor(/listening on/);
      expect((await fetch(`http://127.0.0.1:${port}/readyz`)).status).toBe(200);
      // The public catalog page: routes, core and the database all answered.
      const models = await fetch(`http://127.0.0.1:${port}/models`, { headers: { accept: 'text/html' } });
      expect(models.status).toBe(200);
      expect(await models.text()).toContain('mas/echo');
    } finally {
      await proc.stop();
    }
  });
});
