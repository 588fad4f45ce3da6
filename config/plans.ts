import fs from 'node:fs/promises';
import { parse } from 'yaml';
import { PlansError, validatePlans, type Plan } from '../core/payments/plans.ts';

/** Reads and checks the plans file (PLANS_FILE); a missing or bad file stops the start with one clear line, as the catalog's does. */
export async function loadPlansFile(file: string): Promise<Plan[]> {
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch (err) {
    throw new PlansError(`plans: cannot read ${file}: ${(err as Error).message}`);
  }
  let raw: unknown;
  try {
    raw = parse(text);
  } catch (err) {
    throw new PlansError(`plans: ${file} is not valid YAML: ${(err as Error).message.split('\n')[0]}`);
  }
  return validatePlans(raw);
}
