import { Migration } from '@mikro-orm/migrations';

/**
 * Indexes for the admin API's lists (core/admin/reads), which page every account's rows newest
 * first and filter them:
 * - accounts by the start of their email, case-insensitive: `lower(email) like 'abc%'` can use
 *   a btree only with text_pattern_ops under a locale other than C (an external PostgreSQL);
 * - accounts, files and the keys of one account by creation time;
 * - jobs by status (the failed ones), by model and by key, each by creation time (jobs by time
 *   alone: generations_created, from the analytics migration).
 */
export class Migration20261126030000_admin_reads extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create index accounts_email_pattern on accounts (lower(email) text_pattern_ops);
      create index accounts_created on accounts (created_at desc);
      create index files_created on files (created_at desc);
      create index api_keys_account_created on api_keys (account_id, created_at desc);
      create index generations_status_created on generations (status, created_at desc);
      create index generations_model_created on generations (model_id, created_at desc);
      create index generations_key_created on generations (key_id, created_at desc);
    `);
  }

  override async down(): Promise<void> {
    this.addSql(`
      drop index if exists generations_key_created;
      drop index if exists generations_model_created;
      drop index if exists generations_status_created;
      drop index if exists api_keys_account_created;
      drop index if exists files_created;
      drop index if exists accounts_created;
      drop index if exists accounts_email_pattern;
    `);
  }
}
