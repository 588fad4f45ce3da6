import { createHmac, timingSafeEqual } from 'node:crypto';
import { CoreError } from '../errors.ts';

/**
 * Result links carry no API key: an expiry and an HMAC-SHA256 over the job id and expiry,
 * made with the server's signing secret. Every instance must share the secret.
 */
export type SignedResource = 'generation' | 'file';

export interface UrlSigner {
  sign(id: string, expiresAt: Date, resource?: SignedResource): string;
  verify(id: string, expires: unknown, signature: unknown, now: Date, resource?: SignedResource): void;
}

const PATHS: Record<SignedResource, (id: string) => string> = {
  generation: (id) => `/api/v1/generations/${encodeURIComponent(id)}/output`,
  file: (id) => `/api/v1/files/${encodeURIComponent(id)}/content`,
};

export function createUrlSigner(secret: string, publicBaseUrl: string): UrlSigner {
  // The resource kind is signed too: a link to one kind never opens another.
  const mac = (resource: SignedResource, id: string, expires: number) =>
    createHmac('sha256', secret).update(`${resource}:${id}:${expires}`).digest('base64url');
  return {
    sign(id, expiresAt, resource = 'generation') {
      const expires = Math.floor(expiresAt.getTime() / 1000);
      return `${publicBaseUrl}${PATHS[resource](id)}?expires=${expires}&signature=${mac(resource, id, expires)}`;
    },
    verify(id, expires, signature, now, resource = 'generation') {
      const exp = typeof expires === 'string' && /^\d{1,12}$/.test(expires) ? Number(expires) : NaN;
      const given = typeof signature === 'string' ? Buffer.from(signature) : Buffer.alloc(0);
      const wanted = Number.isNaN(exp) ? Buffer.alloc(1) : Buffer.from(mac(resource, id, exp));
      if (given.length !== wanted.length || !timingSafeEqual(given, wanted)) {
        throw new CoreError('forbidden', 'This link is not valid.', { reason: 'invalid_signature' });
      }
      if (exp * 1000 < now.getTime()) throw new CoreError('forbidden', 'This link has expired. Fetch the job again for its current state.', { reason: 'url_expired' });
    },
  };
}
