import { Migration } from '@mikro-orm/migrations';

/**
 * Usage analytics for operators (issue 18, core/admin/analytics/): daily rollups of the ledger
 * and of the jobs, rebuilt day by day by the `mas-analytics-refresh` Temporal Schedule
 * (core/admin/analytics/refresh.ts), so that the admin queries read a few thousand rows instead
 * of the ledger. The money functions are untouched: nothing is written in the ledger's
 * transaction.
 *
 * - usage_daily: per UTC day, account, model and key, what was spent (captured), refunded
 *   (ledger kind `refund`), given back by failed or canceled jobs (their hold released) and
 *   adjusted, and how many requests were charged. `model_id` and `key_id` are '' where an
 *   entry is about no model or key (adjustments; a refund whose reference is not a job): the
 *   columns are in the primary key, which cannot hold nulls on PostgreSQL 13.
 * - usage_daily_models, usage_daily_accounts: the same per day and model, and per day and
 *   account, summed from usage_daily in the same transaction, for the queries that group by
 *   neither keys nor both (totals per day, top models, top accounts).
 * - jobs_daily: per UTC day of creation, model, status and failure code, the count of jobs and
 *   their durations in milliseconds (arrays, so that percentiles over any range stay exact).
 * - analytics_refresh_state: one row, what the rollups include.
 *
 * Indexes for the refresh: a BRIN index on ledger_entries.created_at (the ledger is
 * append-only and written in time order, so a block range index finds a day's entries at
 * almost no cost to the inserts of the hot path), and btree indexes on generations' creation
 * and completion times (the jobs created or ended since the last run).
 */
export class Migration20261126020000_analytics extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create index ledger_entries_created_brin on ledger_entries using brin (created_at);
      create index generations_created on generations (created_at);
      create index generations_completed on generations (completed_at) where completed_at is not null;

      create table usage_daily (
        day date not null,
        account_id text not null,
        model_id text not null,
        key_id text not null,
        spent_micro bigint not null,
        refunded_micro bigint not null,
        job_released_micro bigint not null,
        adjusted_micro bigint not null,
        requests integer not null,
        primary key (day, account_id, model_id, key_id)
      );
      create index usage_daily_account on usage_daily (account_id, day);
      create index usage_daily_model on usage_daily (model_id, day);
      create index usage_daily_key on usage_daily (key_id, day);

      create table usage_daily_models (
        day date not null,
        model_id text not null,
        spent_micro bigint not null,
        refunded_micro bigint not null,
        job_released_micro bigint not null,
        adjusted_micro bigint not null,
        requests integer not null,
        primary key (day, model_id)
      );

      create table usage_daily_accounts (
        day date not null,
        account_id text not null,
        spent_micro bigint not null,
        refunded_micro bigint not null,
        job_released_micro bigint not null,
        adjusted_micro bigint not null,
        requests integer not null,
        primary key (day, account_id)
      );

      create table jobs_daily (
        day date not null,
        model_id text not null,
        status text not null,
        error_code text not null,
        jobs integer not null,
        run_ms integer[] not null,
        total_ms integer[] not null,
        primary key (day, model_id, status, error_code)
      );

      create table analytics_refresh_state (
        id boolean primary key default true check (id),
        ledger_id bigint not null default 0,
        refreshed_at timestamptz
      );
      insert into analytics_refresh_state default values;
    `);
  }

  override async down(): Promise<void> {
    this.addSql(`
      drop table if exists analytics_refresh_state;
      drop table if exists jobs_daily;
      drop table if exists usage_daily_accounts;
      drop table if exists usage_daily_models;
      drop table if exists usage_daily;
      drop index if exists generations_completed;
      drop index if exists generations_created;
      drop index if exists ledger_entries_created_brin;
    `);
  }
}
