import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { loadCatalogFile } from '../../config/catalog.ts';
import { temporalGenerationStarter } from '../../config/temporal.ts';
import { seedModels } from '../../core/catalog/catalog.ts';
import { openOrm } from '../../core/orm.ts';
import { makeAccount, makeKey, migratedFreshDatabase, silentLogger, testDeps } from '../support/db.ts';
import { bearer, createTestApp, getJson, serve } from '../support/http.ts';
import { ROOT, entryArgs } from '../support/process.ts';

/**
 * The worker process's stdout is the service's JSON log lines: the Temporal SDK's own lines
 * (the worker's state changes, a failed workflow with its stack trace) go through the service's
 * logger (pino) too, each one JSON line, never the SDK's default `[INFO] …` text on stderr.
 */
let db: Awaited<ReturnType<typeof migratedFreshDatabase>>;
let orm: MikroORM;
let connection: Connection;
let api: Awaited<ReturnType<typeof serve>>;
let dataDir: string;
let worker: ChildProcess | undefined;
const taskQueue = `test-logs-${randomBytes(4).toString('hex')}`;
/** The one line of plain text the worker prints on stdout, for people (README "What npm start prints"). */
const BANNER = `Model Access Service worker running on task queue ${taskQueue}`;

beforeAll(async () => {
  db = await migratedFreshDatabase();
  orm = await openOrm({ url: db.url });
  await seedModels(orm.em.fork(), await loadCatalogFile('config/models.yaml', 50n));
  dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-worker-logs-'));
  connection = await Connection.connect({ address: inject('temporalAddress') });
  const deps = testDeps(orm, { storageDir: path.join(dataDir, 'storage'), generations: temporalGenerationStarter(new Client({ connection }), { taskQueue }) });
  api = await serve(createTestApp({ deps, logger: silentLogger }));
});
afterAll(async () => {
  if (worker && worker.exitCode === null && worker.signalCode === null) worker.kill('SIGKILL');
  await api?.close();
  await connection?.close();
  await orm?.close();
  await db?.drop();
  if (dataDir) await fs.rm(dataDir, { recursive: true, force: true });
});

type LogLine = Record<string, unknown> & { level: number; msg: string };

describe('the worker process logs', () => {
  it("prints the Temporal SDK's lines as the service's JSON log lines on stdout, a failed workflow's stack trace inside one line", { timeout: 180_000 }, async () => {
    const child = spawn(process.execPath, entryArgs('worker'), {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        DATABASE_URL: db.url,
        TEMPORAL_ADDRESS: inject('temporalAddress'),
        TEMPORAL_TASK_QUEUE: taskQueue,
        DATA_DIR: dataDir,
        LOG_LEVEL: 'info',
        SIGNING_SECRET: 'a-shared-signing-secret-of-at-least-32-chars',
      } as NodeJS.ProcessEnv,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    worker = child;
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const lines = () => stdout.split('\n').filter((l) => l !== '' && l !== BANNER);
    const logged = (): LogLine[] =>
      lines().flatMap((l) => {
        try {
          return [JSON.parse(l) as LogLine];
        } catch {
          return [];
        }
      });

    await vi.waitFor(() => expect(stdout).toContain(BANNER), { timeout: 90_000, interval: 100 });
    // The SDK's own line, as a JSON log line of the service.
    const output = () => `stdout:\n${stdout}\nstderr:\n${stderr}`;
    await vi.waitFor(() => expect(logged().find((l) => l.msg === 'Worker state changed' && l.state === 'RUNNING'), output()).toBeDefined(), { timeout: 30_000, interval: 100 });

    // A job that fails: its workflow closes Failed, and the SDK logs it with the failure's stack trace.
    const account = await makeAccount(orm, { coins: '10' });
    const { key } = await makeKey(orm, account.id);
    const submitted = await getJson(`${api.base}/api/v1/generations`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mas/image-demo', prompt: 'a failing job', settings: { size: 128, fail: true } }),
    });
    expect(submitted.status).toBe(202);
    await vi.waitFor(
      () => expect(logged().find((l) => l.msg === 'Workflow failed' && l.workflowId === submitted.body.id), output()).toBeDefined(),
      { timeout: 60_000, interval: 100 },
    );
    const failed = logged().find((l) => l.msg === 'Workflow failed' && l.workflowId === submitted.body.id)!;
    expect(failed).toMatchObject({ level: 40, service: 'mas', sdkComponent: 'worker', taskQueue, err: { message: 'The local provider was asked to fail (fail: true).' } });
    const stack = (failed.err as { stack?: unknown }).stack;
    expect(typeof stack).toBe('string');
    // A multi-line stack trace, inside the one line.
    expect((stack as string).split('\n').length).toBeGreaterThan(1);

    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(logged().find((l) => l.msg === 'Worker state changed' && l.state === 'STOPPED'), output()).toBeDefined();

    // Every line on stdout is a JSON log line of the service (besides the one line for people),
    // and nothing is printed in the SDK's own format, on stdout or stderr.
    for (const line of lines()) {
      expect(() => JSON.parse(line), line).not.toThrow();
      expect(JSON.parse(line), line).toMatchObject({ service: 'mas', level: expect.any(Number), time: expect.any(String), msg: expect.any(String) });
    }
    expect(stdout.split('\n').filter((l) => l === BANNER)).toHaveLength(1);
    expect(stderr).not.toMatch(/\[(TRACE|DEBUG|INFO|WARN|ERROR)\]/);
    expect(stderr).not.toMatch(/Worker state changed|Workflow failed/);
  });
});
