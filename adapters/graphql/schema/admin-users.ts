import type { AdminUserView } from '../../../core/admin/users.ts';
import { builder } from '../builder.ts';
import { AdminRole } from './admin.ts';

/** Admin users (core: admin.users.*, docs/admin.md "Access"): people who sign in to the admin pages. */
const AdminUser = builder.objectRef<AdminUserView>('AdminUser').implement({
  description: 'A person who operates the service, apart from accounts and API keys.',
  fields: (t) => ({
    id: t.exposeID('id', { description: '`adu_…`' }),
    email: t.exposeString('email'),
    role: t.field({ type: AdminRole, resolve: (u) => u.role }),
    passwordSet: t.exposeBoolean('password_set', { description: 'false until the one-time sign-in link is redeemed.' }),
    createdAt: t.expose('created_at', { type: 'DateTime' }),
    disabledAt: t.expose('disabled_at', { type: 'DateTime', nullable: true }),
  }),
});

const CreatedAdminUser = builder.objectRef<AdminUserView & { login_token: string; login_expires_at: string }>('CreatedAdminUser').implement({
  fields: (t) => ({
    user: t.field({ type: AdminUser, resolve: (u) => u }),
    loginToken: t.exposeString('login_token', { description: 'The one-time sign-in token (24 hours), shown this once: give it to the new admin.' }),
    loginExpiresAt: t.expose('login_expires_at', { type: 'DateTime' }),
  }),
});

const CreateAdminUserInput = builder.inputType('CreateAdminUserInput', {
  fields: (t) => ({
    email: t.string({ required: true }),
    role: t.field({ type: AdminRole, required: true }),
    reason: t.string({ description: 'Why, for the audit log.' }),
  }),
});

builder.queryField('adminUsers', (t) =>
  t.field({ type: [AdminUser], description: 'Every admin user, oldest first.', resolve: async (_root, _args, ctx) => (await ctx.core.admin.users.list()).data }),
);

builder.mutationField('createAdminUser', (t) =>
  t.field({
    type: CreatedAdminUser,
    description: 'A new admin user and their one-time sign-in token.',
    args: { input: t.arg({ type: CreateAdminUserInput, required: true }) },
    resolve: (_root, { input }, ctx) => ctx.core.admin.users.create({ email: input.email, role: input.role, ...(input.reason ? { reason: input.reason } : {}) }),
  }),
);
