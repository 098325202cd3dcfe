/**
 * The Lua script, read from the .lua file shipped beside this module, and its
 * SHA-1 computed here (never hard-coded, so it cannot go stale); and the same
 * code as a Redis function library (Redis 7+), for RedisStore's `functions` option.
 */
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'

export const LIMIT_SCRIPT = readFileSync(new URL('./lua/limit.lua', import.meta.url), 'utf8')
export const LIMIT_SHA = createHash('sha1').update(LIMIT_SCRIPT).digest('hex')

const PER_CALL = /^-+ per call$/m
const [definitions, perCall, ...rest] = LIMIT_SCRIPT.split(PER_CALL)
if (perCall === undefined || rest.length > 0) throw new Error('lua/limit.lua must have exactly one "per call" section line')

/**
 * The function's name, which is also its library's: named by the script's hash,
 * so each sluice version loads a library of its own, and instances of two
 * versions (a rolling deploy) never replace each other's.
 */
export const LIMIT_FUNCTION = `sluice_limit_${LIMIT_SHA.slice(0, 16)}`

/**
 * The library: the script's definitions run once, at its first call (Redis 7.0
 * gives a library's top level no `math` or `string`), and each call runs only
 * the per-call part, with KEYS and ARGV handed in. EVALSHA runs the whole
 * script every call, and its definitions (those of the algorithms the call
 * uses) cost Redis about 3.5 µs a call (`redis-benchmark` on one fixed-window
 * decision, INFO commandstats: 10.8 µs by EVALSHA, 7.1 by FCALL).
 */
export const LIMIT_LIBRARY = `#!lua name=${LIMIT_FUNCTION}
local function setup()
local KEYS, ARGV
${definitions}
return function(keys, args)
KEYS, ARGV = keys, args
${perCall}
end
end

local limit = nil
redis.register_function('${LIMIT_FUNCTION}', function(keys, args)
  if limit == nil then limit = setup() end
  return limit(keys, args)
end)
`
