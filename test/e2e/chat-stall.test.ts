import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parse, stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createFreshDatabase } from '../support/db.ts';
import { freePort, ROOT, serverArgs, spawnProject, type Spawned } from '../support/process.ts';

/**
 * Regression: one chat request must not stall every other request. Counting the tokens of a
 * message made of one letter repeated used to hold the server's only event loop for seconds
 * (100,000 × b: 8 s on a 2-core machine; 400,000 × b: minutes), so /healthz, and every other
 * client, waited as long. Here the real server (`npm start`'s main.ts, a process of its own)
 * handles such requests over real HTTP while this test asks /healthz again and again.
 *
 * What is measured is the server's own event loop, not the probes' round trips: the server
 * runs with test/support/loop-blocks.ts preloaded, which reports the longest time its loop was
 * held, counted in the CPU time the server used meanwhile, so a loaded machine (which delays
 * every process it does not schedule, the probes' answers with them) changes nothing.
 *
 * The catalog is the shipped one (the demo model mas/echo, a 16,384-token context: such a
 * message is refused with context_length_exceeded, its count stopped early) plus a local
 * model with a context of a million tokens, for which 400,000 × b fits and is counted in full
 * before the answer.
 */
let db: Awaited<ReturnType<typeof createFreshDatabase>>;
let dataDir: string;
let server: Spawned;
let base: string;
let key: string;

