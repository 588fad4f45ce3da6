import { writeFileSync } from 'node:fs';
import { printSdl, SDL_FILE } from './schema.ts';

/** `npm run graphql:sdl`: writes the admin API's schema to docs/admin.graphql (a test fails while it is stale). */
writeFileSync(SDL_FILE, printSdl());
console.log(`wrote ${SDL_FILE.pathname}`);
