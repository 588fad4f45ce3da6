import type { Logger } from 'pino';
import { withRetry, type Execute } from '../db/batch.ts';
import type { Micro } from '../money/coins.ts';
import { endAttributes, type HoldOutcome } from '../money/holds.ts';
import { dbSpan } from '../telemetry.ts';
import type { CompletionRecord } from './recorder.ts';

/**
 * How a chat's hold ends: its charge (and the record of what it was charged), or its release.
 * `accountId` lets a read of that account wait for the write (`settledFor`).
 */
export type ChargeItem =
  | { outcome: 'settled'; holdId: string; accountId: string; cost: Micro; record?: CompletionRecord | undefined }
  | { outcome: 'released'; holdId: string; accountId: string };

interface Pending {
  item: ChargeItem;
  queuedAt: number;
  resolve: (outcome: HoldOutcome | undefined) => void;
}

type EndRow = { i: number; status: string; captured: string | null; amount: string | null };

const RECORD_COLUMNS = `id text, kind text, account_id text, key_id text, model text, prompt_tokens integer,
      completion_tokens integer, finish_reason text, created_at timestamptz, duration_ms integer,
      provider text, route_model text, upstream_cost_micro bigint`;

/**
 * One statement, one transaction: the holds end (mas_end_hold_many: the charge as `API usage`
 * in the ledger, the history's row, and the rest released) and the completion records are
 * inserted with what each charge really captured. The records of holds that were not found
 * are not written.
 */
const END_AND_RECORD = `with ended as (
    select e.i, e.status, e.captured, e.amount from mas_end_hold_many($1::jsonb) e
  ), recorded as (
    insert into completion_records (id, kind, account_id, key_id, model, prompt_tokens, completion_tokens, cost_micro, finish_reason, created_at,
        duration_ms, provider, route_model, upstream_cost_micro)
      select r.id, r.kind, r.account_id, r.key_id, r.model, r.prompt_tokens, r.completion_tokens, ended.captured, r.finish_reason, r.created_at,
          r.duration_ms, r.provider, r.route_model, r.upstream_cost_micro
        from jsonb_to_recordset($2::jsonb) as r(i integer, ${RECORD_COLUMNS})
        join ended on ended.i = r.i
        where ended.status in ('settled', 'released')
      on conflict (id) do nothing
  )
  select i, status, captured::text, amount::text from ended`;

const END_ONLY = 'select i, status, captured::text, amount::text from mas_end_hold_many($1::jsonb)';

const INSERT_RECORD = `insert into completion_records (id, kind, account_id, key_id, model, prompt_tokens, completion_tokens, cost_micro, finish_reason, created_at,
    duration_ms, provider, route_model, upstream_cost_micro)
  select r.id, r.kind, r.account_id, r.key_id, r.model, r.prompt_tokens, r.completion_tokens, $2::bigint, r.finish_reason, r.created_at,
      r.duration_ms, r.provider, r.route_model, r.upstream_cost_micro
    from jsonb_to_recordset($1::jsonb) as r(i integer, ${RECORD_COLUMNS})
  on conflict (id) do nothing`;

