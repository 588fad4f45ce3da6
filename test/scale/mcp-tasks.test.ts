import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, CreateTaskResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ClusterProcess } from '../../scripts/support/cluster.ts';
import { startTestCluster, type TestCluster } from './support.ts';

/**
 * Issue 35: "a task created on one instance of `npm run cluster` can be read on the other." A
 * task is its job row (adapters/mcp/tasks.ts), not state of the server that created it: the
 * official SDK client creates it on one API instance, addressed directly (not through nginx),
 * and reads it (tasks/get, tasks/result, tasks/list) or cancels it on the other.
 */
let tc: TestCluster;

beforeAll(async () => {
  tc = await startTestCluster('mcp-tasks', { apis: 2, workers: 1 });
});
afterAll(async () => {
  await tc?.stop();
});

/** A client of one API instance, on its own port. */
async function clientOf(instance: number | ClusterProcess, key: string): Promise<Client> {
  const port = (typeof instance === 'number' ? tc.cluster.apis[instance]! : instance).port!;
  const client = new Client({ name: `mas-scale-tasks-${port}`, version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/api/v1/mcp`), { requestInit: { headers: { Authorization: `Bearer ${key}` } } }));
  await client.listTools();
  return client;
}

const createTask = (client: Client, args: Record<string, unknown>) =>
  client.request({ method: 'tools/call', params: { name: 'generate', arguments: args, task: { ttl: 60_000 } } }, CreateTaskResultSchema);

const balanceOf = async (accountId: string) => (await tc.sql.query<{ c: string }>('select (subscription_micro + purchased_micro)::text as c from wallets where account_id = $1', [accountId])).rows[0]!.c;

describe('MCP tasks across instances', () => {
  it('a task created on one instance is read, listed and its result fetched on the other', async () => {
    expect(tc.cluster.apis.map((a) => a.port)).toHaveLength(2);
    const { key } = await tc.fundedKey();
    const first = await clientOf(0, key);
    const second = await clientOf(1, key);
    const { task } = await createTask(first, { model: 'mas/image-demo', settings: { size: 128, delay_ms: 1500 } });
    expect(task.status).toBe('working');

    expect(await second.experimental.tasks.getTask(task.taskId)).toMatchObject({ taskId: task.taskId, createdAt: task.createdAt });
    const result = await second.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema);
    expect(result.structuredContent).toMatchObject({ id: task.taskId, status: 'succeeded' });
    expect(result.content.some((c) => c.type === 'resource_link')).toBe(true);
    expect(await second.experimental.tasks.getTask(task.taskId)).toMatchObject({ status: 'completed' });
    expect((await second.experimental.tasks.listTasks()).tasks.map((t) => t.taskId)).toContain(task.taskId);
    // And back on the first instance: the same task.
    expect(await first.experimental.tasks.getTask(task.taskId)).toMatchObject({ status: 'completed' });
    await Promise.all([first.close(), second.close()]);
  });

  it('a task created on one instance is cancelled on the other, refunded once', async () => {
    const { key, accountId } = await tc.fundedKey();
    const before = await balanceOf(accountId);
    const first = await clientOf(0, key);
    const second = await clientOf(1, key);
    const { task } = await createTask(first, { model: 'mas/image-demo', settings: { size: 128, delay_ms: 60_000 } });
    expect(await second.experimental.tasks.cancelTask(task.taskId)).toMatchObject({ status: 'cancelled' });
    await expect(first.experimental.tasks.cancelTask(task.taskId)).rejects.toMatchObject({ code: -32602 });
    expect(await first.experimental.tasks.getTask(task.taskId)).toMatchObject({ status: 'cancelled' });
    expect(await balanceOf(accountId)).toBe(before);
    const releases = await tc.sql.query<{ n: string }>(`select count(*)::text as n from ledger_entries where reference = $1 and kind = 'release'`, [task.taskId]);
    const reservations = await tc.sql.query<{ n: string }>(`select count(*)::text as n from ledger_entries where reference = $1 and kind = 'reservation'`, [task.taskId]);
    expect(releases.rows[0]!.n).toBe(reservations.rows[0]!.n);
    await Promise.all([first.close(), second.close()]);
  });

  it('a task outlives the instance that created it: a new instance started after it stopped answers it', async () => {
    const { key } = await tc.fundedKey();
    const creator = tc.cluster.apis[0]!;
    const client = await clientOf(creator, key);
    const { task } = await createTask(client, { model: 'mas/image-demo', settings: { size: 128, delay_ms: 3000 } });
    await client.close();
    await tc.cluster.front(tc.cluster.apis.filter((a) => a !== creator && a.running()));
    creator.child.kill('SIGTERM');
    await creator.exited;
    const replacement = await tc.cluster.startApi();
    await tc.cluster.front();
    const fresh = await clientOf(replacement, key);
    expect((await fresh.experimental.tasks.getTask(task.taskId)).taskId).toBe(task.taskId);
    expect((await fresh.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema)).structuredContent).toMatchObject({ id: task.taskId, status: 'succeeded' });
    await fresh.close();
  });
});
