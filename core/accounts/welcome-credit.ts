import type { EntityManager } from '@mikro-orm/postgresql';
import { recordAudit } from '../audit/record.ts';
import { coinsToJson, type Micro } from '../money/coins.ts';
import { WELCOME_CREDIT_DESCRIPTION, WELCOME_CREDIT_REFERENCE } from '../money/history-details.ts';

/**
 * The welcome credit (STARTER_CREDIT_COINS, docs/accounts.md "Welcome credit"): coins given
 * once to each account when its e-mail address is confirmed, so that a new customer's first
 * request works before any payment.
 *
 * - Once per account: the confirmation that grants is the one whose statement sets
 *   `email_verified_at` from null (`markConfirmed`), and the credit's ledger entry has the
 *   idempotency key `welcome:<account>` (unique), so a retried or concurrent confirmation (two
 *   links, a link and a password reset) moves nothing more.
 * - In the confirmation's transaction, through the money function `mas_adjust` (one ledger
 *   entry `adjustment` in the purchased pocket, described "Welcome credit"), with an audit entry
 *   (actor `internal`, action `wallet.welcome_credit`).
 * - It does not make the account paid (`mas_adjust` never does): as OpenRouter's free credits,
 *   it lets people try the models, not the ones kept for paying accounts.
 */

/** Sets the account's address confirmed now; true when this call confirmed it (it was not confirmed before). */
export async function markConfirmed(tx: EntityManager, accountId: string, now: Date): Promise<boolean> {
  const rows = await tx.execute<{ id: string }[]>('update accounts set email_verified_at = ? where id = ? and email_verified_at is null returning id', [now, accountId]);
  return rows.length > 0;
}

/**
 * Confirms the address and, when this call confirmed it, grants the welcome credit (if any).
 * Call it inside the confirmation's transaction.
 */
export async function confirmEmail(tx: EntityManager, accountId: string, now: Date, starterCredit: Micro): Promise<void> {
  if (!(await markConfirmed(tx, accountId, now))) return;
  await grantWelcomeCredit(tx, accountId, starterCredit);
}

/** The credit itself, idempotent on the account: answers whether coins moved. */
export async function grantWelcomeCredit(tx: EntityManager, accountId: string, amount: Micro): Promise<boolean> {
  if (amount <= 0n) return false;
  const [row] = await tx.execute<{ status: string; entry_id: string | null }[]>('select status, entry_id::text from mas_adjust(?, ?, ?::bigint, ?, ?, ?)', [
    accountId,
    'adjustment',
    amount.toString(),
    WELCOME_CREDIT_REFERENCE,
    `welcome:${accountId}`,
    WELCOME_CREDIT_DESCRIPTION,
  ]);
  if (row?.status !== 'applied') return false;
  await recordAudit(tx, { kind: 'internal' }, {
    action: 'wallet.welcome_credit',
    targetType: 'wallet',
    targetId: accountId,
    reason: 'welcome credit (STARTER_CREDIT_COINS) at the e-mail address confirmation',
    after: { coins: coinsToJson(amount), entry_id: `le_${row.entry_id}` },
  });
  return true;
}
