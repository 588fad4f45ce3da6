/**
 * The name of every migration, in order: what core/orm.ts compares with the applied ones to say
 * what is pending, without loading the migrations' code. Their classes extend
 * `@mikro-orm/migrations`' `Migration`, a library of about 20 MiB of memory that a process which
 * only checks (every start but the first after a release) never needs (bench/RESULTS.md, "Memory").
 * index.ts lists the same names with their classes; test/unit/migration-names.test.ts keeps
 * the two, and the files of this folder, equal.
 */
export const migrationNames: readonly string[] = [
  'Migration20261122000000_foundation',
  'Migration20261122010000_models',
  'Migration20261122020000_generations',
  'Migration20261122030000_idempotency',
  'Migration20261122040000_webhooks',
  'Migration20261122050000_files',
  'Migration20261122060000_batched_holds',
  'Migration20261122070000_end_hold_many_probe',
  'Migration20261122080000_reserve_checks_key',
  'Migration20261122090000_reserve_commits_async',
  'Migration20261122100000_batched_holds_one_wallet_write',
  'Migration20261123000000_wallet_history',
  'Migration20261123010000_idempotency_results',
  'Migration20261123020000_sessions_and_admin_tokens',
  'Migration20261124000000_passwords_and_login_links',
  'Migration20261124010000_app_connections',
  'Migration20261125000000_oauth',
  'Migration20261126000000_admin',
  'Migration20261126010000_model_prices',
  'Migration20261126020000_analytics',
  'Migration20261126030000_admin_reads',
  'Migration20261126040000_job_run_id',
  'Migration20261127000000_result_retention',
  'Migration20261128000000_change_notices',
  'Migration20261129000000_payments',
  'Migration20261129010000_subscriptions',
  'Migration20261130000000_payment_receipts',
  'Migration20261130010000_payment_reversals',
  'Migration20261201000000_auto_top_up',
  'Migration20261201010000_completion_records',
  'Migration20261202000000_routes',
  'Migration20261202010000_route_margin',
  'Migration20261202020000_upstream_cancel',
  'Migration20261203000000_key_limits',
  'Migration20261203010000_mail',
  'Migration20261205030000_app_reconnect',
  'Migration20261206000000_trace_id',
  'Migration20261207000000_key_room_limited_only',
  'Migration20261208100000_payment_claims',
  'Migration20261209000000_organizations',
  'Migration20261209200000_oauth_code_member',
];
