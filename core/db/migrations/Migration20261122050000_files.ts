import { Migration } from '@mikro-orm/migrations';

/** Uploaded files, usable as generation inputs by the account that uploaded them. */
export class Migration20261122050000_files extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table files (
        id text primary key,
        account_id text not null references accounts (id),
        filename text not null,
        bytes bigint not null check (bytes >= 0),
        mime_type text not null,
        type text not null check (type in ('image', 'video', 'audio', 'model', 'other')),
        storage_key text not null,
        created_at timestamptz not null default now()
      );
      create index files_account on files (account_id, created_at desc);
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists files;');
  }
}
