import { Migration } from '@mikro-orm/migrations';

/** Idempotency keys (Stripe-style): the first response to a key, kept at least 24 hours. */
export class Migration20261122030000_idempotency extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table idempotency_keys (
        account_id text not null references accounts (id),
        scope text not null,
        key text not null,
        request_hash text not null,
        response_status int not null,
        response_body jsonb not null,
        created_at timestamptz not null default now(),
        primary key (account_id, scope, key)
      );
      create index idempotency_keys_created on idempotency_keys (created_at);
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists idempotency_keys;');
  }
}
