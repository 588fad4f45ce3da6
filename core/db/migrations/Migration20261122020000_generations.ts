import { Migration } from '@mikro-orm/migrations';

/** Media generation jobs. Each job owns one hold (`hold_id`), which its workflow ends exactly once. */
export class Migration20261122020000_generations extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table generations (
        id text primary key,
        account_id text not null references accounts (id),
        key_id text not null references api_keys (id),
        model_id text not null,
        status text not null default 'queued' check (status in ('queued', 'running', 'succeeded', 'failed', 'canceled')),
        prompt text not null,
        settings jsonb not null,
        inputs jsonb not null,
        price_micro bigint not null check (price_micro >= 0),
        cost_micro bigint check (cost_micro >= 0),
        hold_id text not null references holds (id),
        output jsonb,
        error jsonb,
        created_at timestamptz not null default now(),
        started_at timestamptz,
        completed_at timestamptz,
        output_expires_at timestamptz,
        check ((status in ('queued', 'running')) = (completed_at is null))
      );
      create index generations_active_by_key on generations (key_id) where status in ('queued', 'running');
      create index generations_account on generations (account_id, created_at desc);
      create index generations_queued on generations (created_at) where status = 'queued';
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists generations;');
  }
}
