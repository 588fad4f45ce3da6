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
 * The real-time case of test/integration/mcp-timeout.test.ts (which shortens the server's quiet
 * wait to 1 s): the official TypeScript SDK client with its defaults (a 60 s request timeout, no
 * reset on progress, as the MCP Inspector runs) calls `generate` on a 75 s job with the server's
 * default quiet wait (MCP_GENERATE_QUIET_WAIT_SECONDS, 50 s). The server answers first, with the
 * running job; the client never times out, follows the job with get_generation, and the account
 * is charged once. About two minutes of real time: here, not in `npm test`.
 */
let h: JobHarness;
beforeAll(async () => {
  h = await startJobHarness();
});
afterAll(() => h.close());

const text = (r: CallToolResult) => r.content.flatMap((c) => (c.type === 'text' ? [c.text] : [])).join('\n');

describe('an MCP client with the SDK’s 60 s timeout, a 75 s job', () => {
  it('gets the running job at the 50 s quiet wait, not a timeout; the job then succeeds, charged once', { timeout: 240_000 }, async () => {
    expect(DEFAULT_REQUEST_TIMEOUT_MSEC).toBe(60_000);
    expect(DEFAULT_QUIET_WAIT_SECONDS).toBe(50);
    const account = await makeAccount(h.orm, { coins: '100' });
    const { key } = await makeKey(h.orm, account.id);
    const client = new Client({ name: 'mas-timeout-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${h.base}/api/v1/mcp`), { requestInit: { headers: { Authorization: `Bearer ${key}` } } }));

    // No `onprogress`, no `timeout`, no `resetTimeoutOnProgress`: the SDK's defaults.
    const answer = (await client.callTool({ name: 'generate', arguments: { model: 'mas/image-demo', prompt: 'a long night', settings: { delay_ms: 75_000, size: 128 } } })) as CallToolResult;
    const job = answer.structuredContent as { id: string; status: string };
    expect(['queued', 'running']).toContain(job.status);
    expect(text(answer)).toContain(`Call get_generation with id "${job.id}" later for its result`);

    let done: { status: string; cost_coins: number } | undefined;
    await vi.waitFor(
      async () => {
        done = (await client.callTool({ name: 'get_generation', arguments: { id: job.id } })).structuredContent as typeof done;
        expect(done!.status).toBe('succeeded');
      },
      { timeout: 120_000, interval: 2_000 },
    );
    expect(await capturedFor(h.orm, job.id)).toBe(BigInt(Math.round(done!.cost_coins * 1e6)));
    await expectSettledWallet(h.orm, account.id);
    await client.close();
  });
});
