import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeAccount, makeKey, openTestOrm } from '../support/db.ts';
import { startTestApi } from '../support/http.ts';
import { ensureInspector, runInspectorCli } from '../support/inspector.ts';

/**
 * The MCP Inspector CLI 2.12.0, as a developer runs it against the server, with `--strict`: its
 * schema-portability lint reports every bare `{}`, boolean schema and `type` array in the tool
 * schemas of tools/list. The server's must give none (issue 35 counted 13 warnings).
 */
let orm: MikroORM;
let api: Awaited<ReturnType<typeof startTestApi>>;
let home: string;
beforeAll(async () => {
  await ensureInspector(); // minutes on the first run of this machine, with progress
  orm = await openTestOrm();
  api = await startTestApi(orm);
  // Its catalog and secret store live under HOME: a fresh one, not the user's.
  home = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-inspector-home-'));
}, 600_000);
afterAll(async () => {
  await api?.close();
  await orm?.close();
  if (home) await fs.rm(home, { recursive: true, force: true });
});

describe('MCP Inspector CLI --strict', () => {
  it('lists the tools with 0 schema warnings and 0 errors', async () => {
    const account = await makeAccount(orm, { coins: '1' });
    const { key } = await makeKey(orm, account.id);
    const env = { HOME: home, XDG_CONFIG_HOME: home, XDG_DATA_HOME: home, NO_COLOR: '1' };
    const args = ['--transport', 'http', '--header', `Authorization: Bearer ${key}`, '--method', 'tools/list', `${api.url}/api/v1/mcp`];
    const strict = await runInspectorCli([...args, '--strict'], env);
    expect(strict.code, strict.stderr).toBe(0);
    const names = (JSON.parse(strict.stdout) as { tools: { name: string }[] }).tools.map((t) => t.name);
    expect(names).toEqual(expect.arrayContaining(['list_models', 'get_model', 'chat', 'generate', 'upload_file', 'get_generation', 'get_balance']));
    expect(strict.stderr).not.toMatch(/Warning: tool|Error: tool|Schema portability/);
    // Without --strict it would say "Schema portability: N errors, M warnings" on stderr when there were any.
    const plain = await runInspectorCli(args, env);
    expect(plain.code, plain.stderr).toBe(0);
    expect(plain.stderr).not.toMatch(/Schema portability/);
  });
});
