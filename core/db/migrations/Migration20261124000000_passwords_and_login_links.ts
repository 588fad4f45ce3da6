import { Migration } from '@mikro-orm/migrations';

/**
 * Passwords for the account pages (an argon2id hash in PHC form; null for accounts made by the
 * CLI or the demo, which sign in by an operator's login link until they set one), and the
 * operator's one-time login links: only the hash of the token is stored, valid 15 minutes,
 * used at most once.
 */
export class Migration20261124000000_passwords_and_login_links extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      alter table accounts add column password_hash text;
      create table login_links (
        token_hash text primary key,
        account_id text not null references accounts (id),
        created_at timestamptz not null default now(),
        expires_at timestamptz not null,
        used_at timestamptz
      );
      create index login_links_expires on login_links (expires_at);
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists login_links; alter table accounts drop column if exists password_hash;');
  }
}
