import { EntitySchema } from '@mikro-orm/core';

export class Account {
  declare id: string;
  declare email: string;
  declare paid: boolean;
  declare createdAt: Date;
}

export const AccountSchema = new EntitySchema<Account>({
  class: Account,
  tableName: 'accounts',
  properties: {
    id: { type: 'string', primary: true },
    email: { type: 'string' },
    paid: { type: 'boolean', default: false },
    createdAt: { type: 'Date', defaultRaw: 'now()', onCreate: () => new Date() },
  },
});
