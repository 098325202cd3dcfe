import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { AddressInfo } from 'node:net'
import { Cluster } from 'ioredis'
import { createCluster } from 'redis'
import { MemoryStore, RedisStore, Limiter, redisKey } from '../../src/index.ts'
import { handWritten, randomTraces, replay, spanningKeys, withHashTag } from '../conformance/traces.ts'
import { withRateLimit } from '../../src/http/adapters/node.ts'
import { moveSlot, startCluster, type RedisCluster } from '../support/cluster.ts'
import { decideThroughFailover, decidesExactly } from '../support/failover.ts'
import { runCli } from '../support/gateway.ts'
import { commandCalls, functionLibraries, scanKeys, type RedisServer } from '../support/redis.ts'

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

  it('spans keys that share a hash tag, all-or-nothing in one slot, with decisions identical to the memory store (ioredis and node-redis)', async () => {
    for (const [label, store] of [['ioredis', new RedisStore({ client })], ['node-redis', new RedisStore({ client: nodeRedis })]] as const) {
      assert.equal(store.spansKeys, false)
      const traces = [...spanningKeys, ...randomTraces(10, 29, false, true), ...randomTraces(5, 31, true, true)]
      for (const [n, trace] of traces.entries()) {
        const tagged = withHashTag(trace, `tenant-${n}`)
        const expected = await replay(tagged, new MemoryStore(), `${label}-span${n}`)
        const actual = await replay(tagged, store, `${label}-span${n}`)
        assert.deepEqual(actual, expected, `${label}: ${tagged.name}`)
      }
    }
  })

  it('per user AND per tenant on one tag: exact under concurrency, refusals charging neither, every key in one slot', async () => {
    const limiter = new Limiter({
      store: new RedisStore({ client }),
      prefix: 'tenant',
      policies: [{ algorithm: 'sliding-log', limit: 2, windowMs: 3_600_000, name: 'user' }, { algorithm: 'fixed-window', limit: 12, windowMs: 3_600_000, name: 'tenant' }],
    })
    const users = Array.from({ length: 10 }, (_, i) => `{t7}user:${i}`)
    // 40 calls at once, 4 per user: each user's 2, until the tenant's 12 are spent.
    const decisions = await Promise.all(users.flatMap((user) => [0, 1, 2, 3].map(() => limiter.limit(user, { keys: { tenant: '{t7}' } }))))
    assert.equal(decisions.filter((d) => d.allowed).length, 12)
    assert.ok(decisions.every((d) => !d.degraded))
    // What the users' logs hold is exactly what was admitted: a call the tenant refused took nothing of its user's.
    const held = await Promise.all(users.map(async (user) => 2 - (await limiter.peek(user, { keys: { tenant: '{t7}' } })).policies[0]!.remaining))
    assert.equal(held.reduce((a, b) => a + b, 0), 12)
    assert.equal((await limiter.peek('{t7}')).policies[1]?.remaining, 0)
    const perNode = await Promise.all(client.nodes('master').map(async (node) => (await scanKeys(node, 'tenant:*')).length))
    // The six users admitted and the tenant; the four refused outright left no key.
    assert.deepEqual(perNode.filter((n) => n > 0), [7], `keys per master: ${perNode.join(', ')}`)
  })

  it('HTTP rules whose keys share a hash tag are one all-or-nothing call; keys of different tags a call each, in order (node adapter, real server)', async () => {
    const tenantFirst = (prefix: string, tenantKey: string) => withRateLimit((_request, response) => response.end('ok'), {
      store: new RedisStore({ client }),
      prefix,
      headers: { standard: 'draft-10' },
      rules: [
        { name: 'tenant', key: () => tenantKey, policies: { algorithm: 'fixed-window', limit: 3, windowMs: 3_600_000, name: 'tenant' } },
        { name: 'user', key: (request) => `{t}${request.header('x-user')}`, policies: { algorithm: 'fixed-window', limit: 1, windowMs: 3_600_000, name: 'user' } },
      ],
    })
    const outcomes: Record<string, string[]> = {}
    for (const [label, tenantKey] of [['one tag', '{t}'], ['two tags', 'tenant']] as const) {
      const server = createServer(tenantFirst(`http-${label.replace(' ', '-')}`, tenantKey))
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
      try {
        const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`
        const seen: string[] = []
        for (const user of ['u1', 'u1', 'u2', 'u3', 'u4']) {
          const response = await fetch(url, { headers: { 'x-user': user } })
          // The fixed windows are the clock's hours: `t` is whatever is left of this one.
          seen.push(`${response.status} ${response.headers.get('ratelimit')?.replace(/;t=\d+/g, '')}`)
        }
        outcomes[label] = seen
      } finally {
        server.closeAllConnections()
        await new Promise((resolve) => server.close(resolve))
      }
    }
    // One tag: u1's second request, refused by its user limit, took nothing of the tenant's 3 (u1, u2 and u3 spend them).
    assert.deepEqual(outcomes['one tag'], [
      '200 "tenant";r=2, "user";r=0',
      '429 "tenant";r=2, "user";r=0',
      '200 "tenant";r=1, "user";r=0',
      '200 "tenant";r=0, "user";r=0',
      '429 "tenant";r=0, "user";r=1',
    ])
    // Two tags: the tenant is decided first, on its own, and u1's refusal by its user limit had already charged it.
    assert.deepEqual(outcomes['two tags'], [
      '200 "tenant";r=2, "user";r=0',
      '429 "tenant";r=1, "user";r=0',
      '200 "tenant";r=0, "user";r=0',
      '429 "tenant";r=0',
      '429 "tenant";r=0',
    ])
  })

  it('refuses calls spanning keys of different hash tags, saying how to tag them (ioredis and node-redis)', async () => {
    const policies = [{ algorithm: 'fixed-window' as const, limit: 5, windowMs: 60_000, name: 'user' }, { algorithm: 'fixed-window' as const, limit: 5, windowMs: 60_000, name: 'global' }]
    for (const store of [new RedisStore({ client }), new RedisStore({ client: nodeRedis })]) {
      const limiter = new Limiter({ store, prefix: 'span', policies })
      const refused = (tags: string) => new RegExp(`^ArgumentError: keys must share a hash tag on a Redis Cluster, as one atomic script touches one hash slot; here ${tags} \\(got .*\\); start each key with the same \\{tag\\}, e\\.g\\. "\\{tenant:7\\}" and "\\{tenant:7\\}user:42"$`)
      await assert.rejects(limiter.limit('a', { keys: { global: 'all' } }), refused('user: "a" \\(tag "a"\\), global: "all" \\(tag "all"\\)'))
      await assert.rejects(limiter.peek('a', { keys: { global: 'all' } }), refused('user: "a" .*'))
      // The tag is the key up to its first `}`: `{x}a` and `{x}` share one, `x` is another.
      await assert.rejects(limiter.limit('{x}a', { keys: { global: 'x' } }), refused('user: "\\{x\\}a" \\(tag "\\{x"\\), global: "x" \\(tag "x"\\)'))
      await assert.rejects(store.consume({ prefix: 'span', key: 'a', keys: ['a', 'b'], policies: limiter.policies, cost: 1, maxWaitMs: 0, now: undefined }), refused('user: "a" .*'))
      assert.equal((await limiter.limit('a')).allowed, true)
      assert.equal((await limiter.limit('{x}a', { keys: { global: '{x}' } })).allowed, true)
    }
  })

  it('sluice inspect given any one node finds a key\'s state on whichever master holds it, raw and through a config', async () => {
    const policies = { algorithm: 'fixed-window' as const, name: 'hour', limit: 5, windowMs: 3_600_000 }
    const limiter = new Limiter({ store: new RedisStore({ client }), prefix: 'insp:http', policies })
    const keys = Array.from({ length: 12 }, (_, i) => `ip:10.0.0.${i}`)
    for (const key of keys) await limiter.limit(key)
    const holders = await Promise.all(client.nodes('master').map(async (node) => (await scanKeys(node, 'insp:http:*')).length))
    assert.ok(holders.filter((n) => n > 0).length > 1, `the keys spread over masters: ${holders.join(', ')}`)
    const dir = mkdtempSync(join(tmpdir(), 'sluice-inspect-'))
    try {
      writeFileSync(join(dir, 'sluice.yaml'), `
server: { listen: 127.0.0.1:0 }
prefix: insp
routes:
  - name: api
    upstream: http://127.0.0.1:9
    limits:
      - { name: hour, key: [ip], policies: { algorithm: fixed-window, name: hour, limit: 5, windowMs: 3600000 } }
`)
      const node = `redis://127.0.0.1:${cluster.nodes[0]?.port}`
      for (const key of keys) {
        const raw = await runCli(['inspect', '--redis', node, '--prefix', 'insp', key])
        assert.equal(raw.code, 0, raw.stderr)
        assert.match(raw.stdout, /^ {2}hour: fixed-window state \d+:1 \(expires in \d+ ms\)\n$/, `${key}: ${raw.stdout}`)
        const viaConfig = await runCli(['inspect', '--redis', node, '--config', join(dir, 'sluice.yaml'), key])
        assert.equal(viaConfig.code, 0, viaConfig.stderr)
        assert.match(viaConfig.stdout, /api\.hour {2}hour: 4\/5 left, full in \d+ ms\n$/, `${key}: ${viaConfig.stdout}`)
      }
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('a store given one node\'s URL says that keys of the other nodes\' slots need a Cluster client, not only MOVED', async () => {
    const warnings: string[] = []
    const oneNode = new RedisStore({ url: `redis://127.0.0.1:${(cluster.nodes[0] as RedisServer).port}`, onWarning: (message) => warnings.push(message) })
    const observed: string[] = []
    try {
      const limiter = new Limiter({ store: oneNode, prefix: 'one-node', onStoreFailure: 'closed', policies: { algorithm: 'fixed-window', limit: 5, windowMs: 60_000 }, observer: { storeCall: (_ms, _outcome, error) => { if (error !== undefined) observed.push(error.message) } } })
      // A third of the slots are this node's: among 30 keys, some are decided here and some are not.
      const reasons = []
      for (let i = 0; i < 30; i++) reasons.push((await limiter.limit(`user-${i}`)).reason)
      assert.ok(reasons.includes(undefined) && reasons.includes('store-error'), reasons.join(' '))
      assert.match(observed[0] ?? '', /^MOVED \d+ 127\.0\.0\.1:\d+: this Redis is a node of a Cluster, and the key's slot is on another node; connect to the Cluster as one \(the gateway's store\.cluster, ioredis's Redis\.Cluster, node-redis's createCluster\), not to one node by URL$/)
      // Said once as well, when the node first answers: a try that met only its own slots would see no failure.
      for (let i = 0; i < 50 && warnings.length === 0; i++) await new Promise((resolve) => setTimeout(resolve, 10))
      assert.deepEqual(warnings, ['sluice: this Redis is a node of a Cluster, reached as a single server: calls on keys whose slots other nodes hold fail (MOVED). Connect to the Cluster as one (the gateway\'s store.cluster, ioredis\'s Redis.Cluster, node-redis\'s createCluster).'])
    } finally {
      await oneNode.close()
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

  it('a slot moved to another master while its keys are decided (resharding): Redis refuses half-moved calls (TRYAGAIN), the store sends them again, none is degraded, lost or charged twice (ioredis and node-redis)', async () => {
    const tryAgains = async () => {
      const counts = await Promise.all(cluster.nodes.map(async (node) => Number(/errorstat_TRYAGAIN:count=(\d+)/.exec(String(await node.client().info('errorstats')))?.[1] ?? 0)))
      return counts.reduce((a, b) => a + b, 0)
    }
    for (const [label, redisClient] of [['io', client], ['nr', nodeRedis]] as const) {
      const prefix = `reshard-${label}`
      const limiter = new Limiter({
        store: new RedisStore({ client: redisClient }),
        prefix,
        onStoreFailure: 'closed',
        // Limits no call reaches, so every call is charged. A call's keys move one by one, and its
        // block key exists on neither master: each makes a call Redis refuses until the slot has moved.
        policies: [
          { name: 'hour', algorithm: 'fixed-window', limit: 100_000, windowMs: 3_600_000 },
          { name: 'bucket', algorithm: 'token-bucket', capacity: 100_000, refillTokens: 1, refillIntervalMs: 3_600_000, blockMs: 1000 },
        ],
      })
      const keys = Array.from({ length: 40 }, (_, i) => `{moving-${label}}user-${i}`)
      for (const key of keys) assert.equal((await limiter.limit(key)).allowed, true)
      const refusedBefore = await tryAgains()
      let moved = false
      const outcomes: string[] = []
      const callers = Array.from({ length: 16 }, async (_, caller) => {
        for (let i = 0; i < 2000 && (!moved || i < 10); i++) {
          const decision = await limiter.limit(keys[(caller * 7 + i) % keys.length] as string)
          outcomes.push(decision.degraded ? `degraded: ${decision.reason}` : decision.allowed ? 'allowed' : 'refused')
        }
      })
      // Resets of keys in the slot meanwhile: a DEL of a call's keys is refused (TRYAGAIN) as its script is.
      const resets: string[] = []
      const resetters = Array.from({ length: 4 }, async (_, resetter) => {
        for (let i = 0; i < 2000 && (!moved || i < 5); i++) {
          const key = `{moving-${label}}reset-${resetter}`
          await limiter.limit(key)
          resets.push(await limiter.reset(key).then(() => 'reset', (error: Error) => error.message))
        }
      })
      const slot = Number(await client.cluster('KEYSLOT', redisKey(prefix, keys[0] as string, 'hour')))
      const { to } = await moveSlot(cluster, slot)
      moved = true
      await Promise.all([...callers, ...resetters])
      assert.deepEqual([...new Set(resets)], ['reset'], label)
      assert.ok(await tryAgains() > refusedBefore, `${label}: no call met the slot half moved`)
      assert.deepEqual([...new Set(outcomes)], ['allowed'], label)
      // What Redis counted is what the callers were told: no call lost in the move, none charged twice.
      let charged = 0
      for (const key of keys) charged += 100_000 - (await limiter.peek(key)).remaining
      assert.equal(charged, keys.length + outcomes.length, label)
      const inSlot = await Promise.all(cluster.nodes.map(async (node) => Number(await node.client().cluster('COUNTKEYSINSLOT', slot))))
      assert.deepEqual(inSlot, cluster.nodes.map((_, i) => (i === to ? keys.length * 2 : 0)), label)
    }
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

describe('Cluster failover under load (a master killed, its replica promoted)', () => {
  let cluster: RedisCluster
  before(async () => {
    cluster = await startCluster(3, { replicas: 1, nodeTimeoutMs: 1000 })
  })
  after(async () => {
    await cluster.stop()
  })

  it('no crash, the failure policy during the gap, exact decisions again on the promoted replica (ioredis and node-redis)', async (t) => {
    const seeds = cluster.nodes.map((node) => ({ host: '127.0.0.1', port: node.port }))
    const io = new Cluster(seeds, { enableOfflineQueue: false, redisOptions: { maxRetriesPerRequest: 1, autoResendUnfulfilledCommands: false, commandTimeout: 1000 } })
    io.on('error', () => {})
    await new Promise((resolve) => io.once('ready', resolve))
    const nr = createCluster({ rootNodes: seeds.map(({ port }) => ({ url: `redis://127.0.0.1:${port}` })) })
    nr.on('error', () => {})
    await nr.connect()
    // The master to kill: the one holding the key every caller decides.
    const masterOf = async (key: string) => {
      const slot = Number(await io.cluster('KEYSLOT', key))
      const ranges = await io.cluster('SLOTS')
      return ranges.find(([first, last]) => first <= slot && slot <= last)?.[2]?.[1]
    }
    const victimPort = await masterOf(redisKey('failover-io', 'user-0', 'fw'))
    const victim = cluster.nodes.find((node) => node.port === victimPort) as (typeof cluster.nodes)[number]
    try {
      // node-redis finds the new master a few seconds after ioredis.
      await decideThroughFailover(t, { io, nr }, { prefix: 'failover', key: () => 'user-0', kill: () => victim.signal('SIGKILL'), forMs: 15_000 })
      // The replica holds the keys now, and decides exactly.
      assert.notEqual(await masterOf(redisKey('failover-io', 'user-0', 'fw')), victimPort)
      await decidesExactly({ io, nr }, 'after-failover', 'user-0')
    } finally {
      io.disconnect()
      await nr.close().catch(() => {})
    }
  })
})
