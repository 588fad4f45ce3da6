import type { Request, Response, Router } from 'express';
import { html, notice, type Html } from '../html.ts';
import { actionForm, adminPage, markField, messageOfGraphql, statusOfGraphql, VIEWER_REFUSAL, type AdminTools, type Data, type Nav } from './shared.ts';

/**
 * One operator action of the admin pages: a GraphQL mutation of the admin API (which checks
 * the role and writes the audit entry), with a confirmation page at GET `path` and the action at
 * POST `path`. The form carries a reason and an "I understand" box; after it worked, the browser
 * goes back to `back` with `?done=<key>` (post/redirect/get) and that page shows `done`.
 */
export interface ActionSpec {
  /** The done code, unique among the actions. */
  key: string;
  /** An express path under /admin, e.g. `/accounts/:id/keys/:key/revoke`. */
  path: string;
  title: (req: Request) => string;
  button: (req: Request) => string;
  /** What ticking the box acknowledges. */
  understand: string;
  danger?: boolean;
  /** The action's own fields (besides reason and confirmation), with the values sent when the form comes back with an error. */
  fields?: (req: Request, values: Record<string, string>, tools: AdminTools) => Html | Promise<Html>;
  /** What the confirmation page says about the target (read through the admin API). */
  describe?: (req: Request, tools: AdminTools) => Promise<Html>;
  mutation: string;
  /** The mutation's variables; a string is an error about the form (400), `{ field, message }` one about a field, shown beside it too. */
  variables: (req: Request, reason: string, value: (field: string) => string, tools: AdminTools) => Variables | Promise<Variables>;
  /** The page to go back to. */
  back: (req: Request) => string;
  done: string;
}

export type Variables = Record<string, unknown> | string | FieldProblem;
/** A form error about one field of the action's own (`name` of its input). */
export interface FieldProblem {
  field: string;
  message: string;
}
const isFieldProblem = (v: Variables): v is FieldProblem => typeof v === 'object' && typeof v.field === 'string' && typeof v.message === 'string' && Object.keys(v).length === 2;

/** The `done` messages of a list of actions, for `doneNotice`. */
export const doneMessages = (specs: ActionSpec[]) => Object.fromEntries(specs.map((s) => [s.key, s.done]));

/** The action's URL for this request's path parameters. */
export const actionUrl = (req: Request) => `/admin${req.path}`;

const withDone = (url: string, key: string) => `${url}${url.includes('?') ? '&' : '?'}done=${encodeURIComponent(key)}`;

/** The page a viewer gets for an action: 403, in the pages' words, and no form. */
export function refuseViewer(tools: AdminTools, res: Response, nav: Nav) {
  tools.send(res, adminPage('Not allowed', nav, html`<p class="error" role="alert">${VIEWER_REFUSAL}</p>`), 403);
}

export function mountActions(router: Router, tools: AdminTools, specs: ActionSpec[]) {
  /** The confirmation page; with an error, the form comes back with it at the top and, when it is about one field, beside that field. */
  const confirmPage = async (spec: ActionSpec, req: Request, res: Response, nav: Nav, extra: { error?: string; field?: string | undefined; status?: number; values?: Record<string, string> } = {}) => {
    const values = extra.values ?? {};
    const about = spec.describe ? await spec.describe(req, tools) : '';
    const own = spec.fields ? await spec.fields(req, values, tools) : undefined;
    const field = extra.error ? extra.field : undefined;
    const fields = own && field && field !== 'reason' && field !== 'confirm' ? markField(own, field, extra.error!) : own;
    const errors = field === 'reason' || field === 'confirm' ? { [field]: extra.error } : undefined;
    tools.send(
      res,
      adminPage(spec.title(req), nav, html`${notice('error', extra.error)}
${about}
${actionForm({ action: actionUrl(req), csrf: nav.csrf, fields, understand: spec.understand, button: spec.button(req), danger: spec.danger ?? false, reason: values.reason ?? '', errors })}
<p><a href="${spec.back(req)}">Back, without doing it</a></p>`),
      extra.status,
    );
  };

  for (const spec of specs) {
    const current = `/admin/${spec.path.split('/')[1]}`;
    router.get(spec.path, tools.signedIn(current, async (req, res, nav) => {
      if (nav.role !== 'operator') return refuseViewer(tools, res, nav);
      await confirmPage(spec, req, res, nav);
    }));
    router.post(spec.path, tools.requireCsrf, tools.signedIn(current, async (req, res, nav) => {
      if (nav.role !== 'operator') return refuseViewer(tools, res, nav);
      const body = (req.body ?? {}) as Record<string, unknown>;
      const values = Object.fromEntries(Object.entries(body).filter((e): e is [string, string] => typeof e[1] === 'string' && e[0] !== '_csrf'));
      const reason = tools.form(req, 'reason').trim();
      if (!reason) return confirmPage(spec, req, res, nav, { error: 'Reason: say why, for the audit log.', field: 'reason', status: 400, values });
      if (tools.form(req, 'confirm') !== 'yes') return confirmPage(spec, req, res, nav, { error: 'Tick “I understand” to confirm.', field: 'confirm', status: 400, values });
      const variables = await spec.variables(req, reason, (field) => tools.form(req, field).trim(), tools);
      if (typeof variables === 'string') return confirmPage(spec, req, res, nav, { error: variables, status: 400, values });
      if (isFieldProblem(variables)) return confirmPage(spec, req, res, nav, { error: variables.message, field: variables.field, status: 400, values });
      const result = await tools.query<Data>(req, spec.mutation, variables);
      const failed = result.errors[0];
      // Core names the field it refused (`param`, GraphQL's extensions): shown beside it when the form has it.
      const param = typeof failed?.extensions?.param === 'string' ? failed.extensions.param : undefined;
      if (failed) return confirmPage(spec, req, res, nav, { error: messageOfGraphql(failed), field: param, status: statusOfGraphql(failed), values });
      res.redirect(303, withDone(spec.back(req), spec.key));
    }));
  }
}
