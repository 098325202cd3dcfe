/**
 * Untrusted input through the public API: every call returns a decision or
 * throws a typed SluiceError; nothing crashes, and no other key's state moves.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import fc from 'fast-check'
import { Limiter, MemoryStore, RedisStore, SluiceError, type Store } from '../../src/index.ts'
import { fcOptions } from '../helpers.ts'
import { startRedis, type RedisServer } from '../support/redis.ts'

const hostileKey = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ unit: 'grapheme', maxLength: 40 }),
  fc.constantFrom('', '{', '}', '{}', '}{', 'a}b{c', '{control}', 'control}', '\u0000', '\uD800', '\uFFFD', '\uDC00x', 'x'.repeat(1 << 20)),
  fc.anything(),
)
const hostileCost = fc.oneof(
  fc.constantFrom(0, -1, 1.5, Number.NaN, Infinity, -Infinity, 2 ** 53, 2 ** 53 - 1, '1', null, undefined, {}, [], 1, 2, 5),
  fc.integer({ min: -10, max: 10 }),
  fc.double(),
)
const hostileWait = fc.oneof(fc.constantFrom(undefined, 0, -5, 1e12, Number.NaN, '10', 10), fc.integer({ min: 0, max: 10_000 }))

function isDecision(value: unknown): boolean {
  const d = value as { allowed?: unknown; remaining?: unknown; retryAfterMs?: unknown }
  return typeof d?.allowed === 'boolean' && Number.isSafeInteger(d.remaining) && (d.remaining as number) >= 0 && Number.isSafeInteger(d.retryAfterMs)
}

async function fuzz(store: Store, prefix: string): Promise<void> {
  const limiter = new Limiter({
    store,
    prefix,
    policies: [{ algorithm: 'fixed-window', limit: 5, windowMs: 3_600_000, name: 'fw' }, { algorithm: 'token-bucket', capacity: 5, refillTokens: 1, refillIntervalMs: 3_600_000, name: 'tb' }],
    blockCache: false,
  })
  await limiter.limit('control', { cost: 2 })
  await fc.assert(
    fc.asyncProperty(hostileKey, hostileCost, hostileWait, fc.constantFrom('limit', 'peek', 'reset'), async (key, cost, maxWaitMs, op) => {
      try {
        const result = op === 'limit'
          ? await limiter.limit(key as string, { cost: cost as number, maxWaitMs: maxWaitMs as number })
          : op === 'peek' ? await limiter.peek(key as string) : await limiter.reset(key as string)
        if (op !== 'reset') assert.ok(isDecision(result), `not a decision: ${JSON.stringify(result)}`)
      } catch (error) {
        assert.ok(error instanceof SluiceError, `untyped error: ${String(error)}`)
      }
    }),
    fcOptions(300),
  )
  const control = await limiter.peek('control')
  assert.deepEqual(control.policies.map((p) => p.remaining), [3, 3], 'the control key was not touched')
  // Distinct keys that one encoding would merge stay distinct.
  await limiter.limit('\uD800', { cost: 5 })
  assert.equal((await limiter.peek('\uFFFD')).remaining, 5)
}

describe('hostile input', () => {
  let redis: RedisServer
  before(async () => { redis = await startRedis() })
  after(async () => { await redis.stop() })

  it('keys, costs and waits: a decision or a typed error, on the memory store', async () => {
    await fuzz(new MemoryStore(), 'hostile')
  })

  it('keys, costs and waits: a decision or a typed error, on Redis (hash tags intact)', async () => {
    await fuzz(new RedisStore({ client: redis.client() }), 'hostile')
  })

  it('policies: a limiter or a PolicyError / ArgumentError, never anything else', () => {
    const field = fc.oneof(fc.anything(), fc.constantFrom(0, -1, 1.5, Number.NaN, Infinity, 2 ** 60, 2 ** 53, '10', 10, 1000))
    fc.assert(
      fc.property(
        fc.record({
          algorithm: fc.oneof(fc.constantFrom('fixed-window', 'sliding-log', 'sliding-window', 'token-bucket', 'leaky-bucket', 'gcra', ''), fc.anything()),
          limit: field, windowMs: field, capacity: field, refillTokens: field, refillIntervalMs: field, leakTokens: field, leakIntervalMs: field,
          refill: fc.oneof(fc.constantFrom('greedy', 'interval', 'x'), fc.anything()),
          mode: fc.oneof(fc.constantFrom('police', 'shape', 'x'), fc.anything()),
          name: fc.oneof(fc.string(), fc.anything()),
        }, { requiredKeys: ['algorithm'] }),
        (policy) => {
          try {
            const limiter = new Limiter({ policies: policy as never })
            assert.ok(isDecision(limiter.limitSync('k')))
          } catch (error) {
            assert.ok(error instanceof SluiceError, `untyped error: ${String(error)}`)
          }
        },
      ),
      fcOptions(2000),
    )
  })
})
