import { createCipheriv, createDecipheriv, createHash, hkdfSync, randomBytes } from 'node:crypto';
import cookieParser from 'cookie-parser';
import { doubleCsrf } from 'csrf-csrf';
import { Router, type Request, type RequestHandler, type Response } from 'express';

/**
 * What every surface that people use in a browser shares (the account pages, later the OAuth
 * consent page and the admin dashboard): the session cookie, CSRF tokens and the Origin check.
 *
 * - The session cookie holds core's opaque session token (stored hashed by core):
 *   HttpOnly, SameSite=Lax, Secure when the service is served over https.
 * - CSRF: every state-changing form carries a token (csrf-csrf: an HMAC bound to the session,
 *   or before sign-in to a random pre-session cookie, checked against its cookie), and a POST
 *   whose Origin is another site is refused.
 */
export const SESSION_COOKIE = 'mas_session';
/** The admin pages' session (core's admin session token): HttpOnly, SameSite=Strict, only sent to /admin. */
export const ADMIN_SESSION_COOKIE = 'mas_admin_session';
const PRE_SESSION_COOKIE = 'mas_pre';
/** The device cookie (core/auth/device-cookies.ts): set at each sign-in, kept 180 days. */
export const DEVICE_COOKIE = 'mas_device';
const DEVICE_COOKIE_MS = 180 * 24 * 3600 * 1000;
/** A one-time message for the next page (a new key's secret): see `setFlash`. */
const FLASH_COOKIE = 'mas_flash';
/** How long a flash waits for the page that shows it. */
const FLASH_TTL_SECONDS = 60;

export interface BrowserKit {
  /** cookie parsing, the pre-session id, and the Origin check: mount before the pages. */
  middleware: Router;
  /** Refuses a POST without a valid CSRF token (403). */
  requireCsrf: RequestHandler;
  /** The token to put in a form's hidden `_csrf` field (sets its cookie). */
  csrfToken(req: Request, res: Response): string;
  sessionToken(req: Request): string | null;
  /** The device cookie the browser sent, if any. */
  deviceToken(req: Request): string | undefined;
  setDevice(res: Response, token: string): void;
  setSession(res: Response, token: string, expiresAt: Date): void;
  clearSession(res: Response): void;
  adminSessionToken(req: Request): string | null;
  setAdminSession(res: Response, token: string, expiresAt: Date): void;
  clearAdminSession(res: Response): void;
  /** The error `requireCsrf` passes on: the adapter answers it with its own 403 page. */
  invalidCsrfError: Error;
  /**
   * Keeps a value (a new key's secret) for the next GET of `path`, after a POST that redirects
   * there (post/redirect/get): never in a URL, never stored on the server. The cookie holds it
   * encrypted with AES-256-GCM under a key derived from the service's secret, bound to the
   * session (its hash is the additional data), HttpOnly, SameSite=Strict, only sent to `path`,
   * for 60 seconds.
   */
  setFlash(req: Request, res: Response, path: string, value: string): void;
  /** The flash kept for `path`, once: the cookie is cleared. Null when there is none, or it expired or is another session's. */
  takeFlash(req: Request, res: Response, path: string): string | null;
}

