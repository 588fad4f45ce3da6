import pino from 'pino';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { CompletionRecorder, type CompletionRecord } from '../../core/chat/recorder.ts';
import type { Execute } from '../../core/db/batch.ts';

const record = (id: string): CompletionRecord => ({
  id,
  kind: 'chat.completion',
  accountId: 'acct_1',
  keyId: 'key_1',
  model: 'mas/echo',
  promptTokens: 9,
  completionTokens: 5,
  cost: 23n,
  finishReason: 'stop',
  createdAt: new Date(0),
  durationMs: 12.4,
  provider: 'fake',
  routeModel: 'upstream-model',
  upstreamCost: 7n,
});

describe('CompletionRecorder', () => {
  it('writes records that arrive together in one statement; a row the database refuses loses only itself, logged, never thrown', async () => {
    const statements: string[][] = [];
    const execute = (async (_sql: string, params: unknown[]) => {
      const rows = JSON.parse(String(params[0])) as { id: string; cost_micro: string; duration_ms: number }[];
      statements.push(rows.map((r) => r.id));
      expect(rows[0]).toMatchObject({ cost_micro: '23', duration_ms: 12, provider: 'fake', route_model: 'upstream-model', upstream_cost_micro: '7' });
      if (rows.some((r) => r.id === 'chatcmpl-bad')) throw new Error('refused');
      return [];
    }) as Execute;
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'info' }, new Writable({ write: (chunk: Buffer, _enc, done) => void (lines.push(JSON.parse(chunk.toString())), done()) }));
    const recorder = new CompletionRecorder(execute, logger);

    await Promise.all(['chatcmpl-a', 'chatcmpl-bad', 'chatcmpl-c'].map((id) => recorder.record(record(id))));
    expect(statements).toEqual([['chatcmpl-a', 'chatcmpl-bad', 'chatcmpl-c'], ['chatcmpl-a'], ['chatcmpl-bad'], ['chatcmpl-c']]);
    expect(lines).toEqual([expect.objectContaining({ level: 40, completion: 'chatcmpl-bad', msg: 'could not record the completion; its charge stands' })]);

    // A database that is down: the record is lost and logged, the call still resolves.
    const down = new CompletionRecorder((() => Promise.reject(new Error('connection lost'))) as Execute, logger);
    await expect(down.record(record('chatcmpl-d'))).resolves.toBeUndefined();
    expect(lines.at(-1)).toMatchObject({ completion: 'chatcmpl-d' });
  });
});
