import { ADJUSTMENT_NOTE_PREFIX } from '../../money/history-details.ts';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Logger } from 'pino';
import { z } from 'zod';
import { accountRef, resolveAccount } from '../../accounts/accounts.ts';
import { CoreError, invalid, notFound } from '../../errors.ts';
import { endJob, markEnded } from '../../generations/end-job.ts';
import { loadJob } from '../../generations/job-row.ts';
import { generationIdInput } from '../../generations/schema.ts';
import { generationView } from '../../generations/views.ts';
import { appConnectionIdInput } from '../../apps/connections.ts';
import { endAllSessions } from '../../auth/sessions.ts';
import { keyIdInput } from '../../keys/keys.ts';
import { coinsToJson, formatCoins, InvalidAmountError, parseCoins, type Micro } from '../../money/coins.ts';
import { release } from '../../money/holds.ts';
import { balanceView, getBalance } from '../../money/wallet.ts';
import type { GenerationStarter, UrlSigner } from '../../ports.ts';
import { resolveWalletOwner, walletOwnerFields } from '../../operators/wallet-owner.ts';
import { reasonSchema, recordAudit, type Operator } from '../audit.ts';

/**
 * Operators' actions (docs/admin.md, "Mutations"), each one transaction with its audit entry.
 * Money moves only through the money functions (mas_adjust here), so every change is a ledger
 * entry and every correction is idempotent on its key.
 */
interface Ctx {
  em: EntityManager;
  operator: Operator;
  requestId: string | undefined;
}

const balanceOf = async (em: EntityManager, accountId: string) => {
  const b = balanceView(await getBalance(em, accountId));
  return { subscription_coins: b.subscription_coins, purchased_coins: b.purchased_coins, held_coins: b.held_coins };
};

/** A signed amount of coins: "+12.5", "-3", "7". */
const signedCoins = z
  .union([z.string(), z.number()])
  .transform((v, ctx) => {
    const text = String(v).trim();
    const negative = text.startsWith('-');
    try {
      const micro = parseCoins(text.replace(/^[+-]/, ''));
      if (micro === 0n) throw new InvalidAmountError('must not be 0');
      return negative ? -micro : micro;
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: (err as Error).message });
      return z.NEVER;
    }
  });

export const adjustBalanceInput = z.object({
  /** A person's account (id or e-mail), or `organization` (org_…): exactly one. */
  ...walletOwnerFields,
  /** Up (+) into purchased coins; down (−) out of purchased coins first, then subscription coins. */
  coins: signedCoins,
  reason: reasonSchema,
  /** What the customer reads in their history beside the adjustment (the reason is the operators' own). */
  customer_note: z.string().trim().min(1, 'must not be empty; leave it out for no note').max(200).optional(),
  /** Makes a retried adjustment count once. */
  idempotency_key: z.string().trim().min(1).max(200),
});

/** Moves coins with mas_adjust and answers the outcome; 'insufficient' is a 400 naming `coins`. */
async function adjust(tx: EntityManager, accountId: string, kind: 'adjustment' | 'refund', amount: Micro, reference: string, key: string, description: string) {
  const [row] = await tx.execute<{ status: string; entry_id: string | null; available: string | null }[]>(
    'select status, entry_id::text, available::text from mas_adjust(?, ?, ?::bigint, ?, ?, ?)',
    [accountId, kind, amount.toString(), reference, key, description],
  );
  if (row!.status === 'insufficient') {
    throw invalid('coins', `The account has ${formatCoins(BigInt(row!.available!))} spendable coins; a correction down cannot take more (held coins are never taken).`, 'insufficient_balance');
  }
  if (row!.status === 'no_wallet') throw notFound('account_not_found', `No account ${accountId}.`);
  return { applied: row!.status === 'applied', entryId: row!.entry_id };
}

