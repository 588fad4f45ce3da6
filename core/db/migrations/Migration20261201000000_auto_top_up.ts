import { Migration } from '@mikro-orm/migrations';

/**
 * Auto top-up (docs/payments.md, "Auto top-up"): an account's opt-in (a threshold in coins and
 * an amount in cents), the card it saved at a Checkout to be charged with the customer away,
 * and why it was turned off, if it was; and each off-session charge it made, the exactly-once
 * and per-day record of the workflow that charges (core/payments/auto-top-up.ts).
 *
 * A charge's payment lands in `payments` like a Checkout's, so refunds, disputes and receipts
 * treat both alike: such a row has no Checkout Session, only its PaymentIntent.
 */
export class Migration20261201000000_auto_top_up extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      create table auto_top_ups (
        account_id text primary key references accounts (id),
        enabled boolean not null default false,
        threshold_micro bigint not null check (threshold_micro > 0),
        amount_cents bigint not null check (amount_cents > 0),
        -- The card, as the Checkout that saved it left it: its customer and its PaymentIntent
        -- (whose payment method is read at the first charge, then kept).
        customer_id text,
        setup_payment_intent_id text,
        payment_method_id text,
        disabled_reason text,
        disabled_at timestamptz,
        updated_at timestamptz not null default now()
      );

      create table auto_top_up_charges (
        id text primary key,
        account_id text not null references accounts (id),
        amount_cents bigint not null check (amount_cents > 0),
        -- pending: being charged; charged: the provider took it, its webhook credits it;
        -- credited; declined / requires_action / failed: nothing was taken.
        status text not null check (status in ('pending', 'charged', 'credited', 'declined', 'requires_action', 'failed')),
        payment_intent_id text unique,
        reason text,
        created_at timestamptz not null default now(),
        ended_at timestamptz
      );
      create index auto_top_up_charges_account on auto_top_up_charges (account_id, created_at desc);

      alter table payments alter column checkout_session_id drop not null;
      alter table payments add column source text not null default 'checkout' check (source in ('checkout', 'auto_top_up'));
      create unique index payments_payment_intent_key on payments (payment_intent_id) where source = 'auto_top_up';
    `);
  }

  override async down(): Promise<void> {
    this.addSql(`
      drop index if exists payments_payment_intent_key;
      delete from payments where checkout_session_id is null;
      alter table payments drop column if exists source;
      alter table payments alter column checkout_session_id set not null;
      drop table if exists auto_top_up_charges;
      drop table if exists auto_top_ups;
    `);
  }
}
