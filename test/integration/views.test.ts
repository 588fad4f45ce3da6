import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createProviderRegistry } from '../../adapters/providers/registry.ts';
import { modelViewSchema } from '../../core/catalog/views.ts';
import { completionRecordSchema } from '../../core/chat/records.ts';
import { chatCompletionSchema } from '../../core/chat/views.ts';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { fileSchema } from '../../core/files/file-row.ts';
import { generationSchema } from '../../core/generations/views.ts';
import { createdKeySchema, keySchema } from '../../core/keys/keys.ts';
import { walletHistorySchema } from '../../core/money/history.ts';
import { balanceSchema } from '../../core/money/wallet.ts';
import { createCaller } from '../../core/router.ts';
import { makeAccount, makeKey, testDeps } from '../support/db.ts';
import { startJobHarness, type JobHarness } from '../support/jobs.ts';

/**
 * Each view has one zod output schema in core; the REST document and the MCP tools' output
 * schemas are made from them. Real results of the use cases must parse strictly.
 */
let h: JobHarness;
beforeAll(async () => {
  h = await startJobHarness();
});
afterAll(() => h.close());

async function spender(deps: CoreDeps) {
  const account = await makeAccount(h.orm, { coins: '100' });
  const key = await makeKey(h.orm, account.id);
  return { account, core: () => createCaller(createContext(deps, { kind: 'bearer', token: key.key })) };
}

describe('output schemas', () => {
  it('balance, models, generation, file and key results parse strictly', async () => {
    const { account, core } = await spender(h.deps);
    balanceSchema.parse(await core().wallet.balance());
    walletHistorySchema.parse(await core().wallet.history({}));

    const models = await core().models.list({});
    expect(models.data.length).toBeGreaterThan(0);
    for (const model of models.data) modelViewSchema.parse(model);
    modelViewSchema.parse(await core().models.get({ id: 'mas/image-demo' }));
    modelViewSchema.parse(await core().models.get({ id: 'mas/echo' }));

    const { generation } = await core().generations.create({ model: 'mas/image-demo', prompt: 'a fox', settings: { size: 128 }, wait_seconds: 20 });
    expect(generation.status).toBe('succeeded');
    generationSchema.parse(generation);
    const failed = await core().generations.create({ model: 'mas/image-demo', settings: { fail: true }, wait_seconds: 20 });
    expect(failed.generation.status).toBe('failed');
    generationSchema.parse(failed.generation);
    generationSchema.parse(await core().generations.get({ id: generation.id }));

    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'mas-views-'));
    const file = path.join(dir, 'upload');
    await fs.writeFile(file, Buffer.from('89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da63f8cfc0f01f0005000201a5b2b1a30000000049454e44ae426082', 'hex'));
    const { file: uploaded } = await core().files.create({ upload: { path: file, filename: 'dot.png', bytes: 70, sha256: 'x' } });
    expect(uploaded.type).toBe('image');
    fileSchema.parse(uploaded);
    fileSchema.parse(await core().files.get({ id: uploaded.id }));
    // The upload limit is core's rule, whatever a transport let through.
    await expect(core().files.create({ upload: { path: file, filename: 'huge.png', bytes: 50 * 1024 * 1024 + 1, sha256: 'x' } })).rejects.toMatchObject({
      cause: { code: 'invalid_request', reason: 'file_too_large' },
    });
    await fs.rm(dir, { recursive: true, force: true });

    const internal = createCaller(createContext(h.deps, { kind: 'internal' }));
    const created = await internal.keys.create({ account: account.id, name: 'views' });
    const { account: owner, ...createdKey } = created;
    expect(owner).toBe(account.id);
    createdKeySchema.parse(createdKey);
    for (const key of (await internal.keys.list({ account: account.id })).data) keySchema.parse(key);
    // Top-up, two job charges, one refund: every kind of row but a grant.
    const history = walletHistorySchema.parse(await core().wallet.history({ limit: 100 }));
    expect(new Set(history.data.map((e) => e.type))).toEqual(new Set(['topup', 'api_usage', 'refund']));
  });

  it('a chat completion and its record parse strictly', async () => {
    const deps = testDeps(h.orm, { providers: createProviderRegistry({ local: { kind: 'local' } }) });
    const { core } = await spender(deps);
    const result = await core().chat.complete({ model: 'mas/echo', messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 20 });
    expect(result.stream).toBe(false);
    if (result.stream) return;
    chatCompletionSchema.parse(result.completion);
    const record = completionRecordSchema.parse(await core().chat.get({ id: result.completion.id }));
    expect(record.usage).toEqual(result.completion.usage);
  });
});
