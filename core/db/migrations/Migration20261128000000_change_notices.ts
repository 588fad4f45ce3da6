import { Migration } from '@mikro-orm/migrations';

/**
 * Every process keeps small caches (the catalog for a few seconds, recently seen keys on the
 * chat path); with many instances, a change made on one must reach the others' caches. These
 * triggers NOTIFY the channel `mas_changes` in the transaction that makes the change, so
 * PostgreSQL delivers the notice at its commit (never for a rolled-back change), whichever
 * process, CLI or SQL session made it. Payloads carry ids only, never a secret or its hash:
 *   {"kind":"catalog"}                       a model or a scheduled price changed
 *   {"kind":"key","id":"key_…"}              a key was revoked
 *   {"kind":"account","id":"acct_…"}         an account was disabled or enabled
 */
export class Migration20261128000000_change_notices extends Migration {
  override async up(): Promise<void> {
    // One function for every trigger: the kind is the trigger's argument; row triggers add the row's id.
    this.addSql(`create or replace function mas_notify_change() returns trigger language plpgsql as $$
      begin
        if tg_level = 'ROW' then
          perform pg_notify('mas_changes', json_build_object('kind', tg_argv[0], 'id', new.id)::text);
        else
          perform pg_notify('mas_changes', json_build_object('kind', tg_argv[0])::text);
        end if;
        return null;
      end $$;`);
    this.addSql(`create trigger models_changed after insert or update or delete or truncate on models
      for each statement execute function mas_notify_change('catalog');`);
    this.addSql(`create trigger model_prices_changed after insert or update or delete or truncate on model_prices
      for each statement execute function mas_notify_change('catalog');`);
    this.addSql(`create trigger api_keys_revoked after update of revoked_at on api_keys
      for each row when (old.revoked_at is null and new.revoked_at is not null) execute function mas_notify_change('key');`);
    this.addSql(`create trigger accounts_state_changed after update of disabled_at on accounts
      for each row when (old.disabled_at is distinct from new.disabled_at) execute function mas_notify_change('account');`);
  }

  override async down(): Promise<void> {
    this.addSql('drop trigger if exists accounts_state_changed on accounts;');
    this.addSql('drop trigger if exists api_keys_revoked on api_keys;');
    this.addSql('drop trigger if exists model_prices_changed on model_prices;');
    this.addSql('drop trigger if exists models_changed on models;');
    this.addSql('drop function if exists mas_notify_change();');
  }
}
