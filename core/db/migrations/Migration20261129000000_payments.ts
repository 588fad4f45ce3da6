import { Migration } from '@mikro-orm/migrations';

/**
 * Customers pay for themselves (issue 31, docs/payments.md): a Stripe Checkout top-up is
 * credited from its webhook, exactly once.
 *
 * - payments: one row per credited payment, written in the transaction of its ledger entry
 *   (mas_credit, keyed `stripe:checkout:<session id>`). The unique Checkout Session id is the
 *   second lock on "once": two deliveries of one session (a retry, or completed and then
 *   async_payment_succeeded under another event id) cannot both commit a row, and the ledger's
 *   unique idempotency key is the first. The row points at its ledger entry and the entry's
 *   reference is the session id, so every coin that entered can be followed to its payment.
 * - payment_events: every verified event, once per event id, with what the service did with it
 *   (`outcome`); a delivery of an event already here changes nothing. Accounts are kept as the
 *   event named them (no foreign key): an event for an unknown account is recorded too.
 */
export class Migration20261129000000_payments extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table payments (
        id text primary key,
        checkout_session_id text not null,
        account_id text not null references accounts (id),
        amount_cents bigint not null check (amount_cents > 0),
        currency text not null,
        coins_micro bigint not null check (coins_micro > 0),
        payment_intent_id text,
        customer_id text,
        event_id text not null,
        ledger_entry_id bigint not null references ledger_entries (id),
        created_at timestamptz not null default now(),
        constraint payments_checkout_session_key unique (checkout_session_id),
        constraint payments_ledger_entry_key unique (ledger_entry_id)
      );
      create index payments_account on payments (account_id, created_at desc);

      create table payment_events (
        event_id text primary key,
        type text not null,
        object_id text,
        account_id text,
        outcome text not null,
        event_created_at timestamptz not null,
        received_at timestamptz not null default now()
      );
      create index payment_events_received on payment_events (received_at desc);
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists payment_events;');
    this.addSql('drop table if exists payments;');
  }
}
