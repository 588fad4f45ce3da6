import { context, trace } from '@opentelemetry/api';
import { AlwaysOnSampler, InMemorySpanExporter, ParentBasedSampler, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import pino from 'pino';
import { Writable } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ChargeWriter } from '../../core/chat/charge-writer.ts';
import type { CompletionRecord } from '../../core/chat/recorder.ts';
import type { Execute } from '../../core/db/batch.ts';
import { setTracing } from '../../core/telemetry.ts';

/**
 * The charge writer (core/chat/charge-writer.ts) on a fake database: when a statement is sent,
 * what it carries, and what is lost when the database refuses. The real statement runs in
 * test/integration/charges-behind.test.ts.
 */
const record = (id: string): CompletionRecord => ({
  id,
  kind: 'chat.completion',
  accountId: 'acct_1',
  keyId: 'key_1',
  model: 'mas/echo',
  promptTokens: 9,
  completionTokens: 5,
  finishReason: 'stop',
  createdAt: new Date(0),
  durationMs: 12.4,
  provider: 'fake',
  routeModel: 'upstream-model',
  upstreamCost: 7n,
});

type Ends = { i: number; hold_id: string; actual: string; outcome: string }[];

/** A database that answers every end as asked, unless told otherwise. */
function fakeDb(opts: { refuse?: (sql: string, params: unknown[]) => boolean; status?: (holdId: string) => string } = {}) {
  const statements: { sql: 'both' | 'end' | 'record'; holds: string[]; records: string[] }[] = [];
  let release: (() => void) | undefined;
  let gate: Promise<void> | undefined;
  const execute = (async (sql: string, params: unknown[]) => {
    const kind = sql.startsWith('with ended') ? 'both' : sql.startsWith('select') ? 'end' : 'record';
    const ends = kind === 'record' ? [] : (JSON.parse(String(params[0])) as Ends);
    const records = kind === 'both' ? (JSON.parse(String(params[1])) as { id: string }[]) : kind === 'record' ? (JSON.parse(String(params[0])) as { id: string }[]) : [];
    statements.push({ sql: kind, holds: ends.map((e) => e.hold_id), records: records.map((r) => r.id) });
    if (gate) await gate;
    if (opts.refuse?.(sql, params)) throw new Error('refused');
    return ends.map((e) => ({ i: e.i, status: opts.status?.(e.hold_id) ?? e.outcome, captured: e.actual, amount: '100' }));
  }) as Execute;
  return {
    execute,
    statements,
    /** Holds every statement until `open()`. */
    hold: () => void (gate = new Promise<void>((r) => (release = r))),
    open: () => {
      gate = undefined;
      release?.();
    },
  };
}

function logs() {
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: 'info' }, new Writable({ write: (chunk: Buffer, _enc, done) => void (lines.push(JSON.parse(chunk.toString())), done()) }));
  return { lines, logger };
}

const settle = (w: ChargeWriter, holdId: string, accountId = 'acct_1', withRecord = true) =>
  w.settle({ holdId, accountId, cost: 40n, record: withRecord ? record(`chatcmpl-${holdId}`) : undefined });

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setImmediate', 'performance'] });
});
afterEach(() => {
  vi.useRealTimers();
});

