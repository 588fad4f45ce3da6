import { createHmac, timingSafeEqual } from 'node:crypto';
import { CoreError } from './errors.ts';
import type { LinkedResource, LinkLocator, UrlSigner } from './ports.ts';

/**
 * Result and file links carry no API key: an expiry and an HMAC-SHA256 over the resource
 * kind, id and expiry, made with the server's signing secret (every instance must share it).
 * Where a link points is the serving transport's business: `locate` comes from configuration.
 */
export function createUrlSigner(secret: string, locate: LinkLocator): UrlSigner {
  // The resource kind is signed too: a link to one kind never opens another.
  const mac = (resource: LinkedResource, id: string, expires: number) =>
    createHmac('sha256', secret).update(`${resource}:${id}:${expires}`).digest('base64url');
  return {
    sign(id, expiresAt, resource = 'generation') {
      const expires = Math.floor(expiresAt.getTime() / 1000);
      return `${locate(resource, id)}?expires=${expires}&signature=${mac(resource, id, expires)}`;
    },
    verify(id, expires, signature, now, resource = 'generation') {
      const exp = typeof expires === 'string' && /^\d{1,12}$/.test(expires) ? Number(expires) : NaN;
      const given = typeof signature === 'string' ? Buffer.from(signature) : Buffer.alloc(0);
      const wanted = Number.isNaN(exp) ? Buffer.alloc(1) : Buffer.from(mac(resource, id, exp));
      if (given.length !== wanted.length || !timingSafeEqual(given, wanted)) {
        throw new CoreError('forbidden', 'This link is not valid.', { reason: 'invalid_signature' });
      }
      if (exp * 1000 < now.getTime()) throw new CoreError('forbidden', 'This link has expired. Fetch the object again for a fresh link.', { reason: 'url_expired' });
    },
  };
}
