import { Migration } from '@mikro-orm/migrations';

/**
 * Apps connected through OAuth (SPEC part 5): each connection spends through a key of its own,
 * owned by the account, with an optional spend cap and expiry. Revoking the connection
 * revokes its key. The OAuth flow (issue 17) creates them; the account pages list and revoke.
 */
export class Migration20261124010000_app_connections extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table app_connections (
        id text primary key,
        account_id text not null references accounts (id),
        key_id text not null unique references api_keys (id),
        client_id text not null,
        client_name text not null,
        redirect_host text not null,
        spend_cap_micro bigint check (spend_cap_micro is null or spend_cap_micro > 0),
        expires_at timestamptz,
        created_at timestamptz not null default now(),
        last_used_at timestamptz,
        revoked_at timestamptz
      );
      create index app_connections_account on app_connections (account_id, created_at desc);
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists app_connections;');
  }
}
