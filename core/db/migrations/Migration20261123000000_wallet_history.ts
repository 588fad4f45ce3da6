import { Migration } from '@mikro-orm/migrations';

/**
 * Indexes for the customer's wallet history (core/money/history.ts), so that a page costs work
 * bounded by its size, however long the account's ledger is.
 *
 * - `ledger_entries_history`: the entries that can make a row of the history. Left out are the
 *   reservation and release entries of chat requests (reference `chatcmpl-…`): a chat shows
 *   only at its end, through its capture entry (kept), and a failed chat (nothing captured)
 *   shows nothing at all, so a long run of failed requests is never walked through. A hold
 *   whose reference is not a chat completion id keeps all its entries here, which costs only
 *   time, never a row. core/money/history.ts repeats this predicate word for word (the planner
 *   uses a partial index only for a query that implies its predicate).
 * - `ledger_entries_spendable`: each row's `balance_after` is the latest subscription and
 *   purchased balance at or before its last entry, one index probe per pocket.
 *
 * Both are keyed on `-id`, and the queries order by `-id`: no other index gives that order, so
 * the planner cannot take the primary key's backward scan instead, filtering the whole table's
 * newest rows for this account (it did, measured: 10 ms instead of 0.1 for an account whose
 * entries were not the newest, because it expects an account's entries to be spread evenly).
 */
export class Migration20261123000000_wallet_history extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create index ledger_entries_history on ledger_entries (account_id, (-id))
        where hold_id is null or kind = 'capture' or reference not like 'chatcmpl-%';
      create index ledger_entries_spendable on ledger_entries (account_id, pocket, (-id)) include (balance_after_micro)
        where pocket <> 'held';
    `);
  }

  override async down(): Promise<void> {
    this.addSql(`
      drop index if exists ledger_entries_spendable;
      drop index if exists ledger_entries_history;
    `);
  }
}
