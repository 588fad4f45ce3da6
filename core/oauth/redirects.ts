import { invalid } from '../errors.ts';

/**
 * Redirect URIs of OAuth clients (OAuth 2.1 and RFC 8252). A client may register:
 * - an https URI (web apps: claude.ai, chatgpt.com, vscode.dev);
 * - an http URI on a loopback host (`127.0.0.1`, `[::1]`, `localhost`): native apps that listen
 *   on a port the system gives them (Claude Code, the MCP inspector);
 * - a private-use scheme (`cursor://…`, `com.example.app:/cb`): native apps.
 * Never a fragment, credentials, or a scheme that runs or reads something in the browser.
 */
const LOOPBACK = new Set(['127.0.0.1', '[::1]', 'localhost']);
const FORBIDDEN_SCHEMES = new Set(['javascript:', 'data:', 'file:', 'vbscript:', 'about:', 'blob:', 'filesystem:', 'ws:', 'wss:', 'ftp:', 'mailto:', 'chrome:', 'view-source:']);

export const MAX_REDIRECT_URIS = 10;
export const MAX_REDIRECT_URI_LENGTH = 2000;

/** Why a redirect URI cannot be registered, or undefined when it can. */
export function redirectUriProblem(raw: string): string | undefined {
  if (raw.length > MAX_REDIRECT_URI_LENGTH) return `is longer than ${MAX_REDIRECT_URI_LENGTH} characters`;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return 'is not an absolute URI';
  }
  if (url.hash || raw.includes('#')) return 'must not have a fragment';
  if (url.username || url.password) return 'must not contain credentials';
  if (url.protocol === 'https:') return undefined;
  if (url.protocol === 'http:') return LOOPBACK.has(url.hostname) ? undefined : 'must use https, or http only on a loopback address (127.0.0.1, [::1], localhost)';
  if (FORBIDDEN_SCHEMES.has(url.protocol)) return `must not use the ${url.protocol} scheme`;
  return undefined;
}

export function checkRedirectUris(uris: readonly string[], param = 'redirect_uris'): void {
  if (uris.length === 0) throw invalid(param, 'At least one redirect URI is required.', 'invalid_redirect_uri');
  if (uris.length > MAX_REDIRECT_URIS) throw invalid(param, `At most ${MAX_REDIRECT_URIS} redirect URIs are accepted.`, 'invalid_redirect_uri');
  for (const [i, uri] of uris.entries()) {
    const problem = redirectUriProblem(uri);
    if (problem) throw invalid(`${param}.${i}`, `The redirect URI ${JSON.stringify(uri.slice(0, 200))} ${problem}.`, 'invalid_redirect_uri');
  }
}

/**
 * Whether a requested redirect URI matches a registered one: exactly, except that a loopback
 * http URI matches on any port (RFC 8252, section 7.3), with the same host, path and query.
 */
export function redirectUriMatches(requested: string, registered: string): boolean {
  if (requested === registered) return true;
  let req: URL;
  let reg: URL;
  try {
    req = new URL(requested);
    reg = new URL(registered);
  } catch {
    return false;
  }
  if (req.protocol !== 'http:' || reg.protocol !== 'http:' || !LOOPBACK.has(req.hostname)) return false;
  return req.hostname === reg.hostname && req.pathname === reg.pathname && req.search === reg.search && !req.hash && !req.username && !req.password;
}

/** What the consent page shows of a redirect URI: its scheme and host, which a client name cannot fake. */
export function redirectHost(uri: string): string {
  const url = new URL(uri);
  if (url.protocol === 'https:') return url.host;
  if (url.protocol === 'http:') return `${url.hostname} (this computer)`;
  return `${url.protocol}//${url.host}`.replace(/\/\/$/, '');
}
