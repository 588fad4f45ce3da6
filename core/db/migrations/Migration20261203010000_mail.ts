import { Migration } from '@mikro-orm/migrations';

/**
 * Mail to people (docs/accounts.md):
 * - `accounts.email_verified_at`: when the person proved the address is theirs (the sign-up
 *   link, or a password reset). Accounts that exist today, and accounts an operator makes,
 *   count as verified (the default); only the sign-up page makes unverified ones.
 * - `account_tokens`: the one-time links of those mails (verification 24 hours, password reset
 *   30 minutes), stored as the SHA-256 of the token, as login links are.
 * - `accounts.low_balance_threshold_micro`, `low_balance_notified_at`: the low-balance notice.
 *   The mark is set (by a conditional update) before the one mail of a crossing is sent and
 *   cleared when the balance is back at or above the threshold.
 */
export class Migration20261203010000_mail extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      alter table accounts add column email_verified_at timestamptz default now();
      alter table accounts add column low_balance_threshold_micro bigint check (low_balance_threshold_micro > 0);
      alter table accounts add column low_balance_notified_at timestamptz;
      create index accounts_low_balance on accounts (id) where low_balance_threshold_micro is not null;
      create table account_tokens (
        token_hash text primary key,
        account_id text not null references accounts (id),
        purpose text not null check (purpose in ('verify_email', 'reset_password')),
        created_at timestamptz not null default now(),
        expires_at timestamptz not null,
        used_at timestamptz
      );
      create index account_tokens_expires on account_tokens (expires_at);
      create index account_tokens_account on account_tokens (account_id, purpose);
    `);
  }

  override async down(): Promise<void> {
    this.addSql(`
      drop table if exists account_tokens;
      drop index if exists accounts_low_balance;
      alter table accounts drop column if exists low_balance_notified_at;
      alter table accounts drop column if exists low_balance_threshold_micro;
      alter table accounts drop column if exists email_verified_at;
    `);
  }
}
