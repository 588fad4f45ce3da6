import { Migration } from '@mikro-orm/migrations';

/**
 * The credentials of the two principals beside API keys: account sessions (the pages) and
 * admin tokens (the admin API). Only hashes of their secrets are stored.
 */
export class Migration20261123020000_sessions_and_admin_tokens extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table sessions (
        id text primary key,
        token_hash text not null unique,
        account_id text not null references accounts (id),
        created_at timestamptz not null default now(),
        last_seen_at timestamptz not null default now(),
        expires_at timestamptz not null
      );
      create index sessions_account on sessions (account_id);
      create table admin_tokens (
        id text primary key,
        name text not null,
        role text not null check (role in ('viewer', 'operator')),
        token_hash text not null unique,
        created_at timestamptz not null default now(),
        last_used_at timestamptz,
        revoked_at timestamptz
      );
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists admin_tokens; drop table if exists sessions;');
  }
}
