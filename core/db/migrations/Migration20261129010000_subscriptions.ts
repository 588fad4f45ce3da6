import { Migration } from '@mikro-orm/migrations';

/**
 * Subscriptions paid through Stripe (docs/payments.md, "Subscriptions"): each paid invoice
 * grants its plan's coins to the subscription pocket, once per invoice, until the
 * subscription is deleted.
 *
 * - subscriptions: one row per Stripe subscription, made by its first paid invoice or its
 *   deletion (whichever Stripe delivers first), locked by both, so a grant and a deletion of
 *   one subscription never interleave. `ended_at` set: no more grants.
 * - subscription_grants: one row per granted invoice, unique on the invoice id, written in the
 *   transaction of its ledger entry (mas_credit, keyed `stripe:invoice:<invoice id>`), as
 *   payments are for Checkout Sessions.
 */
export class Migration20261129010000_subscriptions extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table subscriptions (
        id text primary key,
        account_id text not null references accounts (id),
        customer_id text,
        plan_name text,
        price_id text,
        current_period_end timestamptz,
        created_at timestamptz not null default now(),
        ended_at timestamptz
      );
      create index subscriptions_account on subscriptions (account_id, created_at desc);

      create table subscription_grants (
        id text primary key,
        invoice_id text not null,
        subscription_id text not null references subscriptions (id),
        account_id text not null references accounts (id),
        plan_name text not null,
        amount_paid_cents bigint not null check (amount_paid_cents > 0),
        currency text not null,
        coins_micro bigint not null check (coins_micro > 0),
        event_id text not null,
        ledger_entry_id bigint not null references ledger_entries (id),
        created_at timestamptz not null default now(),
        constraint subscription_grants_invoice_key unique (invoice_id),
        constraint subscription_grants_ledger_entry_key unique (ledger_entry_id)
      );
      create index subscription_grants_subscription on subscription_grants (subscription_id, created_at desc);
    `);
  }

  override async down(): Promise<void> {
    this.addSql('drop table if exists subscription_grants;');
    this.addSql('drop table if exists subscriptions;');
  }
}
