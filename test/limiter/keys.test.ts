import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Limiter, MemoryStore, RedisStore, type Decision, type Policy, type Store } from '../../src/index.ts'
import { scanKeys, startRedis, type RedisServer } from '../support/redis.ts'

const user: Policy = { algorithm: 'sliding-log', limit: 3, windowMs: 10_000, name: 'user' }
const global: Policy = { algorithm: 'fixed-window', limit: 5, windowMs: 10_000, name: 'global' }
const SPAN = { keys: { global: 'all' } }

/** `user:verdict(binding policy remaining per policy)`, one per call, for traces read at a glance. */
const brief = (who: string, d: Decision) => `${who}:${d.allowed ? 'Y' : 'n'}(${d.policy} ${d.policies.map((p) => p.remaining).join('/')})`

describe('Limiter: calls that span keys (a policy under a key of its own)', () => {
  it('per user AND global, all-or-nothing: a refusal by either charges neither', () => {
    let now = 1_000_000
    const limiter = new Limiter({ policies: [user, global], clock: () => now })
    const seen = ['a', 'a', 'b', 'a', 'a', 'b', 'c', 'c'].map((who) => {
      now += 10
      return brief(who, limiter.limitSync(`user:${who}`, SPAN))
    })
    assert.deepEqual(seen, [
      'a:Y(user 2/4)', 'a:Y(user 1/3)', 'b:Y(user 2/2)', 'a:Y(user 0/1)',
      // a's own limit refuses: the global quota keeps its last unit, which b then takes.
      'a:n(user 0/1)', 'b:Y(global 1/0)',
      // The global quota is spent: c, never seen before, is refused, and its own log stays empty.
      'c:n(global 3/0)', 'c:n(global 3/0)',
    ])
    assert.deepEqual(limiter.peekSync('user:c').policies.map((p) => p.remaining), [3, 5], 'without keys, "global" is counted under user:c, untouched')
    assert.deepEqual(limiter.peekSync('all').policies.map((p) => p.remaining), [3, 0], 'the shared key holds the global count')
    // The next window: the global quota is back, and a's log has let its first call go.
    now = 1_010_015
    assert.deepEqual([limiter.limitSync('user:a', SPAN).allowed, limiter.limitSync('user:c', SPAN).allowed], [true, true])
  })

  it('peek and reset take the same keys; reset forgets each policy under the key it is counted by', async () => {
    const now = 0
    const limiter = new Limiter({ policies: [user, global], clock: () => now })
    for (const who of ['a', 'b', 'b']) limiter.limitSync(`user:${who}`, SPAN)
    assert.deepEqual(limiter.peekSync('user:b', SPAN).policies.map((p) => p.remaining), [1, 2])
    assert.deepEqual((await limiter.peek('user:b', SPAN)).policies.map((p) => p.remaining), [1, 2])
    await limiter.reset('user:b', SPAN)
    assert.deepEqual(limiter.peekSync('user:b', SPAN).policies.map((p) => p.remaining), [3, 5])
    assert.deepEqual(limiter.peekSync('user:a', SPAN).policies.map((p) => p.remaining), [2, 5], 'a\'s own log stays; the global count went with the reset')
    limiter.limitSync('user:a', SPAN)
    limiter.resetSync('user:a')
    assert.deepEqual(limiter.peekSync('user:a', SPAN).policies.map((p) => p.remaining), [3, 4], 'without keys, reset forgets the global count under user:a only (none)')
  })

  it('a reservation spanning keys is charged on every key at once', () => {
    const now = 0
    const bucket: Policy = { algorithm: 'token-bucket', capacity: 2, refillTokens: 1, refillIntervalMs: 1000, name: 'global' }
    const window: Policy = { algorithm: 'fixed-window', limit: 10, windowMs: 60_000, name: 'user' }
    const limiter = new Limiter({ policies: [window, bucket], clock: () => now })
    const waits = ['a', 'b', 'c', 'd'].map((who) => limiter.limitSync(who, { maxWaitMs: 1500, ...SPAN }))
    assert.deepEqual(waits.map((d) => [d.allowed, d.waitMs]), [[true, 0], [true, 0], [true, 1000], [false, 0]])
    assert.deepEqual(limiter.peekSync('d').policies.map((p) => p.remaining), [10, 2], 'd was refused: charged nowhere')
  })

  it('refund gives units back under the keys the call spanned: jobs in progress per tenant AND overall', async () => {
    const now = 0
    const running = new Limiter({
      clock: () => now,
      policies: [{ algorithm: 'sliding-log', limit: 2, windowMs: 600_000, name: 'tenant' }, { algorithm: 'sliding-log', limit: 3, windowMs: 600_000, name: 'overall' }],
    })
    const OVERALL = { keys: { overall: 'all' } }
    const started = ['t1', 't1', 't2', 't2'].map((tenant) => running.limitSync(tenant, OVERALL))
    assert.deepEqual(started.map((d) => [d.allowed, d.policy]), [[true, 'tenant'], [true, 'tenant'], [true, 'overall'], [false, 'overall']])
    // A refund under t1 alone frees t1's slot, not the overall one.
    running.refundSync('t1', 1)
    assert.equal(running.limitSync('t2', OVERALL).allowed, false)
    running.limitSync('t1')
    // Given the keys, both: t2's second job may start.
    const refunded = running.refundSync('t1', 1, { heldMs: 5_000, ...OVERALL })
    assert.deepEqual(refunded.policies.map((p) => p.remaining), [1, 1])
    assert.equal((await running.refund('t2', 1, { keys: { overall: 'all' } })).policies[1]?.remaining, 2)
    assert.deepEqual(running.limitSync('t2', OVERALL).allowed, true)
    // Held past the window, a unit has left the logs already: nothing is given back, anywhere.
    assert.deepEqual(running.refundSync('t2', 1, { heldMs: 600_000, ...OVERALL }).policies.map((p) => p.remaining), [1, 1])
    assert.throws(() => running.refundSync('t2', 1, { heldMs: 5 } as never, 5), /heldMs goes in the options object when one is given/)
    assert.throws(() => running.refundSync('t2', 1, { held: 5 } as never), /held is not a refund option/)
    assert.throws(() => running.refundSync('t2', 1, { keys: { tenants: 'x' } }), /keys\["tenants"\] names no policy/)
  })

  it('refuses bad keys by name', () => {
    const limiter = new Limiter({ policies: [user, global] })
    const cases: Array<[unknown, RegExp]> = [
      ['all', /keys must be an object of policy names to keys/],
      [['all'], /keys must be an object of policy names to keys/],
      [{ globl: 'all' }, /keys\["globl"\] names no policy of this limiter \(its policies: "user", "global"\)/],
      [{ global: '' }, /keys\["global"\] must be a non-empty string/],
      [{ global: 42 }, /keys\["global"\] must be a non-empty string \(got 42\)/],
    ]
    for (const [keys, message] of cases) {
      assert.throws(() => limiter.limitSync('k', { keys } as never), message)
      assert.throws(() => limiter.peekSync('k', { keys } as never), message)
    }
    assert.throws(() => limiter.peekSync('k', { cost: 2 } as never), /cost is not a key option/)
  })

  it('refuses keys where they cannot be decided together: a store that does not say it can', async () => {
    const memory = new MemoryStore()
    // A wrapper (say, one that counts calls) that does not pass spansKeys on.
    const wrapped: Store = { consume: (call) => memory.consume(call), reset: (prefix, key, policies) => memory.reset(prefix, key, policies) }
    const limiter = new Limiter({ policies: [user, global], store: wrapped })
    await assert.rejects(limiter.limit('k', SPAN), /keys cannot be used with this store: it does not say it decides a call's keys together, atomically \(a store that does declares spansKeys: true\)/)
    assert.equal((await limiter.limit('k', { keys: { global: 'k' } })).allowed, true, 'keys that name the call\'s own key change nothing')
  })

  it('a store that spans only some keys (spanOf): those of one span are decided together, the rest refused naming them', async () => {
    const memory = new MemoryStore()
    // A store sharded by tenant, say: one call can span the keys of one tenant.
    const byTenant: Store = { consume: (call) => memory.consume(call), reset: (prefix, key, policies) => memory.reset(prefix, key, policies), spanOf: (key) => key.split('/')[0] as string }
    const limiter = new Limiter({ policies: [user, global], store: byTenant })
    assert.equal((await limiter.limit('t1/u1', { keys: { global: 't1/all' } })).allowed, true)
    assert.deepEqual((await limiter.peek('t1/all')).policies.map((p) => p.remaining), [3, 4], 'the tenant-wide key counted the call')
    await assert.rejects(limiter.limit('t1/u1', { keys: { global: 't2/all' } }), /^ArgumentError: keys name keys this store cannot decide together, its spanOf differing between them \(user: "t1\/u1", global: "t2\/all"\) \(got/)
    assert.deepEqual((await limiter.peek('t1/u1', { keys: { global: 't1/all' } })).policies.map((p) => p.remaining), [2, 4], 'the refused call charged nothing')
  })
})

describe('Limiter: calls that span keys, on Redis', () => {
  let redis: RedisServer
  before(async () => { redis = await startRedis() })
  after(async () => { await redis.stop() })

  it('each policy\'s state is under its own key, and the decisions are the memory store\'s', async () => {
    let now = 1_700_000_000_000
    const onRedis = new Limiter({ policies: [user, global], store: new RedisStore({ client: redis.client() }), prefix: 'span', clock: () => now })
    const inMemory = new Limiter({ policies: [user, global], clock: () => now })
    for (const who of ['a', 'a', 'b', 'a', 'a', 'b', 'c']) {
      now += 10
      assert.deepEqual(await onRedis.limit(`user:${who}`, SPAN), inMemory.limitSync(`user:${who}`, SPAN), who)
    }
    const keys = (await scanKeys(redis.client(), 'span:*')).sort()
    assert.deepEqual(keys, ['span:{all}:global', 'span:{user:a}:user', 'span:{user:b}:user'], 'c was refused: no state written for it')
  })

  it('refuses keys with shards or a lease (each holds units of one key); the block cache answers a refusal again for the same keys only', async () => {
    const store = new RedisStore({ client: redis.client() })
    const bucket: Policy = { algorithm: 'token-bucket', capacity: 4, refillTokens: 1, refillIntervalMs: 60_000, name: 'global' }
    const sharded = new Limiter({ policies: [bucket], store, shards: 2 })
    await assert.rejects(sharded.limit('k', SPAN), /keys cannot be used with shards/)
    const leased = new Limiter({ policies: [bucket], store, lease: { units: 2 } })
    await assert.rejects(leased.limit('k', SPAN), /keys cannot be used with a lease/)
    let hits = 0
    const limiter = new Limiter({ policies: [{ ...bucket, name: 'own', capacity: 5 }, { ...bucket, capacity: 1 }], store, prefix: 'span-cache', observer: { blockCacheHit: () => { hits++ } } })
    // a spends the global quota of 1; b is refused by it, then again from the cache.
    assert.equal((await limiter.limit('a', SPAN)).allowed, true)
    const refusals = [await limiter.limit('b', SPAN), await limiter.limit('b', SPAN), await limiter.limit('b', SPAN)]
    assert.deepEqual(refusals.map((d) => [d.allowed, d.policy]), [[false, 'global'], [false, 'global'], [false, 'global']])
    assert.equal(hits, 2)
    // Not for other keys: b alone (the global policy under b), and c under "all", ask the store.
    assert.equal((await limiter.limit('b')).allowed, true)
    assert.equal((await limiter.limit('c', SPAN)).allowed, false)
    assert.equal(hits, 2)
    // A reset with the same keys forgets the cached refusal: the global quota is back for b.
    await limiter.reset('b', SPAN)
    assert.equal((await limiter.limit('b', SPAN)).allowed, true)
    assert.equal(hits, 2)
  })
})
