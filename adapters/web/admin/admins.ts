import type { Request, Response } from 'express';
import { html, notice } from '../html.ts';
import { refuseViewer } from './actions.ts';
import { actionForm, adminPage, messageOfGraphql, statusOfGraphql, viewerNote, when, type AdminTools, type Mount, type Nav } from './shared.ts';

/**
 * The Admins page: the admin users, and for an operator a form that creates one (`createAdminUser`,
 * audited by core with the reason). Its one-time sign-in link is a secret shown once: the
 * answer to the POST shows it (as the account pages show a new key), it is not stored to be
 * shown after a redirect.
 */

const ADMINS = `query Admins { adminUsers { id email role passwordSet createdAt disabledAt } }`;
const CREATE = `mutation CreateAdmin($input: CreateAdminUserInput!) { createAdminUser(input: $input) { user { id email role } loginToken loginExpiresAt } }`;
const ROLES = ['viewer', 'operator'] as const;

interface AdminUser { id: string; email: string; role: string; passwordSet: boolean; createdAt: string; disabledAt: string | null }

export function mountAdmins(publicBaseUrl: string | undefined): Mount {
  return (router, tools) => {
    const render = async (tools: AdminTools, req: Request, res: Response, nav: Nav, extra: { error?: string; status?: number; values?: Record<string, string>; created?: { email: string; role: string; url: string; expiresAt: string } } = {}) => {
      const data = await tools.read(req, ADMINS);
      const users = data.adminUsers as AdminUser[];
      const v = extra.values ?? {};
      tools.send(
        res,
        adminPage('Admins', nav, html`${notice('error', extra.error)}${viewerNote(nav)}
${extra.created
  ? html`<section class="secret-once" role="status"><p><strong>Admin ${extra.created.email} (${extra.created.role}) was created.</strong> Give them this one-time sign-in link, valid until ${when(extra.created.expiresAt)}; it is shown only this once. With it they choose a password.</p>
<div class="secret"><code id="admin-link">${extra.created.url}</code> <button type="button" data-copy="admin-link" hidden>Copy</button></div></section>`
  : ''}
${html`<table id="admins"><thead><tr><th>Email</th><th>Role</th><th>Created</th><th>State</th></tr></thead><tbody>
${users.map((u) => html`<tr><td>${u.email}</td><td>${u.role}</td><td>${when(u.createdAt)}</td><td>${u.disabledAt ? 'disabled' : u.passwordSet ? 'active' : 'link not used yet'}</td></tr>`)}
</tbody></table>`}
${nav.role === 'operator'
  ? html`<section><h2>Add an admin</h2>${actionForm({
      action: '/admin/admins',
      csrf: nav.csrf,
      id: 'create-admin',
      fields: html`<label>Email <input type="email" name="email" required maxlength="254" value="${v.email ?? ''}"></label>
  <label>Role <select name="role">${ROLES.map((r) => html`<option value="${r}"${(v.role ?? 'viewer') === r ? html` selected` : ''}>${r === 'viewer' ? 'viewer (reads)' : 'operator (reads and acts)'}</option>`)}</select></label>`,
      understand: 'I understand this person can sign in to these pages with the role chosen.',
      button: 'Create admin',
      reason: v.reason ?? '',
    })}</section>`
  : ''}`),
        extra.status,
      );
    };

    router.get('/admins', tools.signedIn('/admin/admins', (req, res, nav) => render(tools, req, res, nav)));
    router.post('/admins', tools.requireCsrf, tools.signedIn('/admin/admins', async (req, res, nav) => {
      if (nav.role !== 'operator') return refuseViewer(tools, res, nav);
      const values = { email: tools.form(req, 'email').trim(), role: tools.form(req, 'role'), reason: tools.form(req, 'reason').trim() };
      if (!values.reason) return render(tools, req, res, nav, { error: 'Reason: say why, for the audit log.', status: 400, values });
      if (tools.form(req, 'confirm') !== 'yes') return render(tools, req, res, nav, { error: 'Tick “I understand” to confirm.', status: 400, values });
      if (!(ROLES as readonly string[]).includes(values.role)) return render(tools, req, res, nav, { error: 'Role: viewer or operator.', status: 400, values });
      const result = await tools.query(req, CREATE, { input: values });
      const failed = result.errors[0];
      if (failed || !result.data) return render(tools, req, res, nav, { error: failed ? messageOfGraphql(failed) : 'The admin was not created.', status: failed ? statusOfGraphql(failed) : 500, values });
      const made = result.data.createAdminUser as { user: { email: string; role: string }; loginToken: string; loginExpiresAt: string };
      const path = `/admin/login/link?token=${encodeURIComponent(made.loginToken)}`;
      const url = publicBaseUrl ? `${publicBaseUrl.replace(/\/+$/, '')}${path}` : path;
      await render(tools, req, res, nav, { created: { email: made.user.email, role: made.user.role, url, expiresAt: made.loginExpiresAt } });
    }));
  };
}