export function browserKit(opts: { publicBaseUrl: string; secret: string }): BrowserKit {
  const secure = opts.publicBaseUrl.startsWith('https:');
  const publicOrigin = new URL(opts.publicBaseUrl).origin;
  const cookie = { httpOnly: true, sameSite: 'lax' as const, secure, path: '/' };
  const sessionToken = (req: Request): string | null => {
    const value = (req.cookies as Record<string, unknown> | undefined)?.[SESSION_COOKIE];
    return typeof value === 'string' && value.length > 0 && value.length <= 200 ? value : null;
  };
  const adminCookie = { httpOnly: true, sameSite: 'strict' as const, secure, path: '/admin' };
  const adminSessionToken = (req: Request): string | null => {
    const value = (req.cookies as Record<string, unknown> | undefined)?.[ADMIN_SESSION_COOKIE];
    return typeof value === 'string' && value.length > 0 && value.length <= 200 ? value : null;
  };
  // The admin pages' forms are bound to the admin session, the account pages' to the account session.
  const sessionFor = (req: Request) => (req.originalUrl.startsWith('/admin') ? adminSessionToken(req) : sessionToken(req));
  const csrf = doubleCsrf({
    getSecret: () => opts.secret,
    // Bound to the session when signed in, else to the pre-session cookie set on the first page.
    getSessionIdentifier: (req) => sessionFor(req) ?? String((req.cookies as Record<string, unknown>)[PRE_SESSION_COOKIE] ?? req.res?.locals.preSession ?? ''),
    cookieName: secure ? '__Host-mas_csrf' : 'mas_csrf',
    cookieOptions: { ...cookie, sameSite: 'strict' },
    getCsrfTokenFromRequest: (req) => {
      const token = (req.body as Record<string, unknown> | undefined)?._csrf;
      return typeof token === 'string' ? token : null;
    },
  });

  // The flash cookie's key: derived, so that it is never the CSRF HMAC key itself.
  const flashKey = Buffer.from(hkdfSync('sha256', opts.secret, 'mas-flash-cookie', 'AES-256-GCM v1', 32));
  const flashCookie = (path: string) => ({ httpOnly: true, sameSite: 'strict' as const, secure, path });
  const flashAad = (req: Request) => createHash('sha256').update(sessionFor(req) ?? '').digest();
  const setFlash = (req: Request, res: Response, path: string, value: string) => {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', flashKey, iv);
    cipher.setAAD(flashAad(req));
    const plain = JSON.stringify({ v: value, exp: Date.now() + FLASH_TTL_SECONDS * 1000 });
    const sealed = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()]);
    res.cookie(FLASH_COOKIE, Buffer.concat([iv, cipher.getAuthTag(), sealed]).toString('base64url'), { ...flashCookie(path), maxAge: FLASH_TTL_SECONDS * 1000 });
  };
  const takeFlash = (req: Request, res: Response, path: string): string | null => {
    const raw = (req.cookies as Record<string, unknown> | undefined)?.[FLASH_COOKIE];
    if (raw === undefined) return null;
    res.clearCookie(FLASH_COOKIE, flashCookie(path));
    if (typeof raw !== 'string' || raw.length > 4096) return null;
    try {
      const bytes = Buffer.from(raw, 'base64url');
      const decipher = createDecipheriv('aes-256-gcm', flashKey, bytes.subarray(0, 12));
      decipher.setAAD(flashAad(req));
      decipher.setAuthTag(bytes.subarray(12, 28));
      const plain = JSON.parse(Buffer.concat([decipher.update(bytes.subarray(28)), decipher.final()]).toString('utf8')) as { v?: unknown; exp?: unknown };
      return typeof plain.v === 'string' && typeof plain.exp === 'number' && plain.exp > Date.now() ? plain.v : null;
    } catch {
      // Tampered with, another session's, or sealed under another secret: nothing to show.
      return null;
    }
  };

  const middleware = Router();
  middleware.use(cookieParser());
  middleware.use((req, res, next) => {
    if (!sessionFor(req) && !(req.cookies as Record<string, unknown>)[PRE_SESSION_COOKIE]) {
      res.locals.preSession = randomBytes(18).toString('base64url');
      res.cookie(PRE_SESSION_COOKIE, res.locals.preSession, cookie);
    }
    next();
  });
  // A form posted from another site is refused before anything else (CSRF, second line).
  middleware.use((req, res, next) => {
    if (req.method === 'GET' || req.method === 'HEAD') return next();
    const origin = req.headers.origin;
    if (origin === undefined || origin === publicOrigin || origin === `${req.protocol}://${req.headers.host}`) return next();
    res.status(403).type('text/plain').send('Forbidden: this form was sent from another site.');
  });

  return {
    middleware,
    requireCsrf: csrf.doubleCsrfProtection,
    csrfToken: (req, res) => csrf.generateCsrfToken(req, res, { overwrite: false, validateOnReuse: false }),
    sessionToken,
    deviceToken: (req) => {
      const value = (req.cookies as Record<string, unknown> | undefined)?.[DEVICE_COOKIE];
      return typeof value === 'string' && value.length > 0 && value.length <= 300 ? value : undefined;
    },
    setDevice: (res, token) => res.cookie(DEVICE_COOKIE, token, { ...cookie, maxAge: DEVICE_COOKIE_MS }),
    setSession: (res, token, expiresAt) => res.cookie(SESSION_COOKIE, token, { ...cookie, expires: expiresAt }),
    clearSession: (res) => res.clearCookie(SESSION_COOKIE, cookie),
    adminSessionToken,
    setAdminSession: (res, token, expiresAt) => res.cookie(ADMIN_SESSION_COOKIE, token, { ...adminCookie, expires: expiresAt }),
    clearAdminSession: (res) => res.clearCookie(ADMIN_SESSION_COOKIE, adminCookie),
    invalidCsrfError: csrf.invalidCsrfTokenError,
    setFlash,
    takeFlash,
  };
}
