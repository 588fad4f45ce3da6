import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureReachable, postgresUserIfRoot } from '../../adapters/embedded/postgres.ts';
import { silentLogger } from '../support/db.ts';
import { freePort, runCli, serverArgs, spawnProject } from '../support/process.ts';

/**
 * The two-command set-up with no DATABASE_URL: the CLI and the server share one embedded
 * PostgreSQL under DATA_DIR, inside a `mktemp -d` folder that other users cannot enter.
 */
let closed: string;
let dataDir: string;
beforeAll(async () => {
  closed = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-closed-'));
  await fs.chmod(closed, 0o700);
  dataDir = path.join(closed, 'data');
});
/** Servers the tests started: one left running by a test that timed out is stopped here, not leaked. */
const servers: ReturnType<typeof spawnProject>[] = [];
afterAll(async () => {
  for (const s of servers) {
    if (s.child.exitCode !== null || s.child.signalCode !== null) continue;
    s.child.kill('SIGTERM');
    const stopped = await Promise.race([s.exited.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 30_000))]);
    if (!stopped) s.child.kill('SIGKILL');
  }
  await fs.rm(closed, { recursive: true, force: true });
});

function postgresRunning(): boolean {
  const pidFile = path.join(dataDir, 'postgres', 'postmaster.pid');
  if (!existsSync(pidFile)) return false;
  try {
    process.kill(Number(execFileSync('head', ['-1', pidFile]).toString().trim()), 0);
    return true;
  } catch {
    return false;
  }
}

const env = () => ({ DATA_DIR: dataDir });

describe('embedded PostgreSQL', () => {
  it('the CLI works on a fresh DATA_DIR with no server running, prints one JSON object, and stops its database', async () => {
    const created = await runCli(['account', 'create', '--email', 'ops@example.com', '--json'], env());
    expect(created.code).toBe(0);
    expect(created.stdout.trim().split('\n')).toHaveLength(1);
    expect(JSON.parse(created.stdout)).toEqual({ id: expect.stringMatching(/^acct_/), email: 'ops@example.com' });
    expect(postgresRunning()).toBe(false);

    const topup = await runCli(['wallet', 'topup', '--account', 'ops@example.com', '--coins', '2.5', '--json'], env());
    expect(JSON.parse(topup.stdout)).toMatchObject({ object: 'topup', coins: 2.5, balance: { coins: 2.5, paid_account: true } });

    const failed = await runCli(['balance', '--account', 'nobody@example.com', '--json'], env());
    expect(failed.code).not.toBe(0);
    expect(JSON.parse(failed.stdout)).toEqual({ error: { message: expect.any(String), type: 'not_found_error', code: 'account_not_found' } });
  });

  it('the server and the CLI share one running server; the last one out stops it', async () => {
    const port = await freePort();
    const server = spawnProject(serverArgs(), { ...env(), PORT: String(port), HOST: '127.0.0.1' });
    servers.push(server);
    await server.waitFor(/listening on/);
    expect(postgresRunning()).toBe(true);
    // With no TEMPORAL_ADDRESS, a Temporal dev server runs too, with its Web UI printed.
    const [, ui] = await server.waitFor(/Temporal Web UI \(embedded dev server\): (http:\/\/127\.0\.0\.1:\d+)/);
    expect((await fetch(ui!)).status).toBe(200);
    const temporalState = JSON.parse(await fs.readFile(path.join(dataDir, 'temporal', 'server.json'), 'utf8')) as { pid: number };
    // The accounts the CLI made are there, so no demo account is created.
    expect(server.output()).not.toContain('Demo account created');

    const key = await runCli(['key', 'create', '--account', 'ops@example.com', '--name', 'shared', '--json'], env());
    expect(key.code).toBe(0);
    const secret = JSON.parse(key.stdout).key as string;
    // The CLI left, the server still has its database.
    expect(postgresRunning()).toBe(true);
    const balance = await fetch(`http://127.0.0.1:${port}/api/v1/balance`, { headers: { authorization: `Bearer ${secret}` } });
    expect(await balance.json()).toMatchObject({ coins: 2.5 });

    const list = await runCli(['key', 'list', '--account', 'ops@example.com', '--json'], env());
    expect(JSON.parse(list.stdout).data).toEqual([
      {
        id: expect.any(String), name: 'shared', prefix: secret.slice(0, 12), created_at: expect.any(String), last_used_at: expect.any(String), revoked_at: null,
        spend_limit_coins: null, spend_limit_period: null, expires_at: null, allowed_models: null, usage_coins: 0, remaining_coins: null,
      },
    ]);
    const revoke = await runCli(['key', 'revoke', '--id', JSON.parse(list.stdout).data[0].id, '--json'], env());
    expect(JSON.parse(revoke.stdout).revoked_at).not.toBeNull();
    expect((await fetch(`http://127.0.0.1:${port}/api/v1/balance`, { headers: { authorization: `Bearer ${secret}` } })).status).toBe(401);

    server.child.kill('SIGTERM');
    expect(await server.exited).toBe(0);
    expect(postgresRunning()).toBe(false);
    expect(() => process.kill(temporalState.pid, 0)).toThrow();
  });

  it.runIf(process.getuid?.() === 0)('as root, lets the postgres user through closed folders to its files', async () => {
    const runAs = (await postgresUserIfRoot(silentLogger))!;
    const deep = path.join(closed, 'a', 'b');
    await fs.mkdir(deep, { recursive: true, mode: 0o700 });
    await fs.chmod(path.join(closed, 'a'), 0o700);
    const file = path.join(deep, 'probe');
    await fs.writeFile(file, 'x');
    await fs.chmod(deep, 0o755);
    const canRead = () => {
      try {
        execFileSync(process.execPath, ['-e', `require('fs').readFileSync(${JSON.stringify(file)})`], { uid: runAs.uid, gid: runAs.gid, cwd: '/', stdio: 'ignore' });
        return true;
      } catch {
        return false;
      }
    };
    expect(canRead()).toBe(false);
    await ensureReachable(runAs, [file], silentLogger);
    expect(canRead()).toBe(true);
    // Passage only: the postgres user still cannot list the closed folder.
    const { mode } = await fs.stat(path.join(closed, 'a'));
    expect(mode & 0o004).toBe(0);
  });
});