/** A promise and its resolve (Promise.withResolvers, which this project's ES2023 library lacks). */
function resolvable(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

export interface ChargeWriterOptions {
  /**
   * USAGE_FLUSH_MS: the longest an ended chat waits for others to share its statement. 0: the
   * statement is sent at the end of the current turn of the event loop (still shared by the
   * chats that ended in that turn, and by all those that end while a statement is running).
   */
  flushMs: number;
  /** The most items one statement carries. */
  maxBatch?: number;
  /**
   * How long a charge the database refused (down, failing over) is tried again, with a backoff of
   * 1 s doubling to 10 s, before it is given up: by then the hold sweep has released its hold
   * (HOLD_TTL_SECONDS, 900 s by default), so a later write would charge nothing anyway.
   */
  retryForMs?: number;
}

/**
 * Ends chat holds off the request's path (docs/chat.md, "Charges are written behind the
 * answer"), after the usage reports of prepaid credit control (RFC 4006) and the batched
 * transfers of TigerBeetle: the answer does not wait for its charge. The charge, its ledger
 * entries and its completion record are queued in memory and written together, many chats per
 * statement, within `flushMs` plus one statement's time: the window a killed process can lose
 * (its holds then stay open until the hold sweep releases them: the customer is charged nothing
 * for it, never twice, and the wallet stays exact). A graceful stop (`close`) writes everything.
 *
 * One statement is in flight at a time; what ends meanwhile goes together into the next one as
 * soon as it returns (group commit). A read of an account (`settledFor`) sends the queue at once
 * and waits for that account's writes, so that an account sees its own charges at once through
 * the same instance.
 *
 * A write never fails the chat: the answer is already on its way. A hold the database no longer
 * has (a crash lost its asynchronously committed reservation) charges nothing and is logged. A
 * statement the database refuses (down, restarting) is tried again until it is back, within
 * `retryForMs`: an outage loses no charge while the process lives (`refused`).
 */
export class ChargeWriter {
  private queue: Pending[] = [];
  private timer: NodeJS.Timeout | undefined;
  private immediate: NodeJS.Immediate | undefined;
  private running: Promise<void> | undefined;
  /** The unwritten items of each account, and all of them. */
  private readonly perAccount = new Map<string, Set<Promise<unknown>>>();
  private readonly all = new Set<Promise<unknown>>();
  private readonly flushMs: number;
  private readonly maxBatch: number;
  private readonly execute: Execute;
  private readonly logger: Logger;
  /** The clock of `queuedAt` (the oldest item's wait); tests inject theirs. */
  private readonly now: () => number;
  private readonly retryForMs: number;
  /** Armed after a statement failed for want of the database: nothing is sent until it fires. */
  private retryTimer: NodeJS.Timeout | undefined;
  private failuresInARow = 0;
  /** Resolved (and replaced) each time a statement fails: reads stop waiting for a database that is not there. */
  private failed = resolvable();
  private closing = false;

  constructor(execute: Execute, logger: Logger, opts: ChargeWriterOptions, now: () => number = () => performance.now()) {
    this.execute = execute;
    this.logger = logger;
    this.flushMs = opts.flushMs;
    this.maxBatch = opts.maxBatch ?? 256;
    this.retryForMs = opts.retryForMs ?? 900_000;
    this.now = now;
  }

  /** Charges `cost` of the hold (and writes its record with what was captured). Resolves once written; never rejects. */
  settle(item: Omit<Extract<ChargeItem, { outcome: 'settled' }>, 'outcome'>): Promise<HoldOutcome | undefined> {
    // Traced (tracing on), the span is the chat's child and lasts until its charge is written.
    return dbSpan('mas_end_hold_many', () => endAttributes(item.holdId, item.cost, 'settled'), () => this.add({ outcome: 'settled', ...item }));
  }

  /** Gives the whole hold back. Resolves once written; never rejects. */
  release(item: Omit<Extract<ChargeItem, { outcome: 'released' }>, 'outcome'>): Promise<HoldOutcome | undefined> {
    return dbSpan('mas_end_hold_many', () => endAttributes(item.holdId, 0n, 'released'), () => this.add({ outcome: 'released', ...item }));
  }

  /**
   * Waits until every charge of this account queued so far is written: sending them at once (a
   * read), or, with `{ send: false }`, in their own time (what may follow a charge, such as the
   * auto top-up's check, must not cost the batching).
   */
  async settledFor(accountId: string, opts: { send?: boolean } = {}): Promise<void> {
    const open = this.perAccount.get(accountId);
    if (!open) return;
    await this.waitFor(open, opts.send !== false);
  }

  /** Waits until every charge queued so far is written (sending them at once). */
  async settledAll(): Promise<void> {
    await this.waitFor(this.all, true);
  }

  /**
   * While the database refuses the charges (they wait to be tried again), a read does not wait
   * for them: it meets the same database, and answers as it does (503). Else it waits for the
   * charges, or for the statement carrying them to fail.
   */
  private async waitFor(pending: Set<Promise<unknown>>, send: boolean): Promise<void> {
    if (this.retryTimer) return;
    const failed = this.failed.promise;
    if (send) this.send();
    await Promise.race([Promise.all([...pending]), failed]);
  }

  /**
   * Writes everything queued: a graceful stop calls it before closing the database. A statement
   * that fails now is not tried again: its charges are logged as lost (the sweep releases their holds).
   */
  async close(): Promise<void> {
    this.closing = true;
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    this.send();
    await Promise.all([...this.all]);
  }

  /** Whether charges of this account wait to be written. */
  hasPending(accountId: string): boolean {
    return this.perAccount.has(accountId);
  }

  /** How many charges wait to be written (a gauge for operators; tests). */
  get pending(): number {
    return this.all.size;
  }

  private add(item: ChargeItem): Promise<HoldOutcome | undefined> {
    let resolve!: (outcome: HoldOutcome | undefined) => void;
    const written = new Promise<HoldOutcome | undefined>((r) => (resolve = r));
    this.queue.push({ item, queuedAt: this.now(), resolve });
    let open = this.perAccount.get(item.accountId);
    if (!open) this.perAccount.set(item.accountId, (open = new Set()));
    open.add(written);
    this.all.add(written);
    void written.then(() => {
      this.all.delete(written);
      open.delete(written);
      if (open.size === 0 && this.perAccount.get(item.accountId) === open) this.perAccount.delete(item.accountId);
    });
    this.schedule();
    return written;
  }

  /**
   * After a charge is queued: sends the queue when its oldest item has waited `flushMs`, or at
   * once when it is full. While a statement runs, nothing is armed: its end sends the queue.
   */
  private schedule(): void {
    if (this.running || this.retryTimer) return;
    if (this.queue.length >= this.maxBatch) return this.send();
    const wait = this.flushMs - (this.now() - this.queue[0]!.queuedAt);
    if (wait > 0) {
      this.timer ??= setTimeout(() => {
        this.timer = undefined;
        this.send();
      }, wait);
    } else {
      // USAGE_FLUSH_MS=0, or a wait already spent: at the end of this turn of the event loop,
      // with every chat that ended in it.
      this.immediate ??= setImmediate(() => {
        this.immediate = undefined;
        this.send();
      });
    }
  }

  /**
   * Sends the queue now (a timer's end, a read, a full batch), unless a statement runs: what
   * ended meanwhile goes as soon as that statement returns (group commit).
   */
  private send(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.running || this.retryTimer || this.queue.length === 0) return;
    const batch = this.queue.splice(0, this.maxBatch);
    this.running = this.write(batch).finally(() => {
      this.running = undefined;
      this.send();
    });
  }

  /**
   * The database refused the batch (down, restarting, failing over): nothing of it was written.
   * Its charges go back to the head of the queue and are tried again after a backoff, so that an
   * outage loses no charge while the process lives; those past `retryForMs`, or refused during a
   * graceful stop, are logged as lost (their holds are released by the sweep).
   */
  private refused(batch: Pending[], err: unknown): void {
    const now = this.now();
    const lost = this.closing ? batch : batch.filter((p) => now - p.queuedAt >= this.retryForMs);
    const kept = batch.filter((p) => !lost.includes(p));
    if (lost.length > 0) {
      this.logger.error({ err, holds: lost.length }, 'could not write chat charges; their holds stay open until the hold sweep releases them');
      for (const p of lost) p.resolve(undefined);
    }
    if (kept.length > 0) {
      this.queue.unshift(...kept);
      this.failuresInARow += 1;
      const wait = Math.min(1_000 * 2 ** (this.failuresInARow - 1), 10_000);
      this.logger.warn({ err, holds: kept.length, retryInMs: wait }, 'could not write chat charges; trying again');
      this.retryTimer = setTimeout(() => {
        this.retryTimer = undefined;
        this.send();
      }, wait);
    }
    this.failed.resolve();
    this.failed = resolvable();
  }

  private async write(batch: Pending[]): Promise<void> {
    const ends = batch.map((p, i) => ({ i, hold_id: p.item.holdId, actual: p.item.outcome === 'settled' ? p.item.cost.toString() : '0', outcome: p.item.outcome }));
    const records = batch.flatMap((p, i) => (p.item.outcome === 'settled' && p.item.record ? [recordRow(i, p.item.record)] : []));
    let rows: EndRow[];
    try {
      rows = await withRetry(() => this.execute<EndRow>(END_AND_RECORD, [JSON.stringify(ends), JSON.stringify(records)]));
    } catch (err) {
      // Nothing of the statement was committed. The charges must not wait on a record the
      // database refuses: they go alone, then each record on its own.
      try {
        rows = await withRetry(() => this.execute<EndRow>(END_ONLY, [JSON.stringify(ends)]));
      } catch (again) {
        this.refused(batch, again);
        return;
      }
      if (records.length > 0) this.logger.warn({ err }, 'the charges and records could not be written together; the charges were written alone');
      await Promise.all(
        records.map(async (r) => {
          const row = rows.find((x) => Number(x.i) === r.i);
          if (!row || (row.status !== 'settled' && row.status !== 'released')) return;
          await this.execute(INSERT_RECORD, [JSON.stringify([r]), row.captured]).catch((e: unknown) =>
            this.logger.warn({ err: e, completion: r.id }, 'could not record the completion; its charge stands'),
          );
        }),
      );
    }
    this.failuresInARow = 0;
    const byIndex = new Map(rows.map((r) => [Number(r.i), r]));
    for (const [i, p] of batch.entries()) {
      const row = byIndex.get(i);
      if (!row || row.status === 'not_found' || row.status === 'invalid_amount') {
        // not_found: a database crash lost the reservation, committed without waiting for the
        // disk, before this charge: nothing is charged (docs/chat.md, "Durability").
        this.logger.warn({ hold: p.item.holdId, account: p.item.accountId, status: row?.status ?? 'no_row' }, 'a chat charge found no open hold to end; nothing was charged for it');
        p.resolve(undefined);
        continue;
      }
      p.resolve({ holdId: p.item.holdId, status: row.status as HoldOutcome['status'], captured: BigInt(row.captured!), amount: BigInt(row.amount!) });
    }
  }
}

function recordRow(i: number, r: CompletionRecord) {
  return {
    i,
    id: r.id,
    kind: r.kind,
    account_id: r.accountId,
    key_id: r.keyId,
    model: r.model,
    prompt_tokens: r.promptTokens,
    completion_tokens: r.completionTokens,
    finish_reason: r.finishReason,
    created_at: r.createdAt.toISOString(),
    duration_ms: Math.max(0, Math.round(r.durationMs)),
    provider: r.provider,
    route_model: r.routeModel,
    upstream_cost_micro: r.upstreamCost === null ? null : r.upstreamCost.toString(),
  };
}
