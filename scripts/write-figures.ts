// Writes docs/simulate/*.svg, the README's simulator pictures (npm run figures).
// A test fails when the committed files are stale.
import { mkdirSync, writeFileSync } from 'node:fs'
import { figures } from '../src/simulate/figures.ts'

const dir = new URL('../docs/simulate/', import.meta.url)
mkdirSync(dir, { recursive: true })
for (const [name, contents] of figures()) writeFileSync(new URL(name, dir), contents)
console.log(`wrote ${dir.pathname}`)
