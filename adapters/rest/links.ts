import type { LinkLocator } from '../../core/ports.ts';

/** Where REST serves the bytes behind signed links: the composition root hands this to core's signer. */
export function restLinks(publicBaseUrl: string): LinkLocator {
  return (resource, id) =>
    resource === 'generation'
      ? `${publicBaseUrl}/api/v1/generations/${encodeURIComponent(id)}/output`
      : `${publicBaseUrl}/api/v1/files/${encodeURIComponent(id)}/content`;
}
