import fs from 'node:fs/promises';
import { parse } from 'yaml';
import { CatalogError, validateCatalog, type ValidatedCatalog } from '../core/catalog/catalog.ts';

/** Reads and checks the catalog file (CATALOG_FILE); a bad file stops the start with one clear line. */
export async function loadCatalogFile(file: string, apiPricePercent: bigint): Promise<ValidatedCatalog> {
  return validateCatalog(await readCatalogYaml(file), apiPricePercent);
}

/** The catalog file parsed from YAML, not yet checked. */
export async function readCatalogYaml(file: string): Promise<unknown> {
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch (err) {
    throw new CatalogError(`catalog: cannot read ${file}: ${(err as Error).message}`);
  }
  let raw: unknown;
  try {
    raw = parse(text);
  } catch (err) {
    throw new CatalogError(`catalog: ${file} is not valid YAML: ${(err as Error).message.split('\n')[0]}`);
  }
  return raw ?? {};
}
