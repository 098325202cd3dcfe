#!/usr/bin/env node
// tsc compiles TypeScript only: copy the Lua scripts next to the compiled store.
import { cpSync } from 'node:fs'

const root = new URL('..', import.meta.url)
cpSync(new URL('src/stores/redis/lua', root), new URL('dist/stores/redis/lua', root), { recursive: true })
