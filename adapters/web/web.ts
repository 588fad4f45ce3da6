import path from 'node:path';
import express, { Router, type Request, type RequestHandler, type Response } from 'express';
import type { Logger } from 'pino';
import { createContext, type CoreDeps } from '../../core/context.ts';
import { MAX_ACTIVE_KEYS } from '../../core/keys/keys.ts';
import { createCaller } from '../../core/router.ts';
import { toCoreError } from '../../core/trpc.ts';
import { CoreError } from '../../core/errors.ts';
import type { HttpAdapter } from '../http/app.ts';
import { SESSION_COOKIE, type BrowserKit } from '../http/browser.ts';
import { sendPageError, statusOf } from './errors.ts';
import { html, page, type WalletSwitch } from './html.ts';
import { randomUUID } from 'node:crypto';
import { appsPage, editKeyPage, keysPage, overviewPage, revokeKeyPage, settingsPage, type FormError, type KeyValues } from './pages/account.ts';
import { catalogPage, landingPage, modelNotFoundPage, modelPage, type ModelView } from './pages/public.ts';
import { generationPage, usagePage } from './pages/usage.ts';
import { apiBase, firstRequestModel, firstRequestSnippets } from './pages/snippets.ts';
import { billingPage, billingRefusedPage, PAYMENT_FORM_TARGETS, topUpSuccessPage, type BillingFormState } from './pages/billing.ts';
import { forgotPasswordPage, forgotPasswordSentPage, loginLinkPage, resetPasswordPage, safeNext, signInPage, signUpPage, signUpSentPage, verifyEmailPage } from './pages/auth.ts';
import { lowBalanceSection, verificationSection } from './pages/notices.ts';
import { authorizationErrorPage, consentPage } from './pages/consent.ts';
import { memberPage, organizationPage, organizationsPage, organizationUsagePage, orgHref } from './pages/organizations.ts';
import { invitationAcceptPage, invitationRefusedPage, invitationSignedOutPage } from './pages/invitation.ts';

export interface WebOptions {
  kit: BrowserKit;
  logger: Logger;
  /** PUBLIC_BASE_URL, for the ready requests of the model pages; default: the OAuth issuer, which is the same setting. */
  publicBaseUrl?: string;
}

/**
 * The account pages for people, at the site's root: sign-up, sign-in, the overview, API keys,
 * connected apps and usage. Each handler is a route like REST's: parse the form, call one core
 * use case with the session's credential, render. Rules (the 10-key limit, ownership of every
 * key and job) are core's.
 */
