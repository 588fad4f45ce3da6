import { Client } from '@temporalio/client';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { SEARCH_ATTRIBUTES } from '../../workflows/shared.ts';
import { artifactPath, launchChromium } from '../support/browser.ts';
import { makeAccount, makeKey } from '../support/db.ts';
import { bearer, getJson } from '../support/http.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';

/**
 * What an operator does in the Temporal UI (the dev server's, in a real Chromium): filters the
 * workflow list by the MasAccountId search attribute and sees that account's jobs, and only
 * those, each closed as its job ended. (The list's default columns are Status, Workflow ID, Run
 * ID, Type, Start and End: the jobs' summary shows only on a workflow's own page.)
 */
let h: JobHarness;
let client: Client;
let browser: Browser;
let page: Page;
beforeAll(async () => {
  h = await startJobHarness();
  client = new Client({ connection: h.connection, namespace: 'default' });
  browser = await launchChromium();
  page = await (await browser.newContext({ viewport: { width: 1920, height: 1080 } })).newPage();
});
afterAll(async () => {
  await browser?.close();
  await h?.close();
});

async function customer() {
  const account = await makeAccount(h.orm, { coins: '100' });
  const { key } = await makeKey(h.orm, account.id);
  return { accountId: account.id, key };
}

async function submit(key: string, settings: Record<string, unknown>): Promise<string> {
  const res = await getJson(`${h.base}/api/v1/generations`, {
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'mas/image-demo', prompt: 'a lighthouse at dusk', settings }),
  });
  expect(res.status).toBe(202);
  return (res.body as { id: string }).id;
}

async function waitEnded(key: string, id: string): Promise<string> {
  let status = '';
  await vi.waitFor(
    async () => {
      status = ((await getJson(`${h.base}/api/v1/generations/${id}`, { headers: bearer(key) })).body as { status: string }).status;
      expect(['succeeded', 'failed', 'canceled']).toContain(status);
    },
    { timeout: 30_000, interval: 100 },
  );
  return status;
}

describe('the Temporal UI', () => {
  it("filtered by MasAccountId, lists that account's jobs and no other's, with how each closed", { timeout: 120_000 }, async () => {
    const a = await customer();
    const b = await customer();
    const [succeeded, failed, other] = await Promise.all([submit(a.key, { size: 128 }), submit(a.key, { size: 128, fail: true }), submit(b.key, { size: 128 })]);
    expect(await waitEnded(a.key, succeeded)).toBe('succeeded');
    expect(await waitEnded(a.key, failed)).toBe('failed');
    expect(await waitEnded(b.key, other)).toBe('succeeded');

    // Visibility is eventually consistent: the query first, as the UI will run it.
    const query = `${SEARCH_ATTRIBUTES.accountId.name} = "${a.accountId}"`;
    await vi.waitFor(
      async () => {
        const listed: Record<string, string> = {};
        for await (const wf of client.workflow.list({ query })) listed[wf.workflowId] = wf.status.name;
        expect(listed).toEqual({ [succeeded]: 'COMPLETED', [failed]: 'FAILED' });
      },
      { timeout: 30_000, interval: 250 },
    );

    await page.goto(`${inject('temporalUiUrl')}/namespaces/default/workflows?query=${encodeURIComponent(query)}`);
    // A row per workflow (the workflow id is the job id), its cells under the list's column headers.
    const row = (jobId: string) => page.locator('tbody tr', { hasText: jobId });
    await row(succeeded).waitFor({ timeout: 30_000 });
    await row(failed).waitFor({ timeout: 30_000 });
    expect(await page.locator('tbody tr', { hasText: /gen_/ }).count()).toBe(2);
    expect(await page.getByText(other).count()).toBe(0);
    const headers = (await page.locator('thead th').allInnerTexts()).map((t) => t.trim());
    const status = headers.indexOf('Status');
    expect(status).toBeGreaterThanOrEqual(0);
    expect((await row(succeeded).locator('td').nth(status).innerText()).trim()).toBe('Completed');
    expect((await row(failed).locator('td').nth(status).innerText()).trim()).toBe('Failed');
    await page.screenshot({ path: await artifactPath('temporal-ui-account-filter.png'), fullPage: true });
  });
});
