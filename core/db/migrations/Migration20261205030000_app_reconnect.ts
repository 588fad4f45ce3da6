import { Migration } from '@mikro-orm/migrations';

/**
 * Reconnecting an app (docs/oauth.md, "Reconnecting an app"): an approval for an app the account
 * already has connected replaces that connection in place (core/oauth/tokens.ts, exchangeCode)
 * instead of adding a second identical row. app_connections.reconnected_at is when it last did;
 * created_at stays the first connection's date.
 */
export class Migration20261205030000_app_reconnect extends Migration {
  override async up(): Promise<void> {
    this.addSql('alter table app_connections add column reconnected_at timestamptz;');
  }

  override async down(): Promise<void> {
    this.addSql('alter table app_connections drop column if exists reconnected_at;');
  }
}
