import DataLoader from 'dataloader';

/** Runs one SQL statement outside any request's transaction (its own implicit transaction). */
export type Execute = <T>(sql: string, params: unknown[]) => Promise<T[]>;

/**
 * A DataLoader that sends together the calls made in one turn of the event loop: under load,
 * the requests whose bodies arrived in the same turn share one statement (one round trip, one
 * commit). Alone, a call waits for nothing but the end of the current turn. Nothing is cached:
 * every call reaches the database.
 */
export function statementBatcher<K, V>(run: (items: readonly K[]) => Promise<readonly (V | Error)[]>, maxBatchSize = 64): DataLoader<K, V> {
  return new DataLoader<K, V>(run, { cache: false, maxBatchSize, batchScheduleFn: (dispatch) => setImmediate(dispatch) });
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
