/** Where the MCP adapter is mounted, and so the URL of the protected resource OAuth tokens are for (RFC 9728). */
export const MCP_PATH = '/api/v1/mcp';

export function mcpResourceUrl(publicBaseUrl: string): string {
  return `${publicBaseUrl.replace(/\/+$/, '')}${MCP_PATH}`;
}

const LOOPBACK_HOSTS = new Set(['localhost', '127.0.0.1', '[::1]']);

/**
 * The base URL as the client reached it. With the default PUBLIC_BASE_URL (`loopbackAliases`,
 * docs/oauth.md), a request to `localhost`, `127.0.0.1` or `[::1]` gets the base URL at that
 * host, so the protected resource metadata names the MCP server the client connected to (MCP
 * clients refuse a resource at another host). Otherwise, and for any other host: PUBLIC_BASE_URL.
 */
export function baseUrlFor(publicBaseUrl: string, loopbackAliases: boolean, hostHeader: string | undefined): string {
  const base = publicBaseUrl.replace(/\/+$/, '');
  if (!loopbackAliases || hostHeader === undefined) return base;
  let hostname: string;
  try {
    hostname = new URL(`http://${hostHeader}`).hostname;
  } catch {
    return base;
  }
  if (!LOOPBACK_HOSTS.has(hostname)) return base;
  const url = new URL(base);
  url.hostname = hostname;
  return url.href.replace(/\/+$/, '');
}
