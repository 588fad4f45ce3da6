import { Migration } from '@mikro-orm/migrations';

/**
 * The chat reservations (mas_reserve_many) commit without waiting for their WAL to reach the
 * disk (`synchronous_commit = off` for that transaction only). A reservation's durability
 * matters only once something is charged against it, and the settle that charges it commits
 * synchronously, which flushes the WAL up to and including the reservation (the WAL is one
 * sequence). If PostgreSQL crashes in between, the reservation may be lost with the request it
 * belonged to: that request cannot settle (its hold is gone) and fails, nothing is charged,
 * nothing is reported to the client as paid, and the wallet is as if it had never been held.
 * Never overspent either: a reservation made after a lost one is later in the WAL, so it is
 * lost too. Top-ups, settles, releases and job reservations keep synchronous commits.
 * This takes one disk flush out of every chat request's path.
 */
export class Migration20261122090000_reserve_commits_async extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create or replace function mas_reserve_many(p_items jsonb)
      returns table (i int, status text, available bigint)
      language plpgsql as $$
      declare
        x record;
        r record;
      begin
        -- See the comment of this migration: the settle's synchronous commit makes this durable.
        perform set_config('synchronous_commit', 'off', true);
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
}
