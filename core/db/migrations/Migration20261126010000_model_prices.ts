import { Migration } from '@mikro-orm/migrations';

/**
 * Operators change the catalog at run time (issue 18, docs/admin.md "Models"):
 *
 * - model_prices: prices from a date. The price of a model in force at time T is the row with
 *   the latest `effective_from` <= T, else the model's own `definition.pricing` (the base price,
 *   as the catalog file or `admin.models.create` wrote it). Rows are never edited once in force;
 *   a future row may be replaced before it starts. `prices` is written as the operator wrote it
 *   (in-app prices, the catalog file's `pricing` shape). `created_by` is who scheduled it:
 *   `admin_token:adm_…`, `admin_user:adu_…` or `internal`. A model's rows go with it when a
 *   catalog sync removes the model; the audit log keeps their history.
 * - models.disabled_at: a disabled model is refused for new chats and jobs as an unknown one
 *   is; jobs already accepted run on.
 */
export class Migration20261126010000_model_prices extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table model_prices (
        model_id text not null references models (id) on delete cascade,
        effective_from timestamptz not null,
        prices jsonb not null,
        created_at timestamptz not null default now(),
        created_by text not null,
        primary key (model_id, effective_from)
      );

      alter table models add column disabled_at timestamptz;
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists model_prices; alter table models drop column if exists disabled_at;');
  }
}
