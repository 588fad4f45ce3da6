import express, { Router, type Request, type RequestHandler, type Response } from 'express';
import type { Logger } from 'pino';
import { createContext, type CoreDeps } from '../../../core/context.ts';
import { createCaller } from '../../../core/router.ts';
import { toCoreError } from '../../../core/trpc.ts';
import type { TemporalUi } from '../../graphql/context.ts';
import { executeAdminQuery } from '../../graphql/execute.ts';
import type { HttpAdapter } from '../../http/app.ts';
import type { BrowserKit } from '../../http/browser.ts';
import { HTTP_STATUS } from '../../http/status.ts';
import { html, notice } from '../html.ts';
import { mountAccounts } from './accounts.ts';
import { mountAdmins } from './admins.ts';
import { mountDashboard } from './dashboard.ts';
import { mountJobs } from './jobs.ts';
import { mountModels } from './models.ts';
import { mountOrganizations } from './organizations.ts';
import { adminPage, messageOfGraphql, PageError, statusOfGraphql, VIEWER_REFUSAL, type AdminTools, type Data, type Nav } from './shared.ts';

export interface AdminPagesOptions {
  kit: BrowserKit;
  logger: Logger;
  temporal: Partial<TemporalUi>;
  /** PUBLIC_BASE_URL, for the sign-in link of a new admin (a path on this site when absent). */
  publicBaseUrl?: string;
}

/** Where to go after signing in: only an /admin path of this site. */
export const safeAdminNext = (next: unknown) => (typeof next === 'string' && next.length <= 2000 && /^\/admin(?:[/?][\w\-./?=&%+*~:@,;!()]*)?$/.test(next) && !next.startsWith('//') ? next : '/admin');

/**
 * The admin pages at /admin (issues 18 and 34): sign-in with an admin user's password or
 * one-time link, and the pages mounted from their modules: the dashboard, margin and audit log
 * (dashboard.ts), accounts and their actions (accounts.ts), organizations and their balance actions (organizations.ts), the job search and a job (jobs.ts),
 * the models (models.ts), the admin users (admins.ts). Every read and action is a GraphQL operation of the admin API,
 * executed in this process with the admin session's credential, so roles and auditing are the
 * API's; the pages hide every action from a viewer, and say so when one posts anyway.
 */
