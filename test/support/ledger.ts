import type { MikroORM } from '@mikro-orm/postgresql';
import { expect } from 'vitest';
import { chargesWritten, walletInvariants } from './db.ts';

/** The `API usage` captured for one request (its completion id is the ledger reference), in micro-coins. */
export async function capturedFor(orm: MikroORM, reference: string): Promise<bigint> {
  await chargesWritten();
  const [row] = await orm.em.fork().execute<{ total: string }[]>(
    `select coalesce(-sum(amount_micro), 0)::text as total from ledger_entries where reference = ? and kind = 'capture'`,
    [reference],
  );
  return BigInt(row!.total);
}

/** After any request: no hold left open, and the ledger sums to the balance. */
export async function expectSettledWallet(orm: MikroORM, accountId: string) {
  const state = await walletInvariants(orm, accountId);
  expect(state.openHolds).toBe(0n);
  expect(state.balance.held).toBe(0n);
  expect(state.ledgerTotal).toBe(state.balance.subscription + state.balance.purchased);
  return state;
}