export async function adjustBalance(c: Ctx, input: z.output<typeof adjustBalanceInput>) {
  const account = await resolveWalletOwner(c.em, input);
  return c.em.transactional(async (tx) => {
    const before = await balanceOf(tx, account.id);
    const { applied, entryId } = await adjust(tx, account.id, 'adjustment', input.coins, `adj_${input.idempotency_key}`.slice(0, 200), `adjustment:${account.id}:${input.idempotency_key}`, input.customer_note ? `${ADJUSTMENT_NOTE_PREFIX}${input.customer_note}` : 'Balance adjustment');
    const after = await balanceOf(tx, account.id);
    if (applied) {
      await recordAudit(tx, c.operator, { action: 'wallet.adjust', targetType: 'wallet', targetId: account.id, reason: input.reason, before, after: { ...after, coins: coinsToJson(input.coins) } }, c.requestId);
    }
    return { object: 'adjustment' as const, account: account.id, coins: coinsToJson(input.coins), applied, entry_id: entryId ? `le_${entryId}` : null, balance: balanceView(await getBalance(tx, account.id)) };
  });
}

export const refundGenerationInput = generationIdInput.extend({ reason: reasonSchema });

/**
 * Gives back what a succeeded job was charged, once (idempotent on the job id): the coins go to
 * the purchased pocket as a `refund` ledger entry, which the customer's history shows as a
 * refund. A job that did not succeed was already refunded when it ended.
 */
export async function refundGeneration(c: Ctx, deps: { signer: UrlSigner }, input: z.output<typeof refundGenerationInput>) {
  return c.em.transactional(async (tx) => {
    const [locked] = await tx.execute<{ status: string }[]>('select status from generations where id = ? for update', [input.id]);
    if (!locked) throw notFound('generation_not_found', `No generation ${input.id}.`);
    const job = await loadJob(tx, input.id);
    const charged = BigInt(job.cost_micro ?? '0');
    if (job.status !== 'succeeded' || charged === 0n) {
      throw new CoreError('conflict', `The generation ${input.id} is ${job.status} and was charged ${formatCoins(charged)} coins: there is nothing to refund.`, { reason: 'nothing_to_refund' });
    }
    const { applied, entryId } = await adjust(tx, job.account_id, 'refund', charged, job.id, `refund:${job.id}`, 'Refund');
    if (applied) {
      await recordAudit(tx, c.operator, { action: 'generation.refund', targetType: 'generation', targetId: job.id, reason: input.reason, before: { charged_coins: coinsToJson(charged) }, after: { refunded_coins: coinsToJson(charged), account: job.account_id } }, c.requestId);
    }
    return { object: 'generation_refund' as const, generation: job.id, account: job.account_id, refunded_coins: coinsToJson(charged), applied, entry_id: entryId ? `le_${entryId}` : null, generation_view: generationView(job, deps.signer) };
  });
}

export const cancelAnyGenerationInput = generationIdInput.extend({ reason: reasonSchema.optional() });

/** Cancels any account's unfinished job and refunds it in full, as its owner's cancel does, audited. */
export async function cancelAnyGeneration(c: Ctx, deps: { signer: UrlSigner; generations: GenerationStarter; logger: Logger }, input: z.output<typeof cancelAnyGenerationInput>) {
  const result = await endJob(c.em, input.id, async (tx, job) => {
    await release(tx, job.hold_id);
    await markEnded(tx, input.id, 'canceled', null);
    await recordAudit(tx, c.operator, { action: 'generation.cancel', targetType: 'generation', targetId: job.id, reason: input.reason, before: { status: job.status }, after: { status: 'canceled', refunded_coins: coinsToJson(BigInt(job.price_micro)) } }, c.requestId);
  });
  if ('ended' in result) {
    throw new CoreError('conflict', `The generation ${input.id} has already ended (${result.ended.status}); it cannot be canceled.`, { reason: 'generation_finished' });
  }
  await deps.generations.cancel(input.id).catch((err: unknown) => deps.logger.warn({ err, job: input.id }, 'could not cancel the job workflow'));
  return generationView(await loadJob(c.em, input.id), deps.signer);
}

export const revokeKeyInput = keyIdInput.extend({ reason: reasonSchema.optional() });