export function webAdapter(deps: CoreDeps, opts: WebOptions): HttpAdapter {
  const { kit } = opts;
  const router = Router();
  // The APIs' paths are never pages: an unknown /api/… or /webhooks/… path gets the JSON 404, and
  // no cookie. So does /v1/…, the base path most OpenAI-compatible servers use, which clients try
  // here by mistake.
  router.use((req, _res, next) => next(isApiPath(req.path) ? 'router' : undefined));
  router.use('/assets', express.static(path.join(import.meta.dirname, 'assets'), { index: false, maxAge: '1h' }));
  const publicBaseUrl = opts.publicBaseUrl ?? deps.config.oauth.issuer;
  mountPublicPages(router, deps, publicBaseUrl);
  router.use(kit.middleware);
  // The keys forms send one `allowed_models` field per model ticked (at most 100); every other form has few fields.
  router.use('/account/keys', express.urlencoded({ extended: false, limit: '16kb', parameterLimit: 120 }));
  router.use(express.urlencoded({ extended: false, limit: '16kb', parameterLimit: 20 }));

  const core = (req: Request) =>
    createCaller(createContext(deps, { kind: 'session', token: kit.sessionToken(req) }, { requestId: String(req.id), clientIp: req.ip, device: kit.deviceToken(req) }));
  const form = (req: Request, field: string) => {
    const value = (req.body as Record<string, unknown> | undefined)?.[field];
    return typeof value === 'string' ? value : '';
  };
  type Me = Awaited<ReturnType<ReturnType<typeof core>['accounts']['me']>>;
  /**
   * The wallet the pages show (docs/organizations.md): `?organization=ID` for one page, else the
   * wallet cookie the switch set; empty: the personal wallet. Never trusted: it must be one of the
   * person's organizations as core lists them, and every core call with it checks the role again.
   */
  const WALLET_COOKIE = 'mas_wallet';
  const walletCookie = { httpOnly: true, sameSite: 'lax' as const, secure: publicBaseUrl.startsWith('https:'), path: '/' };
  const walletFor = async (req: Request, res: Response): Promise<WalletSwitch> => {
    const cookie = (req.cookies as Record<string, unknown> | undefined)?.[WALLET_COOKIE];
    const asked = typeof req.query.organization === 'string' ? req.query.organization : cookie;
    const { data } = await core(req).organizations.list();
    const choices = data.map((o) => ({ id: o.id, name: o.name }));
    const find = (id: unknown) => (typeof id === 'string' && id ? (choices.find((c) => c.id === id) ?? null) : null);
    // A cookie naming an organization the person left (or never joined): back to the personal wallet.
    if (typeof cookie === 'string' && !find(cookie)) res.clearCookie(WALLET_COOKIE, walletCookie);
    // After a switch, back to the same section (a key of the other wallet would not be found).
    const back = req.method === 'GET' ? req.path.split('/').slice(0, 3).join('/') : '/account';
    return { current: find(asked), choices, back };
  };
  type Nav = { email: string; csrf: string; wallet: WalletSwitch };
  const signedIn = (fn: (req: Request, res: Response, nav: Nav, me: Me) => Promise<void>): RequestHandler => async (req, res) => {
    // A signed-in page is private: never stored, so Back after signing out cannot show it.
    res.setHeader('Cache-Control', 'no-store');
    try {
      const me = await core(req).accounts.me();
      await fn(req, res, { email: me.email, csrf: kit.csrfToken(req, res), wallet: await walletFor(req, res) }, me);
    } catch (err) {
      sendPageError(req, res, err);
    }
  };
  const label = (route: string): RequestHandler => (_req, res, next) => {
    res.locals.route = route;
    next();
  };
  const send = (res: Response, body: string, status = 200) => void res.status(status).type('html').send(body);
  /** A refused form: its status, and when to try again for a rate limit (pages too say Retry-After). */
  const refusedWith = (res: Response, failure: { code: Parameters<typeof statusOf>[0]; retryAfterSeconds?: number | undefined }) => {
    if (failure.retryAfterSeconds !== undefined) res.setHeader('Retry-After', String(Math.max(1, Math.ceil(failure.retryAfterSeconds))));
    return statusOf(failure.code);
  };
  /** Every way in: the session cookie and the device cookie. */
  const signInBrowser = (res: Response, session: { token: string; expires_at: string; device_token: string }) => {
    kit.setSession(res, session.token, new Date(session.expires_at));
    kit.setDevice(res, session.device_token);
  };
  // The address a sign-up went to, for the next page only (not in its URL, which logs keep).
  const SIGNUP_EMAIL_COOKIE = 'mas_signup_email';
  // The invitation a signed-out person opened, to come back to once their new account is confirmed.
  const INVITATION_COOKIE = 'mas_invitation';

  router.get('/favicon.ico', (_req, res) => void res.status(204).end());

  router.get('/signup', label('/signup'), async (req, res) => {
    const { open } = await core(req).accounts.signUpOpen();
    send(res, signUpPage({ csrf: kit.csrfToken(req, res), open, next: safeNext(req.query.next) }));
  });
  router.post('/signup', label('/signup'), kit.requireCsrf, async (req, res) => {
    const email = form(req, 'email');
    const next = safeNext(form(req, 'next'));
    try {
      // The same answer whether the address is new or already has an account (core mails either way).
      const answer = await core(req).accounts.signUp({ email, password: form(req, 'password') });
      res.cookie(SIGNUP_EMAIL_COOKIE, answer.email, { httpOnly: true, sameSite: 'lax', path: '/signup/sent', maxAge: 10 * 60 * 1000 });
      res.redirect(303, '/signup/sent');
    } catch (err) {
      const failure = toCoreError(err);
      if (!failure) return sendPageError(req, res, err);
      const { open } = await core(req).accounts.signUpOpen();
      send(res, signUpPage({ csrf: kit.csrfToken(req, res), email, error: failure.message, open, next }), refusedWith(res, failure));
    }
  });
  router.get('/signup/sent', label('/signup/sent'), (req, res) => {
    const email = (req.cookies as Record<string, unknown> | undefined)?.[SIGNUP_EMAIL_COOKIE];
    send(res, signUpSentPage({ email: typeof email === 'string' && email.length <= 254 ? email : null }));
  });
  router.get('/signup/verify', label('/signup/verify'), (req, res) => send(res, verifyEmailPage({ csrf: kit.csrfToken(req, res), token: String(req.query.token ?? '').slice(0, 200) })));
  router.post('/signup/verify', label('/signup/verify'), kit.requireCsrf, async (req, res) => {
    try {
      signInBrowser(res, await core(req).accounts.verifyEmail({ token: form(req, 'token') }));
      res.redirect(303, '/account?verified=1');
    } catch (err) {
      const failure = toCoreError(err);
      if (!failure) return sendPageError(req, res, err);
      send(res, verifyEmailPage({ csrf: kit.csrfToken(req, res), token: '', error: failure.message }), refusedWith(res, failure));
    }
  });

  router.get('/password/forgot', label('/password/forgot'), (req, res) => send(res, forgotPasswordPage({ csrf: kit.csrfToken(req, res) })));
  router.post('/password/forgot', label('/password/forgot'), kit.requireCsrf, async (req, res) => {
    const email = form(req, 'email');
    try {
      await core(req).accounts.requestPasswordReset({ email });
      res.redirect(303, '/password/forgot/sent');
    } catch (err) {
      const failure = toCoreError(err);
      if (!failure) return sendPageError(req, res, err);
      send(res, forgotPasswordPage({ csrf: kit.csrfToken(req, res), email, error: failure.message }), refusedWith(res, failure));
    }
  });
  router.get('/password/forgot/sent', label('/password/forgot/sent'), (_req, res) => send(res, forgotPasswordSentPage()));
  router.get('/password/reset', label('/password/reset'), async (req, res) => {
    res.setHeader('Cache-Control', 'no-store');
    const token = String(req.query.token ?? '').slice(0, 200);
    try {
      await core(req).accounts.checkResetLink({ token });
      send(res, resetPasswordPage({ csrf: kit.csrfToken(req, res), token }));
    } catch (err) {
      const failure = toCoreError(err);
      if (!failure) return sendPageError(req, res, err);
      send(res, resetPasswordPage({ csrf: kit.csrfToken(req, res), token: '', invalid: true, error: failure.message }), refusedWith(res, failure));
    }
  });
  router.post('/password/reset', label('/password/reset'), kit.requireCsrf, async (req, res) => {
    res.setHeader('Cache-Control', 'no-store');
    const token = form(req, 'token');
    try {
      signInBrowser(res, await core(req).accounts.resetPassword({ token, new_password: form(req, 'new_password') }));
      res.redirect(303, '/account/settings?password=reset');
    } catch (err) {
      const failure = toCoreError(err);
      if (!failure) return sendPageError(req, res, err);
      const badLink = failure.param === 'token' || failure.code === 'rate_limited';
      send(res, resetPasswordPage({ csrf: kit.csrfToken(req, res), token: badLink ? '' : token, invalid: badLink, error: failure.message }), refusedWith(res, failure));
    }
  });

  router.get('/login', label('/login'), (req, res) => send(res, signInPage({ csrf: kit.csrfToken(req, res), next: safeNext(req.query.next) })));
  router.post('/login', label('/login'), kit.requireCsrf, async (req, res) => {
    const email = form(req, 'email');
    const next = safeNext(form(req, 'next'));
    try {
      signInBrowser(res, await core(req).accounts.signIn({ email, password: form(req, 'password') }));
      res.redirect(303, next);
    } catch (err) {
      const failure = toCoreError(err);
      if (!failure) return sendPageError(req, res, err);
      send(res, signInPage({ csrf: kit.csrfToken(req, res), email, next, error: failure.message }), refusedWith(res, failure));
    }
  });

  router.get('/login/link', label('/login/link'), (req, res) => send(res, loginLinkPage({ csrf: kit.csrfToken(req, res), token: String(req.query.token ?? '').slice(0, 200) })));
  router.post('/login/link', label('/login/link'), kit.requireCsrf, async (req, res) => {
    try {
      signInBrowser(res, await core(req).accounts.redeemLoginLink({ token: form(req, 'token') }));
      res.redirect(303, '/account');
    } catch (err) {
      const failure = toCoreError(err);
      if (!failure) return sendPageError(req, res, err);
      send(res, loginLinkPage({ csrf: kit.csrfToken(req, res), token: '', error: failure.message }), refusedWith(res, failure));
    }
  });

  router.post('/logout', label('/logout'), kit.requireCsrf, async (req, res) => {
    await core(req).accounts.signOut().catch(() => undefined);
    kit.clearSession(res);
    res.redirect(303, '/login');
  });

  /** The overview: the balance, what to do next, the unconfirmed address. */
  const renderOverview = async (req: Request, res: Response, nav: Nav, me: Me, extra: { status?: number; verifyError?: string } = {}) => {
    const org = nav.wallet.current;
    const [billing, keys, organization] = await Promise.all([
      core(req).payments.billing(),
      core(req).account.keys.list(org ? { organization_id: org.id } : undefined),
      org ? core(req).organizations.get({ id: org.id }) : undefined,
    ]);
    const top = verificationSection(nav, { verified: me.email_verified, verifiedNow: req.query.verified === '1', sent: req.query.verification === 'sent', error: extra.verifyError });
    const activeKeys = keys.data.filter((k) => !k.revoked_at && k.user_id === me.id).length;
    const orgView = organization?.balance ? { id: organization.id, name: organization.name, role: organization.role } : undefined;
    send(res, overviewPage(nav, { balance: organization?.balance ?? me.balance, paymentsEnabled: billing.payments_enabled, activeKeys, mail: { top }, organization: orgView }), extra.status);
  };
  /**
   * Billing: its payment forms post here and are redirected to Stripe, so its form-action allows Stripe's pages.
   * `?organization=ID` (a form's `organization_id`): the organization's wallet, for its owners; core refuses anyone else.
   */
  const billingWallet = (req: Request) => {
    const raw = req.method === 'GET' ? req.query.organization : (req.body as Record<string, unknown> | undefined)?.organization_id;
    return typeof raw === 'string' && raw !== '' ? raw.slice(0, 100) : undefined;
  };
  const walletQuery = (organizationId: string | undefined) => (organizationId ? `organization=${encodeURIComponent(organizationId)}&` : '');
  const renderBilling = async (req: Request, res: Response, nav: { email: string; csrf: string }, me: Me, extra: { pay?: Partial<BillingFormState>; status?: number } = {}) => {
    const organizationId = billingWallet(req);
    const choice = organizationId ? { organization_id: organizationId } : undefined;
    let billing, autoTopUp, organization;
    try {
      billing = await core(req).payments.billing(choice);
      autoTopUp = billing.payments_enabled ? await core(req).payments.autoTopUp(choice) : undefined;
      organization = organizationId ? await core(req).organizations.get({ id: organizationId }) : undefined;
    } catch (err) {
      const failure = toCoreError(err);
      if (!organizationId || !failure || failure.code === 'unauthorized') throw err;
      return send(res, billingRefusedPage(nav, failure.message), refusedWith(res, failure));
    }
    if (billing.payments_enabled) {
      const csp = String(res.getHeader('Content-Security-Policy') ?? '');
      res.setHeader('Content-Security-Policy', csp.replace("form-action 'self'", `form-action 'self' ${PAYMENT_FORM_TARGETS.join(' ')}`));
    }
    const returned = typeof req.query.checkout === 'string' ? req.query.checkout : undefined;
    const changed = typeof req.query.auto_top_up === 'string' ? req.query.auto_top_up : undefined;
    const pay: BillingFormState = { idempotencyKey: randomUUID(), returned, autoTopUp: { changed }, ...extra.pay, ...(organization ? { organization: { id: organization.id, name: organization.name } } : {}) };
    send(res, billingPage(nav, { balance: organization?.balance ?? me.balance, billing, autoTopUp, pay }), extra.status);
  };
  /** Settings: the password and the low-balance e-mail. */
  const renderSettings = async (req: Request, res: Response, nav: { email: string; csrf: string }, me: Me, extra: { password?: FormError; status?: number; lowBalance?: { value: string; error: string } } = {}) => {
    const lowBalance = lowBalanceSection(nav, { threshold: me.low_balance_threshold_coins, saved: req.query.notice === 'saved', value: extra.lowBalance?.value, error: extra.lowBalance?.error });
    send(res, settingsPage(nav, { password: extra.password, passwordChanged: req.query.password === 'changed' || req.query.password === 'reset', lowBalance }), extra.status);
  };
  // The account page was one long page; its parts are pages of their own now (issue 48). Links made
  // before (Stripe's return URLs of sessions already open, mails, bookmarks) still land in the right place.
  const MOVED: [string, string][] = [
    ['checkout', '/account/billing'],
    ['auto_top_up', '/account/billing'],
    ['notice', '/account/settings'],
    ['password', '/account/settings'],
  ];
  router.get('/account', label('/account'), signedIn(async (req, res, nav, me) => {
    // Signed up from an invitation's page: the confirmation link lands here; back to the invitation.
    const invitation = (req.cookies as Record<string, unknown> | undefined)?.[INVITATION_COOKIE];
    if (req.query.verified === '1' && typeof invitation === 'string' && /^\/invitations\/[\w%-]{1,300}$/.test(invitation)) {
      res.clearCookie(INVITATION_COOKIE, walletCookie);
      return res.redirect(303, invitation);
    }
    const moved = MOVED.find(([param]) => typeof req.query[param] === 'string');
    if (moved) {
      const query = new URLSearchParams(Object.entries(req.query).filter((e): e is [string, string] => typeof e[1] === 'string')).toString();
      return res.redirect(303, `${moved[1]}?${query}`);
    }
    await renderOverview(req, res, nav, me);
  }));
  router.get('/account/billing', label('/account/billing'), signedIn((req, res, nav, me) => renderBilling(req, res, nav, me)));
  router.get('/account/settings', label('/account/settings'), signedIn((req, res, nav, me) => renderSettings(req, res, nav, me)));
  router.post('/account/verify/resend', label('/account/verify/resend'), kit.requireCsrf, signedIn(async (req, res, nav, me) => {
    try {
      await core(req).accounts.resendVerification();
      res.redirect(303, '/account?verification=sent#verify');
    } catch (err) {
      const failure = toCoreError(err);
      if (!failure || failure.code === 'unauthorized') throw err;
      await renderOverview(req, res, nav, me, { verifyError: failure.message, status: refusedWith(res, failure) });
    }
  }));
  router.post('/account/low-balance', label('/account/low-balance'), kit.requireCsrf, signedIn(async (req, res, nav, me) => {
    const value = form(req, 'threshold_coins').trim();
    try {
      await core(req).account.setLowBalanceNotice({ threshold_coins: value });
      res.redirect(303, '/account/settings?notice=saved#low-balance');
    } catch (err) {
      const failure = toCoreError(err);
      if (!failure || failure.code === 'unauthorized') throw err;
      await renderSettings(req, res, nav, me, { lowBalance: { value: value.slice(0, 10), error: failure.message }, status: refusedWith(res, failure) });
    }
  }));

  // Paying (docs/payments.md): each form calls the one core use case a back office calls with its key, then goes to Stripe.
  const toStripe = (res: Response, url: string) => {
    res.setHeader('Cache-Control', 'no-store');
    res.redirect(303, url);
  };
  const payFailure = async (req: Request, res: Response, nav: { email: string; csrf: string }, me: Me, err: unknown, amount?: string) => {
    const failure = toCoreError(err);
    if (!failure || failure.code === 'unauthorized') throw err;
    await renderBilling(req, res, nav, me, { pay: { error: failure.message, param: failure.param, amount }, status: statusOf(failure.code) });
  };
  router.post('/account/credits', label('/account/credits'), kit.requireCsrf, signedIn(async (req, res, nav, me) => {
    const amount = form(req, 'amount_usd');
    try {
      const key = form(req, 'idempotency_key');
      const organizationId = billingWallet(req);
      const session = await core(req).payments.checkout({ amount_usd: amount, ...(key ? { idempotency_key: key } : {}), ...(organizationId ? { organization_id: organizationId } : {}) });
      toStripe(res, session.url);
    } catch (err) {
      await payFailure(req, res, nav, me, err, amount.slice(0, 13));
    }
  }));
  router.post('/account/subscribe', label('/account/subscribe'), kit.requireCsrf, signedIn(async (req, res, nav, me) => {
    try {
      const key = form(req, 'idempotency_key');
      const organizationId = billingWallet(req);
      const session = await core(req).payments.subscribe({ plan: form(req, 'plan'), ...(key ? { idempotency_key: key } : {}), ...(organizationId ? { organization_id: organizationId } : {}) });
      toStripe(res, session.url);
    } catch (err) {
      await payFailure(req, res, nav, me, err);
    }
  }));
  router.post('/account/auto-top-up', label('/account/auto-top-up'), kit.requireCsrf, signedIn(async (req, res, nav, me) => {
    const threshold = form(req, 'threshold_coins');
    const amount = form(req, 'amount_usd');
    const enabled = form(req, 'enabled') === 'on';
    try {
      const key = form(req, 'idempotency_key');
      const organizationId = billingWallet(req);
      const wallet = organizationId ? { organization_id: organizationId } : {};
      const result = await core(req).payments.configureAutoTopUp(
        enabled ? { enabled, threshold_coins: threshold, amount_usd: amount, ...(key ? { idempotency_key: key } : {}), ...wallet } : { enabled, ...wallet },
      );
      // No card saved yet: Stripe's page takes the first payment and saves it.
      if (result.checkout) return toStripe(res, result.checkout.url);
      res.redirect(303, `/account/billing?${walletQuery(organizationId)}auto_top_up=${result.enabled ? 'on' : 'off'}#auto-top-up`);
    } catch (err) {
      const failure = toCoreError(err);
      if (!failure || failure.code === 'unauthorized') throw err;
      await renderBilling(req, res, nav, me, { pay: { autoTopUp: { error: failure.message, param: failure.param, threshold: threshold.slice(0, 9), amount: amount.slice(0, 13) } }, status: statusOf(failure.code) });
    }
  }));
  router.post('/account/billing/portal', label('/account/billing/portal'), kit.requireCsrf, signedIn(async (req, res, nav, me) => {
    try {
      const organizationId = billingWallet(req);
      toStripe(res, (await core(req).payments.portal(organizationId ? { organization_id: organizationId } : undefined)).url);
    } catch (err) {
      await payFailure(req, res, nav, me, err);
    }
  }));
  router.get('/account/credits/success', label('/account/credits/success'), signedIn(async (req, res, nav) => {
    res.setHeader('Cache-Control', 'no-store');
    const organizationId = billingWallet(req);
    const status = await core(req).payments.topUpStatus({ session_id: typeof req.query.session_id === 'string' ? req.query.session_id : '', ...(organizationId ? { organization_id: organizationId } : {}) });
    send(res, topUpSuccessPage(nav, status, organizationId));
  }));
  router.post('/account/password', label('/account/password'), kit.requireCsrf, signedIn(async (req, res, nav, me) => {
    const current = form(req, 'current_password');
    try {
      // Every session of the account ends; this browser gets the new one.
      signInBrowser(res, await core(req).accounts.changePassword({ new_password: form(req, 'new_password'), ...(current ? { current_password: current } : {}) }));
      res.redirect(303, '/account/settings?password=changed');
    } catch (err) {
      const failure = toCoreError(err);
      if (!failure || failure.code === 'unauthorized') throw err;
      await renderSettings(req, res, nav, me, { password: { message: failure.message, param: failure.param }, status: statusOf(failure.code) });
    }
  }));

  /** The limit fields of the key forms, as core's create and update take them. Empty: no limit. */
  const keyLimits = (req: Request) => {
    const models = (req.body as Record<string, unknown> | undefined)?.allowed_models;
    const list = Array.isArray(models) ? models.filter((m): m is string => typeof m === 'string') : typeof models === 'string' ? [models] : [];
    const period = form(req, 'spend_limit_period');
    return {
      spend_limit_coins: form(req, 'spend_limit_coins').trim() || null,
      ...(period === 'total' || period === 'monthly' ? { spend_limit_period: period as 'total' | 'monthly' } : {}),
      expires_at: form(req, 'expires_at').trim() || null,
      allowed_models: list.length > 0 ? list : null,
    };
  };
  const modelChoices = async (req: Request) => (await core(req).account.models({})).data.map((m) => ({ id: m.id, name: m.name }));
  /** The key listing of the wallet shown: the personal keys, or the organization's (a member's own; an admin's all). */
  const walletKeys = (nav: Nav) => (nav.wallet.current ? { organization_id: nav.wallet.current.id } : undefined);
  const renderKeys = async (req: Request, res: Response, nav: Nav, extra: { created?: { id: string; name: string; key: string } | undefined; error?: string; param?: string | undefined; status?: number; values?: KeyValues } = {}) => {
    const [keys, models, me] = await Promise.all([core(req).account.keys.list(walletKeys(nav)), core(req).account.models({}), core(req).accounts.me()]);
    const created = extra.created;
    const createdKey = created && keys.data.find((k) => k.id === created.id);
    // A management key calls no model (403): no chat to try it with.
    const firstModel = created && createdKey?.type !== 'management' && firstRequestModel(models.data, createdKey?.allowed_models ?? null);
    const firstRequest = created && firstModel ? { model: firstModel, snippets: firstRequestSnippets(apiBase(publicBaseUrl), created.key, firstModel) } : undefined;
    // The 10 keys hold per person: in an organization, per member (an admin sees the others' keys too).
    const activeCount = keys.data.filter((k) => !k.revoked_at && k.user_id === me.id).length;
    const organization = nav.wallet.current ?? undefined;
    send(res, keysPage(nav, { keys: keys.data, limit: MAX_ACTIVE_KEYS, models: models.data.map((m) => ({ id: m.id, name: m.name })), created, firstRequest, error: extra.error, param: extra.param, values: extra.values, organization, activeCount }), extra.status);
  };
  // A new key's secret reaches the page once: POST creates the key and redirects here with the
  // secret in an encrypted flash cookie (kit.setFlash); this GET shows it and clears the cookie.
  // A reload creates nothing and shows no secret. The page is never cached.
  router.get('/account/keys', label('/account/keys'), signedIn(async (req, res, nav) => {
    res.setHeader('Cache-Control', 'no-store');
    const flash = kit.takeFlash(req, res, '/account/keys');
    const created = flash ? parseCreated(flash) : undefined;
    await renderKeys(req, res, nav, { created });
  }));
  router.post('/account/keys', label('/account/keys'), kit.requireCsrf, signedIn(async (req, res, nav) => {
    const name = form(req, 'name').trim();
    try {
      const management = form(req, 'management') === 'on';
      const created = await core(req).account.keys.create({ ...(name ? { name } : {}), ...keyLimits(req), ...walletKeys(nav), ...(management ? { management } : {}) });
      kit.setFlash(req, res, '/account/keys', JSON.stringify({ id: created.id, name: created.name, key: created.key }));
      res.redirect(303, '/account/keys');
    } catch (err) {
      const failure = toCoreError(err);
      if (!failure || failure.code === 'unauthorized') throw err;
      res.setHeader('Cache-Control', 'no-store');
      const limits = keyLimits(req);
      const values: KeyValues = { name, spend_limit_coins: limits.spend_limit_coins ?? '', spend_limit_period: limits.spend_limit_period, expires_at: limits.expires_at ?? '', allowed_models: limits.allowed_models ?? [] };
      await renderKeys(req, res, nav, { error: failure.message, param: failure.param, status: statusOf(failure.code), values });
    }
  }));
  const renderEditKey = async (req: Request, res: Response, nav: Nav, extra: { error?: string; param?: string | undefined; status?: number } = {}) => {
    const [key, models] = await Promise.all([core(req).account.keys.get({ id: String(req.params.id) }), modelChoices(req)]);
    if (key.revoked_at) return send(res, page({ title: 'Not found', nav: { ...nav, current: '/account/keys' } }, html`<p class="error" role="alert">No such active key.</p>`), 404);
    send(res, editKeyPage(nav, key, { models, error: extra.error, param: extra.param }), extra.status);
  };
  router.get('/account/keys/:id/edit', label('/account/keys/:id/edit'), signedIn((req, res, nav) => renderEditKey(req, res, nav)));
  router.post('/account/keys/:id/edit', label('/account/keys/:id/edit'), kit.requireCsrf, signedIn(async (req, res, nav) => {
    const name = form(req, 'name').trim();
    try {
      await core(req).account.keys.update({ id: String(req.params.id), ...(name ? { name } : {}), ...keyLimits(req), disabled: form(req, 'disabled') === 'on' });
      res.redirect(303, '/account/keys');
    } catch (err) {
      const failure = toCoreError(err);
      if (!failure || failure.code === 'unauthorized' || failure.code === 'not_found') throw err;
      await renderEditKey(req, res, nav, { error: failure.message, param: failure.param, status: statusOf(failure.code) });
    }
  }));
  router.get('/account/keys/:id/revoke', label('/account/keys/:id/revoke'), signedIn(async (req, res, nav) => {
    const key = (await core(req).account.keys.list(walletKeys(nav))).data.find((k) => k.id === req.params.id && !k.revoked_at);
    if (!key) return send(res, page({ title: 'Not found', nav: { ...nav, current: '/account/keys' } }, html`<p class="error" role="alert">No such active key.</p>`), 404);
    send(res, revokeKeyPage(nav, key));
  }));
  router.post('/account/keys/:id/revoke', label('/account/keys/:id/revoke'), kit.requireCsrf, signedIn(async (req, res) => {
    await core(req).account.keys.revoke({ id: String(req.params.id) });
    res.redirect(303, '/account/keys');
  }));

  router.get('/account/apps', label('/account/apps'), signedIn(async (req, res, nav) => send(res, appsPage(nav, { apps: (await core(req).account.apps.list()).data }))));
  router.post('/account/apps/:id/revoke', label('/account/apps/:id/revoke'), kit.requireCsrf, signedIn(async (req, res) => {
    await core(req).account.apps.revoke({ id: String(req.params.id) });
    res.redirect(303, '/account/apps');
  }));

  router.get('/account/usage', label('/account/usage'), signedIn(async (req, res, nav) => {
    // An organization's wallet: its usage per member and per key.
    if (nav.wallet.current) return renderOrgUsage(req, res, nav, nav.wallet.current, '/account/usage');
    const q = (name: string) => (typeof req.query[name] === 'string' ? (req.query[name] as string).slice(0, 20) : undefined);
    const cursor = q('starting_after');
    const range = { from: q('from'), to: q('to') };
    const [history, generations] = await Promise.all([
      core(req).account.history({ limit: 25, ...(cursor ? { starting_after: cursor } : {}) }),
      core(req).account.generations.list({ limit: 10 }),
    ]);
    try {
      const usage = await core(req).account.usage({ ...(range.from ? { from: range.from } : {}), ...(range.to ? { to: range.to } : {}) });
      send(res, usagePage(nav, { usage, range: { from: usage.from, to: usage.to }, history, generations: generations.data, cursor }));
    } catch (err) {
      // A range core refuses (a day that does not exist, from after to, more than 366 days): the page again, with the message.
      const failure = toCoreError(err);
      if (!failure || failure.code !== 'invalid_request') throw err;
      send(res, usagePage(nav, { range: { from: range.from ?? '', to: range.to ?? '' }, error: failure.message, errorParam: failure.param, history, generations: generations.data, cursor }), statusOf(failure.code));
    }
  }));
  router.get('/account/usage.csv', label('/account/usage.csv'), signedIn(async (req, res) => {
    const filters: Record<string, string> = {};
    for (const name of ['from', 'to', 'model', 'key']) if (typeof req.query[name] === 'string' && req.query[name]) filters[name] = (req.query[name] as string).slice(0, 200);
    const csv = await core(req).account.historyCsv(filters);
    res.setHeader('Content-Type', csv.content_type);
    res.setHeader('Content-Disposition', `attachment; filename="${csv.filename}"`);
    res.send(csv.csv);
  }));
  router.get('/account/generations/:id', label('/account/generations/:id'), signedIn(async (req, res, nav) => {
    send(res, generationPage(nav, await core(req).account.generations.get({ id: String(req.params.id) })));
  }));

  // Organizations (docs/organizations.md): each form calls one core use case with the session;
  // roles, limits and the last owner are core's rules. A refusal comes back on the page: beside
  // its field, or as a notice when the person's role does not allow it (403).
  router.use('/account/organizations', express.urlencoded({ extended: false, limit: '16kb', parameterLimit: 20 }));
  const orgParam = (req: Request) => String(req.params.id).slice(0, 80);
  const INFO: Record<string, string> = {
    created: 'The organization is made: you are its owner. Invite its members below.',
    invited: 'The invitation is sent.',
    revoked: 'The invitation is revoked: its link no longer works.',
    updated: 'The member is saved.',
    removed: 'The member is removed, and their keys of this organization are revoked.',
    joined: 'You joined the organization.',
    left: 'You left the organization; your keys of it are revoked.',
  };
  const infoOf = (req: Request) => INFO[Object.keys(INFO).find((k) => req.query[k] === '1') ?? ''];
  /** A refusal to show on the page, or the error again for the error page (signed out, unknown, not ours). */
  const shown = (err: unknown) => {
    const failure = toCoreError(err);
    if (!failure || failure.code === 'unauthorized' || failure.code === 'not_found') throw err;
    return failure;
  };
  const renderOrganizations = async (req: Request, res: Response, nav: Nav, extra: { error?: FormError; name?: string; status?: number } = {}) => {
    const { data } = await core(req).organizations.list();
    send(res, organizationsPage(nav, { organizations: data, error: extra.error, name: extra.name, info: infoOf(req) }), extra.status);
  };
  const renderOrganization = async (req: Request, res: Response, nav: Nav, extra: { error?: string; status?: number; invite?: { error: FormError; email: string; role: string } } = {}) => {
    const id = orgParam(req);
    const [organization, me] = await Promise.all([core(req).organizations.get({ id }), core(req).organizations.membership({ id })]);
    const admin = organization.role !== 'member';
    const [members, invitations] = admin ? await Promise.all([core(req).organizations.members.list({ id }), core(req).organizations.invitations.list({ id })]) : [undefined, undefined];
    send(res, organizationPage(nav, { organization, me, members: members?.data, invitations: invitations?.data, invite: extra.invite, error: extra.error, info: infoOf(req) }), extra.status);
  };
  const renderOrgUsage = async (req: Request, res: Response, nav: Nav, org: { id: string }, current?: string) => {
    const q = (name: string) => (typeof req.query[name] === 'string' ? (req.query[name] as string).slice(0, 20) : undefined);
    const range = { from: q('from'), to: q('to') };
    const organization = await core(req).organizations.get({ id: org.id });
    try {
      const usage = await core(req).organizations.usage({ id: org.id, ...(range.from ? { from: range.from } : {}), ...(range.to ? { to: range.to } : {}) });
      send(res, organizationUsagePage(nav, { organization, usage, range: { from: usage.from, to: usage.to }, ...(current ? { current } : {}) }));
    } catch (err) {
      const failure = toCoreError(err);
      if (!failure || failure.code !== 'invalid_request') throw err;
      send(res, organizationUsagePage(nav, { organization, range: { from: range.from ?? '', to: range.to ?? '' }, error: failure.message, errorParam: failure.param, ...(current ? { current } : {}) }), statusOf(failure.code));
    }
  };

  router.get('/account/organizations', label('/account/organizations'), signedIn((req, res, nav) => renderOrganizations(req, res, nav)));
  router.post('/account/organizations', label('/account/organizations'), kit.requireCsrf, signedIn(async (req, res, nav) => {
    const name = form(req, 'name');
    try {
      const created = await core(req).organizations.create({ name });
      res.redirect(303, `${orgHref(created.id)}?created=1`);
    } catch (err) {
      const failure = shown(err);
      await renderOrganizations(req, res, nav, { error: { message: failure.message, param: failure.param }, name: name.slice(0, 100), status: statusOf(failure.code) });
    }
  }));
  /** The switch above the pages: the wallet (an organization core lists as the person's, or the personal one) for the next pages. */
  router.post('/account/wallet', label('/account/wallet'), kit.requireCsrf, signedIn(async (req, res, nav) => {
    const id = form(req, 'organization').trim();
    const next = safeNext(form(req, 'next'));
    if (!id) {
      res.clearCookie(WALLET_COOKIE, walletCookie);
      return res.redirect(303, next);
    }
    const chosen = nav.wallet.choices.find((c) => c.id === id);
    if (!chosen) throw new CoreError('not_found', `No organization ${id.slice(0, 80)}.`, { reason: 'organization_not_found', param: 'organization' });
    res.cookie(WALLET_COOKIE, chosen.id, { ...walletCookie, maxAge: 365 * 86_400_000 });
    res.redirect(303, next);
  }));
  router.get('/account/organizations/:id', label('/account/organizations/:id'), signedIn((req, res, nav) => renderOrganization(req, res, nav)));
  router.post('/account/organizations/:id/invitations', label('/account/organizations/:id/invitations'), kit.requireCsrf, signedIn(async (req, res, nav) => {
    const email = form(req, 'email');
    const role = form(req, 'role');
    try {
      await core(req).organizations.invitations.create({ id: orgParam(req), email, ...(role ? { role: role as 'member' } : {}) });
      res.redirect(303, `${orgHref(orgParam(req))}?invited=1#invitations`);
    } catch (err) {
      const failure = shown(err);
      // A role the person lacks (403) is a notice; anything about the form's fields goes beside them.
      if (failure.code === 'forbidden') return renderOrganization(req, res, nav, { error: failure.message, status: statusOf(failure.code) });
      await renderOrganization(req, res, nav, { invite: { error: { message: failure.message, param: failure.param }, email: email.slice(0, 254), role }, status: statusOf(failure.code) });
    }
  }));
  router.post('/account/organizations/:id/invitations/:invitation/revoke', label('/account/organizations/:id/invitations/:invitation/revoke'), kit.requireCsrf, signedIn(async (req, res, nav) => {
    try {
      await core(req).organizations.invitations.revoke({ id: orgParam(req), invitation_id: String(req.params.invitation).slice(0, 80) });
      res.redirect(303, `${orgHref(orgParam(req))}?revoked=1#invitations`);
    } catch (err) {
      const failure = shown(err);
      await renderOrganization(req, res, nav, { error: failure.message, status: statusOf(failure.code) });
    }
  }));
  const memberOf = async (req: Request) => {
    const id = orgParam(req);
    const userId = String(req.params.user).slice(0, 80);
    const [organization, members] = await Promise.all([core(req).organizations.get({ id }), core(req).organizations.members.list({ id })]);
    const member = members.data.find((m) => m.user_id === userId);
    if (!member) throw new CoreError('not_found', `No member ${userId} in the organization ${id}.`, { reason: 'member_not_found', param: 'user_id' });
    return { organization, member };
  };
  router.get('/account/organizations/:id/members/:user', label('/account/organizations/:id/members/:user'), signedIn(async (req, res, nav) => {
    try {
      send(res, memberPage(nav, await memberOf(req)));
    } catch (err) {
      // A member (not an admin) opening an admin's page: the organization, with why.
      const failure = shown(err);
      await renderOrganization(req, res, nav, { error: failure.message, status: statusOf(failure.code) });
    }
  }));
  router.post('/account/organizations/:id/members/:user', label('/account/organizations/:id/members/:user'), kit.requireCsrf, signedIn(async (req, res, nav) => {
    const role = form(req, 'role');
    const limit = form(req, 'spend_limit_coins').trim();
    const period = form(req, 'spend_limit_period');
    try {
      await core(req).organizations.members.update({
        id: orgParam(req),
        user_id: String(req.params.user).slice(0, 80),
        ...(role ? { role: role as 'member' } : {}),
        spend_limit_coins: limit || null,
        ...(period ? { spend_limit_period: period as 'monthly' } : {}),
      });
      res.redirect(303, `${orgHref(orgParam(req))}?updated=1#members`);
    } catch (err) {
      const failure = shown(err);
      const status = statusOf(failure.code);
      // A role the person lacks, or the last owner: a notice; a bad field: beside it.
      const asNotice = failure.code === 'forbidden' || failure.code === 'conflict';
      const error: FormError = asNotice ? { message: failure.message } : { message: failure.message, param: failure.param };
      try {
        send(res, memberPage(nav, { ...(await memberOf(req)), error, values: { role, spend_limit_coins: limit.slice(0, 30), spend_limit_period: period } }), status);
      } catch {
        await renderOrganization(req, res, nav, { error: failure.message, status });
      }
    }
  }));
  const removeFrom = async (req: Request, res: Response, nav: Nav, userId: string, me: Me) => {
    const id = orgParam(req);
    try {
      await core(req).organizations.members.remove({ id, user_id: userId });
      if (userId !== me.id) return res.redirect(303, `${orgHref(id)}?removed=1#members`);
      if (nav.wallet.current?.id === id) res.clearCookie(WALLET_COOKIE, walletCookie);
      res.redirect(303, '/account/organizations?left=1');
    } catch (err) {
      const failure = shown(err);
      await renderOrganization(req, res, nav, { error: failure.message, status: statusOf(failure.code) });
    }
  };
  router.post('/account/organizations/:id/members/:user/remove', label('/account/organizations/:id/members/:user/remove'), kit.requireCsrf, signedIn((req, res, nav, me) => removeFrom(req, res, nav, String(req.params.user).slice(0, 80), me)));
  router.post('/account/organizations/:id/leave', label('/account/organizations/:id/leave'), kit.requireCsrf, signedIn((req, res, nav, me) => removeFrom(req, res, nav, me.id, me)));
  router.get('/account/organizations/:id/usage', label('/account/organizations/:id/usage'), signedIn((req, res, nav) => renderOrgUsage(req, res, nav, { id: orgParam(req) })));
  router.get('/account/organizations/:id/usage.csv', label('/account/organizations/:id/usage.csv'), signedIn(async (req, res) => {
    const q = (name: string) => (typeof req.query[name] === 'string' && req.query[name] ? { [name]: (req.query[name] as string).slice(0, 20) } : {});
    const csv = await core(req).organizations.usageCsv({ id: orgParam(req), ...q('from'), ...q('to') });
    res.setHeader('Content-Type', csv.content_type);
    res.setHeader('Content-Disposition', `attachment; filename="${csv.filename}"`);
    res.send(csv.csv);
  }));

  // An invitation's link (docs/organizations.md): who invites, to what; sign in as the invited
  // address and accept. Used, expired or revoked: 410; another address: 403; both say why.
  const INVITATION_REFUSALS = new Set(['gone', 'forbidden', 'not_found', 'invalid_request']);
  const refusedInvitation = (req: Request, res: Response, err: unknown, nav?: { email: string; csrf: string }) => {
    const failure = toCoreError(err);
    if (!failure || !INVITATION_REFUSALS.has(failure.code)) return sendPageError(req, res, err);
    send(res, invitationRefusedPage(statusOf(failure.code), failure.message, nav), statusOf(failure.code));
  };
  router.get('/invitations/:token', label('/invitations/:token'), async (req, res) => {
    res.setHeader('Cache-Control', 'no-store');
    const token = String(req.params.token).slice(0, 200);
    const path = `/invitations/${encodeURIComponent(token)}`;
    let me: Me | null = null;
    if (kit.sessionToken(req)) {
      me = await core(req).accounts.me().catch((err: unknown) => {
        if (toCoreError(err)?.code === 'unauthorized') return null;
        throw err;
      });
    }
    const nav = me ? { email: me.email, csrf: kit.csrfToken(req, res) } : undefined;
    try {
      const details = await core(req).organizations.invitations.read({ token, signed_in: me !== null });
      if (!nav) {
        // Signed out: after signing up (the confirmation link lands on /account), back here.
        res.cookie(INVITATION_COOKIE, path, { ...walletCookie, maxAge: 86_400_000 });
        return send(res, invitationSignedOutPage(details, path));
      }
      res.clearCookie(INVITATION_COOKIE, walletCookie);
      send(res, invitationAcceptPage(nav, details, token));
    } catch (err) {
      refusedInvitation(req, res, err, nav);
    }
  });
  router.post('/invitations/:token/accept', label('/invitations/:token/accept'), kit.requireCsrf, signedIn(async (req, res, nav) => {
    const token = String(req.params.token).slice(0, 200);
    try {
      const joined = await core(req).organizations.invitations.accept({ token });
      res.clearCookie(INVITATION_COOKIE, walletCookie);
      res.redirect(303, `${orgHref(joined.organization_id)}?joined=1`);
    } catch (err) {
      const failure = toCoreError(err);
      // An address not confirmed yet: the invitation again, with what to do.
      if (failure?.reason === 'email_not_verified') {
        const details = await core(req).organizations.invitations.read({ token, signed_in: true });
        return send(res, invitationAcceptPage(nav, details, token, failure.message), statusOf(failure.code));
      }
      refusedInvitation(req, res, err, nav);
    }
  }));

  // OAuth (docs/oauth.md): an app sends a person here; they sign in, then allow or deny it.
  const authorizationFields = ['client_id', 'redirect_uri', 'response_type', 'code_challenge', 'code_challenge_method', 'state', 'resource', 'scope'] as const;
  const fieldsOf = (source: Record<string, unknown>) => {
    const out: Record<string, string> = {};
    for (const f of authorizationFields) if (typeof source[f] === 'string') out[f] = source[f];
    return out as { client_id: string } & Partial<Record<(typeof authorizationFields)[number], string>>;
  };
  const toApp = (res: Response, to: string, csp?: string) => {
    if (csp) res.setHeader('Content-Security-Policy', csp);
    res.redirect(303, to);
  };
  /** The consent form posts here and is redirected to the app: the page's form-action must allow the app's redirect URI. */
  const allowFormTo = (res: Response, redirectUri: string) => {
    const url = new URL(redirectUri);
    const source = url.protocol === 'http:' || url.protocol === 'https:' ? url.origin : url.protocol;
    const csp = String(res.getHeader('Content-Security-Policy') ?? '');
    if (/^[\w.:/[\]-]+$/.test(source)) res.setHeader('Content-Security-Policy', csp.replace("form-action 'self'", `form-action 'self' ${source}`));
  };
  const authorizationError = (req: Request, res: Response, err: unknown) => {
    const failure = toCoreError(err);
    if (failure?.code === 'invalid_request' || failure?.code === 'not_found') return send(res, authorizationErrorPage(failure.message), 400);
    sendPageError(req, res, err);
  };

  router.get('/authorize', label('/authorize'), async (req, res) => {
    res.setHeader('Cache-Control', 'no-store');
    const fields = fieldsOf(req.query);
    let checked;
    try {
      checked = await core(req).oauth.authorization(fields);
    } catch (err) {
      return authorizationError(req, res, err);
    }
    if (checked.object === 'authorization_redirect') return toApp(res, checked.redirect_to);
    // Signed out: sign in, then back to this very request.
    const back = `/authorize?${new URLSearchParams(fields).toString()}`;
    let me: Me;
    try {
      me = await core(req).accounts.me();
    } catch (err) {
      if (toCoreError(err)?.code === 'unauthorized') return res.redirect(303, `/login?${new URLSearchParams({ next: back }).toString()}`);
      return sendPageError(req, res, err);
    }
    allowFormTo(res, checked.request.redirect_uri);
    const { client } = checked;
    const replaces = await core(req).account.apps.live({ client_id: client.id, name: client.name, redirect_host: client.redirect_host });
    const organizations = (await core(req).organizations.list()).data;
    send(res, consentPage({ email: me.email, csrf: kit.csrfToken(req, res) }, { authorization: checked, balance: String(me.balance.coins), replaces, organizations }));
  });

  router.post('/authorize', label('/authorize'), kit.requireCsrf, signedIn(async (req, res, nav, me) => {
    res.setHeader('Cache-Control', 'no-store');
    const body = (req.body ?? {}) as Record<string, unknown>;
    const fields = { ...fieldsOf(body), response_type: 'code', code_challenge_method: 'S256' };
    try {
      if (form(req, 'decision') !== 'allow') return toApp(res, (await core(req).oauth.deny(fields)).redirect_to);
      const lifetime = form(req, 'lifetime');
      // The wallet the app spends from: the person's own, or an organization's (core checks the membership).
      const wallet = form(req, 'wallet');
      const answer = await core(req).oauth.approve({
        ...fields,
        spend_cap_coins: form(req, 'spend_cap_coins'),
        ...(lifetime ? { lifetime: lifetime as '7' } : {}),
        ...(wallet && wallet !== 'personal' ? { organization_id: wallet } : {}),
      });
      toApp(res, answer.redirect_to);
    } catch (err) {
      const failure = toCoreError(err);
      if (!failure || failure.code === 'unauthorized') throw err;
      // The person's own choices (cap, lifetime) or the app limit: the page again, with the message.
      if (failure.param === 'spend_cap_coins' || failure.param === 'lifetime' || failure.param === 'organization_id' || failure.code === 'limit_reached') {
        const checked = await core(req).oauth.authorization(fields);
        if (checked.object === 'authorization_request') {
          allowFormTo(res, checked.request.redirect_uri);
          const organizations = (await core(req).organizations.list()).data;
          const values = { spend_cap_coins: form(req, 'spend_cap_coins'), lifetime: form(req, 'lifetime'), wallet: failure.param === 'organization_id' ? 'personal' : form(req, 'wallet') };
          return send(
            res,
            consentPage(nav, { authorization: checked, balance: String(me.balance.coins), values, error: failure.message, organizations }),
            statusOf(failure.code),
          );
        }
      }
      authorizationError(req, res, err);
    }
  }));

  // A browser gets a page; any other client (an SDK, curl) the JSON 404 that names the API's base URL.
  router.use((req, res, next) => {
    if (!wantsPage(req)) {
      // Not a browser: no page, so no cookie either (the kit's pre-session cookie is for forms).
      res.removeHeader('Set-Cookie');
      return next();
    }
    send(res, page({ title: 'Not found' }, html`<p>There is no page at ${req.path}. <a href="/account">Your account</a></p>`), 404);
  });
  router.use(((err, req, res, _next) => {
    if (err === kit.invalidCsrfError) {
      return send(res, page({ title: 'Form expired' }, html`<p class="error" role="alert">This form has expired or did not come from this site. Go back, reload the page and try again.</p>`), 403);
    }
    // A form the body parser refused (too large, too many fields, an unknown charset): the client's fault, a 4xx page.
    const status = (err as { status?: unknown }).status;
    if (typeof status === 'number' && status >= 400 && status < 500) {
      return send(res, page({ title: 'This form could not be read' }, html`<p class="error" role="alert">The form was too large or not readable. Go back and try again.</p>`), status);
    }
    sendPageError(req, res, err);
  }) as express.ErrorRequestHandler);
  return { path: '/', router };
}

