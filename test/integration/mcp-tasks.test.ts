import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, CreateTaskResultSchema, McpError, RELATED_TASK_META_KEY, type CallToolResult, type Task } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeAccount, makeFailedJob, makeKey } from '../support/db.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';
import { expectSettledWallet } from '../support/ledger.ts';

/**
 * MCP tasks (revision 2025-11-25) for `generate`, through the official TypeScript SDK's task
 * client (`client.experimental.tasks`) over real HTTP, on real PostgreSQL and Temporal. A task
 * is its job row: every request below is a new HTTP POST answered by a new server.
 */
const RETENTION_SECONDS = 1800;
let h: JobHarness;
beforeAll(async () => {
  h = await startJobHarness({ retentionSeconds: RETENTION_SECONDS });
});
afterAll(() => h.close());

async function connect(key: string, way: 'header' | 'link' = 'header'): Promise<Client> {
  const client = new Client({ name: 'mas-tasks-test', version: '1.0.0' });
  const transport =
    way === 'header'
      ? new StreamableHTTPClientTransport(new URL(`${h.base}/api/v1/mcp`), { requestInit: { headers: { Authorization: `Bearer ${key}` } } })
      : new StreamableHTTPClientTransport(new URL(`${h.base}/api/v1/mcp/${key}`));
  await client.connect(transport);
  // The client learns which tools may run as tasks (and their output schemas) from tools/list.
  await client.listTools();
  return client;
}

async function funded(coins = '100') {
  const account = await makeAccount(h.orm, { coins });
  const key = await makeKey(h.orm, account.id);
  return { accountId: account.id, key: key.key, keyId: key.id };
}

/** A task-augmented tools/call of generate: the CreateTaskResult, answered at once. */
async function createTask(client: Client, args: Record<string, unknown>, task: Record<string, unknown> = { ttl: 60_000 }) {
  return client.request({ method: 'tools/call', params: { name: 'generate', arguments: args, task } }, CreateTaskResultSchema);
}

const balanceOf = async (accountId: string) => (await h.orm.em.fork().execute<{ c: string }[]>('select (subscription_micro + purchased_micro)::text as c from wallets where account_id = ?', [accountId]))[0]!.c;
const jobCount = async (accountId: string) => Number((await h.orm.em.fork().execute<{ n: string }[]>('select count(*)::text as n from generations where account_id = ?', [accountId]))[0]!.n);
const ledgerOf = async (reference: string) =>
  h.orm.em.fork().execute<{ kind: string; pocket: string; amount: string }[]>('select kind, pocket, amount_micro::text as amount from ledger_entries where reference = ? order by id', [reference]);
const text = (r: CallToolResult) => r.content.flatMap((c) => (c.type === 'text' ? [c.text] : [])).join('\n');

async function rpcError(promise: Promise<unknown>): Promise<McpError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, 'expected a JSON-RPC error').toBeInstanceOf(McpError);
  return err as McpError;
}

