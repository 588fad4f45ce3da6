import { Migration } from '@mikro-orm/migrations';

/** Completion webhooks: a URL per job, a signing secret per account (Standard Webhooks). */
export class Migration20261122040000_webhooks extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      alter table generations add column webhook_url text;
      create table webhook_secrets (
        account_id text primary key references accounts (id),
        secret text not null,
        created_at timestamptz not null default now()
      );
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists webhook_secrets; alter table generations drop column if exists webhook_url;');
  }
}
