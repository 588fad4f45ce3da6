import { afterAll } from 'vitest';
import { cloneTestDatabase } from './db.ts';

/**
 * A setup file of the integration, browser and e2e tiers (vitest.config.ts): before a test file
 * runs, it gets a database of its own, cloned from the migrated template the global setup made
 * (`CREATE DATABASE … TEMPLATE`, a copy of files, not a rerun of the migrations), and that
 * database is dropped when the file ends.
 *
 * Files run side by side, and some of what they do is global to a database: the hold sweep
 * (`releaseExpiredHolds` releases every expired hold), the orphaned-job sweep, `setval` on the
 * ledger's and the audit log's sequences, the change feed's LISTEN, the admin analytics' sums.
 * In a database of its own each file sees only its own rows, as it did when files ran one at a
 * time. `testDatabaseUrl()` (test/support/db.ts) answers this file's database.
 */
const db = await cloneTestDatabase();
process.env.MAS_TEST_DATABASE_URL = db.url;
afterAll(async () => {
  await db.drop();
}, 60_000);
