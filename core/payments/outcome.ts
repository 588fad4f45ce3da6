import type { EntityManager } from '@mikro-orm/postgresql';
import { recordAudit } from '../admin/audit.ts';

export interface EventOutcome {
  /** What the service did with the event, kept in payment_events and answered to the provider. */
  outcome: string;
  /** The account the event was for, when one is known. */
  accountId: string | null;
  /** Money may have been taken and no coins given: an operator must look (the audit log says why). */
  alert: boolean;
}

export const outcome = (name: string, accountId: string | null, alert = false): EventOutcome => ({ outcome: name, accountId, alert });

/**
 * A payment that was made and is not credited: written to the admin audit log (action
 * `payment.not_credited`, actor internal) in the event's transaction, for an operator to refund
 * or credit by hand (docs/payments.md, "When a payment is not credited").
 */
export async function notCredited(
  tx: EntityManager,
  what: { outcome: string; objectId: string; accountId: string | null; why: string; facts: Record<string, unknown> },
): Promise<EventOutcome> {
  await recordAudit(tx, { kind: 'internal' }, { action: 'payment.not_credited', targetType: 'payment', targetId: what.objectId, reason: what.why, after: what.facts });
  return outcome(what.outcome, what.accountId, true);
}
