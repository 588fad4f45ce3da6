import { testDatabaseUrl } from '../support/db.ts';
import fs from 'node:fs/promises';
import path from 'node:path';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../support/process.ts';

/**
 * core/money/money.sql is the readable definition of the money functions. The migrations are
 * their history; this test keeps the two equal: running the file on the migrated database
 * (inside a transaction that is rolled back) must change no function definition.
 */
const DEFINITIONS = `select p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')' as name, pg_get_functiondef(p.oid) as def
  from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'public' order by 1`;

describe('core/money/money.sql', () => {
  it('defines exactly the money functions the migrations leave in the database', async () => {
    const sql = await fs.readFile(path.join(ROOT, 'core/money/money.sql'), 'utf8');
    const client = new pg.Client(testDatabaseUrl());
    await client.connect();
    try {
      await client.query('begin');
      const before = (await client.query<{ name: string; def: string }>(DEFINITIONS)).rows;
      await client.query(sql);
      const after = (await client.query<{ name: string; def: string }>(DEFINITIONS)).rows;
      expect(after.map((r) => r.name)).toEqual(before.map((r) => r.name));
      for (const [i, row] of after.entries()) expect(row.def, row.name).toBe(before[i]!.def);
      expect(before.map((r) => r.name.replace(/\(.*/, ''))).toEqual(
        expect.arrayContaining(['mas_credit', 'mas_reserve', 'mas_end_hold', 'mas_reserve_many', 'mas_end_hold_many', 'mas_write_wallet']),
      );
    } finally {
      await client.query('rollback');
      await client.end();
    }
  });
});
