/**
 * Options as a hurried user writes them: any value, or a misspelt name, put
 * anywhere in a valid set. Each entry point takes them or refuses them with a
 * SluiceError that names what was wrong, and so does its first call: never a
 * TypeError from deep inside (an array given for options once passed its
 * prototype's keys() off as the list of API keys).
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import fc from 'fast-check'
import { Registry } from 'prom-client'
import { apiKey, clientIpKey, createRateLimitHandler, jwtClaim, Limiter, MemoryStore, rateLimited, SluiceError } from '../../src/index.ts'
import { createClient } from '../../src/client/index.ts'
import { rateLimitMetrics } from '../../src/metrics/index.ts'
import { fcOptions } from '../helpers.ts'

type Options = Record<PropertyKey, unknown>

/** Every place in `value` a value can be put: its own path first. */
function placesIn(value: unknown, at: PropertyKey[] = [], out: PropertyKey[][] = []): PropertyKey[][] {
  out.push(at)
  if (Array.isArray(value)) value.forEach((inner, i) => placesIn(inner, [...at, i], out))
  else if (typeof value === 'object' && value !== null && Object.getPrototypeOf(value) === Object.prototype) {
    for (const [key, inner] of Object.entries(value)) placesIn(inner, [...at, key], out)
  }
  return out
}

/** A deep copy of arrays and plain objects; functions are shared. */
function copied(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(copied)
  if (typeof value === 'object' && value !== null && Object.getPrototypeOf(value) === Object.prototype) {
    return Object.fromEntries(Object.entries(value).map(([key, inner]) => [key, copied(inner)]))
  }
  return value
}

/** `options` with each edit made: a value replaced, or (with a name) a field added. */
function edited(options: Options, edits: ReadonlyArray<[number, unknown, string | undefined]>): Options {
  const copy = copied(options) as Options
  for (const [pick, value, name] of edits) {
    const places = placesIn(copy).filter((path) => path.length > 0)
    const path = places[pick % places.length] as PropertyKey[]
    const parent = path.slice(0, -1).reduce<Options>((node, key) => node[key] as Options, copy)
    // A copy: fast-check hands the same [] or {} to many cases, and a later edit must not write into it.
    if (name !== undefined && !Array.isArray(parent)) parent[name] = copied(value)
    else parent[path[path.length - 1] as PropertyKey] = copied(value)
  }
  return copy
}

const odd = fc.oneof(
  fc.constantFrom(undefined, null, -1, 0, 0.5, 2 ** 53, Number.NaN, Number.POSITIVE_INFINITY, '', 'x', [], {}, [null], true, () => 1, 'queue', 'open', 'draft-10', '/**'),
  fc.string({ maxLength: 6 }),
  fc.integer(),
)
const name = fc.option(fc.constantFrom('extra', 'limt', 'key', 'keys', 'prefix', 'cost', 'action', 'maxWaitMs', 'retries', 'claim', 'maxKeys'), { nil: undefined })
const edits = fc.array(fc.tuple(fc.nat(), odd, name), { minLength: 1, maxLength: 3 })
const request = { method: 'GET', path: '/api/x', host: 'api.test', header: (field: string) => (field === 'authorization' ? 'Bearer a.b.c' : 'k-1'), remoteAddress: '10.0.0.2' }

/** Builds and calls once; anything thrown or rejected must be a SluiceError. */
async function takenOrRefused(what: string, options: Options, use: (options: Options) => unknown): Promise<void> {
  try {
    await use(options)
  } catch (error) {
    assert.ok(error instanceof SluiceError, `${what}: ${String(error)} for ${JSON.stringify(options, (_key, value: unknown) => (typeof value === 'function' ? 'fn' : typeof value === 'number' && !Number.isFinite(value) ? String(value) : value))}`)
  }
}

const entryPoints: Array<[string, Options, (options: Options) => unknown]> = [
  ['Limiter', { policies: [{ algorithm: 'token-bucket', capacity: 5, refillTokens: 1, refillIntervalMs: 1000, name: 'tb' }, { algorithm: 'fixed-window', limit: 3, windowMs: 1000 }], prefix: 'p', storeTimeoutMs: 100, onStoreFailure: 'open', blockCache: true },
    async (options) => { const limiter = new Limiter(options as never); await limiter.limit('k', { cost: 2 }); return limiter.limitSync('k') }],
  ['MemoryStore', { maxKeys: 10 }, (options) => new MemoryStore(options as never)],
  ['createRateLimitHandler', { rules: [{ name: 'api', match: { path: '/api/**', method: ['GET'] }, policies: { algorithm: 'sliding-window', limit: 5, windowMs: 1000 }, cost: 1 }, { name: 'q', action: 'queue', maxWaitMs: 100, policies: { algorithm: 'leaky-bucket', capacity: 2, leakTokens: 1, leakIntervalMs: 10, mode: 'shape' } }], headers: { standard: 'draft-10' }, clientIp: { trustProxy: ['10.0.0.0/8'] }, emptyKey: 'anonymous', skip: ['/health'], onWarning: () => {} },
    (options) => createRateLimitHandler(options as never)(request)],
  ['rateLimited', { limit: 2, windowMs: 1000, keyPrefix: 'k', action: 'reject' }, async (options) => { const call = rateLimited((x: number) => x, options as never); await call(1); await call(2) }],
  ['createClient', { maxWaitMs: 50, retry: { retries: 1, baseDelayMs: 1, maxDelayMs: 5, statuses: [429] }, pace: { algorithm: 'token-bucket', capacity: 2, refillTokens: 1, refillIntervalMs: 10 }, concurrency: 2, maxQueue: 5, prefix: 'c', probeMs: 10, fetch: async () => new Response('ok') },
    // Without a fetch the client would use the network's, whose failure is its own: one that answers stands in.
    async (options) => (await createClient({ ...options, fetch: options.fetch ?? (async () => new Response('ok')) } as never).fetch('http://api.test/')).text()],
  ['apiKey', { header: 'x-api-key', options: { keys: ['k-1'], maxLength: 10, prefix: 'apikey' } }, (options) => apiKey(options.header as never, options.options as never)(request)],
  ['jwtClaim', { secret: 'x'.repeat(32), algorithms: ['HS256'], claim: 'sub', issuer: 'i', audience: 'a' }, (options) => jwtClaim(options as never)(request)],
  ['clientIpKey', { trustProxy: ['10.0.0.0/8'], ipv6Prefix: 56, header: 'x-forwarded-for' }, (options) => clientIpKey(options as never)(request)],
  ['rateLimitMetrics', { prefix: 'sluice_', durationByRule: true }, (options) => rateLimitMetrics({ registry: new Registry(), ...options } as never)],
]

describe('bad options', () => {
  for (const [what, options, use] of entryPoints) {
    it(`${what}: any value or name put anywhere in its options is taken, or refused with a SluiceError, at construction or on the first call`, async () => {
      await fc.assert(fc.asyncProperty(edits, (changes) => takenOrRefused(what, edited(options, changes), use)), fcOptions(300))
    })
  }
})
