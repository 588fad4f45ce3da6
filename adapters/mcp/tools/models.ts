import { z } from 'zod';
import { modelViewSchema } from '../../../core/catalog/views.ts';
import { MODEL_PICKER_URI } from '../apps/index.ts';
import { defineTool } from '../tool.ts';

const TYPES = ['text', 'image', 'video', 'audio', '3d'] as const;

export const listModels = defineTool({
  name: 'list_models',
  title: 'List models',
  description:
    'Lists the models this service sells, with their prices in coins (1 USD = 1000 coins), settings and file inputs. ' +
    'Text models answer `chat`; image, video, audio and 3D models run as jobs with `generate`. Free to call.',
  input: z.object({ type: z.enum(TYPES).optional().describe('Only models of this kind, e.g. "image". Omit for all.') }),
  output: z.object({ object: z.literal('list'), data: z.array(modelViewSchema) }),
  annotations: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
  ui: MODEL_PICKER_URI,
  async run(args, { core }) {
    const list = await core.models.list(args.type ? { type: args.type } : {});
    const lines = list.data.map((m) => `- ${m.id} (${m.type}): ${m.name}${m.paid_only ? ', paid accounts only' : ''}`);
    return { structured: list, text: `${list.data.length} models:\n${lines.join('\n')}\nCall get_model for one model's prices, settings and an example.` };
  },
});

export const getModel = defineTool({
  name: 'get_model',
  title: 'Get a model',
  description: "One model: its prices in coins, its settings (options, defaults, bounds), its file inputs and a ready example request. Free to call.",
  input: z.object({ id: z.string().min(1).max(200).describe('A model id from list_models, e.g. "mas/image-demo". Ids may contain "/".') }),
  output: modelViewSchema,
  annotations: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
  async run(args, { core }) {
    const model = await core.models.get({ id: args.id });
    return { structured: model, text: `${model.id} (${model.type}): ${model.description}\nPricing: ${JSON.stringify(model.pricing)}` };
  },
});
