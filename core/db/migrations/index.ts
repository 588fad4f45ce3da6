import { Migration20261122000000_foundation } from './Migration20261122000000_foundation.ts';
import { Migration20261122010000_models } from './Migration20261122010000_models.ts';
import { Migration20261122020000_generations } from './Migration20261122020000_generations.ts';
import { Migration20261122030000_idempotency } from './Migration20261122030000_idempotency.ts';
import { Migration20261122040000_webhooks } from './Migration20261122040000_webhooks.ts';
import { Migration20261122050000_files } from './Migration20261122050000_files.ts';
import { Migration20261122060000_batched_holds } from './Migration20261122060000_batched_holds.ts';
import { Migration20261122070000_end_hold_many_probe } from './Migration20261122070000_end_hold_many_probe.ts';
import { Migration20261122080000_reserve_checks_key } from './Migration20261122080000_reserve_checks_key.ts';
import { Migration20261122090000_reserve_commits_async } from './Migration20261122090000_reserve_commits_async.ts';
import { Migration20261122100000_batched_holds_one_wallet_write } from './Migration20261122100000_batched_holds_one_wallet_write.ts';
import { Migration20261123000000_wallet_history } from './Migration20261123000000_wallet_history.ts';
import { Migration20261123010000_idempotency_results } from './Migration20261123010000_idempotency_results.ts';
import { Migration20261123020000_sessions_and_admin_tokens } from './Migration20261123020000_sessions_and_admin_tokens.ts';
import { Migration20261124000000_passwords_and_login_links } from './Migration20261124000000_passwords_and_login_links.ts';
import { Migration20261124010000_app_connections } from './Migration20261124010000_app_connections.ts';
import { Migration20261125000000_oauth } from './Migration20261125000000_oauth.ts';
import { Migration20261126000000_admin } from './Migration20261126000000_admin.ts';
import { Migration20261126010000_model_prices } from './Migration20261126010000_model_prices.ts';
import { Migration20261126020000_analytics } from './Migration20261126020000_analytics.ts';
import { Migration20261126030000_admin_reads } from './Migration20261126030000_admin_reads.ts';
import { Migration20261126040000_job_run_id } from './Migration20261126040000_job_run_id.ts';

/** Every migration, in order. Listed explicitly so that no file globbing decides what runs. */
export const migrations = [
  { name: 'Migration20261122000000_foundation', class: Migration20261122000000_foundation },
  { name: 'Migration20261122010000_models', class: Migration20261122010000_models },
  { name: 'Migration20261122020000_generations', class: Migration20261122020000_generations },
  { name: 'Migration20261122030000_idempotency', class: Migration20261122030000_idempotency },
  { name: 'Migration20261122040000_webhooks', class: Migration20261122040000_webhooks },
  { name: 'Migration20261122050000_files', class: Migration20261122050000_files },
  { name: 'Migration20261122060000_batched_holds', class: Migration20261122060000_batched_holds },
  { name: 'Migration20261122070000_end_hold_many_probe', class: Migration20261122070000_end_hold_many_probe },
  { name: 'Migration20261122080000_reserve_checks_key', class: Migration20261122080000_reserve_checks_key },
  { name: 'Migration20261122090000_reserve_commits_async', class: Migration20261122090000_reserve_commits_async },
  { name: 'Migration20261122100000_batched_holds_one_wallet_write', class: Migration20261122100000_batched_holds_one_wallet_write },
  { name: 'Migration20261123000000_wallet_history', class: Migration20261123000000_wallet_history },
  { name: 'Migration20261123010000_idempotency_results', class: Migration20261123010000_idempotency_results },
  { name: 'Migration20261123020000_sessions_and_admin_tokens', class: Migration20261123020000_sessions_and_admin_tokens },
  { name: 'Migration20261124000000_passwords_and_login_links', class: Migration20261124000000_passwords_and_login_links },
  { name: 'Migration20261124010000_app_connections', class: Migration20261124010000_app_connections },
  { name: 'Migration20261125000000_oauth', class: Migration20261125000000_oauth },
  { name: 'Migration20261126000000_admin', class: Migration20261126000000_admin },
  { name: 'Migration20261126010000_model_prices', class: Migration20261126010000_model_prices },
  { name: 'Migration20261126020000_analytics', class: Migration20261126020000_analytics },
  { name: 'Migration20261126030000_admin_reads', class: Migration20261126030000_admin_reads },
  { name: 'Migration20261126040000_job_run_id', class: Migration20261126040000_job_run_id },
];
