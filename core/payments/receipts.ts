import type { EntityManager } from '@mikro-orm/postgresql';
import type { z } from 'zod';
import type { CoreDeps } from '../context.ts';
import { listHistory, type historyInput, type WalletEntryView } from '../money/history.ts';

/** How long a page waits for the provider's receipt before showing the row without it (it is asked again next time). */
const RECEIPT_WAIT_MS = 3000;
/** At most this many receipts are asked for per read: a long-unpaid history never makes a page slow. */
const RECEIPTS_PER_READ = 5;

/**
 * Receipts of top-ups (Stripe: the charge's `receipt_url`). The Checkout Session of the webhook
 * does not carry it, so it is asked of the provider the first time the account's history or
 * billing is read after the credit, and kept in `payments.receipt_url`. Best effort: a provider
 * that fails or is slow leaves the row without a link, to be asked again on the next read.
 */
export async function fillReceipts(deps: Pick<CoreDeps, 'payments' | 'logger'>, em: EntityManager, accountId: string): Promise<void> {
  const provider = deps.payments;
  if (!provider?.receiptUrl) return;
  const missing = await em.execute<{ id: string; payment_intent_id: string }[]>(
    `select id, payment_intent_id from payments where account_id = ? and receipt_url is null and payment_intent_id is not null order by created_at desc limit ${RECEIPTS_PER_READ}`,
    [accountId],
  );
  await Promise.all(
    missing.map(async (p) => {
      let timer: NodeJS.Timeout | undefined;
      try {
        const url = await Promise.race([
          provider.receiptUrl!(p.payment_intent_id),
          new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), RECEIPT_WAIT_MS))),
        ]);
        if (url && /^https:\/\//.test(url)) await em.execute('update payments set receipt_url = ? where id = ? and receipt_url is null', [url, p.id]);
      } catch (err) {
        deps.logger.warn({ payment: p.id, err: { message: err instanceof Error ? err.message : String(err) } }, 'could not read the receipt of a payment');
      } finally {
        clearTimeout(timer);
      }
    }),
  );
}

/** The receipts of the top-ups among `entries`, by their reference (the Checkout Session id, or an auto top-up's PaymentIntent id). */
export async function receiptsOf(em: EntityManager, accountId: string, entries: WalletEntryView[]): Promise<Map<string, string>> {
  const sessions = entries.filter((e) => e.type === 'topup').map((e) => e.reference);
  if (sessions.length === 0) return new Map();
  // A Checkout's top-up is referenced by its session, an auto top-up by its PaymentIntent.
  const rows = await em.execute<{ reference: string; receipt_url: string }[]>(
    `select coalesce(checkout_session_id, payment_intent_id) as reference, receipt_url from payments
     where account_id = ? and receipt_url is not null and coalesce(checkout_session_id, payment_intent_id) in (${sessions.map(() => '?').join(', ')})`,
    [accountId, ...sessions],
  );
  return new Map(rows.map((r) => [r.reference, r.receipt_url]));
}

export type WalletEntryWithReceipt = WalletEntryView & { receipt_url: string | null };

/** A page of the wallet history, each top-up with its receipt when the provider has one (the account pages). */
export async function historyWithReceipts(deps: Pick<CoreDeps, 'payments' | 'logger'>, em: EntityManager, accountId: string, input: z.output<typeof historyInput>) {
  await fillReceipts(deps, em, accountId);
  const page = await listHistory(em, accountId, input);
  const receipts = await receiptsOf(em, accountId, page.data);
  return { ...page, data: page.data.map((e): WalletEntryWithReceipt => ({ ...e, receipt_url: (e.type === 'topup' && receipts.get(e.reference)) || null })) };
}
