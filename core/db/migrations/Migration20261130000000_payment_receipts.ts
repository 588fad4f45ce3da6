import { Migration } from '@mikro-orm/migrations';

/**
 * The customer's receipt of a top-up (Stripe: its charge's `receipt_url`), linked from the
 * history on the pages and in the CSV. The webhook's Checkout Session does not carry it: it is
 * read from the payment provider the first time the account's history or billing is shown,
 * and kept here (docs/payments.md, "Receipts").
 */
export class Migration20261130000000_payment_receipts extends Migration {
  override async up(): Promise<void> {
    this.addSql('alter table payments add column receipt_url text;');
  }

  override async down(): Promise<void> {
    this.addSql('alter table payments drop column if exists receipt_url;');
  }
}