beforeAll(async () => {
  db = await createFreshDatabase();
  dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-e2e-stall-'));
  const catalog = parse(await fs.readFile(path.join(ROOT, 'config/models.yaml'), 'utf8')) as { models: Record<string, unknown>[] };
  catalog.models.push({
    id: 'test/long-context',
    name: 'Local echo with a million-token context',
    type: 'text',
    generation_types: ['chat'],
    provider: { name: 'local', model: 'echo' },
    pricing: { input_per_million: 2, output_per_million: 4 },
    context_window: 1_000_000,
    max_output_tokens: 4096,
    default_max_tokens: 64,
  });
  const catalogFile = path.join(dataDir, 'models.yaml');
  await fs.writeFile(catalogFile, stringify(catalog));
  const port = await freePort();
  // The loop monitor (TypeScript, through tsx) is loaded before the built server.
  server = spawnProject(['--import', 'tsx', '--import', path.join(ROOT, 'test/support/loop-blocks.ts'), ...serverArgs()], {
    DATABASE_URL: db.url,
    DATA_DIR: dataDir,
    CATALOG_FILE: catalogFile,
    PORT: String(port),
    HOST: '127.0.0.1',
    LOG_LEVEL: 'warn',
    TEMPORAL_ADDRESS: inject('temporalAddress'),
    TEMPORAL_TASK_QUEUE: `e2e-stall-${process.pid}`,
  });
  await server.waitFor(/listening on/);
  // The demo account (paid, 1000 coins) prints its key once, on this first start.
  key = (await server.waitFor(/\n {2}(mas_[0-9A-Za-z]+)\n/))[1]!;
  base = `http://127.0.0.1:${port}`;
  // A first, ordinary completion warms the path up (database connections, caches, JIT), so
  // that what is timed below is the big messages, not the first request of a new process.
  const warm = await fetch(`${base}/api/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'mas/echo', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 16 }),
  });
  expect(warm.status).toBe(200);
});
afterAll(async () => {
  if (server) {
    server.child.kill('SIGTERM');
    await server.exited;
  }
  await db?.drop();
  if (dataDir) await fs.rm(dataDir, { recursive: true, force: true });
});

let reports = 0;
/** The server's longest event-loop block since the last report (test/support/loop-blocks.ts), then it starts over. */
async function loopBlocks(): Promise<{ longestBlockMs: number; longestMainThreadMs: number; longestGapMs: number; ticks: number }> {
  const n = ++reports;
  server.child.kill('SIGUSR2');
  const [, json] = (await server.waitFor(new RegExp(`loop-blocks #${n} (\\{.*\\})`)))!;
  return JSON.parse(json!);
}

/**
 * Sends the chat request and, until its answer is in, asks /healthz one request after another
 * (at least 5 times). Returns the chat answer and how long the server's loop was held at most
 * meanwhile (the probes' round trips, for the record).
 */
async function chatWhileProbing(body: unknown): Promise<{ status: number; json: any; loop: Awaited<ReturnType<typeof loopBlocks>> & { probesMs: number[] } }> {
  await loopBlocks();
  let answered = false;
  const chat = fetch(`${base}/api/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  }).then(async (res) => ({ status: res.status, json: await res.json() }));
  void chat.finally(() => (answered = true)).catch(() => {});
  const probesMs: number[] = [];
  while (!answered || probesMs.length < 5) {
    const started = performance.now();
    const res = await fetch(`${base}/healthz`);
    expect(await res.json()).toEqual({ status: 'ok' });
    probesMs.push(Math.round(performance.now() - started));
  }
  const answer = await chat;
  return { ...answer, loop: { ...(await loopBlocks()), probesMs } };
}

const bees = (n: number) => ({ role: 'user', content: 'b'.repeat(n) });

/**
 * The longest the server's loop may be held, in the CPU time the server used meanwhile. The
 * stall this guards against held it for seconds; what it holds it for now (parsing a 400 KB or
 * 4 MB body, a piece of a count) measured 4 to 20 ms.
 */
const STALL_MS = 250;

// No retries: the tokenizer caches what it has merged, so a second try with the same message
// would pass on the old code too. The loop's figures and the probe times are in the failure message.
describe('one huge chat message does not stall the server', () => {
  it('100,000 × b to mas/echo: refused as too long, the server\'s loop never held for 250 ms meanwhile', async () => {
    const { status, json, loop } = await chatWhileProbing({ model: 'mas/echo', messages: [bees(100_000)] });
    expect(status).toBe(400);
    expect(json.error).toMatchObject({ type: 'invalid_request_error', code: 'context_length_exceeded' });
    expect(loop.longestBlockMs, JSON.stringify(loop)).toBeLessThan(STALL_MS);
  });

  it('400,000 × b to mas/echo: refused as too long, the server\'s loop never held for 250 ms meanwhile', async () => {
    const { status, json, loop } = await chatWhileProbing({ model: 'mas/echo', messages: [bees(400_000)] });
    expect(status).toBe(400);
    expect(json.error).toMatchObject({ type: 'invalid_request_error', code: 'context_length_exceeded' });
    expect(loop.longestBlockMs, JSON.stringify(loop)).toBeLessThan(STALL_MS);
  });

  it('400,000 and 100,000 × b to a model whose context holds them: answered, the server\'s loop never held for 250 ms meanwhile', async () => {
    const { status, json, loop } = await chatWhileProbing({ model: 'test/long-context', messages: [bees(400_000), bees(100_000)], max_tokens: 16 });
    expect(status).toBe(200);
    // 'bbbb' is one token: 125,000 + 2 × (3 + 1) + 3, plus 3 per blind cut (one per 512
    // characters of the unbroken runs: 781 + 195), which keeps the count an over-estimate.
    expect(json.usage.prompt_tokens).toBe(125_011 + 3 * (781 + 195));
    expect(loop.longestBlockMs, JSON.stringify(loop)).toBeLessThan(STALL_MS);
  });

  it('a request far over the context window is refused before any counting', async () => {
    // 3,900,000 characters cannot be fewer than 30,469 tokens (no token is longer than 128 bytes).
    const { status, json, loop } = await chatWhileProbing({ model: 'mas/echo', messages: [{ role: 'user', content: 'x'.repeat(3_900_000) }] });
    expect(status).toBe(400);
    expect(json.error).toMatchObject({ code: 'context_length_exceeded' });
    expect(json.error.message).toMatch(/at least 30476 /);
    expect(loop.longestBlockMs, JSON.stringify(loop)).toBeLessThan(STALL_MS);
  });

  it(`refuses more than 2048 messages, naming messages`, async () => {
    const res = await fetch(`${base}/api/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mas/echo', messages: Array.from({ length: 2049 }, () => ({ role: 'user', content: 'hi' })) }),
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.message).toMatch(/messages/);
  });
});
