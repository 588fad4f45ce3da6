import type { CoreError } from '../errors.ts';

/**
 * The 402 `insufficient_balance` answer says how to get more coins, with the link: core adds it
 * to the error's message in one place (the base procedure of core/trpc.ts), so that REST, MCP,
 * GraphQL and the CLI say the same words. The code, type and status stay as they were.
 */
export function topUpHint(links: { addCredits: string }, paymentsOn: boolean): string {
  return paymentsOn
    ? `Add credits at ${links.addCredits}`
    : `Payments are not set up on this server: ask its operator for coins. Your balance: ${links.addCredits}`;
}

/** Appends the hint to an `insufficient_balance` error's message (once); other errors are left alone. */
export function addTopUpHint(err: CoreError, links: { addCredits: string }, paymentsOn: boolean): void {
  if (err.code !== 'insufficient_balance') return;
  const hint = topUpHint(links, paymentsOn);
  if (err.message.includes(hint)) return;
  err.message = `${err.message} ${hint}`;
}
