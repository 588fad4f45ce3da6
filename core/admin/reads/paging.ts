import type { EntityManager } from '@mikro-orm/postgresql';
import { z } from 'zod';
import { invalid } from '../../errors.ts';

/**
 * What every admin list shares: a page of at most 100 rows, newest first, continued after the
 * id of the last row of the previous page (like REST's `starting_after`), and an optional
 * time range on `created_at` (`since` inclusive, `until` exclusive).
 */
export const MAX_PAGE = 100;

export const pageInput = z.object({
  first: z.number().int().min(1).max(MAX_PAGE).default(20),
  after: z.string().trim().min(1).max(100).optional(),
});

export const timeRangeInput = z.object({
  since: z.iso.datetime({ offset: true }).optional(),
  until: z.iso.datetime({ offset: true }).optional(),
});

/** An id with its type prefix (`acct_…`), checked before it reaches SQL. */
export const prefixedId = (prefix: string) =>
  z.string().trim().regex(new RegExp(`^${prefix}_[0-9A-Za-z]{1,64}$`), `must be an id such as ${prefix}_…`);

/** Look-ups by ids (dataloaders): one query for up to 500 ids. */
export const idsInput = (id: z.ZodType<string>) => z.object({ ids: z.array(id).max(500) });

/** Conditions and their parameters, in order, for one `where` clause. */
export class Conditions {
  private readonly parts: string[] = [];
  readonly params: unknown[] = [];

  add(sql: string, ...values: unknown[]): this {
    this.parts.push(sql);
    this.params.push(...values);
    return this;
  }

  /** Adds `sql` only when `value` was given. */
  addIf(value: unknown, sql: string): this {
    return value === undefined ? this : this.add(sql, value);
  }

  range(column: string, input: z.output<typeof timeRangeInput>): this {
    if (input.since) this.add(`${column} >= ?::timestamptz`, input.since);
    if (input.until) this.add(`${column} < ?::timestamptz`, input.until);
    return this;
  }

  /**
   * Keyset paging over `(created_at, id)` descending, continued after the row with id
   * `after`: its exact timestamp is read in the same statement (JavaScript dates would drop the
   * microseconds and skip or repeat rows).
   */
  after(alias: string, table: string, after: string | undefined): this {
    if (after === undefined) return this;
    return this.add(`(${alias}.created_at, ${alias}.id) < (select c.created_at, c.id from ${table} c where c.id = ?)`, after);
  }

  sql(): string {
    return this.parts.length > 0 ? `where ${this.parts.join(' and ')}` : '';
  }
}

/** The page and whether more rows follow (the query asked for one row more than the page). */
export function pageOf<T>(rows: T[], first: number): { object: 'list'; data: T[]; has_more: boolean } {
  return { object: 'list', data: rows.slice(0, first), has_more: rows.length > first };
}

/**
 * An empty page after a cursor that names no row is a mistake of the caller, not the end of
 * the list: say so (one more query, only in that case).
 */
export async function checkCursor(em: EntityManager, table: string, after: string | undefined, rows: unknown[]): Promise<void> {
  if (after === undefined || rows.length > 0) return;
  const found = await em.execute(`select 1 from ${table} where id = ?`, [after]);
  if (found.length === 0) throw invalid('after', `'after' must be the id of a row of this list; ${after} is not.`, 'invalid_cursor');
}

/**
 * A PostgreSQL text[] literal: MikroORM inlines an array parameter as a list of values, so
 * `= any(?::text[])` takes the array as one string.
 */
export function textArray(values: readonly string[]): string {
  return `{${values.map((v) => `"${v.replace(/["\\]/g, '\\$&')}"`).join(',')}}`;
}

export const iso = (d: Date | string | null): string | null => (d === null ? null : new Date(d).toISOString());