/**
 * The public pages (docs/catalog.md, "Public pages"): the landing page, the catalog, each
 * model's page and the docs. Mounted before the browser kit, so they set no cookie; the same
 * answer for everyone signed out, cacheable by anyone for five minutes. A visitor with a session
 * cookie gets "Your account" in place of Sign in / Sign up, in a private answer (`Vary: Cookie`).
 * The cookie's presence is enough for that link: the account pages check the session itself.
 */
function mountPublicPages(router: Router, deps: CoreDeps, publicBaseUrl: string) {
  const visitor = (req: Request, res: Response) => {
    const signedIn = new RegExp(`(?:^|;\\s*)${SESSION_COOKIE}=[^;]`).test(req.get('cookie') ?? '');
    res.setHeader('Cache-Control', signedIn ? 'private, no-cache' : 'public, max-age=300');
    res.setHeader('Vary', 'Cookie');
    return { signedIn };
  };
  const core = (req: Request) => createCaller(createContext(deps, { kind: 'none' }, { requestId: String(req.id), clientIp: req.ip }));
  const label = (route: string): RequestHandler => (_req, res, next) => {
    res.locals.route = route;
    next();
  };
  const send = (res: Response, body: string, status = 200) => void res.status(status).type('html').send(body);
  const safely = (fn: RequestHandler): RequestHandler => async (req, res, next) => {
    try {
      await fn(req, res, next);
    } catch (err) {
      sendPageError(req, res, err);
    }
  };

  const catalog = async (req: Request) => (await core(req).models.catalog({})).data as ModelView[];
  router.get('/', label('/'), safely(async (req, res) => {
    const who = visitor(req, res);
    send(res, landingPage(who, publicBaseUrl, await catalog(req)));
  }));
  router.get('/models', label('/models'), safely(async (req, res) => {
    const who = visitor(req, res);
    send(res, catalogPage(who, await catalog(req)));
  }));
  router.get('/models/*id', label('/models/*id'), safely(async (req, res) => {
    const who = visitor(req, res);
    const parts = (req.params as { id?: string | string[] }).id;
    const id = Array.isArray(parts) ? parts.join('/') : String(parts ?? '');
    try {
      send(res, modelPage(who, (await core(req).models.page({ id })) as ModelView, publicBaseUrl));
    } catch (err) {
      const failure = toCoreError(err);
      if (failure?.code !== 'not_found' && failure?.code !== 'invalid_request') throw err;
      res.setHeader('Cache-Control', 'no-store');
      send(res, modelNotFoundPage(who, id), 404);
    }
  }));
  // The docs pages (marked and the rendered docs) are imported on the first request for one. They
  // show this deployment's base URL and the catalog's models and prices (docs/customer/README.md).
  const docs = () => import('./pages/docs.ts');
  const docContext = async (req: Request) => ({ publicBaseUrl, models: await catalog(req), resultRetentionSeconds: deps.config.resultRetentionSeconds });
  router.get('/docs', label('/docs'), safely(async (req, res) => {
    const who = visitor(req, res);
    send(res, (await docs()).docsIndexPage(who, await docContext(req)));
  }));
  router.get('/docs/:name', label('/docs/:name'), safely(async (req, res) => {
    const { docNotFoundPage, docPage, lookupDoc, movedDoc } = await docs();
    const name = String(req.params.name);
    // An old name of a page that moved when the customer docs were split from the operator documents.
    const moved = movedDoc(name);
    if (moved) return res.redirect(301, `/docs/${moved}`);
    const who = visitor(req, res);
    const doc = lookupDoc(name);
    if (!doc) return send(res, docNotFoundPage(who, name), 404);
    send(res, docPage(who, doc, await docContext(req)));
  }));
}

const isApiPath = (path: string) => /^\/(api|v1|webhooks)(\/|$)/.test(path);

/** A browser navigating asks for HTML by name; SDKs ask for JSON, curl and fetch for anything. */
const wantsPage = (req: Request) => /\btext\/html\b/i.test(req.get('accept') ?? '');

/** The flash the keys POST left: the new key's id, name and secret. */
function parseCreated(flash: string): { id: string; name: string; key: string } | undefined {
  try {
    const v = JSON.parse(flash) as Record<string, unknown>;
    return typeof v.id === 'string' && typeof v.name === 'string' && typeof v.key === 'string' ? { id: v.id, name: v.name, key: v.key } : undefined;
  } catch {
    return undefined;
  }
}
