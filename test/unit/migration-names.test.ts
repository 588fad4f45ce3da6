import { readdirSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { migrations } from '../../core/db/migrations/index.ts';
import { migrationNames } from '../../core/db/migrations/names.ts';

/**
 * What is pending is decided from names.ts alone (core/orm.ts, `pendingMigrations`), and what
 * runs from index.ts's classes: a migration missing from either would be run but never awaited,
 * or awaited but never run.
 */
describe('the list of migrations (core/db/migrations)', () => {
  it('names.ts names the migrations index.ts runs, in the same order', () => {
    expect(migrationNames).toEqual(migrations.map((m) => m.name));
  });

  it('every migration file of the folder is listed, in the order of its name', () => {
    const files = readdirSync(path.resolve(import.meta.dirname, '../../core/db/migrations'))
      .filter((f) => f.startsWith('Migration'))
      .map((f) => f.replace(/\.ts$/, ''))
      .sort();
    expect(migrationNames).toEqual(files);
  });
});
