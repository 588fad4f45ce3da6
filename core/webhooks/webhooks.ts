import { createHmac, randomBytes } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { loadJob } from '../generations/job-row.ts';
import { generationView } from '../generations/views.ts';
import type { Clock, UrlSigner, WebhookTransport } from '../ports.ts';

/**
 * Job-completion webhooks in the Standard Webhooks style: headers `webhook-id` (stable across
 * retries), `webhook-timestamp` (Unix seconds) and `webhook-signature` (`v1,` + base64
 * HMAC-SHA256 over `id.timestamp.body`, keyed with the account's `whsec_…` secret). The
 * body is `{"type":"generation.succeeded","timestamp":…,"data":<job>}`.
 */
export async function webhookSecret(em: EntityManager, accountId: string): Promise<string> {
  await em.execute('insert into webhook_secrets (account_id, secret) values (?, ?) on conflict (account_id) do nothing', [
    accountId,
    `whsec_${randomBytes(24).toString('base64')}`,
  ]);
  const [row] = await em.execute<{ secret: string }[]>('select secret from webhook_secrets where account_id = ?', [accountId]);
  return row!.secret;
}

export function signWebhook(secret: string, id: string, timestamp: number, body: string): string {
  const key = Buffer.from(secret.replace(/^whsec_/, ''), 'base64');
  return `v1,${createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64')}`;
}

export class WebhookDeliveryError extends Error {}

/** Sends the job's webhook once; throws when the receiver does not answer 2xx (the workflow retries). */
export async function deliverJobWebhook(deps: { webhooks: WebhookTransport; signer: UrlSigner; clock: Clock }, em: EntityManager, jobId: string): Promise<'sent' | 'none'> {
  const job = await loadJob(em, jobId);
  if (!job.webhook_url) return 'none';
  const secret = await webhookSecret(em, job.account_id);
  const timestamp = Math.floor(deps.clock().getTime() / 1000);
  const id = `msg_${job.id}_${job.status}`;
  const body = JSON.stringify({ type: `generation.${job.status}`, timestamp: new Date(timestamp * 1000).toISOString(), data: generationView(job, deps.signer) });
  let status: number;
  try {
    status = await deps.webhooks.post(job.webhook_url, body, {
      'content-type': 'application/json',
      'user-agent': 'mas-webhooks/1',
      'webhook-id': id,
      'webhook-timestamp': String(timestamp),
      'webhook-signature': signWebhook(secret, id, timestamp, body),
    });
  } catch (err) {
    throw new WebhookDeliveryError(`webhook to ${new URL(job.webhook_url).host} failed: ${(err as Error).message}`);
  }
  if (status < 200 || status > 299) throw new WebhookDeliveryError(`webhook receiver answered HTTP ${status}`);
  return 'sent';
}
