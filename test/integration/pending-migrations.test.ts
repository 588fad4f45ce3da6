import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrationNames } from '../../core/db/migrations/names.ts';
import { migrator, openOrm, pendingMigrations } from '../../core/orm.ts';
import { cloneTestDatabase, createFreshDatabase } from '../support/db.ts';

/**
 * What is pending is read from the migrator's table without loading the migrator (core/orm.ts,
 * `pendingMigrations`): it must say what the migrator would, since a process that finds nothing
 * pending starts without migrating and one that must not migrate refuses to start on it.
 */
type Db = Awaited<ReturnType<typeof createFreshDatabase>>;
const opened: { db: Db; orm: MikroORM }[] = [];
async function open(db: Db): Promise<MikroORM> {
  const orm = await openOrm({ url: db.url, poolMax: 1 });
  opened.push({ db, orm });
  return orm;
}
/** What MikroORM's migrator itself says is pending (it loads the migrator: fine in a test). */
async function migratorSays(orm: MikroORM): Promise<string[]> {
  return (await (await migrator(orm)).getPendingMigrations()).map((m) => m.name);
}
let empty: MikroORM;
let migrated: MikroORM;
beforeAll(async () => {
  [empty, migrated] = await Promise.all([createFreshDatabase().then(open), cloneTestDatabase().then(open)]);
});
afterAll(async () => {
  for (const { db, orm } of opened) {
    await orm.close();
    await db.drop();
  }
});

describe('pending migrations', () => {
  it('on a brand-new database (no migrations table yet): every migration, in order', async () => {
    expect(await pendingMigrations(empty)).toEqual(migrationNames);
    expect(await migratorSays(empty)).toEqual(migrationNames);
  });

  it('on a migrated database: none', async () => {
    expect(await pendingMigrations(migrated)).toEqual([]);
  });

  it('those not recorded as applied; a name recorded with its file extension counts as applied, as the migrator counts it', async () => {
    const conn = migrated.em.getConnection();
    const [last, oneBefore] = [migrationNames.at(-1)!, migrationNames.at(-2)!];
    await conn.execute('delete from mikro_orm_migrations where name = ?', [last]);
    await conn.execute(`update mikro_orm_migrations set name = name || '.js' where name = ?`, [oneBefore]);
    expect(await pendingMigrations(migrated)).toEqual([last]);
    expect(await migratorSays(migrated)).toEqual([last]);
  });
});
