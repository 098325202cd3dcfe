import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { Limiter, RedisStore, type Policy, type Store } from '../../src/index.ts'

import { useRedisAndWorkers } from '../support/workers.ts'

const DAY = 86_400_000

/** A RedisStore whose calls are counted: what reaches Redis. */
function counted(store: RedisStore): { store: Store; calls: () => number } {
  let calls = 0
  return {
    store: { consume: (call) => { calls++; return store.consume(call) }, reset: (p, k, ps) => store.reset(p, k, ps), ping: () => store.ping() },
    calls: () => calls,
  }
}

describe('leases for hot keys (local + global hybrid)', () => {
  const env = useRedisAndWorkers(4)

  it('one process: exactly the capacity is admitted, with about one store call per lease', async () => {
    const { store, calls } = counted(new RedisStore({ client: env.redis.client() }))
    const limiter = new Limiter({ store, prefix: 'lease-one', policies: { algorithm: 'token-bucket', capacity: 500, refillTokens: 1, refillIntervalMs: DAY }, lease: { units: 20 }, clock: () => 1_000_000 })
    let admitted = 0
    for (let i = 0; i < 1000; i++) if ((await limiter.limit('hot')).allowed) admitted++
    assert.equal(admitted, 500, 'leases are charged in Redis first: never more than the bucket holds')
    // 500 / 21 leases, a few exact calls near empty, then refusals answered by the block cache.
    assert.ok(calls() <= 60, `${calls()} store calls for 1000 decisions`)
  })

  it('concurrent calls on one key share a lease instead of each taking one', async () => {
    const { store, calls } = counted(new RedisStore({ client: env.redis.client() }))
    const limiter = new Limiter({ store, prefix: 'lease-burst', policies: { algorithm: 'leaky-bucket', capacity: 1000, leakTokens: 1, leakIntervalMs: DAY }, lease: { units: 49 }, clock: () => 1_000_000 })
    const decisions = await Promise.all(Array.from({ length: 500 }, () => limiter.limit('hot')))
    assert.equal(decisions.filter((d) => d.allowed).length, 500)
    assert.ok(calls() <= 15, `${calls()} store calls for 500 concurrent decisions (10 leases of 50)`)
  })

  it('gives unspent units back once the lease is older than maxAgeMs', async () => {
    let now = 1_000_000
    const redisStore = new RedisStore({ client: env.redis.client() })
    const policies: Policy = { algorithm: 'token-bucket', capacity: 100, refillTokens: 1, refillIntervalMs: DAY, name: 'tb' }
    const leased = new Limiter({ store: redisStore, prefix: 'lease-return', policies, lease: { units: 30, maxAgeMs: 500 }, clock: () => now })
    const observer = new Limiter({ store: redisStore, prefix: 'lease-return', policies, clock: () => now, blockCache: false })
    assert.equal((await leased.limit('k')).remaining, 99, 'locally: 69 left in Redis + 30 in the lease')
    assert.equal((await observer.peek('k')).remaining, 69, 'Redis charged the call and the lease')
    for (let i = 0; i < 10; i++) await leased.limit('k')
    now += 600 // the lease is stale: its 20 units go back on the next call
    await leased.limit('k')
    // The give-back runs in the background: until it lands, Redis shows 69 - 1 - 30.
    for (let waited = 0; (await observer.peek('k')).remaining === 38 && waited < 2000; waited += 10) await new Promise((resolve) => setTimeout(resolve, 10))
    // 69 + 20 returned, then this call takes 1 + a new lease of 30.
    assert.equal((await observer.peek('k')).remaining, 58)
  })

  it('refuses configurations it cannot honour', () => {
    const store = new RedisStore({ client: env.redis.client() })
    assert.throws(() => new Limiter({ store, policies: { algorithm: 'fixed-window', limit: 10, windowMs: 1000 }, lease: { units: 5 } }), /lease needs token-bucket or police leaky-bucket policies/)
    assert.throws(() => new Limiter({ policies: { algorithm: 'token-bucket', capacity: 10, refillTokens: 1, refillIntervalMs: 1000 }, lease: { units: 5 } }), /in-process store needs none/)
    assert.throws(() => new Limiter({ store, policies: { algorithm: 'token-bucket', capacity: 10, refillTokens: 1, refillIntervalMs: 1000 }, lease: { units: 0 } }), /lease.units must be a positive integer/)
  })

  it('4 processes on one hot key: within the documented bound of the limit, Redis sees under 1/10 of the calls', async (t) => {
    const units = 20
    const capacity = 2000
    const results = await env.workers.runCounted({
      kind: 'burst', url: env.redis.url, prefix: 'lease-four', calls: 1000, startAt: Date.now() + 300, lease: { units }, sequential: true,
      policy: { algorithm: 'token-bucket', capacity, refillTokens: 1, refillIntervalMs: DAY },
    })
    const admitted = results.reduce((sum, r) => sum + r.allowed, 0)
    const storeCalls = results.reduce((sum, r) => sum + r.storeCalls, 0)
    // Leases are charged before they are spent: never above capacity; at most 4 x units stranded in unspent leases.
    assert.ok(admitted <= capacity && admitted >= capacity - 4 * units, `admitted ${admitted}`)
    assert.ok(storeCalls * 10 <= 4000, `${storeCalls} store calls for 4000 decisions`)
    t.diagnostic(`4 processes x 1000 calls, capacity ${capacity}, lease ${units}: admitted ${admitted}, store calls ${storeCalls} (${((storeCalls / 4000) * 100).toFixed(1)}%)`)
  })

  it('with refill running, leases spent late admit at most instances x units beyond the bucket', async (t) => {
    const units = 25
    const capacity = 100
    const perSecond = 200
    const durationMs = 2000
    const startAt = Date.now() + 300
    const results = await env.workers.runCounted({
      // About 4 x 1000 calls a second against a refill of 200: demand far above the rate.
      kind: 'burst', url: env.redis.url, prefix: 'lease-refill', calls: 5000, startAt, durationMs, paceMs: 1, lease: { units }, sequential: true,
      policy: { algorithm: 'token-bucket', capacity, refillTokens: perSecond, refillIntervalMs: 1000 },
    })
    const admitted = results.reduce((sum, r) => sum + r.allowed, 0)
    const storeCalls = results.reduce((sum, r) => sum + r.storeCalls, 0)
    // The bucket alone admits at most capacity + refill over the span (plus 100 ms for the processes' start and stop).
    const bucket = capacity + Math.ceil(((durationMs + 100) * perSecond) / 1000)
    const bound = bucket + 4 * units
    assert.ok(admitted <= bound, `admitted ${admitted} > bound ${bound}`)
    // And leases strand little: demand far above the rate still gets most of what the bucket gives.
    assert.ok(admitted >= 0.8 * (capacity + (durationMs * perSecond) / 1000), `admitted only ${admitted}`)
    t.diagnostic(`refill ${perSecond}/s, capacity ${capacity}, 4 processes x ${durationMs} ms, lease ${units}: admitted ${admitted} (bucket alone <= ${bucket}, documented bound ${bound}); store calls ${storeCalls}`)
  })
})

