import type { Request, Response } from 'express';
import type { CoreErrorCode } from '../../core/errors.ts';
import { toCoreError } from '../../core/trpc.ts';
import { HTTP_STATUS } from '../http/status.ts';
import { html, page } from './html.ts';

export const statusOf = (code: CoreErrorCode) => HTTP_STATUS[code];

/**
 * What a page does with an error: signed out (or the session ended) goes to the sign-in page
 * and back; a domain error is a page with its message; anything else a page without details
 * (logged, with the request id), never a stack trace.
 */
export function sendPageError(req: Request, res: Response, err: unknown): void {
  const core = toCoreError(err);
  if (core?.code === 'unauthorized') {
    res.redirect(303, `/login?next=${encodeURIComponent(req.originalUrl)}`);
    return;
  }
  if (core) {
    res.status(HTTP_STATUS[core.code]).type('html').send(page({ title: core.code === 'not_found' ? 'Not found' : 'Something is wrong' }, html`<p class="error" role="alert">${core.message}</p><p><a href="/account">Back to your account</a></p>`));
    return;
  }
  req.log?.error({ err }, 'page failed');
  res
    .status(500)
    .type('html')
    .send(page({ title: 'Something went wrong' }, html`<p class="error" role="alert">The page could not be shown. Try again; if it persists, give us this id: ${String(req.id)}.</p>`));
}
