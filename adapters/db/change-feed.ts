import pg from 'pg';
import type { Logger } from 'pino';
import { parseChange, type Change } from '../../core/changes.ts';

export const CHANGES_CHANNEL = 'mas_changes';

export interface ChangeFeed {
  close(): Promise<void>;
}

/**
 * Listens on PostgreSQL's `mas_changes` channel over one connection of its own and hands each
 * change to `onChange`. When the connection is lost it connects again (backing off up to 5 s)
 * and reports `resync`, since notices sent meanwhile are gone. Resolves once listening.
 */
export async function listenForChanges(url: string, logger: Logger, onChange: (change: Change) => void): Promise<ChangeFeed> {
  let client: pg.Client | undefined;
  let closed = false;
  let retry: NodeJS.Timeout | undefined;
  let delayMs = 100;

  const connect = async (): Promise<void> => {
    const c = new pg.Client({ connectionString: url, application_name: 'mas-change-feed' });
    c.on('notification', (msg) => {
      if (msg.channel !== CHANGES_CHANNEL) return;
      const change = parseChange(msg.payload);
      if (change) onChange(change);
    });
    c.on('error', (err) => {
      if (closed) return;
      logger.warn({ err }, 'change feed connection lost: reconnecting');
      lost(c);
    });
    c.on('end', () => lost(c));
    await c.connect();
    await c.query(`listen ${CHANGES_CHANNEL}`);
    client = c;
    delayMs = 100;
  };

  const lost = (c: pg.Client) => {
    if (closed || client !== c) return;
    client = undefined;
    c.end().catch(() => undefined);
    schedule();
  };

  const schedule = () => {
    if (closed || retry) return;
    retry = setTimeout(() => {
      retry = undefined;
      connect().then(
        () => onChange({ kind: 'resync' }),
        (err: unknown) => {
          logger.warn({ err, retryMs: delayMs }, 'change feed could not connect: retrying');
          delayMs = Math.min(delayMs * 2, 5000);
          schedule();
        },
      );
    }, delayMs);
    retry.unref();
  };

  await connect();
  return {
    async close() {
      closed = true;
      clearTimeout(retry);
      await client?.end().catch(() => undefined);
      client = undefined;
    },
  };
}
