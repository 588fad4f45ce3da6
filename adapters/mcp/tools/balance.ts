import { z } from 'zod';
import { balanceSchema } from '../../../core/money/wallet.ts';
import { defineTool } from '../tool.ts';

export const getBalance = defineTool({
  name: 'get_balance',
  title: 'Get the balance',
  description: "The account's coins (1 USD = 1000 coins): spendable now, by pocket (subscription, purchased), held by running requests, and whether the account is paid. Free to call.",
  input: z.object({}),
  output: balanceSchema,
  annotations: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
  async run(_args, { core }) {
    const b = await core.wallet.balance();
    return { structured: b, text: `${b.coins} coins to spend (${b.held_coins} held by running requests).${b.paid_account ? '' : ' Unpaid account: some models need a first top-up.'}` };
  },
});
