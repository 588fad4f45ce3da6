import type { EntityManager } from '@mikro-orm/postgresql';
import { UniqueConstraintViolationException } from '@mikro-orm/core';
import { z } from 'zod';
import { CoreError, notFound } from '../errors.ts';
import { newId } from '../ids.ts';
import { Account } from './account.entity.ts';

export const createAccountInput = z.object({
  email: z.email('must be an email address').max(254).transform((e) => e.trim()),
});

/** An account reference as an operator types it: an account id or an email. */
export const accountRef = z.string().trim().min(1, 'name an account by id or email');

export function accountView(a: Account) {
  return { id: a.id, object: 'account' as const, email: a.email, paid_account: a.paid, created_at: a.createdAt.toISOString() };
}

/** Creates an account with an empty wallet, in one transaction. */
export async function createAccount(em: EntityManager, input: z.output<typeof createAccountInput>): Promise<Account> {
  try {
    return await em.transactional(async (tx) => {
      const account = tx.create(Account, { id: newId('acct'), email: input.email, paid: false, createdAt: new Date() });
      await tx.flush();
      await tx.execute('insert into wallets (account_id) values (?)', [account.id]);
      return account;
    });
  } catch (err) {
    if (err instanceof UniqueConstraintViolationException) {
      throw new CoreError('conflict', `An account with email ${input.email} already exists.`, { param: 'email', reason: 'email_taken' });
    }
    throw err;
  }
}

export async function resolveAccount(em: EntityManager, ref: string): Promise<Account> {
  const rows = await em.execute<{ id: string }[]>(
    `select id from accounts where id = ? or (lower(email) = lower(?) and kind = 'person') limit 1`,
    [ref, ref],
  );
  const id = rows[0]?.id;
  const account = id ? await em.findOne(Account, { id }, { refresh: true }) : null;
  if (!account) throw notFound('account_not_found', `No account with id or email "${ref}".`);
  return account;
}

/** An account as the operator names it (id or email). */
export async function getAccount(em: EntityManager, ref: string) {
  return accountView(await resolveAccount(em, ref));
}

