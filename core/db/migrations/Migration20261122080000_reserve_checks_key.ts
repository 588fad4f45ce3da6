import { Migration } from '@mikro-orm/migrations';

/**
 * A chat request may name its key from a cache of recent look-ups (core/keys/authenticate.ts).
 * Its reservation then carries the key id, and the key must still be active when the coins are
 * reserved: a revoked key gets no hold ('key_revoked'), in the same statement, without a round
 * trip of its own. Items without a key id are reserved as before.
 */
export class Migration20261122080000_reserve_checks_key extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create or replace function mas_reserve_many(p_items jsonb)
      returns table (i int, status text, available bigint)
      language plpgsql as $$
      declare
        x record;
        r record;
      begin
        for x in
          select * from jsonb_to_recordset(p_items)
            as t (i int, hold_id text, account_id text, amount bigint, reference text, expires_at timestamptz, metadata jsonb, key_id text)
          order by t.account_id, t.i
        loop
          i := x.i;
          if x.key_id is not null and not exists (
            select 1 from api_keys k where k.id = x.key_id and k.account_id = x.account_id and k.revoked_at is null
          ) then
            status := 'key_revoked'; available := null;
          else
            select * into r from mas_reserve(x.hold_id, x.account_id, x.amount, x.reference, x.expires_at, x.metadata);
            status := r.status; available := r.available;
          end if;
          return next;
        end loop;
      end $$;
    `);
  }

  override async down(): Promise<void> {
    this.addSql(`
      create or replace function mas_reserve_many(p_items jsonb)
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
    `);
  }
}
