/**
 * The Lua script, read from the .lua file shipped beside this module, and its
 * SHA-1 computed here (never hard-coded, so it cannot go stale).
 */
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'

export const LIMIT_SCRIPT = readFileSync(new URL('./lua/limit.lua', import.meta.url), 'utf8')
export const LIMIT_SHA = createHash('sha1').update(LIMIT_SCRIPT).digest('hex')
