import { createHmac, timingSafeEqual } from 'node:crypto';
import { CoreError } from '../errors.ts';

/**
 * Result links carry no API key: an expiry and an HMAC-SHA256 over the job id and expiry,
 * made with the server's signing secret. Every instance must share the secret.
 */
export interface UrlSigner {
  sign(jobId: string, expiresAt: Date): string;
  verify(jobId: string, expires: unknown, signature: unknown, now: Date): void;
}

export function createUrlSigner(secret: string, publicBaseUrl: string): UrlSigner {
  const mac = (jobId: string, expires: number) => createHmac('sha256', secret).update(`${jobId}:${expires}`).digest('base64url');
  return {
    sign(jobId, expiresAt) {
      const expires = Math.floor(expiresAt.getTime() / 1000);
      return `${publicBaseUrl}/api/v1/generations/${encodeURIComponent(jobId)}/output?expires=${expires}&signature=${mac(jobId, expires)}`;
    },
    verify(jobId, expires, signature, now) {
      const exp = typeof expires === 'string' && /^\d{1,12}$/.test(expires) ? Number(expires) : NaN;
      const given = typeof signature === 'string' ? Buffer.from(signature) : Buffer.alloc(0);
      const wanted = Number.isNaN(exp) ? Buffer.alloc(1) : Buffer.from(mac(jobId, exp));
      if (given.length !== wanted.length || !timingSafeEqual(given, wanted)) {
        throw new CoreError('forbidden', 'This link is not valid.', { reason: 'invalid_signature' });
      }
      if (exp * 1000 < now.getTime()) throw new CoreError('forbidden', 'This link has expired. Fetch the job again for its current state.', { reason: 'url_expired' });
    },
  };
}
