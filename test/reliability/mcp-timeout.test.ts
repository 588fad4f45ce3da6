import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { DEFAULT_REQUEST_TIMEOUT_MSEC } from '@modelcontextprotocol/sdk/shared/protocol.js';
import { ErrorCode, McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { capturedFor, expectSettledWallet } from '../support/ledger.ts';
import { makeAccount, makeKey } from '../support/db.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';

/**
 * Issue 35: a job longer than a client's request timeout is not lost. The official TypeScript
 * SDK client, with its default 60 s timeout and no reset on progress (as the MCP Inspector
 * runs), calls `generate` on a 75 s job; the server would wait up to 100 s. The call times out
 * on the client; the client then finds the job with list_generations, waits for it with
 * get_generation, and the account is charged once.
 */
let h: JobHarness;
beforeAll(async () => {
  h = await startJobHarness();
});
afterAll(() => h.close());

const text = (r: CallToolResult) => r.content.flatMap((c) => (c.type === 'text' ? [c.text] : [])).join('\n');

describe('an MCP client that times out', () => {
  it('loses no job: a 75 s generate times out at 60 s, list_generations finds the job, get_generation its result, charged once', { timeout: 170_000 }, async () => {
    const account = await makeAccount(h.orm, { coins: '100' });
    const { key } = await makeKey(h.orm, account.id);
    const client = new Client({ name: 'mas-timeout-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${h.base}/api/v1/mcp`), { requestInit: { headers: { Authorization: `Bearer ${key}` } } }));
    expect(DEFAULT_REQUEST_TIMEOUT_MSEC).toBe(60_000);

    // No `timeout`, no `resetTimeoutOnProgress`: the SDK's defaults.
    const timedOut = await client.callTool({ name: 'generate', arguments: { model: 'mas/image-demo', prompt: 'a long night', settings: { delay_ms: 75_000, size: 128 } } }).then(
      (r) => ({ answered: r }),
      (err: unknown) => ({ err }),
    );
    expect('err' in timedOut, `the call should time out, got ${JSON.stringify(timedOut)}`).toBe(true);
    const err = (timedOut as { err: unknown }).err;
    expect(err).toBeInstanceOf(McpError);
    expect(err).toMatchObject({ code: ErrorCode.RequestTimeout, message: expect.stringContaining('Request timed out') });

    // The client never saw the job id: list_generations shows it, still running (or just done).
    const listed = (await client.callTool({ name: 'list_generations', arguments: { limit: 5 } })) as CallToolResult;
    const page = listed.structuredContent as { data: { id: string; status: string; model: string; prompt: string }[] };
    expect(page.data).toHaveLength(1);
    const job = page.data[0]!;
    expect(job).toMatchObject({ model: 'mas/image-demo', prompt: 'a long night' });
    expect(['queued', 'running', 'succeeded']).toContain(job.status);
    expect(text(listed)).toContain(job.id);

    // get_generation until it ends (the job has about 15 s left; the timeout only bounds a job that never ends).
    let done: { status: string; cost_coins: number; output: { url: string } | null } | undefined;
    await vi.waitFor(
      async () => {
        const got = (await client.callTool({ name: 'get_generation', arguments: { id: job.id } })) as CallToolResult;
        done = got.structuredContent as NonNullable<typeof done>;
        expect(done.status).toBe('succeeded');
      },
      { timeout: 90_000, interval: 1000 },
    );
    expect(done!.output!.url).toContain(`/generations/${job.id}/output?`);
    const result = await fetch(done!.output!.url.replace('http://localhost', h.base));
    expect(result.status).toBe(200);
    expect(result.headers.get('content-type')).toBe('image/png');

    // Charged once: one capture of the job's cost, and the wallet holds nothing more.
    expect(done!.cost_coins).toBeGreaterThan(0);
    expect(await capturedFor(h.orm, job.id)).toBe(BigInt(Math.round(done!.cost_coins * 1e6)));
    const wallet = await expectSettledWallet(h.orm, account.id);
    expect(wallet.balance.subscription + wallet.balance.purchased).toBe(BigInt(Math.round((100 - done!.cost_coins) * 1e6)));
    const [jobs] = await h.orm.em.fork().execute<{ n: number }[]>('select count(*)::int as n from generations where account_id = ?', [account.id]);
    expect(jobs!.n).toBe(1);
    await client.close();
  });
});
