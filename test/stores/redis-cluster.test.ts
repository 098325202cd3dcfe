import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Cluster } from 'ioredis'
import { createCluster } from 'redis'
import { MemoryStore, RedisStore, Limiter } from '../../src/index.ts'
import { handWritten, randomTraces, replay } from '../conformance/traces.ts'
import { startCluster, type RedisCluster } from '../support/cluster.ts'
import { commandCalls, functionLibraries, scanKeys } from '../support/redis.ts'

describe('RedisStore on a 3-master Redis Cluster (ioredis Cluster)', () => {
  let cluster: RedisCluster
  let client: Cluster
  let nodeRedis: ReturnType<typeof createCluster>
  before(async () => {
    cluster = await startCluster(3)
    client = new Cluster(cluster.nodes.map((node) => ({ host: '127.0.0.1', port: node.port })), { redisOptions: { maxRetriesPerRequest: 1 } })
    client.on('error', () => {})
    await client.ping()
    nodeRedis = createCluster({ rootNodes: cluster.nodes.map((node) => ({ url: `redis://127.0.0.1:${node.port}` })) })
    nodeRedis.on('error', () => {})
    await nodeRedis.connect()
  })
  after(async () => {
    await client.quit()
    await nodeRedis.close()
    await cluster.stop()
  })

  it('runs the conformance traces with decisions identical to the memory store', async () => {
    const store = new RedisStore({ client })
    for (const [n, trace] of [...handWritten, ...randomTraces(40, 11), ...randomTraces(10, 13, true)].entries()) {
      const expected = await replay(trace, new MemoryStore(), `cl${n}`)
      const actual = await replay(trace, store, `cl${n}`)
      assert.deepEqual(actual, expected, trace.name)
    }
  })

  it('node-redis createCluster: the same decisions, and reset reaches the key\'s slot', async () => {
    const store = new RedisStore({ client: nodeRedis })
    for (const [n, trace] of [...handWritten, ...randomTraces(20, 12)].entries()) {
      const expected = await replay(trace, new MemoryStore(), `nr${n}`)
      const actual = await replay(trace, store, `nr${n}`)
      assert.deepEqual(actual, expected, trace.name)
    }
    const limiter = new Limiter({ store, prefix: 'nr-reset', policies: [{ algorithm: 'fixed-window', limit: 1, windowMs: 60_000 }, { algorithm: 'sliding-log', limit: 1, windowMs: 60_000 }] })
    assert.deepEqual([(await limiter.limit('u')).allowed, (await limiter.limit('u')).allowed], [true, false])
    await limiter.reset('u')
    assert.equal((await limiter.limit('u')).allowed, true)
  })

  it('refuses calls that span keys, which one atomic script cannot on a cluster (ioredis and node-redis)', async () => {
    const policies = [{ algorithm: 'fixed-window' as const, limit: 5, windowMs: 60_000, name: 'user' }, { algorithm: 'fixed-window' as const, limit: 5, windowMs: 60_000, name: 'global' }]
    for (const store of [new RedisStore({ client }), new RedisStore({ client: nodeRedis })]) {
      assert.equal(store.spansKeys, false)
      const limiter = new Limiter({ store, prefix: 'span', policies })
      await assert.rejects(limiter.limit('a', { keys: { global: 'all' } }), /keys cannot be used on a Redis Cluster: one atomic script touches one hash slot/)
      await assert.rejects(limiter.peek('a', { keys: { global: 'all' } }), /keys cannot be used on a Redis Cluster/)
      assert.equal((await limiter.limit('a')).allowed, true)
    }
  })

  it('spreads keys over all three masters; one call\'s keys share a slot (no CROSSSLOT)', async () => {
    const limiter = new Limiter({
      store: new RedisStore({ client }),
      prefix: 'spread',
      // An hour's window: a minute's could end, and its keys expire, between the calls and the count.
      policies: [{ algorithm: 'fixed-window', limit: 5, windowMs: 3_600_000 }, { algorithm: 'sliding-log', limit: 5, windowMs: 60_000 }, { algorithm: 'token-bucket', capacity: 5, refillTokens: 1, refillIntervalMs: 1000 }],
    })
    for (let i = 0; i < 60; i++) assert.equal((await limiter.limit(`user-${i}`)).allowed, true)
    // Braces in a key cannot split a call's keys over slots: `}x` would make an empty hash tag, which Redis ignores.
    for (const key of ['}x', '{y}', 'a}b{c']) {
      const decision = await limiter.limit(key)
      assert.equal(decision.allowed, true, key)
      assert.equal(decision.degraded, false, key)
    }
    const perNode = await Promise.all(client.nodes('master').map(async (node) => (await scanKeys(node, 'spread:*')).length))
    assert.equal(perNode.reduce((a, b) => a + b, 0), 189)
    assert.ok(perNode.every((n) => n > 0), `keys per master: ${perNode.join(', ')}`)
  })

  it('functions: true loads the library on every master and decides by FCALL there, the same decisions (ioredis and node-redis)', async () => {
    const masters = client.nodes('master')
    await Promise.all(masters.map((node) => node.config('RESETSTAT')))
    for (const [label, redisClient] of [['io', client], ['nr', nodeRedis]] as const) {
      await Promise.all(masters.map((node) => node.call('FUNCTION', 'FLUSH')))
      const store = new RedisStore({ client: redisClient, functions: true })
      for (const [n, trace] of [...handWritten, ...randomTraces(10, 17)].entries()) {
        const expected = await replay(trace, new MemoryStore(), `fn-${label}${n}`)
        const actual = await replay(trace, store, `fn-${label}${n}`)
        assert.deepEqual(actual, expected, `${label}: ${trace.name}`)
      }
      // Keys enough to reach every master.
      const limiter = new Limiter({ store, prefix: `fn-spread-${label}`, policies: { algorithm: 'token-bucket', capacity: 1, refillTokens: 1, refillIntervalMs: 60_000 } })
      for (let i = 0; i < 30; i++) assert.deepEqual([(await limiter.limit(`user-${i}`)).allowed, (await limiter.limit(`user-${i}`)).allowed], [true, false], `${label}: user-${i}`)
    }
    for (const node of masters) {
      const libraries = await functionLibraries(node)
      assert.equal(libraries.filter((name) => name.startsWith('sluice_limit_')).length, 1, `${node.options.port}: ${libraries.join(', ')}`)
      assert.ok(((await commandCalls(node)).fcall ?? 0) > 0, `${node.options.port}: no FCALL`)
    }
  })
})
