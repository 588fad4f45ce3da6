import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { DEFAULT_REQUEST_TIMEOUT_MSEC } from '@modelcontextprotocol/sdk/shared/protocol.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { DEFAULT_QUIET_WAIT_SECONDS } from '../../adapters/mcp/mcp.ts';
import { capturedFor, expectSettledWallet } from '../support/ledger.ts';
import { makeAccount, makeKey } from '../support/db.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';

/**
 * A job longer than a client's request timeout is not lost, and a client that cannot get
 * progress is not left to time out. The official TypeScript SDK client, with its default 60 s
 * timeout and no reset on progress (as the MCP Inspector runs), calls `generate` without a
 * progressToken: the server returns the running job (its id, and how to follow it) after its
 * quiet wait (MCP_GENERATE_QUIET_WAIT_SECONDS, 50 s by default; 1 s here, so that nothing waits
 * in real time), and the client fetches the result with get_generation; charged once. With a
 * progressToken the call waits longer, as progress resets such a client's timer.
 */
const QUIET_WAIT_SECONDS = 1;
let h: JobHarness;
beforeAll(async () => {
  h = await startJobHarness({ mcpGenerateQuietWaitSeconds: QUIET_WAIT_SECONDS });
});
afterAll(() => h.close());

const text = (r: CallToolResult) => r.content.flatMap((c) => (c.type === 'text' ? [c.text] : [])).join('\n');

async function connect(coins = '100') {
  const account = await makeAccount(h.orm, { coins });
  const { key } = await makeKey(h.orm, account.id);
  const client = new Client({ name: 'mas-timeout-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${h.base}/api/v1/mcp`), { requestInit: { headers: { Authorization: `Bearer ${key}` } } }));
  return { account, client };
}

describe('generate and a client’s timeout', () => {
  it('without a progressToken, returns the running job (its id and how to follow it) within the quiet wait, under the SDK’s 60 s; get_generation gets the result, charged once', async () => {
    expect(DEFAULT_REQUEST_TIMEOUT_MSEC).toBe(60_000);
    expect(DEFAULT_QUIET_WAIT_SECONDS).toBeLessThan(DEFAULT_REQUEST_TIMEOUT_MSEC / 1000);
    const { account, client } = await connect();

    // No `onprogress` (so no progressToken), no `timeout`, no `resetTimeoutOnProgress`: the SDK's defaults.
    const started = Date.now();
    const answer = (await client.callTool({ name: 'generate', arguments: { model: 'mas/image-demo', prompt: 'a long night', settings: { delay_ms: 4000, size: 128 } } })) as CallToolResult;
    const tookMs = Date.now() - started;
    expect(answer.isError).toBeFalsy();
    const job = answer.structuredContent as { id: string; status: string };
    expect(['queued', 'running']).toContain(job.status);
    // It waited its quiet wait, and returned before the 4 s job ended (its status says so): no
    // upper bound on the time, which a loaded machine would stretch.
    expect(tookMs).toBeGreaterThanOrEqual(QUIET_WAIT_SECONDS * 1000 - 100);
    expect(text(answer)).toContain(`Job ${job.id} is ${job.status} after`);
    expect(text(answer)).toContain(`Call get_generation with id "${job.id}" later for its result`);

    let done: { status: string; cost_coins: number; output: { url: string } | null } | undefined;
    await vi.waitFor(
      async () => {
        const got = (await client.callTool({ name: 'get_generation', arguments: { id: job.id } })) as CallToolResult;
        done = got.structuredContent as NonNullable<typeof done>;
        expect(done.status).toBe('succeeded');
      },
      { timeout: 30_000, interval: 500 },
    );
    expect(done!.output!.url).toContain(`/generations/${job.id}/output?`);

    // Charged once: one capture of the job's cost, and the wallet holds nothing more.
    expect(done!.cost_coins).toBeGreaterThan(0);
    expect(await capturedFor(h.orm, job.id)).toBe(BigInt(Math.round(done!.cost_coins * 1e6)));
    const wallet = await expectSettledWallet(h.orm, account.id);
    expect(wallet.balance.subscription + wallet.balance.purchased).toBe(BigInt(Math.round((100 - done!.cost_coins) * 1e6)));
    const [jobs] = await h.orm.em.fork().execute<{ n: number }[]>('select count(*)::int as n from generations where account_id = ?', [account.id]);
    expect(jobs!.n).toBe(1);
    await client.close();
  });

  it('with a progressToken, waits past the quiet wait for the job to end, sending progress', async () => {
    const { client } = await connect();
    const progress: number[] = [];
    const answer = (await client.callTool(
      { name: 'generate', arguments: { model: 'mas/image-demo', prompt: 'a short night', settings: { delay_ms: 2500, size: 128 } } },
      undefined,
      { onprogress: (p) => void progress.push(p.progress), resetTimeoutOnProgress: true },
    )) as CallToolResult;
    expect((answer.structuredContent as { status: string }).status).toBe('succeeded');
    expect(progress.length).toBeGreaterThanOrEqual(1);
    await client.close();
  });
});
