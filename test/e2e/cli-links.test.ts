import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeAccount, openTestOrm, uniqueEmail, testDatabaseUrl } from '../support/db.ts';
import { runCli } from '../support/process.ts';

/**
 * The links the CLI prints point where the server really serves (issue 34): PUBLIC_BASE_URL,
 * else http://localhost:$PORT, the one resolution the server uses (config/env.ts publicBaseUrl).
 */
let orm: MikroORM;
beforeAll(async () => {
  orm = await openTestOrm(2);
});
afterAll(async () => {
  await orm?.close();
});

const env = (extra: Record<string, string>) => ({ DATABASE_URL: testDatabaseUrl(), LOG_LEVEL: 'warn', ...extra });

describe('mas links', () => {
  it('with PORT=18123 and no PUBLIC_BASE_URL, `account login-link` and `admin create` link to http://localhost:18123', async () => {
    const account = await makeAccount(orm);
    const link = await runCli(['account', 'login-link', '--account', account.email, '--json'], env({ PORT: '18123' }));
    expect(link.stderr).toBe('');
    expect(JSON.parse(link.stdout).url).toMatch(/^http:\/\/localhost:18123\/login\/link\?token=/);

    const admin = await runCli(['admin', 'create', '--email', uniqueEmail('cliadmin'), '--role', 'viewer'], env({ PORT: '18123' }));
    expect(admin.code).toBe(0);
    expect(admin.stdout).toMatch(/^ {2}http:\/\/localhost:18123\/admin\/login\/link\?token=\S+$/m);
    expect(admin.stdout).not.toContain(':8080');
  });

  it('with PUBLIC_BASE_URL set, the links use it (whatever PORT is)', async () => {
    const account = await makeAccount(orm);
    const link = await runCli(['account', 'login-link', '--account', account.id, '--json'], env({ PORT: '18123', PUBLIC_BASE_URL: 'https://mas.example.org/' }));
    expect(JSON.parse(link.stdout).url).toMatch(/^https:\/\/mas\.example\.org\/login\/link\?token=/);
    const admin = await runCli(['admin', 'create', '--email', uniqueEmail('cliadmin'), '--role', 'operator', '--json'], env({ PUBLIC_BASE_URL: 'https://mas.example.org' }));
    expect(JSON.parse(admin.stdout).url).toMatch(/^https:\/\/mas\.example\.org\/admin\/login\/link\?token=/);
  });
});
