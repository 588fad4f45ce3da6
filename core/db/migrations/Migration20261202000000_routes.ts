import { Migration } from '@mikro-orm/migrations';

/**
 * Which route served a request, and what it cost upstream (issue 33, docs/providers.md).
 * A model may have several routes (a provider and the model's name there); the customer pays
 * the model's price whichever served, and these columns let the operator see who served what,
 * at what cost:
 * - completion_records (chat): `provider` and `route_model` of the route that answered,
 *   `upstream_cost_micro` what it cost the operator, in micro-coins (1 USD = 1000 coins):
 *   from the upstream's answer where it reports a cost, else the route's `cost` in the catalog;
 *   null when neither says.
 * - generations (media jobs): the same, plus `upstream_handle`, the upstream's id of the job
 *   (a prediction, request or video id), kept as soon as it is submitted, so that a cancel, a
 *   Terminate in the Temporal UI or the orphan sweep can ask the provider to stop it.
 * Rows from before this migration have nulls: their route was the model's one provider.
 * The ledger itself is unchanged (append-only); its entries' reference is the chat or job id,
 * which leads to these rows.
 */
export class Migration20261202000000_routes extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      alter table completion_records
        add column provider text,
        add column route_model text,
        add column upstream_cost_micro bigint check (upstream_cost_micro >= 0);
      alter table generations
        add column provider text,
        add column route_model text,
        add column upstream_handle text,
        add column upstream_cost_micro bigint check (upstream_cost_micro >= 0);
    `);
  }

  override async down(): Promise<void> {
    this.addSql(`
      alter table generations drop column if exists upstream_cost_micro, drop column if exists upstream_handle,
        drop column if exists route_model, drop column if exists provider;
      alter table completion_records drop column if exists upstream_cost_micro, drop column if exists route_model, drop column if exists provider;
    `);
  }
}
