import { Migration } from '@mikro-orm/migrations';

/**
 * Many reservations, or many hold endings, in one statement: the chat hot path sends the ones
 * that arrive together as one round trip and one commit instead of one each. Each item goes
 * through the same single-hold function (so the rules live in one place); items are taken in
 * account order so that two batches lock wallets in the same order and cannot deadlock.
 */
export class Migration20261122060000_batched_holds extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create function mas_reserve_many(p_items jsonb)
      returns table (i int, status text, available bigint)
      language plpgsql as $$
      declare
        x record;
        r record;
      begin
        for x in
          select * from jsonb_to_recordset(p_items)
            as t (i int, hold_id text, account_id text, amount bigint, reference text, expires_at timestamptz, metadata jsonb)
          order by t.account_id, t.i
        loop
          select * into r from mas_reserve(x.hold_id, x.account_id, x.amount, x.reference, x.expires_at, x.metadata);
          i := x.i; status := r.status; available := r.available;
          return next;
        end loop;
      end $$;

      create function mas_end_hold_many(p_items jsonb)
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

  override async down(): Promise<void> {
    this.addSql(`
      drop function if exists mas_end_hold_many(jsonb);
      drop function if exists mas_reserve_many(jsonb);
    `);
  }
}
