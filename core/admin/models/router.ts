import { router } from '../../trpc.ts';

/** Operators' changes to the model catalog: create, update prices from a date, enable, disable (audited). */
export const modelAdminRouter = router({});
