import DataLoader from 'dataloader';

/**
 * Runs one SQL statement (placeholders `$1`, `$2`, …) outside any request's transaction: its
 * own implicit transaction.
 */
export type Execute = <T>(sql: string, params: unknown[]) => Promise<T[]>;

/**
 * A DataLoader that sends calls together: alone, a call waits only for the end of the current
 * turn of the event loop; under load, while `maxInFlight` statements of this kind are running,
 * new calls gather into the next one (group commit: one round trip and one commit for many
 * requests). Nothing is cached: every call reaches the database.
 */
export function statementBatcher<K, V>(
  run: (items: readonly K[]) => Promise<readonly (V | Error)[]>,
  opts: { maxBatchSize?: number; maxInFlight?: number } = {},
): DataLoader<K, V> {
  const maxInFlight = opts.maxInFlight ?? 1;
  let inFlight = 0;
  const waiting: (() => void)[] = [];
  const schedule = (dispatch: () => void) => {
    if (inFlight < maxInFlight) {
      inFlight++;
      setImmediate(dispatch);
    } else {
      waiting.push(dispatch);
    }
  };
  const batch = async (items: readonly K[]) => {
    try {
      return await run(items);
    } finally {
      const next = waiting.shift();
      if (next) setImmediate(next);
      else inFlight--;
    }
  };
  return new DataLoader<K, V>(batch, { cache: false, maxBatchSize: opts.maxBatchSize ?? 64, batchScheduleFn: schedule });
}

/** SQLSTATEs after which the whole statement can simply run again: nothing of it was committed. */
const RETRYABLE = new Set(['40P01', '40001']);

/** Runs a batched statement, again when PostgreSQL chose it as a deadlock or serialization victim. */
export async function withRetry<T>(run: () => Promise<T>, attempts = 3): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await run();
    } catch (err) {
      if (attempt >= attempts || !RETRYABLE.has(sqlState(err))) throw err;
    }
  }
}

function sqlState(err: unknown): string {
  const e = err as { code?: unknown; cause?: { code?: unknown } } | null;
  return String(e?.code ?? e?.cause?.code ?? '');
}