describe('MCP tasks for generate', () => {
  it('declares the tasks capability, and generate alone declares taskSupport "optional"', async () => {
    const { key } = await funded();
    const client = await connect(key);
    expect(client.getServerCapabilities()?.tasks).toEqual({ list: {}, cancel: {}, requests: { tools: { call: {} } } });
    const { tools } = await client.listTools();
    expect(tools.find((t) => t.name === 'generate')!.execution).toEqual({ taskSupport: 'optional' });
    for (const tool of tools.filter((t) => t.name !== 'generate')) expect(tool.execution, tool.name).toBeUndefined();
    await client.close();
  });

  it('creates a task at once, gets it, and fetches the result through a fresh connection; tasks/list shows it', async () => {
    const { accountId, key } = await funded();
    const client = await connect(key);
    const before = await balanceOf(accountId);
    const { task } = await createTask(client, { model: 'mas/image-demo', prompt: 'a fox', settings: { size: 128, delay_ms: 1500 } });
    // At once: the job was accepted, not waited for.
    expect(task).toMatchObject({ taskId: expect.stringMatching(/^gen_/), status: 'working', pollInterval: 5000 });
    expect(task.statusMessage).toContain(task.taskId);
    // While it runs, the task lives at least the result's retention from now.
    expect(task.ttl).toBeGreaterThanOrEqual(RETENTION_SECONDS * 1000);
    // The price is reserved when the task is created.
    expect(BigInt(await balanceOf(accountId))).toBeLessThan(BigInt(before));

    const got = await client.experimental.tasks.getTask(task.taskId);
    expect(got).toMatchObject({ taskId: task.taskId, createdAt: task.createdAt });
    expect(['working', 'completed']).toContain(got.status);

    // tasks/result waits for the job: asked on another connection (another server) than the one that created it.
    const other = await connect(key, 'link');
    const result = await other.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema);
    const job = result.structuredContent as { id: string; status: string; cost_coins: number; output: { url: string; expires_at: string }; created_at: string };
    expect(job).toMatchObject({ id: task.taskId, status: 'succeeded' });
    expect(result.isError).toBeFalsy();
    expect(result.content.find((c) => c.type === 'resource_link')).toMatchObject({ uri: job.output.url, mimeType: 'image/png' });
    expect(text(result)).toMatch(/succeeded/);
    expect(result._meta?.[RELATED_TASK_META_KEY]).toEqual({ taskId: task.taskId });

    const done = await other.experimental.tasks.getTask(task.taskId);
    expect(done).toMatchObject({ status: 'completed', taskId: task.taskId });
    expect(done.pollInterval).toBeUndefined();
    // It lives as long as its result: until the result link expires.
    expect(done.ttl).toBe(Date.parse(job.output.expires_at) - Date.parse(job.created_at));

    const { tasks } = await other.experimental.tasks.listTasks();
    expect(tasks.find((t) => t.taskId === task.taskId)).toMatchObject({ status: 'completed' });
    // Charged once, as generate charges.
    expect(BigInt(before) - BigInt(await balanceOf(accountId))).toBe(BigInt(job.cost_coins) * 1_000_000n);
    await expectSettledWallet(h.orm, accountId);
    await Promise.all([client.close(), other.close()]);
  });

  it("runs through the SDK's callToolStream: task created, polled, result", async () => {
    const { key } = await funded();
    const client = await connect(key);
    const kinds: string[] = [];
    let result: CallToolResult | undefined;
    for await (const message of client.experimental.tasks.callToolStream({ name: 'generate', arguments: { model: 'mas/image-demo', settings: { size: 128 } } }, CallToolResultSchema)) {
      kinds.push(message.type);
      if (message.type === 'error') throw message.error;
      if (message.type === 'result') result = message.result as CallToolResult;
    }
    expect(kinds[0]).toBe('taskCreated');
    expect(kinds.at(-1)).toBe('result');
    expect(result!.structuredContent).toMatchObject({ status: 'succeeded' });
    await client.close();
  });

  it('tasks/cancel cancels the job and refunds it exactly once; a second cancel is invalid params', async () => {
    const { accountId, key } = await funded();
    const client = await connect(key);
    const before = await balanceOf(accountId);
    const { task } = await createTask(client, { model: 'mas/image-demo', settings: { size: 128, delay_ms: 30_000 } });
    const cancelled = await client.experimental.tasks.cancelTask(task.taskId);
    expect(cancelled).toMatchObject({ taskId: task.taskId, status: 'cancelled' });
    expect(await balanceOf(accountId)).toBe(before);
    const ledger = await ledgerOf(task.taskId);
    // One reservation and one release, nothing captured.
    expect(ledger.filter((e) => e.kind === 'reservation').length).toBeGreaterThan(0);
    expect(ledger.filter((e) => e.kind === 'release').length).toBe(ledger.filter((e) => e.kind === 'reservation').length);
    expect(ledger.filter((e) => e.kind === 'capture')).toEqual([]);

    const again = await rpcError(client.experimental.tasks.cancelTask(task.taskId));
    expect(again.code).toBe(-32602);
    expect(again.message).toMatch(/already ended \(canceled\)/);
    expect(await ledgerOf(task.taskId)).toEqual(ledger);
    expect(await balanceOf(accountId)).toBe(before);

    expect(await client.experimental.tasks.getTask(task.taskId)).toMatchObject({ status: 'cancelled' });
    const result = await client.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema);
    expect(result.isError).toBe(true);
    expect(text(result)).toMatch(/canceled and refunded in full/);
    await expectSettledWallet(h.orm, accountId);
    await client.close();
  });

  it('a failed job is a failed task: refunded, its result the isError answer with the refund text', async () => {
    const { accountId, key } = await funded();
    const client = await connect(key);
    const before = await balanceOf(accountId);
    const { task } = await createTask(client, { model: 'mas/image-demo', settings: { fail: true } });
    const result = await client.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema);
    expect(result.isError).toBe(true);
    expect(result.structuredContent).toMatchObject({ status: 'failed', cost_coins: 0 });
    expect(text(result)).toMatch(/refunded in full/);
    const failed = await client.experimental.tasks.getTask(task.taskId);
    expect(failed.status).toBe('failed');
    expect(failed.statusMessage).toMatch(/refunded in full/);
    expect(failed.ttl).toBe(Date.parse(failed.lastUpdatedAt) + RETENTION_SECONDS * 1000 - Date.parse(failed.createdAt));
    expect(await balanceOf(accountId)).toBe(before);
    await client.close();
  });

  it('the same idempotency_key gives the same task, charged once', async () => {
    const { accountId, key } = await funded();
    const client = await connect(key);
    const before = BigInt(await balanceOf(accountId));
    const args = { model: 'mas/image-demo', settings: { size: 128 }, idempotency_key: 'task-retry-1' };
    const first = await createTask(client, args);
    const second = await createTask(client, args);
    expect(second.task.taskId).toBe(first.task.taskId);
    const result = await client.experimental.tasks.getTaskResult(first.task.taskId, CallToolResultSchema);
    const cost = BigInt((result.structuredContent as { cost_coins: number }).cost_coins) * 1_000_000n;
    expect(before - BigInt(await balanceOf(accountId))).toBe(cost);
    await client.close();
  });

  it("another account cannot see, wait for or cancel a task, and gets the same answer as for an unknown id", async () => {
    const a = await funded();
    const b = await funded();
    const clientA = await connect(a.key);
    const clientB = await connect(b.key);
    const { task } = await createTask(clientA, { model: 'mas/image-demo', settings: { size: 128, delay_ms: 3000 } });
    const unknown = 'gen_doesnotexist000000000';
    const same = async (call: (id: string) => Promise<unknown>) => {
      const theirs = await rpcError(call(task.taskId));
      const none = await rpcError(call(unknown));
      expect(theirs.code).toBe(-32602);
      expect({ code: theirs.code, message: theirs.message.replace(task.taskId, 'ID') }).toEqual({ code: none.code, message: none.message.replace(unknown, 'ID') });
    };
    await same((id) => clientB.experimental.tasks.getTask(id));
    await same((id) => clientB.experimental.tasks.getTaskResult(id, CallToolResultSchema));
    await same((id) => clientB.experimental.tasks.cancelTask(id));
    // A malformed id is not found either (never a 500).
    expect((await rpcError(clientB.experimental.tasks.getTask('x'.repeat(8000)))).code).toBe(-32602);
    const { tasks } = await clientB.experimental.tasks.listTasks();
    expect(tasks.map((t: Task) => t.taskId)).not.toContain(task.taskId);
    // B's cancel did nothing: A's job runs on to its end.
    expect((await clientA.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema)).structuredContent).toMatchObject({ status: 'succeeded' });
    await Promise.all([clientA.close(), clientB.close()]);
  });

  it('tasks/list pages with nextCursor over the account\'s jobs, newest first; a bad cursor is invalid params', async () => {
    const { accountId, key, keyId } = await funded('1000');
    const client = await connect(key);
    // More than a page (50): jobs made by the job path's fixture, then one task, the newest.
    const made: string[] = [];
    for (let i = 0; i < 52; i++) made.push(await makeFailedJob(h.orm, accountId, keyId));
    const newest = (await createTask(client, { model: 'mas/image-demo', settings: { size: 128 } })).task.taskId;
    const pages: Task[][] = [];
    let cursor: string | undefined;
    do {
      const page = await client.experimental.tasks.listTasks(cursor);
      pages.push(page.tasks);
      cursor = page.nextCursor;
    } while (cursor);
    expect(pages.map((p) => p.length)).toEqual([50, 3]);
    const seen = pages.flat().map((t) => t.taskId);
    expect(seen[0]).toBe(newest);
    expect(new Set(seen)).toEqual(new Set([newest, ...made]));
    expect(pages.flat().filter((t) => t.taskId !== newest).every((t) => t.status === 'failed')).toBe(true);
    expect((await rpcError(client.experimental.tasks.listTasks('not-a-cursor'))).code).toBe(-32602);
    await client.close();
  });

  it('a malformed task param, a bad argument, an unknown tool or a tool without task support start nothing and charge nothing', async () => {
    const { accountId, key } = await funded();
    const client = await connect(key);
    const before = await balanceOf(accountId);
    const raw = (params: Record<string, unknown>) => client.request({ method: 'tools/call', params: params as never }, CreateTaskResultSchema);

    expect((await rpcError(raw({ name: 'generate', arguments: { model: 'mas/image-demo' }, task: { ttl: 'soon' } }))).code).toBe(-32602);
    expect((await rpcError(raw({ name: 'generate', arguments: { model: 'mas/image-demo' }, task: 'yes' }))).code).toBe(-32602);

    // A malformed tasks/* request is invalid params too, not the SDK's internal error.
    const malformedGet = await rpcError(client.request({ method: 'tasks/get', params: { taskId: 42 } as never }, CreateTaskResultSchema));
    expect(malformedGet.code).toBe(-32602);
    expect(malformedGet.message).toMatch(/taskId/);

    const bad = await rpcError(createTask(client, { model: 'mas/image-demo', settings: { size: 999 } }));
    expect(bad.code).toBe(-32602);
    expect(bad.message).toContain('settings.size');
    expect(bad.data).toMatchObject({ error: { type: 'invalid_request_error' }, status: 400 });
    const unknownArgument = await rpcError(createTask(client, { model: 'mas/image-demo', colour: 'red' }));
    expect(unknownArgument.message).toMatch(/Unknown argument 'colour'/);

    const unknownTool = await rpcError(raw({ name: 'paint', arguments: {}, task: {} }));
    expect(unknownTool.code).toBe(-32602);
    const notATask = await rpcError(raw({ name: 'get_balance', arguments: {}, task: {} }));
    expect(notATask.code).toBe(-32601);

    expect(await jobCount(accountId)).toBe(0);
    expect(await balanceOf(accountId)).toBe(before);
    await expectSettledWallet(h.orm, accountId);
    await client.close();
  });

  it('an account without the balance gets a JSON-RPC error with the billing code, and no job', async () => {
    const { accountId, key } = await funded('0');
    const client = await connect(key);
    const err = await rpcError(createTask(client, { model: 'mas/image-demo', settings: { size: 128 } }));
    expect(err.code).toBe(-32000);
    expect(err.data).toMatchObject({ error: { type: 'billing_error', code: 'insufficient_balance' }, status: 402 });
    expect(await jobCount(accountId)).toBe(0);
    await client.close();
  });

  it('a client without tasks keeps the waiting generate', async () => {
    const { key } = await funded();
    const client = await connect(key);
    const result = (await client.callTool({ name: 'generate', arguments: { model: 'mas/image-demo', settings: { size: 128 }, wait_seconds: 30 } })) as CallToolResult;
    expect(result.structuredContent).toMatchObject({ status: 'succeeded' });
    await client.close();
  });
});
