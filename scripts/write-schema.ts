// Writes schema/sluice.schema.json from the gateway's config schema (npm run schema).
// A test fails when the committed file is stale.
import { writeFileSync } from 'node:fs'
import { configJsonSchema } from '../src/gateway/config-schema.ts'

const file = new URL('../schema/sluice.schema.json', import.meta.url)
writeFileSync(file, `${JSON.stringify(configJsonSchema(), null, 2)}\n`)
console.log(`wrote ${file.pathname}`)
