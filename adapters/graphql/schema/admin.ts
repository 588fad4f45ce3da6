import { builder } from '../builder.ts';

export const AdminRole = builder.enumType('AdminRole', {
  values: { viewer: { description: 'Reads.' }, operator: { description: 'Reads and acts.' } } as const,
});

const Admin = builder.objectRef<{ id: string | null; role: 'viewer' | 'operator'; via: string }>('Admin').implement({
  description: 'The admin calling: an admin token or an admin user signed in to the admin pages.',
  fields: (t) => ({
    id: t.exposeID('id', { nullable: true, description: '`adm_…` (a token) or `adu_…` (a user).' }),
    role: t.field({ type: AdminRole, resolve: (a) => a.role }),
    via: t.exposeString('via', { description: '`token` or `session`.' }),
  }),
});

/** Who passed the door: core checked it there (admin.whoami), once for this request. */
builder.queryField('whoami', (t) => t.field({ type: Admin, resolve: (_root, _args, ctx) => ctx.admin }));
