import { router } from '../../trpc.ts';

/** Usage analytics for operators (docs/admin.md, "Analytics"). */
export const analyticsRouter = router({});