/** Revokes any key (an app's key too: its connection then stops), audited when it was active. */
export async function revokeAnyKey(c: Ctx, input: z.output<typeof revokeKeyInput>) {
  return c.em.transactional(async (tx) => {
    const [row] = await tx.execute<{ id: string; account_id: string; revoked_at: string | null }[]>('select id, account_id, revoked_at from api_keys where id = ? for update', [input.id]);
    if (!row) throw notFound('key_not_found', `No API key ${input.id}.`);
    if (!row.revoked_at) {
      await tx.execute('update api_keys set revoked_at = now() where id = ?', [input.id]);
      await recordAudit(tx, c.operator, { action: 'key.revoke', targetType: 'api_key', targetId: input.id, reason: input.reason, before: { revoked: false }, after: { revoked: true, account: row.account_id } }, c.requestId);
    }
    const [after] = await tx.execute<{ id: string; account_id: string; name: string; prefix: string; kind: string; created_at: string; last_used_at: string | null; revoked_at: string }[]>(
      'select id, account_id, name, prefix, kind, created_at, last_used_at, revoked_at from api_keys where id = ?',
      [input.id],
    );
    const iso = (d: string | null) => (d === null ? null : new Date(d).toISOString());
    return { id: after!.id, object: 'api_key' as const, name: after!.name, prefix: after!.prefix, created_at: new Date(after!.created_at).toISOString(), last_used_at: iso(after!.last_used_at), revoked_at: iso(after!.revoked_at) };
  });
}

export const revokeAppInput = appConnectionIdInput.extend({ reason: reasonSchema.optional() });

/** Revokes any account's app connection and its key, audited. */
export async function revokeAnyAppConnection(c: Ctx, input: z.output<typeof revokeAppInput>) {
  return c.em.transactional(async (tx) => {
    const [row] = await tx.execute<{ account_id: string; key_id: string; revoked_at: string | null }[]>('select account_id, key_id, revoked_at from app_connections where id = ? for update', [input.id]);
    if (!row) throw notFound('app_connection_not_found', `No connected app ${input.id}.`);
    if (!row.revoked_at) {
      await tx.execute('update app_connections set revoked_at = now() where id = ?', [input.id]);
      await tx.execute('update api_keys set revoked_at = coalesce(revoked_at, now()) where id = ?', [row.key_id]);
      await recordAudit(tx, c.operator, { action: 'app_connection.revoke', targetType: 'app_connection', targetId: input.id, reason: input.reason, before: { revoked: false }, after: { revoked: true, account: row.account_id } }, c.requestId);
    }
    return { id: input.id, object: 'app_connection' as const, account: row.account_id, revoked: true as const };
  });
}

export const endSessionsInput = z.object({ account: accountRef, reason: reasonSchema.optional() });

/**
 * Signs the account's person out everywhere: every session of its account pages ends at once,
 * on every instance (sessions are checked in the database on each request), audited. Keys and
 * app connections are not touched.
 */
export async function endAccountSessions(c: Ctx, input: z.output<typeof endSessionsInput>) {
  const account = await resolveAccount(c.em, input.account);
  return c.em.transactional(async (tx) => {
    const ended = await endAllSessions(tx, account.id);
    await recordAudit(tx, c.operator, { action: 'account.end_sessions', targetType: 'account', targetId: account.id, reason: input.reason, after: { sessions_ended: ended } }, c.requestId);
    return { id: account.id, object: 'account' as const, email: account.email, sessions_ended: ended };
  });
}

export const setAccountStateInput = z.object({ account: accountRef, reason: reasonSchema });

/**
 * Disables an account (its keys, app tokens and sessions are refused at once, on every
 * instance; a key the chat path had cached is refused by the reservation itself) or enables it
 * again. Jobs already running finish; nothing is refunded by this.
 */
export async function setAccountDisabled(c: Ctx, input: z.output<typeof setAccountStateInput>, disabled: boolean) {
  const account = await resolveAccount(c.em, input.account);
  return c.em.transactional(async (tx) => {
    const [row] = await tx.execute<{ disabled_at: string | null }[]>('select disabled_at from accounts where id = ? for update', [account.id]);
    const was = row!.disabled_at !== null;
    if (was !== disabled) {
      await tx.execute(`update accounts set disabled_at = ${disabled ? 'now()' : 'null'} where id = ?`, [account.id]);
      if (disabled) await tx.execute('delete from sessions where account_id = ?', [account.id]);
      await recordAudit(tx, c.operator, { action: disabled ? 'account.disable' : 'account.enable', targetType: 'account', targetId: account.id, reason: input.reason, before: { disabled: was }, after: { disabled } }, c.requestId);
    }
    const [after] = await tx.execute<{ disabled_at: string | null }[]>('select disabled_at from accounts where id = ?', [account.id]);
    return { id: account.id, object: 'account' as const, email: account.email, disabled: disabled, disabled_at: after!.disabled_at === null ? null : new Date(after!.disabled_at).toISOString() };
  });
}
