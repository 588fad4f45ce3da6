import type { Request, RequestHandler, Response, Router } from 'express';
import type { GraphQLError } from '../../graphql/graphql-js.ts';
import { fieldError, html, Html, invalidAttrs, notice, page } from '../html.ts';

/**
 * What every admin page module shares: the layout, the in-process GraphQL runner, the signed-in
 * wrapper (which knows the admin's role from `admin.whoami`), the times (html.ts's), and the one
 * wording of a refusal for a viewer.
 */

/** An operation's data: the operations are validated against the schema, and each page reads the fields it asked for. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- see above
export type Data = Record<string, any>;

export type Role = 'viewer' | 'operator';
export interface Nav {
  email: string;
  csrf: string;
  current: string;
  role: Role;
}

export const adminPage = (title: string, nav: Nav | undefined, body: Html) => page({ title, nav, area: 'admin' }, body);

/** The refusal a viewer sees, worded for the pages (the API's own message speaks of tokens). */
export const VIEWER_REFUSAL = 'Your admin role (viewer) can read but not change anything. Ask an operator.';

export interface AdminTools {
  /** One admin GraphQL operation, with this request's admin session. */
  query<T = Data>(req: Request, source: string, variables?: Record<string, unknown>): Promise<{ data: T | null; errors: readonly GraphQLError[] }>;
  /** A read: its data, or its first error thrown as a page error. */
  read<T = Data>(req: Request, source: string, variables?: Record<string, unknown>): Promise<T>;
  /** A signed-in page: sends to the sign-in page without a session; errors become error pages. */
  signedIn(current: string, fn: (req: Request, res: Response, nav: Nav) => Promise<void>): RequestHandler;
  send(res: Response, body: string, status?: number): void;
  form(req: Request, field: string): string;
  requireCsrf: RequestHandler;
}

/** A module of the admin pages mounts its routes on the admin router. */
export type Mount = (router: Router, tools: AdminTools) => void;

export class PageError extends Error {
  readonly status: number;
  constructor(message: string, status = 400) {
    super(message);
    this.status = status;
  }
}

/** The HTTP status of a GraphQL error, from its code. */
export const statusOfGraphql = (err: { extensions?: Record<string, unknown> }) => {
  const code = err.extensions?.code;
  return code === 'FORBIDDEN' ? 403 : code === 'NOT_FOUND' ? 404 : code === 'CONFLICT' ? 409 : code === 'UNAUTHENTICATED' ? 401 : 400;
};

/** An error of the admin API as a page says it: a viewer's refusal in the pages' words. */
export const messageOfGraphql = (err: { message: string; extensions?: Record<string, unknown> }) =>
  err.extensions?.reason === 'operator_role_required' ? VIEWER_REFUSAL : err.message;

/** Times and days: the one format of every page (html.ts), re-exported for the admin modules. */
export { formatDay as readableDay, formatTime as readableTime, onDay, when } from '../html.ts';

/** A long id that may break anywhere on a narrow screen. */
export const idCode = (id: string) => html`<code class="id">${id}</code>`;

export const truncate = (text: string, max = 80) => (text.length > max ? `${text.slice(0, max - 1)}…` : text);


/** The notice after a successful action (post/redirect/get): `?done=` names one of the known messages. */
export function doneNotice(req: Request, messages: Record<string, string>): Html | string {
  const done = typeof req.query.done === 'string' ? req.query.done : '';
  return notice('info', Object.hasOwn(messages, done) ? messages[done] : undefined);
}

/** A viewer's note on a page whose actions are hidden. */
export const viewerNote = (nav: Nav) => (nav.role === 'viewer' ? html`<p class="hint admin-role">${VIEWER_REFUSAL}</p>` : '');

/**
 * An action's form: its own fields, a reason, and an "I understand" box to tick (the
 * confirmation: the pages work without JavaScript, so no confirm()). Posts to `action`.
 */
export function actionForm(v: { action: string; csrf: string; fields?: Html; understand: string; button: string; danger?: boolean; reason?: string; id?: string; errors?: { reason?: string; confirm?: string } }): Html {
  const reasonError = v.errors?.reason;
  const confirmError = v.errors?.confirm;
  return html`<form method="post" action="${v.action}" class="stack admin-action"${v.id ? html` id="${v.id}"` : ''}>
  <input type="hidden" name="_csrf" value="${v.csrf}">
  ${v.fields ?? ''}
  <label>Reason (for the audit log) ${fieldError('reason', reasonError)}<input type="text" name="reason" required minlength="3" maxlength="500" value="${v.reason ?? ''}"${invalidAttrs('reason', reasonError)}></label>
  ${fieldError('confirm', confirmError)}<label class="confirm"><input type="checkbox" name="confirm" value="yes" required${invalidAttrs('confirm', confirmError)}> ${v.understand}</label>
  <button type="submit"${v.danger ? html` class="danger"` : ''}>${v.button}</button>
</form>`;
}

/**
 * An action's own fields (ActionSpec.fields) with `message` beside the one named `name`: after
 * its label's text, before the input, which is marked invalid and described by it (GOV.UK's
 * error message pattern; the page's summary at the top says it too). No such field: unchanged.
 */
export function markField(fields: Html, name: string, message: string): Html {
  const input = new RegExp(`<(?:input|select|textarea)\\b[^>]*\\bname="${name.replace(/[^\w-]/g, '')}"`);
  const found = input.exec(fields.value);
  if (!found) return fields;
  const before = fields.value.slice(0, found.index);
  const after = fields.value.slice(found.index + found[0].length);
  return new Html(`${before}${String(fieldError(name, message))}${found[0]}${String(invalidAttrs(name, message))}${after}`);
}
