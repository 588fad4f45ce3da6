import { router } from '../../trpc.ts';

/** The admin API's reads (docs/admin.md): lists with filters and look-ups by ids for dataloaders. */
export const adminReadRouter = router({});