describe('ChargeWriter', () => {
  it('holds the charges of chats that end within USAGE_FLUSH_MS for one statement, the records with them', async () => {
    const db = fakeDb();
    const w = new ChargeWriter(db.execute, logs().logger, { flushMs: 20 });
    const a = settle(w, 'h1');
    await vi.advanceTimersByTimeAsync(5);
    const b = settle(w, 'h2', 'acct_2');
    const c = w.release({ holdId: 'h3', accountId: 'acct_1' });
    await vi.advanceTimersByTimeAsync(14);
    expect(db.statements).toEqual([]);
    expect(w.pending).toBe(3);
    // The oldest charge has waited 20 ms: all three go.
    await vi.advanceTimersByTimeAsync(1);
    expect(db.statements).toEqual([{ sql: 'both', holds: ['h1', 'h2', 'h3'], records: ['chatcmpl-h1', 'chatcmpl-h2'] }]);
    await expect(a).resolves.toEqual({ holdId: 'h1', status: 'settled', captured: 40n, amount: 100n });
    await expect(b).resolves.toMatchObject({ status: 'settled' });
    await expect(c).resolves.toEqual({ holdId: 'h3', status: 'released', captured: 0n, amount: 100n });
    expect(w.pending).toBe(0);
  });

  it('with 0 ms, sends at the end of the turn what ended in it', async () => {
    const db = fakeDb();
    const w = new ChargeWriter(db.execute, logs().logger, { flushMs: 0 });
    void settle(w, 'h1');
    void settle(w, 'h2');
    expect(db.statements).toEqual([]);
    await vi.advanceTimersByTimeAsync(0);
    expect(db.statements.map((s) => s.holds)).toEqual([['h1', 'h2']]);
  });

  it('what ends while a statement runs goes together into the next one as soon as it returns (group commit)', async () => {
    const db = fakeDb();
    const w = new ChargeWriter(db.execute, logs().logger, { flushMs: 20 });
    db.hold();
    void settle(w, 'h1');
    await vi.advanceTimersByTimeAsync(20);
    expect(db.statements).toHaveLength(1);
    void settle(w, 'h2');
    void settle(w, 'h3');
    await vi.advanceTimersByTimeAsync(100);
    expect(db.statements).toHaveLength(1);
    db.open();
    await vi.advanceTimersByTimeAsync(0);
    expect(db.statements.map((s) => s.holds)).toEqual([['h1'], ['h2', 'h3']]);
  });

  it('arms one timer for a batch, none while a statement runs, and none left once a read has sent the queue', async () => {
    const db = fakeDb();
    const w = new ChargeWriter(db.execute, logs().logger, { flushMs: 20 });
    void settle(w, 'h1');
    void settle(w, 'h2');
    expect(vi.getTimerCount()).toBe(1);
    // A read sends at once and disarms the batch's timer.
    db.hold();
    const read = w.settledFor('acct_1');
    expect(vi.getTimerCount()).toBe(0);
    expect(db.statements.map((s) => s.holds)).toEqual([['h1', 'h2']]);
    // While that statement runs, what ends arms nothing: the statement's end sends it.
    void settle(w, 'h3');
    void w.release({ holdId: 'h4', accountId: 'acct_2' });
    expect(vi.getTimerCount()).toBe(0);
    db.open();
    await read;
    await vi.advanceTimersByTimeAsync(0);
    expect(db.statements.map((s) => s.holds)).toEqual([['h1', 'h2'], ['h3', 'h4']]);
    expect(vi.getTimerCount()).toBe(0);
    await w.settledAll();
    expect(w.pending).toBe(0);
  });

  it('a charge queued with its wait already spent goes at the end of the turn, and the batch timer is disarmed', async () => {
    let now = 0;
    const db = fakeDb();
    const w = new ChargeWriter(db.execute, logs().logger, { flushMs: 20 }, () => now);
    void settle(w, 'h1');
    expect(vi.getTimerCount()).toBe(1);
    // The process was busy: the clock reads 20 ms later when h2 is queued, before h1's timer ran.
    now = 20;
    void settle(w, 'h2');
    expect(vi.getTimerCount()).toBe(2);
    await vi.advanceTimersByTimeAsync(0);
    expect(db.statements.map((s) => s.holds)).toEqual([['h1', 'h2']]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a batch that reaches maxBatch goes at once, without waiting USAGE_FLUSH_MS', async () => {
    const db = fakeDb();
    const w = new ChargeWriter(db.execute, logs().logger, { flushMs: 50, maxBatch: 2 });
    void settle(w, 'h1');
    void settle(w, 'h2');
    await vi.advanceTimersByTimeAsync(0);
    expect(db.statements.map((s) => s.holds)).toEqual([['h1', 'h2']]);
  });

  it('waits USAGE_FLUSH_MS from the first charge, whatever the clock reads', async () => {
    await vi.advanceTimersByTimeAsync(5_000);
    const db = fakeDb();
    const w = new ChargeWriter(db.execute, logs().logger, { flushMs: 20 });
    void settle(w, 'h1');
    await vi.advanceTimersByTimeAsync(19);
    expect(db.statements).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(db.statements).toHaveLength(1);
  });

  it("an account's charges count as pending until the last of them is written, across statements", async () => {
    const db = fakeDb();
    const w = new ChargeWriter(db.execute, logs().logger, { flushMs: 0 });
    expect(w.hasPending('acct_1')).toBe(false);
    db.hold();
    const first = settle(w, 'h1', 'acct_1');
    await vi.advanceTimersByTimeAsync(0);
    const second = settle(w, 'h2', 'acct_1');
    const other = settle(w, 'h3', 'acct_2');
    expect([w.hasPending('acct_1'), w.hasPending('acct_2'), w.pending]).toEqual([true, true, 3]);
    db.open();
    await first;
    // The first statement is written; the account's second charge is not yet.
    expect(w.hasPending('acct_1')).toBe(true);
    await Promise.all([second, other]);
    expect(db.statements.map((s) => s.holds)).toEqual([['h1'], ['h2', 'h3']]);
    expect([w.hasPending('acct_1'), w.hasPending('acct_2'), w.pending]).toEqual([false, false, 0]);
    // A new charge of the account after that is pending again, then not.
    const third = settle(w, 'h4', 'acct_1');
    expect(w.hasPending('acct_1')).toBe(true);
    await vi.advanceTimersByTimeAsync(0);
    await third;
    expect(w.hasPending('acct_1')).toBe(false);
  });

  it('a full batch goes at once; the rest waits its turn', async () => {
    const db = fakeDb();
    const w = new ChargeWriter(db.execute, logs().logger, { flushMs: 50, maxBatch: 2 });
    void settle(w, 'h1');
    void settle(w, 'h2');
    void settle(w, 'h3');
    await vi.advanceTimersByTimeAsync(0);
    expect(db.statements.map((s) => s.holds)).toEqual([['h1', 'h2'], ['h3']]);
  });

  it('a read of an account sends the queue at once and waits for that account only; close writes everything', async () => {
    const db = fakeDb();
    const w = new ChargeWriter(db.execute, logs().logger, { flushMs: 100 });
    await w.settledFor('acct_1'); // nothing queued: answers at once, sends nothing
    expect(db.statements).toEqual([]);
    void settle(w, 'h1', 'acct_1');
    void settle(w, 'h2', 'acct_2');
    let read = false;
    const reading = w.settledFor('acct_1').then(() => (read = true));
    await vi.advanceTimersByTimeAsync(0);
    await reading;
    expect(read).toBe(true);
    expect(db.statements.map((s) => s.holds)).toEqual([['h1', 'h2']]);

    // Waiting without sending: the charge goes in its own time, not before.
    void settle(w, 'h3', 'acct_1');
    let after = false;
    const waiting = w.settledFor('acct_1', { send: false }).then(() => (after = true));
    await vi.advanceTimersByTimeAsync(99);
    expect(after).toBe(false);
    expect(db.statements).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1);
    await waiting;
    expect(db.statements.map((s) => s.holds)).toEqual([['h1', 'h2'], ['h3']]);

    void settle(w, 'h4', 'acct_3');
    const closing = w.close();
    await vi.advanceTimersByTimeAsync(0);
    await closing;
    expect(db.statements.map((s) => s.holds)).toEqual([['h1', 'h2'], ['h3'], ['h4']]);
    expect(w.pending).toBe(0);
  });

  it('a record the database refuses loses only itself: the charges are written alone, then each record; logged, never thrown', async () => {
    const db = fakeDb({ refuse: (sql, params) => (sql.startsWith('with ended') || sql.startsWith('insert')) && String(params[params.length - (sql.startsWith('insert') ? 2 : 1)]).includes('chatcmpl-bad') });
    const { lines, logger } = logs();
    const w = new ChargeWriter(db.execute, logger, { flushMs: 0 });
    const outcomes = Promise.all([settle(w, 'good'), settle(w, 'bad'), settle(w, 'other')]);
    await vi.advanceTimersByTimeAsync(0);
    expect((await outcomes).map((o) => o?.status)).toEqual(['settled', 'settled', 'settled']);
    expect(db.statements.map((s) => [s.sql, ...s.holds, ...s.records])).toEqual([
      ['both', 'good', 'bad', 'other', 'chatcmpl-good', 'chatcmpl-bad', 'chatcmpl-other'],
      ['end', 'good', 'bad', 'other'],
      ['record', 'chatcmpl-good'],
      ['record', 'chatcmpl-bad'],
      ['record', 'chatcmpl-other'],
    ]);
    expect(lines.map((l) => l.msg)).toEqual(['the charges and records could not be written together; the charges were written alone', 'could not record the completion; its charge stands']);
    expect(lines[1]).toMatchObject({ completion: 'chatcmpl-bad' });
  });

  it('written alone after a refusal: a record is inserted only for a hold that ended, with what it captured', async () => {
    const inserted: unknown[][] = [];
    const db = fakeDb({ refuse: (sql) => sql.startsWith('with ended'), status: (holdId) => (holdId === 'gone' ? 'not_found' : holdId === 'freed' ? 'released' : 'settled') });
    const execute = (async (sql: string, params: unknown[]) => {
      if (sql.startsWith('insert')) inserted.push([(JSON.parse(String(params[0])) as { id: string }[])[0]!.id, params[1]]);
      return db.execute(sql, params);
    }) as Execute;
    const w = new ChargeWriter(execute, logs().logger, { flushMs: 0 });
    const outcomes = Promise.all([settle(w, 'gone'), settle(w, 'kept'), settle(w, 'freed')]);
    await vi.advanceTimersByTimeAsync(0);
    expect((await outcomes).map((o) => o?.status)).toEqual([undefined, 'settled', 'released']);
    expect(inserted).toEqual([
      ['chatcmpl-kept', '40'],
      ['chatcmpl-freed', '40'],
    ]);
  });

  it('written alone after a refusal with no record in the batch: no warning about records', async () => {
    const db = fakeDb({ refuse: (sql) => sql.startsWith('with ended') });
    const { lines, logger } = logs();
    const w = new ChargeWriter(db.execute, logger, { flushMs: 0 });
    const outcome = settle(w, 'h1', 'acct_1', false);
    await vi.advanceTimersByTimeAsync(0);
    await expect(outcome).resolves.toMatchObject({ status: 'settled' });
    expect(db.statements.map((s) => s.sql)).toEqual(['both', 'end']);
    expect(lines).toEqual([]);
  });

  it('a database that is down: the charges wait and are tried again (1 s, doubling) until it is back; reads do not wait for it; nothing is lost', async () => {
    let down = true;
    const db = fakeDb({ refuse: () => down });
    const { lines, logger } = logs();
    const w = new ChargeWriter(db.execute, logger, { flushMs: 0 });
    const outcome = settle(w, 'h1');
    await vi.advanceTimersByTimeAsync(0);
    // The charge and then the charge alone: both refused.
    expect(db.statements.map((s) => s.sql)).toEqual(['both', 'end']);
    expect(lines.at(-1)).toMatchObject({ level: 40, holds: 1, retryInMs: 1_000, msg: 'could not write chat charges; trying again' });
    expect(w.pending).toBe(1);
    // A read of the account goes on at once: it meets the same database.
    let read = false;
    void w.settledFor('acct_1').then(() => (read = true));
    await vi.advanceTimersByTimeAsync(0);
    expect(read).toBe(true);
    // What ends meanwhile waits with it; nothing is sent before the backoff.
    void settle(w, 'h2');
    await vi.advanceTimersByTimeAsync(999);
    expect(db.statements).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(1);
    expect(db.statements.slice(2).map((s) => s.holds)).toEqual([['h1', 'h2'], ['h1', 'h2']]);
    expect(lines.at(-1)).toMatchObject({ level: 40, holds: 2, retryInMs: 2_000 });
    down = false;
    await vi.advanceTimersByTimeAsync(2_000);
    await expect(outcome).resolves.toMatchObject({ holdId: 'h1', status: 'settled', captured: 40n });
    expect(db.statements.at(-1)).toEqual({ sql: 'both', holds: ['h1', 'h2'], records: ['chatcmpl-h1', 'chatcmpl-h2'] });
    expect(w.pending).toBe(0);
    // Back to normal: the next failure waits 1 s again.
    down = true;
    void settle(w, 'h3');
    await vi.advanceTimersByTimeAsync(0);
    expect(lines.at(-1)).toMatchObject({ retryInMs: 1_000 });
    expect(lines.filter((l) => l.level === 50)).toEqual([]);
  });

  it('gives a charge up once it has waited retryForMs (the sweep has released its hold by then), and at a graceful stop', async () => {
    const db = fakeDb({ refuse: () => true });
    const { lines, logger } = logs();
    const w = new ChargeWriter(db.execute, logger, { flushMs: 0, retryForMs: 20_000 });
    const old = settle(w, 'h1');
    await vi.advanceTimersByTimeAsync(15_000);
    const young = settle(w, 'h2');
    // 1 + 2 + 4 + 8 + 10 s of backoff: h1's attempt after 20 s gives it up; h2 is kept.
    await vi.advanceTimersByTimeAsync(10_000);
    await expect(old).resolves.toBeUndefined();
    expect(lines.find((l) => l.level === 50)).toMatchObject({ holds: 1, msg: 'could not write chat charges; their holds stay open until the hold sweep releases them' });
    expect(w.pending).toBe(1);
    // A graceful stop tries once more and does not wait for a database that is not there.
    await w.close();
    await expect(young).resolves.toBeUndefined();
    expect(w.pending).toBe(0);
    expect(lines.filter((l) => l.level === 50)).toHaveLength(2);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a hold the database no longer has (a crash lost its reservation) charges nothing, logged with its hold and account', async () => {
    const db = fakeDb({ status: (holdId) => (holdId === 'lost' ? 'not_found' : holdId === 'odd' ? 'invalid_amount' : 'settled') });
    const { lines, logger } = logs();
    const w = new ChargeWriter(db.execute, logger, { flushMs: 0 });
    const [lost, kept, odd] = [settle(w, 'lost', 'acct_9'), settle(w, 'kept'), settle(w, 'odd')];
    await vi.advanceTimersByTimeAsync(0);
    await expect(lost).resolves.toBeUndefined();
    await expect(kept).resolves.toMatchObject({ status: 'settled' });
    // Never expected (the charge is at most the hold): logged the same way, nothing charged.
    await expect(odd).resolves.toBeUndefined();
    expect(lines).toEqual([
      expect.objectContaining({ level: 40, hold: 'lost', account: 'acct_9', status: 'not_found', msg: 'a chat charge found no open hold to end; nothing was charged for it' }),
      expect.objectContaining({ level: 40, hold: 'odd', status: 'invalid_amount' }),
    ]);
  });

  it('sends the record row as the table wants it: duration rounded, never negative, amounts as text', async () => {
    const params: unknown[][] = [];
    const w = new ChargeWriter((async (_sql: string, p: unknown[]) => (params.push(p), [{ i: 0, status: 'settled', captured: '40', amount: '100' }])) as Execute, logs().logger, { flushMs: 0 });
    void w.settle({ holdId: 'h1', accountId: 'acct_1', cost: 40n, record: { ...record('chatcmpl-1'), durationMs: -3 } });
    void w.settle({ holdId: 'h2', accountId: 'acct_1', cost: 40n, record: { ...record('chatcmpl-2'), upstreamCost: null } });
    await vi.advanceTimersByTimeAsync(0);
    expect(JSON.parse(String(params[0]![0]))).toEqual([
      { i: 0, hold_id: 'h1', actual: '40', outcome: 'settled' },
      { i: 1, hold_id: 'h2', actual: '40', outcome: 'settled' },
    ]);
    const rows = JSON.parse(String(params[0]![1])) as Record<string, unknown>[];
    expect(rows[0]).toMatchObject({ i: 0, id: 'chatcmpl-1', duration_ms: 0, provider: 'fake', route_model: 'upstream-model', upstream_cost_micro: '7', created_at: '1970-01-01T00:00:00.000Z' });
    expect(rows[1]).toMatchObject({ i: 1, upstream_cost_micro: null });
  });

  it('traced: each charge is a client span of the chat that lasts until it is written, named for the statement, with its hold, outcome and cost', async () => {
    const exporter = new InMemorySpanExporter();
    const provider = new NodeTracerProvider({ sampler: new ParentBasedSampler({ root: new AlwaysOnSampler() }), spanProcessors: [new SimpleSpanProcessor(exporter)] });
    provider.register();
    setTracing({ on: true });
    try {
      const db = fakeDb();
      const w = new ChargeWriter(db.execute, logs().logger, { flushMs: 20 });
      const root = trace.getTracer('test').startSpan('core chat.complete');
      const written = context.with(trace.setSpan(context.active(), root), () => [settle(w, 'h1'), w.release({ holdId: 'h2', accountId: 'acct_1' })]);
      expect(exporter.getFinishedSpans()).toHaveLength(0);
      await vi.advanceTimersByTimeAsync(20);
      await Promise.all(written);
      root.end();
      const ends = exporter.getFinishedSpans().filter((s) => s.name === 'mas_end_hold_many');
      expect(ends.map((s) => s.attributes)).toEqual([
        expect.objectContaining({ 'db.operation.name': 'mas_end_hold_many', 'mas.hold_id': 'h1', 'mas.hold.outcome': 'settled', 'mas.cost_coins': 0.00004 }),
        expect.objectContaining({ 'db.operation.name': 'mas_end_hold_many', 'mas.hold_id': 'h2', 'mas.hold.outcome': 'released', 'mas.cost_coins': 0 }),
      ]);
      // This SDK names the parent by its id (`parentSpanId`).
      expect(ends.map((s) => (s as unknown as { parentSpanId?: string }).parentSpanId)).toEqual([root.spanContext().spanId, root.spanContext().spanId]);
    } finally {
      setTracing({ on: false });
      await provider.shutdown();
      trace.disable();
      context.disable();
    }
  });
});
