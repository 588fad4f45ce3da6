import { Migration } from '@mikro-orm/migrations';

/**
 * When the service asked the upstream to stop a job (docs/providers.md, "Cancel reaches the
 * upstream"). A cancel through the API, the job's workflow, and the orphan sweep after a
 * Terminate may each try to stop the same upstream job; whoever sets this first (a conditional
 * update on the job's row) calls the provider's cancel, so it is called once per handle. A new
 * handle (the next route of the model) clears it. Null: never asked.
 */
export class Migration20261202020000_upstream_cancel extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table generations add column upstream_canceled_at timestamptz;`);
  }

  override async down(): Promise<void> {
    this.addSql(`alter table generations drop column if exists upstream_canceled_at;`);
  }
}
