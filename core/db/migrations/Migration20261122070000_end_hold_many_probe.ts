import { Migration } from '@mikro-orm/migrations';

/**
 * mas_end_hold_many found each item's account with a join of the items to `holds`. PL/pgSQL
 * keeps the plan of that join for the life of the connection, and a plan made while `holds`
 * was small is a hash join over a sequential scan of the whole table: every settle then read
 * every hold ever made (0.75 ms with a few hundred holds, 2.1 ms with 6,000, growing). A scalar
 * subquery on the primary key is one index probe per item whatever the plan was made with.
 */
export class Migration20261122070000_end_hold_many_probe extends Migration {
  override async up(): Promise<void> {
    // Items are still taken in account order (then hold id), so two batches lock wallets in
    // the same order and cannot deadlock; an unknown hold has no account and sorts last.
    this.addSql(`
      create or replace function mas_end_hold_many(p_items jsonb)
      returns table (i int, status text, captured bigint, amount bigint)
      language plpgsql as $$
      declare
        x record;
        r record;
      begin
        for x in
          select t.*, (select h.account_id from holds h where h.id = t.hold_id) as account_id
            from jsonb_to_recordset(p_items) as t (i int, hold_id text, actual bigint, outcome text)
          order by 5, t.hold_id, t.i
        loop
          select * into r from mas_end_hold(x.hold_id, x.actual, x.outcome);
          i := x.i; status := r.status; captured := r.captured; amount := r.amount;
          return next;
        end loop;
      end $$;
    `);
  }

  override async down(): Promise<void> {
    this.addSql(`
      create or replace function mas_end_hold_many(p_items jsonb)
      returns table (i int, status text, captured bigint, amount bigint)
      language plpgsql as $$
      declare
        x record;
        r record;
      begin
        for x in
          select t.*, h.account_id from jsonb_to_recordset(p_items) as t (i int, hold_id text, actual bigint, outcome text)
            left join holds h on h.id = t.hold_id
          order by h.account_id, t.hold_id, t.i
        loop
          select * into r from mas_end_hold(x.hold_id, x.actual, x.outcome);
          i := x.i; status := r.status; captured := r.captured; amount := r.amount;
          return next;
        end loop;
      end $$;
    `);
  }
}
