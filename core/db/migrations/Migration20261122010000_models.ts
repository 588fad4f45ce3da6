import { Migration } from '@mikro-orm/migrations';

/**
 * The model catalog. `definition` is the catalog entry as the operator wrote it (in-app
 * prices); the API price is derived from it when read. Loaded from config/models.yaml at start.
 */
export class Migration20261122010000_models extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table models (
        id text primary key,
        type text not null check (type in ('text', 'image', 'video', 'audio', '3d')),
        definition jsonb not null,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now()
      );
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists models;');
  }
}