export function adminPagesAdapter(deps: CoreDeps, opts: AdminPagesOptions): HttpAdapter {
  const { kit } = opts;
  const temporal: TemporalUi = { uiUrl: opts.temporal.uiUrl, namespace: opts.temporal.namespace ?? 'default' };
  const router = Router();
  // The admin API's path is not a page.
  router.use((req, _res, next) => next(req.path === '/graphql' || req.path.startsWith('/graphql/') ? 'router' : undefined));
  router.use(kit.middleware);
  router.use(express.urlencoded({ extended: false, limit: '16kb', parameterLimit: 20 }));
  router.use((_req, res, next) => {
    res.locals.route = '/admin';
    res.setHeader('Cache-Control', 'no-store');
    next();
  });

  const core = (req: Request) => createCaller(createContext(deps, { kind: 'admin', token: kit.adminSessionToken(req) }, { requestId: String(req.id), clientIp: req.ip }));
  const form = (req: Request, field: string) => {
    const value = (req.body as Record<string, unknown> | undefined)?.[field];
    return typeof value === 'string' ? value : '';
  };
  const send = (res: Response, body: string, status = 200) => void res.status(status).type('html').send(body);
  const query = <T = Data>(req: Request, source: string, variables: Record<string, unknown> = {}) =>
    executeAdminQuery<T>(deps, { kind: 'admin', token: kit.adminSessionToken(req) }, source, variables, { temporal, logger: req.log ?? opts.logger, requestId: String(req.id), clientIp: req.ip });
  /** A read: its data, or a GraphQL error thrown as a page error. */
  const read = async <T = Data>(req: Request, source: string, variables: Record<string, unknown> = {}) => {
    const result = await query<T>(req, source, variables);
    const failed = result.errors[0];
    if (failed || !result.data) throw new PageError(failed ? messageOfGraphql(failed) : 'The query failed.', failed ? statusOfGraphql(failed) : 400);
    return result.data;
  };

  const pageError = (req: Request, res: Response, err: unknown) => {
    const failure = toCoreError(err);
    if (failure?.code === 'unauthorized') return res.redirect(303, `/admin/login?${new URLSearchParams({ next: safeAdminNext(req.originalUrl) }).toString()}`);
    if (failure) {
      const message = failure.reason === 'operator_role_required' ? VIEWER_REFUSAL : failure.message;
      return send(res, adminPage('Something is wrong', undefined, html`<p class="error" role="alert">${message}</p>`), HTTP_STATUS[failure.code]);
    }
    if (err instanceof PageError) return send(res, adminPage('Something is wrong', undefined, html`<p class="error" role="alert">${err.message}</p>`), err.status);
    (req.log ?? opts.logger).error({ err }, 'admin page failed');
    send(res, adminPage('Something went wrong', undefined, html`<p class="error" role="alert">The page could not be shown. Request id: ${String(req.id)}.</p>`), 500);
  };
  const signedIn = (current: string, fn: (req: Request, res: Response, nav: Nav) => Promise<void>): RequestHandler => async (req, res) => {
    try {
      if (!kit.adminSessionToken(req)) return res.redirect(303, `/admin/login?${new URLSearchParams({ next: safeAdminNext(req.originalUrl) }).toString()}`);
      const me = await core(req).admin.whoami();
      await fn(req, res, { email: `${me.role} admin`, csrf: kit.csrfToken(req, res), current, role: me.role });
    } catch (err) {
      pageError(req, res, err);
    }
  };

  const loginPage = (v: { csrf: string; next: string; email?: string; error?: string }) =>
    adminPage('Admin sign in', undefined, html`${notice('error', v.error)}
<form method="post" action="/admin/login" class="stack">
  <input type="hidden" name="_csrf" value="${v.csrf}">
  <input type="hidden" name="next" value="${v.next}">
  <label>Email <input type="email" name="email" autocomplete="username" required maxlength="254" value="${v.email ?? ''}"></label>
  <label>Password <input type="password" name="password" autocomplete="current-password" required maxlength="256"></label>
  <button type="submit">Sign in</button>
</form>`);
  const linkPage = (v: { csrf: string; token: string; error?: string }) =>
    adminPage('Admin sign-in link', undefined, html`${notice('error', v.error)}
<form method="post" action="/admin/login/link" class="stack">
  <input type="hidden" name="_csrf" value="${v.csrf}">
  <input type="hidden" name="token" value="${v.token}">
  <label>Choose a password (at least 12 characters) <input type="password" name="new_password" autocomplete="new-password" minlength="12" maxlength="256"></label>
  <button type="submit">Continue</button>
</form>`);

  router.get('/login', (req, res) => send(res, loginPage({ csrf: kit.csrfToken(req, res), next: safeAdminNext(req.query.next) })));
  router.post('/login', kit.requireCsrf, async (req, res) => {
    const email = form(req, 'email');
    const next = safeAdminNext(form(req, 'next'));
    try {
      const session = await core(req).admin.session.signIn({ email, password: form(req, 'password') });
      kit.setAdminSession(res, session.token, new Date(session.expires_at));
      res.redirect(303, next);
    } catch (err) {
      const failure = toCoreError(err);
      if (!failure) return pageError(req, res, err);
      send(res, loginPage({ csrf: kit.csrfToken(req, res), next, email, error: failure.message }), HTTP_STATUS[failure.code]);
    }
  });
  // A GET never redeems the link (link previews would use it up): the form posts it.
  router.get('/login/link', (req, res) => send(res, linkPage({ csrf: kit.csrfToken(req, res), token: String(req.query.token ?? '').slice(0, 200) })));
  router.post('/login/link', kit.requireCsrf, async (req, res) => {
    const token = form(req, 'token');
    const password = form(req, 'new_password');
    try {
      const session = await core(req).admin.session.redeemLink({ token, ...(password ? { new_password: password } : {}) });
      kit.setAdminSession(res, session.token, new Date(session.expires_at));
      res.redirect(303, '/admin');
    } catch (err) {
      const failure = toCoreError(err);
      if (!failure) return pageError(req, res, err);
      send(res, linkPage({ csrf: kit.csrfToken(req, res), token: failure.code === 'unauthorized' ? '' : token, error: failure.message }), HTTP_STATUS[failure.code]);
    }
  });
  router.post('/logout', kit.requireCsrf, async (req, res) => {
    await core(req).admin.session.signOut().catch(() => undefined);
    kit.clearAdminSession(res);
    res.redirect(303, '/admin/login');
  });

  const tools: AdminTools = { query, read, signedIn, send, form, requireCsrf: kit.requireCsrf };
  for (const mount of [mountDashboard, mountAccounts, mountOrganizations, mountJobs, mountModels, mountAdmins(opts.publicBaseUrl)]) mount(router, tools);

  router.use((req, res) => send(res, adminPage('Not found', undefined, html`<p>There is no page at /admin${req.path}. <a href="/admin">Dashboard</a></p>`), 404));
  router.use(((err, req, res, _next) => {
    if (err === kit.invalidCsrfError) {
      return send(res, adminPage('Form expired', undefined, html`<p class="error" role="alert">This form has expired or did not come from this site. Go back, reload the page and try again.</p>`), 403);
    }
    const status = (err as { status?: unknown }).status;
    if (typeof status === 'number' && status >= 400 && status < 500) return send(res, adminPage('This form could not be read', undefined, html`<p class="error" role="alert">The form was not readable.</p>`), status);
    pageError(req, res, err);
  }) as express.ErrorRequestHandler);
  return { path: '/admin', router };
}
