import { Migration } from '@mikro-orm/migrations';

/**
 * What a finished text completion was charged, kept for its owner to read back afterwards
 * (`GET /chat/completions/{id}`): clients that drop unknown usage fields lose `cost_coins`
 * from the answer itself. `kind` keeps the chat format's records apart from later formats' (the
 * Responses API's), which the same read serves. Written once when the request ends, never
 * updated; the ledger stays the record of money, this is a copy of what the answer said.
 */
export class Migration20261201010000_completion_records extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table completion_records (
        id text primary key,
        kind text not null check (kind in ('chat.completion', 'response')),
        account_id text not null references accounts (id),
        key_id text not null references api_keys (id),
        model text not null,
        prompt_tokens integer not null check (prompt_tokens >= 0),
        completion_tokens integer not null check (completion_tokens >= 0),
        cost_micro bigint not null check (cost_micro >= 0),
        finish_reason text,
        created_at timestamptz not null,
        duration_ms integer not null check (duration_ms >= 0)
      );
      create index completion_records_account on completion_records (account_id, created_at desc);
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists completion_records;');
  }
}
