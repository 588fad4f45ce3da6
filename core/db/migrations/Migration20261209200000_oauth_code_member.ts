import { Migration } from '@mikro-orm/migrations';

/**
 * The wallet an app is allowed to spend from (issue 49, docs/oauth.md): the consent page lets the
 * person choose their own or an organization's they belong to. An authorization code then names
 * the organization in account_id and the person in member_id, which the connection and its key
 * take when the app exchanges the code (core/oauth/tokens.ts). Null: a personal approval.
 */
export class Migration20261209200000_oauth_code_member extends Migration {
  override async up(): Promise<void> {
    this.addSql('alter table oauth_codes add column member_id text references accounts (id);');
  }

  override async down(): Promise<void> {
    this.addSql('alter table oauth_codes drop column if exists member_id;');
  }
}
