import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Limiter, RedisStore } from '../../src/index.ts'
import { startRedis, type RedisServer } from '../support/redis.ts'

describe('blocked-key cache', () => {
  let redis: RedisServer
  before(async () => { redis = await startRedis() })
  after(async () => { await redis.stop() })

  async function scriptCalls(): Promise<number> {
    const stats = await redis.client().info('commandstats')
    return [...stats.matchAll(/cmdstat_(?:evalsha|eval):calls=(\d+)/g)].reduce((sum, m) => sum + Number(m[1]), 0)
  }

  it('a refused key costs no round trip until its retry time, and is allowed right after', async () => {
    let now = 1_000_000
    const limiter = new Limiter({
      store: new RedisStore({ client: redis.client() }),
      prefix: 'blocked',
      policies: { algorithm: 'fixed-window', limit: 3, windowMs: 1000 },
      clock: () => now,
    })
    for (let i = 0; i < 3; i++) assert.equal((await limiter.limit('k')).allowed, true)
    const refused = await limiter.limit('k')
    assert.deepEqual([refused.allowed, refused.retryAfterMs], [false, 1000])
    const before = await scriptCalls()
    for (let i = 0; i < 100; i++) {
      now = 1_000_000 + i * 9
      const again = await limiter.limit('k')
      assert.deepEqual([again.allowed, again.retryAfterMs, again.degraded], [false, 1000 - i * 9, false])
    }
    assert.equal(await scriptCalls(), before, '100 refusals, no script call')
    // Another key and another cost still go to Redis.
    await limiter.limit('other')
    await limiter.limit('k', { cost: 2 })
    assert.equal(await scriptCalls(), before + 2)
    now = 1_001_000 // the retry time
    assert.equal((await limiter.limit('k')).allowed, true)
    assert.equal(await scriptCalls(), before + 3)
  })

  it('reset clears the cached refusal; blockCache: false asks Redis every time', async () => {
    const limiter = new Limiter({ store: new RedisStore({ client: redis.client() }), prefix: 'blocked-reset', policies: { algorithm: 'token-bucket', capacity: 1, refillTokens: 1, refillIntervalMs: 60_000 } })
    await limiter.limit('k')
    assert.equal((await limiter.limit('k')).allowed, false)
    await limiter.reset('k')
    assert.equal((await limiter.limit('k')).allowed, true)

    const uncached = new Limiter({ store: new RedisStore({ client: redis.client() }), prefix: 'blocked-off', policies: { algorithm: 'token-bucket', capacity: 1, refillTokens: 1, refillIntervalMs: 60_000 }, blockCache: false })
    await uncached.limit('k')
    const before = await scriptCalls()
    for (let i = 0; i < 5; i++) await uncached.limit('k')
    assert.equal(await scriptCalls(), before + 5)
  })
})
