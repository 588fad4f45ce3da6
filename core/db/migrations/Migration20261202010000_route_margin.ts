import { Migration } from '@mikro-orm/migrations';

/**
 * Upstream cost and margin for operators (issue 33, docs/admin.md "Margin"): a daily rollup of
 * what each route served, rebuilt day by day by the analytics refresh
 * (core/admin/analytics/route-days.ts), beside the usage rollups.
 *
 * - route_daily: per UTC day, model, provider and route model, the requests served (chat
 *   completion records, by the day the request came in; media jobs that succeeded, by the day
 *   they ended), what they were charged (`revenue_micro`: their `cost_micro`), and, over the
 *   ones whose upstream cost is known (`costed_requests`), what they were charged
 *   (`costed_revenue_micro`) and what they cost upstream (`upstream_cost_micro`). A margin is
 *   only ever computed over the costed requests: a request of unknown cost is not free.
 *   `provider` and `route_model` are '' for rows written before routes existed (migration
 *   routes): they were served by the model's one provider of the time, which the row does not
 *   name. '' rather than null: the columns are in the primary key.
 * - analytics_refresh_state.route_refreshed_at: when the last refresh of route_daily began;
 *   null until the first, which then rebuilds every day the records and jobs hold (the
 *   usage rollups of an existing deployment are already built, route_daily is not).
 * - completion_records_created: the refresh finds the records of a day by creation time.
 */
export class Migration20261202010000_route_margin extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table route_daily (
        day date not null,
        model_id text not null,
        provider text not null,
        route_model text not null,
        requests integer not null,
        revenue_micro bigint not null,
        costed_requests integer not null,
        costed_revenue_micro bigint not null,
        upstream_cost_micro bigint not null,
        primary key (day, model_id, provider, route_model),
        check (costed_requests <= requests)
      );
      alter table analytics_refresh_state add column route_refreshed_at timestamptz;
      create index completion_records_created on completion_records (created_at);
    `);
  }

  override async down(): Promise<void> {
    this.addSql(`
      drop index if exists completion_records_created;
      alter table analytics_refresh_state drop column if exists route_refreshed_at;
      drop table if exists route_daily;
    `);
  }
}
