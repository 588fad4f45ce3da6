import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { createFreshDatabase } from '../support/db.ts';
import { freePort, runCli, spawnProject, type Spawned, entryArgs } from '../support/process.ts';

/**
 * The processes of a deployment of many (docs/deploy.md), as real processes on a brand-new
 * database: `npm run start:api` (api.ts) starts no embedded server and never migrates;
 * `npm run worker` and the CLI refuse a database with pending migrations; `npm run migrate`
 * applies them once; an instance's SIGTERM fails readiness first and keeps serving for
 * SHUTDOWN_READINESS_DELAY_SECONDS, then drains and exits 0.
 */
let db: Awaited<ReturnType<typeof createFreshDatabase>>;
let dataDir: string;
const running: Spawned[] = [];

beforeAll(async () => {
  db = await createFreshDatabase();
  dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-roles-'));
});
afterAll(async () => {
  for (const p of running) if (p.child.exitCode === null) p.child.kill('SIGKILL');
  await db.drop();
  await fs.rm(dataDir, { recursive: true, force: true });
});

const env = (extra: Record<string, string> = {}) => ({
  DATABASE_URL: db.url,
  TEMPORAL_ADDRESS: inject('temporalAddress'),
  TEMPORAL_TASK_QUEUE: `e2e-roles-${process.pid}`,
  DATA_DIR: dataDir,
  HOST: '127.0.0.1',
  LOG_LEVEL: 'warn',
  SIGNING_SECRET: 'a-shared-signing-secret-of-at-least-32-chars',
  ...extra,
});

function run(file: 'api' | 'worker' | 'migrate', extra: Record<string, string>): Spawned {
  const proc = spawnProject(entryArgs(file), extra);
  running.push(proc);
  return proc;
}

describe('process roles', () => {
  it('an API instance refuses to start without an external PostgreSQL and Temporal, in one line', async () => {
    const proc = run('api', { DATA_DIR: dataDir, LOG_LEVEL: 'warn' });
    expect(await proc.exited).toBe(1);
    expect(proc.output().trim()).toBe('npm run start:api starts no embedded servers: set DATABASE_URL and TEMPORAL_ADDRESS (npm start runs everything on one machine).');
  });

  it('an API instance, a worker and the CLI refuse a database with pending migrations and name the command', { timeout: 180_000 }, async () => {
    const api = run('api', env({ PORT: String(await freePort()) }));
    const worker = run('worker', env());
    expect(await api.exited).toBe(1);
    expect(await worker.exited).toBe(1);
    for (const proc of [api, worker]) expect(proc.output()).toMatch(/The database has \d+ migration\(s\) not yet applied \(Migration2026.*\)\. Run `npm run migrate` once/);
    const cli = await runCli(['balance', '--account', 'nobody@example.com', '--json'], env());
    expect(cli.code).toBe(2);
    expect(JSON.parse(cli.stdout)).toMatchObject({ error: { code: 'invalid_configuration', message: expect.stringContaining('npm run migrate') } });
    // None of them applied anything.
    const sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    const { rows } = await sql.query<{ t: string | null }>(`select to_regclass('public.accounts')::text as t`);
    await sql.end();
    expect(rows[0]!.t).toBeNull();
  });

  it('npm run migrate applies them once and seeds the catalog; a second run has nothing to do', async () => {
    const first = run('migrate', env());
    expect(await first.exited).toBe(0);
    expect(first.output()).toMatch(/^Database up to date\. Added catalog models: mas\/echo, /m);
    const second = run('migrate', env());
    expect(await second.exited).toBe(0);
    expect(second.output().trim()).toBe('Database up to date.');
  });

  it('a migration that fails stops npm run migrate with its error, and applies nothing', async () => {
    // Migrations run in a process of their own (config/database.ts, migrateApart): its error comes back to the one that started it.
    const broken = await createFreshDatabase();
    const sql = new pg.Client({ connectionString: broken.url });
    try {
      await sql.connect();
      await sql.query('create table accounts (id int)');
      const proc = run('migrate', env({ DATABASE_URL: broken.url }));
      expect(await proc.exited).toBe(1);
      const fatal = proc.output().split('\n').find((line) => line.includes('"could not start"'));
      expect(JSON.parse(fatal!)).toMatchObject({ err: { message: expect.stringMatching(/^Migration Migration20261122000000_foundation \(up\) failed: [^]*relation "accounts" already exists/) } });
      const { rows } = await sql.query<{ t: string | null }>(`select to_regclass('public.wallets')::text as t`);
      expect(rows[0]!.t).toBeNull();
    } finally {
      await sql.end();
      await broken.drop();
    }
  });

  it('then an API instance serves; on SIGTERM /readyz fails first while requests are still served, then it drains and exits 0', async () => {
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const api = run('api', env({ PORT: String(port), SHUTDOWN_READINESS_DELAY_SECONDS: '3' }));
    await api.waitFor(/listening on .* \(API instance, port \d+\)/, 120_000);
    // No demo account on an instance: that is `npm start`'s, for one machine.
    expect(api.output()).not.toContain('Demo account created');
    expect((await fetch(`${base}/readyz`)).status).toBe(200);
    expect((await fetch(`${base}/api/v1/models`)).status).toBe(401);

    const signalled = Date.now();
    api.child.kill('SIGTERM');
    // Asked until the signal has been handled (a fixed pause hoped it had, however loaded the machine).
    await vi.waitFor(async () => expect((await fetch(`${base}/readyz`)).status).toBe(503), { timeout: 10_000, interval: 50 });
    // Still serving during the delay: a balancer that has not yet seen the 503 loses nothing.
    expect((await fetch(`${base}/api/v1/models`)).status).toBe(401);
    expect(await api.exited).toBe(0);
    expect(Date.now() - signalled).toBeGreaterThanOrEqual(3000);
    await expect(fetch(`${base}/readyz`)).rejects.toThrow();
  });
});
