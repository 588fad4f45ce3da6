import { z } from 'zod';

/**
 * Shared pieces of the output schemas. Each area describes its view once, as a zod schema
 * beside the function that shapes it (`generationSchema`, `balanceSchema`, …); the OpenAPI
 * document and the MCP tools' output schemas are made from them.
 */
export const coinsSchema = z.number().describe('coins, at most 6 decimals (1 USD = 1000 coins)');
export const isoTimeSchema = z.string().describe('ISO 8601 time, UTC');
