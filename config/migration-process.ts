import { migrate, openOrm } from '../core/orm.ts';

/**
 * The short-lived process in which `npm start` (and any process that migrates at its start)
 * applies pending migrations to the database of its DATABASE_URL (config/database.ts,
 * `migrateApart`): the migrator's library and the migrations' code load here and leave with this
 * process, instead of staying in a long-running one for good (bench/RESULTS.md, "Memory"). It
 * answers over its IPC channel with the names it applied, or with the error that stopped it.
 */
interface Answer {
  applied?: string[];
  error?: { message: string; stack?: string | undefined; props: Record<string, unknown> };
}

const answer = (a: Answer) => new Promise<void>((resolve) => process.send!(a, () => resolve()));

try {
  const orm = await openOrm({ url: process.env.DATABASE_URL!, poolMax: 2 });
  try {
    await answer({ applied: await migrate(orm) });
  } finally {
    await orm.close();
  }
} catch (err) {
  const e = err instanceof Error ? err : new Error(String(err));
  // A PostgreSQL error's code, detail, position… go with it, as far as they are plain data.
  const props = JSON.parse(JSON.stringify({ ...e })) as Record<string, unknown>;
  await answer({ error: { message: e.message, stack: e.stack, props } });
  process.exitCode = 1;
}
process.disconnect();
