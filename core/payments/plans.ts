import { z } from 'zod';
import { parseCoins, type Micro } from '../money/coins.ts';
import { parseUsdCents } from './amounts.ts';

/**
 * The subscription plans (PLANS_FILE, config/plans.yaml): a name, the Stripe price the
 * customer subscribes to, and the coins each paid period grants.
 */
export interface Plan {
  name: string;
  priceId: string;
  coinsPerPeriod: Micro;
  /** What the Stripe price charges each period, in cents, as the operator states it for the pages (optional: Stripe's page shows it anyway). */
  priceCents?: number | undefined;
  /** How often it charges: the Stripe price's interval, as the operator states it (optional). */
  period?: PlanPeriod | undefined;
}

export const PLAN_PERIODS = ['day', 'week', 'month', 'year'] as const;
export type PlanPeriod = (typeof PLAN_PERIODS)[number];

const coins = z.union([z.string(), z.number()]).transform((v, ctx) => {
  try {
    const micro = parseCoins(String(v));
    if (micro > 0n) return micro;
    ctx.addIssue({ code: 'custom', message: 'must be more than 0' });
  } catch (err) {
    ctx.addIssue({ code: 'custom', message: (err as Error).message });
  }
  return z.NEVER;
});

const planSchema = z
  .object({
    name: z.string().trim().min(1).max(100),
    stripe_price_id: z.string().regex(/^price_[A-Za-z0-9_]{1,200}$/, 'must be a Stripe price id (price_…)'),
    coins_per_period: coins,
    // What the plan's Stripe price charges, for the pages (the plans file repeats it: the pages never ask Stripe).
    price_usd: z
      .union([z.string(), z.number()])
      .transform((v, ctx) => {
        const cents = parseUsdCents(v);
        if (cents !== null && cents > 0) return cents;
        ctx.addIssue({ code: 'custom', message: 'must be an amount in US dollars, such as 10 or 9.99' });
        return z.NEVER;
      })
      .optional(),
    period: z.enum(PLAN_PERIODS).optional(),
  })
  .strict();

export const plansFileSchema = z
  .object({ plans: z.array(planSchema).nullish().transform((p) => p ?? []) })
  .strict()
  .superRefine((file, ctx) => {
    const seen = { name: new Set<string>(), stripe_price_id: new Set<string>() };
    file.plans.forEach((plan, i) => {
      for (const field of ['name', 'stripe_price_id'] as const) {
        if (seen[field].has(plan[field])) ctx.addIssue({ code: 'custom', path: ['plans', i, field], message: `${plan[field]} appears twice` });
        seen[field].add(plan[field]);
      }
    });
  })
  .transform((file): Plan[] =>
    file.plans.map((p) => ({ name: p.name, priceId: p.stripe_price_id, coinsPerPeriod: p.coins_per_period, ...(p.price_usd !== undefined ? { priceCents: p.price_usd } : {}), ...(p.period ? { period: p.period } : {}) })),
  );

export class PlansError extends Error {}

/** The plans file's content (parsed YAML), checked; a bad file throws one line naming what is wrong. */
export function validatePlans(raw: unknown): Plan[] {
  const result = plansFileSchema.safeParse(raw ?? {});
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  throw new PlansError(`plans: ${issue.path.join('.') || 'file'}: ${issue.message}`);
}
