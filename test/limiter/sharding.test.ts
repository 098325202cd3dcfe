import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { Limiter, RedisStore, type Policy } from '../../src/index.ts'
import { scanKeys } from '../support/redis.ts'
import { useRedisAndWorkers } from '../support/workers.ts'

const DAY = 86_400_000

describe('hot-key sharding', () => {
  const env = useRedisAndWorkers(4)


  for (const [name, policy] of [
    ['fixed window', { algorithm: 'fixed-window', limit: 800, windowMs: DAY }],
    ['token bucket', { algorithm: 'token-bucket', capacity: 800, refillTokens: 1, refillIntervalMs: DAY }],
  ] as Array<[string, Policy]>) {
    it(`4 processes x 250 calls on one key over 8 shards never admit more than the limit (${name})`, async (t) => {
      const prefix = `shard-${name.replace(' ', '-')}`
      const counts = await env.workers.run({ kind: 'burst', url: env.redis.url, prefix, policy, calls: 250, startAt: Date.now() + 300, shards: 8 })
      const admitted = counts.reduce((a, b) => a + b, 0)
      assert.ok(admitted <= 800, `admitted ${admitted}`)
      // Each shard holds 100; the second try keeps refusals before every shard is full rare.
      assert.ok(admitted >= 760, `admitted only ${admitted} of 800`)
      const keys = await scanKeys(env.redis.client(), `${prefix}:*`)
      assert.equal(keys.length, 8, 'one store key per shard')
      t.diagnostic(`${name}: admitted ${admitted} of 800 (${((admitted / 800) * 100).toFixed(1)}%) over 8 shards; 1000 calls`)
    })
  }

  it('demand equal to the limit: uneven spread over 8 shards refuses a few calls early, never admits more', async (t) => {
    const limiter = new Limiter({ store: new RedisStore({ client: env.redis.client() }), prefix: 'shard-even', policies: { algorithm: 'fixed-window', limit: 800, windowMs: DAY }, shards: 8 })
    const admitted = (await Promise.all(Array.from({ length: 800 }, () => limiter.limit('hot')))).filter((d) => d.allowed).length
    // Seen 776-787 of 800 in five runs; the bound leaves room for chance.
    assert.ok(admitted <= 800 && admitted >= 750, `admitted ${admitted}`)
    t.diagnostic(`800 calls for a limit of 800 over 8 shards: admitted ${admitted}`)
  })

  it('reports the whole limit, resets every shard, and refuses sharding an in-process store', async () => {
    const limiter = new Limiter({ store: new RedisStore({ client: env.redis.client() }), prefix: 'shard-api', policies: { algorithm: 'fixed-window', limit: 10, windowMs: DAY, name: 'fw' }, shards: 2 })
    const first = await limiter.limit('k')
    assert.deepEqual([first.allowed, first.limit, first.remaining], [true, 10, 8], 'a shard of 5 with 4 left, reported as 8 of 10')
    let admitted = 1
    for (let i = 0; i < 20; i++) if ((await limiter.limit('k')).allowed) admitted++
    assert.equal(admitted, 10)
    await limiter.reset('k')
    assert.equal((await limiter.limit('k')).allowed, true)
    assert.deepEqual(await scanKeys(env.redis.client(), 'shard-api:{k#*'), (await scanKeys(env.redis.client(), 'shard-api:*')))
    assert.throws(() => new Limiter({ policies: { algorithm: 'fixed-window', limit: 10, windowMs: 1000 }, shards: 4 }), /in-process store needs none/)
    assert.throws(() => new Limiter({ policies: { algorithm: 'fixed-window', limit: 10, windowMs: 1000 }, shards: 0 }), /shards must be an integer/)
  })

  it('refuses more shards than units, and a cost that no shard can hold, instead of admitting over the limit or refusing forever', async () => {
    const store = new RedisStore({ client: env.redis.client() })
    // Each shard holds at least one unit: 4 shards of a limit of 2 would admit 4.
    assert.throws(
      () => new Limiter({ store, prefix: 'shard-few', policies: [{ algorithm: 'fixed-window', limit: 10, windowMs: DAY }, { algorithm: 'token-bucket', name: 'tb', capacity: 3, refillTokens: 3, refillIntervalMs: DAY }], shards: 4 }),
      /shards exceeds the limit 3 of policy "tb".*\(got 4\)/,
    )
    const limiter = new Limiter({ store, prefix: 'shard-cost', policies: { algorithm: 'fixed-window', name: 'fw', limit: 10, windowMs: DAY }, shards: 4 })
    // A shard holds 2: a cost of 3 fits the limit of 10 but would be refused on every shard, with a retry time that means nothing.
    await assert.rejects(limiter.limit('k', { cost: 3 }), /cost exceeds the 2 units each of the 4 shards of policy "fw" holds \(limit 10\).*\(got 3\)/)
    const allowed = await limiter.limit('k', { cost: 2 })
    assert.deepEqual([allowed.allowed, allowed.limit], [true, 10])
  })
})
