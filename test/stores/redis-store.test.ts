import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { createServer } from 'node:http'
import { connect, type AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { createClient } from 'redis'
import { Limiter, MemoryStore, RedisStore, redisKey, StoreNotAppliedError, type Decision, type Policy, type Store } from '../../src/index.ts'
import { assertSameAsMemory, handWritten, randomTraces, spanningKeys, type Trace } from '../conformance/traces.ts'
import { Cluster, Redis, type RedisOptions } from 'ioredis'
import { freePort, scanKeys, startRedis, type RedisServer } from '../support/redis.ts'
import { seededRandom } from '../../src/simulate/traffic.ts'
import { processWarningsDuring } from '../helpers.ts'

const traces: Trace[] = [...handWritten, ...randomTraces(80, 7), ...randomTraces(40, 9, true), ...spanningKeys, ...randomTraces(30, 21, false, true), ...randomTraces(20, 23, true, true)]

const pick = ({ allowed, remaining, retryAfterMs, resetAfterMs }: Decision) => ({ allowed, remaining, retryAfterMs, resetAfterMs })

/** One policy of each algorithm, limit 3: a fixed window of `fixedMs`, the others spanning `windowMs`. */
function everyAlgorithm(fixedMs: number, windowMs: number): Policy[] {
  return [
    { algorithm: 'fixed-window', limit: 3, windowMs: fixedMs, name: 'fw' },
    { algorithm: 'sliding-log', limit: 3, windowMs, name: 'sl' },
    { algorithm: 'sliding-window', limit: 3, windowMs: windowMs / 2, name: 'sw' },
    { algorithm: 'token-bucket', capacity: 3, refillTokens: 3, refillIntervalMs: windowMs, name: 'tb' },
    { algorithm: 'leaky-bucket', capacity: 3, leakTokens: 3, leakIntervalMs: windowMs, name: 'lb' },
  ]
}

describe('RedisStore', () => {
  let redis: RedisServer
  before(async () => { redis = await startRedis() })
  after(async () => { await redis.stop() })

  const clients: Array<[string, () => Promise<{ store: RedisStore; close: () => Promise<void> }>]> = [
    ['ioredis (RESP3)', async () => ({ store: new RedisStore({ client: redis.client() }), close: async () => {} })],
    ['ioredis (RESP2)', async () => ({ store: new RedisStore({ client: redis.client({ protocol: 2 } as RedisOptions) }), close: async () => {} })],
    ['node-redis (RESP3)', async () => {
      const client = createClient({ url: redis.url, RESP: 3 })
      await client.connect()
      return { store: new RedisStore({ client }), close: async () => { await client.close() } }
    }],
    ['node-redis (RESP2)', async () => {
      const client = createClient({ url: redis.url, RESP: 2 })
      await client.connect()
      return { store: new RedisStore({ client }), close: async () => { await client.close() } }
    }],
  ]

  for (const [label, make] of clients) {
    it(`decides exactly as the memory store on every conformance trace: ${label}`, async () => {
      const { store, close } = await make()
      try {
        for (const [n, trace] of traces.entries()) await assertSameAsMemory(trace, store, `conf-${label.replace(/\W/g, '')}-${n}`)
      } finally {
        await close()
      }
    })
  }

  // Number.MAX_SAFE_INTEGER is how many write "no limit here"; the clients' integer decoding is off near it.
  const HUGE = Number.MAX_SAFE_INTEGER
  const hugePolicies: Policy[] = [
    { algorithm: 'fixed-window', limit: HUGE, windowMs: 1000, name: 'fw' },
    { algorithm: 'sliding-log', limit: HUGE, windowMs: 1000, name: 'sl' },
    { algorithm: 'sliding-window', limit: HUGE, windowMs: 1, name: 'sw' }, // limit x windowMs must stay below 2^53
    { algorithm: 'token-bucket', capacity: HUGE, refillTokens: 1, refillIntervalMs: 1, name: 'tb' },
    { algorithm: 'leaky-bucket', capacity: HUGE, leakTokens: 1, leakIntervalMs: 1, name: 'lb' },
  ]
  for (const [label, make] of clients) {
    it(`reads back remaining exactly under a limit of Number.MAX_SAFE_INTEGER, never above it: ${label}`, async () => {
      const { store, close } = await make()
      let now = 1_700_000_000_000
      const clock = () => now
      const memory = new Limiter({ policies: hugePolicies, clock })
      const limiter = new Limiter({ store, prefix: `huge-${label.replace(/\W/g, '')}`, policies: hugePolicies, clock, blockCache: false })
      try {
        for (const [at, cost] of [[0, 1], [0, 9], [1, 17], [1, 0], [2, 30]] as const) {
          now = 1_700_000_000_000 + at
          const [expected, actual] = cost === 0 ? [memory.peekSync('k'), await limiter.peek('k')] : [memory.limitSync('k', { cost }), await limiter.limit('k', { cost })]
          assert.deepEqual(actual, expected, `at +${at} ms, cost ${cost}`)
          for (const entry of actual.policies) assert.ok(entry.remaining <= HUGE, `${entry.policy}: remaining ${entry.remaining}`)
        }
      } finally {
        await close()
      }
    })
  }

  it('recovers from NOSCRIPT: SCRIPT FLUSH before every call changes no decision (ioredis and node-redis)', async () => {
    const admin = redis.client()
    const flush = async () => { await admin.script('FLUSH') }
    await assertSameAsMemory(handWritten[8] as Trace, new RedisStore({ client: redis.client() }), 'noscript-io', flush)
    const client = createClient({ url: redis.url })
    await client.connect()
    try {
      await assertSameAsMemory(handWritten[7] as Trace, new RedisStore({ client }), 'noscript-nr', flush)
    } finally {
      await client.close()
    }
  })

  it('a node-redis client not yet connected: the failure says to connect it, and decisions come from Redis once it is', async () => {
    const client = createClient({ url: redis.url })
    const failures: string[] = []
    const limiter = new Limiter({ store: new RedisStore({ client }), prefix: 'unconnected', onStoreFailure: 'closed', policies: { algorithm: 'fixed-window', limit: 1, windowMs: 60_000 }, observer: { storeCall: (_ms, _outcome, error) => { if (error !== undefined) failures.push(error.message) } } })
    const before = await limiter.limit('k')
    assert.deepEqual([before.allowed, before.reason], [false, 'store-error'])
    assert.deepEqual(failures, ['The client is closed (a node-redis client takes commands only while connected: await client.connect() before the first decision)'])
    await client.connect()
    try {
      assert.deepEqual((await Promise.all([limiter.limit('k'), limiter.limit('k')])).map((d) => [d.allowed, d.degraded]), [[true, false], [false, false]])
    } finally {
      await client.close()
    }
  })

  it('batches concurrent calls into few script invocations, deciding them exactly as one by one, in order', async () => {
    const admin = redis.client()
    const policies = [{ algorithm: 'sliding-log', limit: 40, windowMs: 1000 }, { algorithm: 'token-bucket', capacity: 30, refillTokens: 1, refillIntervalMs: 10 }] as const
    const calls = Array.from({ length: 300 }, (_, i) => ({ key: `k${i % 3}`, cost: 1 + (i % 2) }))
    const memory = new Limiter({ policies: [...policies], clock: () => 42_000 })
    const expected = calls.map(({ key, cost }) => memory.limitSync(key, { cost }))
    const limiter = new Limiter({ store: new RedisStore({ client: redis.client() }), prefix: 'batch', policies: [...policies], clock: () => 42_000 })
    await admin.config('RESETSTAT')
    const actual = await Promise.all(calls.map(({ key, cost }) => limiter.limit(key, { cost })))
    assert.deepEqual(actual, expected)
    const stats = await admin.info('commandstats')
    const scripts = [...stats.matchAll(/cmdstat_(?:evalsha|eval):calls=(\d+)/g)].reduce((sum, m) => sum + Number(m[1]), 0)
    assert.ok(scripts >= 3 && scripts <= 4, `300 calls in ${scripts} script invocations (at most 128 per invocation)`)
  })

  it('batches calls of limiters with and without blocks, interleaved, exactly as one by one; a block is a key of its own, with its expiry, that reset deletes', async () => {
    const admin = redis.client()
    const blocking = [{ algorithm: 'fixed-window', limit: 5, windowMs: 60_000, name: 'fw' }, { algorithm: 'sliding-log', limit: 8, windowMs: 60_000, blockMs: 90_000, name: 'sl' }, { algorithm: 'token-bucket', capacity: 7, refillTokens: 1, refillIntervalMs: 60_000, blockMs: 30_000, name: 'tb' }] as const
    const plain = [{ algorithm: 'sliding-window', limit: 4, windowMs: 60_000, name: 'sw' }] as const
    const store = new RedisStore({ client: redis.client() })
    const limiters = [new Limiter({ store, prefix: 'blk', policies: [...blocking], clock: () => 42_000, blockCache: false }), new Limiter({ store, prefix: 'blk', policies: [...plain], clock: () => 42_000, blockCache: false })]
    const memory = new MemoryStore()
    const mirrors = [new Limiter({ store: memory, prefix: 'blk', policies: [...blocking], clock: () => 42_000 }), new Limiter({ store: memory, prefix: 'blk', policies: [...plain], clock: () => 42_000 })]
    const calls = Array.from({ length: 120 }, (_, i) => ({ which: i % 2, key: `k${i % 4}`, cost: 1 + (i % 3) }))
    const expected = calls.map(({ which, key, cost }) => (mirrors[which] as Limiter).limitSync(key, { cost }))
    const actual = await Promise.all(calls.map(({ which, key, cost }) => (limiters[which] as Limiter).limit(key, { cost })))
    assert.deepEqual(actual, expected)
    assert.ok(actual.some((decision) => decision.retryAfterMs >= 30_000), 'some calls met a block')
    const blocks = (await scanKeys(admin, 'blk:*')).filter((key) => key.endsWith('{block}')).sort()
    assert.ok(blocks.length > 0 && blocks.every((key) => /^blk:\{k\d\}:(sl|tb)\{block\}$/.test(key)), blocks.join(' '))
    for (const key of blocks) {
      const [value, ttl] = await Promise.all([admin.get(key), admin.pttl(key)])
      assert.match(String(value), /^B\d+$/)
      // The block's length, plus the minute's slack of every key written on the client's clock (see lua/limit.lua).
      assert.ok(ttl > 0 && ttl <= (key.includes(':sl{') ? 90_000 : 30_000) + 60_000, `${key} expires in ${ttl} ms`)
    }
    const blockedKey = (/\{(k\d)\}/.exec(blocks[0] as string) as RegExpExecArray)[1] as string
    await (limiters[0] as Limiter).reset(blockedKey)
    assert.deepEqual((await scanKeys(admin, `blk:{${blockedKey}}:*`)).filter((key) => !key.endsWith(':sw')), [])
  })

  it('batches the requests a server reads in one turn of the event loop, each in a callback of its own', async () => {
    const admin = redis.client()
    const limiter = new Limiter({ store: new RedisStore({ client: redis.client() }), prefix: 'turn', policies: [{ algorithm: 'fixed-window', limit: 5, windowMs: 60_000 }], clock: () => 42_000, blockCache: false })
    await limiter.limit('warm-up')
    // Twenty requests on twenty sockets, read in one poll of the event loop: node runs each
    // 'request' listener in a callback of its own, with microtasks run in between.
    const server = createServer((_req, res) => { void limiter.limit('client').then((d) => res.end(String(d.allowed))) })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const { port } = server.address() as AddressInfo
    // Kept-alive connections, as under load: the server has accepted every one before the requests come.
    let accepted = 0
    const allAccepted = new Promise<void>((resolve) => server.on('connection', () => { if (++accepted === 20) resolve() }))
    const sockets = Array.from({ length: 20 }, () => connect(port, '127.0.0.1'))
    await Promise.all([allAccepted, ...sockets.map((socket) => new Promise((resolve) => socket.once('connect', resolve)))])
    try {
      const answers = sockets.map((socket) => new Promise<string>((resolve) => {
        let text = ''
        socket.on('data', (chunk) => { text += chunk })
        socket.on('end', () => resolve(text.slice(text.indexOf('\r\n\r\n') + 4)))
      }))
      await admin.config('RESETSTAT')
      // Written in one go: all twenty are waiting when the server next polls its sockets.
      for (const socket of sockets) socket.write('GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
      const allowed = (await Promise.all(answers)).filter((body) => body === 'true').length
      assert.equal(allowed, 5, 'exactly the limit, as one by one')
      const stats = await admin.info('commandstats')
      const scripts = [...stats.matchAll(/cmdstat_(?:evalsha|eval):calls=(\d+)/g)].reduce((sum, m) => sum + Number(m[1]), 0)
      assert.ok(scripts <= 8, `20 requests read in one turn (5 per invocation: 4) took ${scripts} script invocations`)
    } finally {
      for (const socket of sockets) socket.destroy()
      await new Promise((resolve) => server.close(resolve))
    }
  })

  it("keeps deciding while an application's tests fake setImmediate and setTimeout", { timeout: 5_000 }, async (t) => {
    const limiter = new Limiter({ store: new RedisStore({ client: redis.client() }), prefix: 'faked', policies: [{ algorithm: 'fixed-window', limit: 1, windowMs: 60_000 }], clock: () => 42_000 })
    t.mock.timers.enable({ apis: ['setImmediate', 'setTimeout'] })
    const [first, second] = await Promise.all([limiter.limit('k'), limiter.limit('k')])
    assert.deepEqual([first.allowed, second.allowed], [true, false], 'decided by Redis, in order')
  })

  it('decides a batch of runs (two limiters on one store, peeks, costs, reservations, two clocks) exactly as one by one', async () => {
    const shapes = [
      [{ algorithm: 'token-bucket', capacity: 20, refillTokens: 1, refillIntervalMs: 100 }, { algorithm: 'fixed-window', limit: 25, windowMs: 1000 }],
      [{ algorithm: 'leaky-bucket', capacity: 8, leakTokens: 1, leakIntervalMs: 50, mode: 'shape' }],
    ] as const
    const store = new RedisStore({ client: redis.client() })
    const times = [42_000, 42_010]
    const limiters = shapes.map((policies, i) => {
      const clock = () => times[i] as number
      return {
        memory: new Limiter({ policies: [...policies], clock }),
        redis: new Limiter({ store, prefix: `runs${i}`, policies: [...policies], clock }),
      }
    })
    // Blocks of alike calls (one run each), then singles that break every field of the run in turn.
    type Call = { limiter: number; key: string; kind: 'limit' | 'peek'; cost?: number; maxWaitMs?: number; at?: number }
    const calls: Call[] = []
    for (let i = 0; i < 12; i++) calls.push({ limiter: 0, key: `k${i % 4}`, kind: 'limit' })
    for (let i = 0; i < 6; i++) calls.push({ limiter: 1, key: `k${i % 2}`, kind: 'limit', maxWaitMs: 200 })
    // A full bucket, then two reservations that wait, then a plain call refused.
    for (let i = 0; i < 20; i++) calls.push({ limiter: 0, key: 'k9', kind: 'limit' })
    calls.push({ limiter: 0, key: 'k9', kind: 'limit', maxWaitMs: 300 }, { limiter: 0, key: 'k9', kind: 'limit', maxWaitMs: 300 })
    calls.push({ limiter: 0, key: 'k9', kind: 'limit' })
    // Alike but for the clock: 500 ms later the bucket has refilled enough.
    calls.push({ limiter: 0, key: 'k9', kind: 'limit', at: 42_500 })
    calls.push({ limiter: 0, key: 'k0', kind: 'peek' }, { limiter: 0, key: 'k0', kind: 'limit', cost: 3 })
    calls.push({ limiter: 0, key: 'k1', kind: 'limit', cost: 3 }, { limiter: 1, key: 'k1', kind: 'peek' })
    for (let i = 0; i < 10; i++) calls.push({ limiter: i % 2, key: 'k1', kind: 'limit', cost: 1 + (i % 3) })
    const decide = (side: 'memory' | 'redis', { limiter, key, kind, cost, maxWaitMs, at }: Call) => {
      if (at !== undefined) times[limiter] = at
      const chosen = (limiters[limiter] as (typeof limiters)[number])[side]
      return kind === 'peek' ? chosen.peek(key) : chosen.limit(key, { cost: cost ?? 1, maxWaitMs: maxWaitMs ?? 0 })
    }
    const expected: unknown[] = []
    for (const call of calls) expected.push(await decide('memory', call))
    times.splice(0, 2, 42_000, 42_010)
    const admin = redis.client()
    await admin.config('RESETSTAT')
    const actual = await Promise.all(calls.map((call) => decide('redis', call)))
    assert.deepEqual(actual, expected)
    const stats = await admin.info('commandstats')
    const scripts = [...stats.matchAll(/cmdstat_(?:evalsha|eval):calls=(\d+)/g)].reduce((sum, m) => sum + Number(m[1]), 0)
    assert.ok(scripts >= 1 && scripts <= 4, `${calls.length} calls in ${scripts} script invocations`)
  })

  it('writes one hash-tagged key per policy, each with an expiry no longer than its state matters', async () => {
    const admin = redis.client()
    // Long windows, so that no key can expire between the write and the SCAN on a loaded machine.
    const limiter = new Limiter({
      store: new RedisStore({ client: redis.client() }),
      prefix: 'keys',
      policies: everyAlgorithm(3_600_000, 10_000),
    })
    for (const key of ['u1', 'u2', 'u3']) for (let i = 0; i < 2; i++) await limiter.limit(key)
    const keys = (await scanKeys(admin, 'keys:*')).sort()
    assert.equal(keys.length, 15)
    assert.ok(keys.includes(redisKey('keys', 'u1', 'sl')) && keys.includes('keys:{u2}:tb'))
    // A sliding window's state lasts two windows.
    const bound: Record<string, number> = { fw: 3_600_000, sl: 10_000, sw: 10_000, tb: 10_000, lb: 10_000 }
    for (const key of keys) {
      const ttl = await admin.pttl(key)
      assert.ok(ttl >= 0 && ttl <= (bound[key.split(':').pop() as string] as number), `${key} expires in ${ttl} ms`)
    }
  })

  it('leaves no key behind once the longest window has passed', async () => {
    const admin = redis.client()
    const limiter = new Limiter({
      store: new RedisStore({ client: redis.client() }),
      prefix: 'ttl',
      policies: everyAlgorithm(100, 150),
    })
    for (const key of ['u1', 'u2', 'u3']) for (let i = 0; i < 2; i++) await limiter.limit(key)
    for (const key of await scanKeys(admin, 'ttl:*')) {
      // -1 would be a key without expiry; -2 means it already expired since the SCAN.
      const ttl = await admin.pttl(key)
      assert.ok(ttl === -2 || (ttl >= 0 && ttl <= 150), `${key} expires in ${ttl} ms`)
    }
    await sleep(250) // the longest window (150 ms) has passed
    assert.deepEqual(await scanKeys(admin, 'ttl:*'), [])
  })

  it('keeps one sliding-log entry per millisecond (calls of one millisecond share it, as in the memory log) and trims the set when a call is allowed', async () => {
    const admin = redis.client()
    const log = (now: number) => new Limiter({ store: new RedisStore({ client: redis.client() }), prefix: 'zset', policies: { algorithm: 'sliding-log', limit: 50, windowMs: 1000, name: 'log' }, clock: () => now })
    const at5000 = log(5000)
    const decisions = await Promise.all(Array.from({ length: 60 }, () => at5000.limit('k')))
    assert.equal(decisions.filter((d) => d.allowed).length, 50)
    // A member is 'running total:cost': the live entries' cost is newest total - oldest total + oldest cost.
    assert.deepEqual(await admin.zrange('zset:{k}:log', '0', '-1', 'WITHSCORES'), ['50:50', '5000'])
    assert.equal((await log(6000).limit('k')).remaining, 49)
    assert.deepEqual(await admin.zrange('zset:{k}:log', '0', '-1', 'WITHSCORES'), ['1:1', '6000'], 'the expired entry trimmed; totals start again')
    const at6500 = log(6500)
    await at6500.limit('k', { cost: 3 })
    await log(6700).limit('k', { cost: 2 })
    assert.deepEqual(await admin.zrange('zset:{k}:log', '0', '-1'), ['1:1', '4:3', '6:2'])
    // Refused for 45 more: the oldest two entries (4 units) must leave, and the second leaves at 7500.
    assert.deepEqual(pick(await log(6800).limit('k', { cost: 48 })), { allowed: false, remaining: 44, retryAfterMs: 700, resetAfterMs: 900 })
  })

  it('a sliding log trims only when a call is allowed, as the memory log does: a clock that steps back after a refusal reopens nothing', async () => {
    const admin = redis.client()
    let now = 1000
    const policies: Policy = { algorithm: 'sliding-log', limit: 2, windowMs: 1000, name: 'log' }
    const onRedis = new Limiter({ store: new RedisStore({ client: redis.client() }), prefix: 'stepback', policies, clock: () => now, blockCache: false })
    const inMemory = new Limiter({ store: new MemoryStore(), prefix: 'stepback', policies, clock: () => now })
    const both = async (cost: number) => {
      const [a, b] = [await onRedis.limit('k', { cost }), await inMemory.limit('k', { cost })]
      assert.deepEqual(pick(a), pick(b), `at ${now}, cost ${cost}`)
      return pick(a)
    }
    assert.equal((await both(1)).allowed, true)
    now = 1500
    assert.equal((await both(1)).allowed, true)
    now = 2100 // the entry of 1000 has left; 2 more do not fit beside the one of 1500
    assert.deepEqual(await both(2), { allowed: false, remaining: 1, retryAfterMs: 400, resetAfterMs: 400 })
    assert.equal(await admin.zcard('stepback:{k}:log'), 2, 'a refusal trims nothing')
    now = 1900 // the clock steps back: both entries are in the window again
    assert.deepEqual(await both(1), { allowed: false, remaining: 0, retryAfterMs: 100, resetAfterMs: 600 })
  })

  it('restarts sliding-log totals before they pass 2^53, deciding exactly as before', async () => {
    const admin = redis.client()
    const key = 'rebase:{k}:log'
    const oldest = 2 ** 53 - 6
    await admin.zadd(key, 1000, `${oldest}:3`, 1500, `${oldest + 5}:5`)
    await admin.pexpire(key, 60_000)
    const limiter = new Limiter({ store: new RedisStore({ client: redis.client() }), prefix: 'rebase', policies: { algorithm: 'sliding-log', limit: 10, windowMs: 10_000, name: 'log' }, clock: () => 2000 })
    assert.deepEqual(pick(await limiter.limit('k', { cost: 2 })), { allowed: true, remaining: 0, retryAfterMs: 0, resetAfterMs: 10_000 })
    assert.deepEqual(await admin.zrange(key, '0', '-1', 'WITHSCORES'), ['3:3', '1000', '8:5', '1500', '10:2', '2000'])
    assert.deepEqual(pick(await limiter.limit('k')), { allowed: false, remaining: 0, retryAfterMs: 9000, resetAfterMs: 10_000 })
  })

  it('rewrites a sliding log of the previous layout (a member per call) once, keeping its times, costs and expiry', async () => {
    const admin = redis.client()
    const key = 'legacy:{k}:log'
    // As sluice wrote it before: 'cost:batch:call' per call; one written by both layouts in a rolling upgrade.
    await admin.zadd(key, 5000, '1:AbCdEfGh0:1', 5000, '1:AbCdEfGh0:2', 5000, '3:AbCdEfGh1:1', 5400, '2:XyZ-_9a0:4')
    await admin.zadd('legacy:{mixed}:log', 5000, '3:3', 5400, '1:AbCdEfGh7:1')
    await admin.pexpire(key, 60_000)
    const at = (now: number) => new Limiter({ store: new RedisStore({ client: redis.client() }), prefix: 'legacy', policies: { algorithm: 'sliding-log', limit: 10, windowMs: 1000, name: 'log' }, clock: () => now })
    // 7 units logged: 4 more is 1 too many, and the oldest entry (5 units at 5000) frees it at 6000.
    assert.deepEqual(pick(await at(5500).limit('k', { cost: 4 })), { allowed: false, remaining: 3, retryAfterMs: 500, resetAfterMs: 900 })
    assert.deepEqual(await admin.zrange(key, '0', '-1', 'WITHSCORES'), ['5:5', '5000', '7:2', '5400'])
    assert.ok(await admin.pttl(key) > 50_000, 'a refused call keeps the expiry it found')
    assert.deepEqual(pick(await at(5500).limit('k', { cost: 3 })), { allowed: true, remaining: 0, retryAfterMs: 0, resetAfterMs: 1000 })
    assert.deepEqual(await admin.zrange(key, '0', '-1'), ['5:5', '7:2', '10:3'])
    assert.equal((await at(5500).peek('mixed')).remaining, 6)
    assert.deepEqual(await admin.zrange('legacy:{mixed}:log', '0', '-1'), ['3:3', '4:1'])
  })

  it('a policy name that a new config gives another algorithm starts afresh, in Redis as in memory, with no store error', async () => {
    const named = everyAlgorithm(60_000, 60_000).map((policy) => ({ ...policy, name: 'api' }))
    const clock = () => 1_000_000
    for (const before of named) {
      for (const after of named) {
        if (before === after) continue
        const fresh = new Limiter({ store: new MemoryStore(), clock, policies: after })
        const expected = [await fresh.limit('k'), await fresh.limit('k', { cost: 2 }), await fresh.limit('k')]
        for (const [label, store] of [['memory', new MemoryStore()], ['redis', new RedisStore({ client: redis.client() })]] as const) {
          const prefix = `switch-${before.algorithm}-${after.algorithm}`
          // Spent to the last unit under the old algorithm: as numbers of the new one, that state meant anything.
          const old = new Limiter({ store, prefix, clock, policies: before })
          for (let i = 0; i < 3; i++) await old.limit('k')
          const next = new Limiter({ store, prefix, clock, policies: after })
          const actual = [await next.limit('k'), await next.limit('k', { cost: 2 }), await next.limit('k')]
          assert.deepEqual(actual, expected, `${label}: ${before.algorithm} then ${after.algorithm}`)
        }
      }
    }
  })

  it('a window that a new config lengthens keeps its count, in Redis as in memory, and ends when the new window does', async () => {
    const now = 1_000_000_123
    const clock = () => now
    const hourEnds = 1_000_800_000 - now
    const cases = [
      // The 6 units spent in this second count in this hour, which ends at 1,000,800,000.
      { algorithm: 'fixed-window', after: { allowed: true, remaining: 3, resetAfterMs: hourEnds, retryAfterMs: 0 }, refusedForMs: hourEnds },
      // The sliding count is gone an hour after this one ends; 1 more fits once a tenth of the next hour has passed.
      { algorithm: 'sliding-window', after: { allowed: true, remaining: 3, resetAfterMs: hourEnds + 3_600_000, retryAfterMs: 0 }, refusedForMs: hourEnds + 360_000 },
    ] as const
    for (const { algorithm, after, refusedForMs } of cases) {
      for (const [label, store] of [['memory', new MemoryStore()], ['redis', new RedisStore({ client: redis.client() })]] as const) {
        const prefix = `lengthened-${algorithm}`
        const perSecond = new Limiter({ store, prefix, clock, policies: { algorithm, limit: 10, windowMs: 1000, name: 'api' } })
        for (let i = 0; i < 6; i++) await perSecond.limit('k')
        const perHour = new Limiter({ store, prefix, clock, policies: { algorithm, limit: 10, windowMs: 3_600_000, name: 'api' } })
        assert.deepEqual(pick(await perHour.limit('k')), after, `${label} ${algorithm}`)
        assert.equal((await perHour.limit('k', { cost: 3 })).remaining, 0)
        assert.deepEqual(pick(await perHour.limit('k')), { allowed: false, remaining: 0, resetAfterMs: after.resetAfterMs, retryAfterMs: refusedForMs }, `${label} ${algorithm}`)
      }
    }
  })

  it('a policy whose numbers a new config changes decides in Redis exactly as in memory while its state lives, never below zero remaining', async () => {
    // Each old policy's state outlives the trace (400 ms at most): past its expiry, the memory store has
    // forgotten it, while Redis under a client clock keeps every state a minute longer (clocks differ),
    // where a policy with other numbers may still count it.
    const changes: Array<[Policy, Policy]> = [
      [{ algorithm: 'fixed-window', limit: 10, windowMs: 1000 }, { algorithm: 'fixed-window', limit: 4, windowMs: 7000 }],
      [{ algorithm: 'fixed-window', limit: 4, windowMs: 7000 }, { algorithm: 'fixed-window', limit: 10, windowMs: 300 }],
      [{ algorithm: 'sliding-window', limit: 10, windowMs: 1000 }, { algorithm: 'sliding-window', limit: 4, windowMs: 7000 }],
      [{ algorithm: 'sliding-window', limit: 4, windowMs: 7000 }, { algorithm: 'sliding-window', limit: 10, windowMs: 150 }],
      [{ algorithm: 'sliding-log', limit: 10, windowMs: 1000 }, { algorithm: 'sliding-log', limit: 3, windowMs: 2500 }],
      [{ algorithm: 'token-bucket', capacity: 10, refillTokens: 1, refillIntervalMs: 900 }, { algorithm: 'token-bucket', capacity: 4, refillTokens: 3, refillIntervalMs: 100 }],
      [{ algorithm: 'token-bucket', capacity: 4, refillTokens: 1, refillIntervalMs: 900, refill: 'interval' }, { algorithm: 'token-bucket', capacity: 10, refillTokens: 2, refillIntervalMs: 70, refill: 'interval' }],
      [{ algorithm: 'leaky-bucket', capacity: 10, leakTokens: 1, leakIntervalMs: 900 }, { algorithm: 'leaky-bucket', capacity: 4, leakTokens: 3, leakIntervalMs: 100 }],
      [{ algorithm: 'leaky-bucket', capacity: 4, leakTokens: 1, leakIntervalMs: 900, mode: 'shape' }, { algorithm: 'leaky-bucket', capacity: 10, leakTokens: 7, leakIntervalMs: 50, mode: 'shape' }],
    ]
    for (const [n, [before, after]] of changes.entries()) {
      const random = seededRandom(n + 1)
      const calls = Array.from({ length: 80 }, () => ({ gap: Math.floor(random() * 5), cost: 1 + Math.floor(random() * 3), wait: random() < 0.3 ? 2000 : 0 }))
      const run = async (store: Store) => {
        let now = 1_000_000_000
        const decisions: Decision[] = []
        for (const [i, call] of calls.entries()) {
          const policy = { ...(i < 40 ? before : after), name: 'api' } as Policy
          const limiter = new Limiter({ store, prefix: `renumbered-${n}`, clock: () => now, policies: policy })
          now += call.gap
          const maxWaitMs = policy.algorithm === 'sliding-log' || policy.algorithm === 'sliding-window' ? 0 : call.wait
          decisions.push(await limiter.limit('k', { cost: call.cost, maxWaitMs }))
        }
        return decisions
      }
      const expected = await run(new MemoryStore())
      assert.deepEqual(await run(new RedisStore({ client: redis.client() })), expected, `${before.algorithm} #${n}`)
      for (const decision of expected) assert.ok(decision.remaining >= 0 && decision.retryAfterMs <= 20_000 && decision.resetAfterMs <= 20_000, JSON.stringify(decision))
    }
  })

  it('decides a key holding a value sluice did not write as a fresh key, and replaces it on the first charged call', async () => {
    const admin = redis.client()
    const clock = () => 1_000_000
    const foreign: Array<[string, (key: string) => Promise<unknown>]> = [
      ['a string', (key) => admin.set(key, 'hello')],
      ['a string with a state letter', (key) => admin.set(key, 'F12:x')],
      ['a hash', (key) => admin.hset(key, 'level', '1')],
      ['a list', (key) => admin.rpush(key, '1')],
    ]
    for (const policy of everyAlgorithm(60_000, 60_000)) {
      const fresh = new Limiter({ store: new MemoryStore(), clock, policies: policy })
      const expected = [await fresh.peek('k'), await fresh.limit('k'), await fresh.limit('k', { cost: 2 }), await fresh.limit('k')]
      for (const [what, write] of foreign) {
        const prefix = `foreign-${policy.algorithm}`
        await write(redisKey(prefix, 'k', policy.name as string))
        const limiter = new Limiter({ store: new RedisStore({ client: redis.client() }), prefix, clock, policies: policy })
        const actual = [await limiter.peek('k'), await limiter.limit('k'), await limiter.limit('k', { cost: 2 }), await limiter.limit('k')]
        assert.deepEqual(actual, expected, `${policy.algorithm} over ${what}`)
        await admin.del(redisKey(prefix, 'k', policy.name as string))
      }
    }
  })

  it('hashes keys too long to store, never rejecting them', async () => {
    const admin = redis.client()
    const limiter = new Limiter({ store: new RedisStore({ client: redis.client() }), prefix: 'long', policies: { algorithm: 'fixed-window', limit: 1, windowMs: 3_600_000, name: 'fw' } })
    const huge = 'k'.repeat(100_000)
    assert.equal((await limiter.limit(huge)).allowed, true)
    assert.equal((await limiter.limit(huge)).allowed, false)
    assert.equal((await limiter.limit(`${huge}!`)).allowed, true)
    const keys = await scanKeys(admin, 'long:*')
    assert.equal(keys.length, 2)
    for (const key of keys) assert.match(key, /^long:\{sha256:[0-9a-f]{64}\}:fw$/)
  })

  it('reset deletes the key of every policy', async () => {
    const admin = redis.client()
    const limiter = new Limiter({ store: new RedisStore({ client: redis.client() }), prefix: 'reset', policies: [{ algorithm: 'fixed-window', limit: 1, windowMs: 3_600_000 }, { algorithm: 'token-bucket', capacity: 1, refillTokens: 1, refillIntervalMs: 60_000 }] })
    await limiter.limit('k')
    assert.equal((await limiter.limit('k')).allowed, false)
    assert.equal((await scanKeys(admin, 'reset:*')).length, 2)
    await limiter.reset('k')
    assert.deepEqual(await scanKeys(admin, 'reset:*'), [])
    assert.equal((await limiter.limit('k')).allowed, true)
  })

  it('opens and closes its own connection from a URL', async () => {
    const store = new RedisStore({ url: redis.url })
    const limiter = new Limiter({ store, prefix: 'url', policies: { algorithm: 'fixed-window', limit: 2, windowMs: 3_600_000 } })
    assert.equal((await limiter.limit('k')).remaining, 1)
    assert.equal((await limiter.limit('k')).remaining, 0)
    await store.close()
  })

  it('answers the calls made before close() from Redis, and fails those made after it, naming why', async () => {
    const store = new RedisStore({ url: redis.url })
    const errors: string[] = []
    const limiter = new Limiter({ store, prefix: 'closing', onStoreFailure: 'closed', policies: { algorithm: 'fixed-window', limit: 3, windowMs: 3_600_000 }, observer: { storeCall: (_ms, _outcome, error) => { if (error) errors.push(error.message) } } })
    assert.equal((await limiter.limit('k')).remaining, 2)
    // Made in the turn close() is called: queued for a batch that had not been sent yet.
    const before = [limiter.limit('k'), limiter.limit('k')]
    const closing = store.close()
    const closingAgain = store.close()
    assert.deepEqual((await Promise.all(before)).map((decision) => [decision.allowed, decision.remaining, decision.reason]), [[true, 1, undefined], [true, 0, undefined]])
    await closing
    await closingAgain
    const after = await limiter.limit('k')
    assert.deepEqual([after.allowed, after.reason], [false, 'store-error'])
    assert.deepEqual(errors, ['this RedisStore is closed (its close() was called): nothing is sent to Redis after it'])
    await assert.rejects(store.ping(), StoreNotAppliedError)
    await assert.rejects(limiter.reset('k'), /^SluiceError: reset of "k" failed: store-error: this RedisStore is closed/)
  })

  it('refuses bad options with a clear error', () => {
    assert.throws(() => new RedisStore({} as never), /client or url is required/)
    assert.throws(() => new RedisStore({ url: 'http://x' }), /redis:\/\/ or rediss:\/\/ URL/)
    // A mistyped URL's password stays out of the error, which lands in logs.
    assert.throws(() => new RedisStore({ url: 'redis:/admin:hunter2@127.0.0.1:6379' }), (error: Error) => error.message.includes('(got "redis:/***@127.0.0.1:6379")') && !error.message.includes('hunter2'))
    // What ioredis would read as SELECT NaN (refused by Redis with no call waiting: the process ended), or fail to decode.
    assert.throws(() => new RedisStore({ url: `${redis.url}/limits` }), /url must name a database by its number \(redis:\/\/host:6379\/0\), not "limits"/)
    assert.throws(() => new RedisStore({ url: `${redis.url}?db=limits` }), /url must name a database by its number \(\?db=0\), not "limits"/)
    assert.throws(() => new RedisStore({ url: 'redis://:50%off@127.0.0.1:6379' }), (error: Error) => /not valid percent-encoding \(write a % in it as %25\)/.test(error.message) && !error.message.includes('50%off'))
    assert.throws(() => new RedisStore({ url: 'redis://127.0.0.1:99999' }), /url is not a valid URL \(a port from 1 to 65535/)
    // ioredis would take these from the query over the store's own: a decision re-sent after a reconnect, charged twice.
    assert.throws(() => new RedisStore({ url: `${redis.url}?autoResendUnfulfilledCommands=true` }), /^ArgumentError: url must not set autoResendUnfulfilledCommands: the store's connection keeps them as a limiter needs \(a decision re-sent after a reconnect is charged twice\); to set them otherwise, pass a client of your own/)
    assert.throws(() => new RedisStore({ url: `${redis.url}/0?enableOfflineQueue=true&maxRetriesPerRequest=20` }), /url must not set enableOfflineQueue or maxRetriesPerRequest:/)
    assert.throws(() => new RedisStore({ client: {} as never }), /ioredis Redis \/ Cluster or a node-redis client/)
    assert.throws(() => new RedisStore({ url: redis.url, timeout: 5 } as never), /timeout is not a RedisStore option/)
    // What rate-limiter-flexible users reach for first: the client itself, or a URL, where the options go.
    const client = redis.client()
    assert.throws(() => new RedisStore(client as never), /options must be an object with "client" or "url" \(got an object\); pass the client as new RedisStore\(\{ client \}\)$/)
    assert.throws(() => new RedisStore(createClient() as never), /pass the client as new RedisStore\(\{ client \}\)$/)
    assert.throws(() => new RedisStore(redis.url as never), /; pass a URL as new RedisStore\(\{ url \}\)$/)
    assert.throws(() => new RedisStore({ client: redis.url as never }), /\(got "redis:\/\/127\.0\.0\.1:\d+"\); a URL goes in url: new RedisStore\(\{ url \}\)$/)
    assert.throws(() => new Limiter({ store: client as never, policies: { algorithm: 'fixed-window', limit: 1, windowMs: 1000 } }), /store must be a MemoryStore, a RedisStore or another Store \(got an object\); a Redis client goes in a RedisStore: store: new RedisStore\(\{ client \}\)$/)
    assert.throws(() => new Limiter({ store: new Map() as never, policies: { algorithm: 'fixed-window', limit: 1, windowMs: 1000 } }), /another Store \(got an object\)$/)
  })
})

describe('RedisStore on a URL it cannot use', () => {
  let redis: RedisServer
  before(async () => {
    redis = await startRedis()
    await redis.client().config('SET', 'requirepass', 'right-password')
  })
  after(async () => { await redis.stop() })

  it('says why its connection is down: a wrong password, nobody listening', async () => {
    const observed: string[] = []
    const wrongPassword = new RedisStore({ url: `redis://:wrong-password@127.0.0.1:${redis.port}` })
    const noPassword = new RedisStore({ url: redis.url })
    const nobody = new RedisStore({ url: `redis://127.0.0.1:${await freePort()}` })
    const refusing = new RedisStore({ url: `redis://127.0.0.1:${await freePort()}` })
    try {
      const limiter = new Limiter({ store: wrongPassword, onStoreFailure: 'closed', policies: { algorithm: 'fixed-window', limit: 2, windowMs: 60_000 }, observer: { storeCall: (_ms, _outcome, error) => observed.push(error?.message ?? '') } })
      // ioredis alone says "Stream isn't writeable and enableOfflineQueue options is false".
      await assert.rejects(wrongPassword.ping(), /WRONGPASS/)
      // Redis 7 tells a client that gave no password about HELLO, which the user never sent: the cause is named.
      await assert.rejects(noPassword.ping(), /NOAUTH .*\(this Redis asks for a password, by requirepass or an ACL user, and the client gave none: put it in the URL, redis:\/\/:PASSWORD@host:port/)
      const decision = await limiter.limit('k')
      assert.equal(decision.allowed, false)
      assert.equal(decision.reason, 'store-error')
      assert.match(observed[0] ?? '', /WRONGPASS/)
      // A refused connection fails the first decision at once, naming the refusal,
      // rather than holding it until storeTimeoutMs and calling it a timeout.
      observed.length = 0
      const refused = new Limiter({ store: refusing, onStoreFailure: 'closed', storeTimeoutMs: 1500, policies: { algorithm: 'fixed-window', limit: 2, windowMs: 60_000 }, observer: { storeCall: (_ms, _outcome, error) => observed.push(error?.message ?? '') } })
      const first = await refused.limit('k')
      assert.equal(first.allowed, false)
      assert.equal(first.reason, 'store-error')
      assert.match(observed[0] ?? '', /ECONNREFUSED/)
      await assert.rejects(nobody.ping(), /ECONNREFUSED/)
    } finally {
      await wrongPassword.close()
      await noPassword.close()
      await nobody.close()
      await refusing.close()
    }
  })

  it('says why Redis closed a connection as it opened (its maxclients), where the client alone says only EPIPE', async () => {
    const crowded = await startRedis(['--maxclients', '1'])
    const hog = crowded.client()
    await hog.ping()
    const store = new RedisStore({ url: crowded.url })
    try {
      // Redis sends "ERR max number of clients reached" and closes; the client, writing its first command, sees EPIPE.
      await assert.rejects(store.ping(), /the connection's last error: (write EPIPE|read ECONNRESET) \(Redis closed the connection as it opened, before answering: it does so to a client over its maxclients \(see INFO clients\)/)
      hog.disconnect()
      // Once there is room, the connection comes up and the words go with it.
      let answered = false
      for (let i = 0; i < 60 && !answered; i++) answered = await store.ping().then(() => true, async () => { await new Promise((resolve) => setTimeout(resolve, 50)); return false })
      assert.equal(answered, true)
    } finally {
      await store.close()
      await crowded.stop()
    }
  })

  it('says that a Redis with EVAL renamed away runs no scripts; with functions: true, FCALL decides there', async () => {
    const hardened = await startRedis(['--rename-command', 'EVAL', '', '--rename-command', 'EVALSHA', ''])
    const scripts = new RedisStore({ url: hardened.url })
    const functions = new RedisStore({ url: hardened.url, functions: true })
    const given = hardened.client()
    const observed: string[] = []
    try {
      const policies = { algorithm: 'fixed-window', limit: 2, windowMs: 60_000 } as const
      const observer = { storeCall: (_ms: number, _outcome: string, error?: Error) => observed.push(error?.message ?? '') }
      // Before, Redis's words alone, with the first 128 bytes of the script after them.
      for (const store of [scripts, new RedisStore({ client: given })]) {
        const decision = await new Limiter({ store, onStoreFailure: 'closed', policies, observer }).limit('k')
        assert.deepEqual([decision.allowed, decision.reason], [false, 'store-error'])
        assert.match(observed.at(-1) ?? '', /^ERR unknown command 'eval(sha)?': this server runs no EVAL(SHA)?\. Either it is a Sentinel \(which runs no scripts: connect through it, with the gateway's store\.sentinel or ioredis's sentinels option\), or EVAL(SHA)? is renamed or disabled \(rename-command in its redis\.conf, or a managed Redis without Lua scripting\)\. Each sluice decision is one script, and cannot be made without it; with functions: true, FCALL is used where the server allows it\.$/)
      }
      const limiter = new Limiter({ store: functions, prefix: 'fn', onStoreFailure: 'closed', policies })
      // The first call finds no library (and would run as a script, which this Redis refuses); it is loaded behind it.
      await limiter.limit('k')
      let allowed = false
      for (let i = 0; i < 40 && !allowed; i++) {
        allowed = (await limiter.limit('k')).allowed
        if (!allowed) await new Promise((resolve) => setTimeout(resolve, 25))
      }
      assert.equal(allowed, true)
    } finally {
      await scripts.close()
      await functions.close()
      given.disconnect()
      await hardened.stop()
    }
  })

  it('fails every call on a database the server does not have, rather than counting in database 0', async () => {
    // ioredis reports the refused SELECT and goes on, on database 0: a limiter sharing those counts with another's.
    const store = new RedisStore({ url: `redis://:right-password@127.0.0.1:${redis.port}/16` })
    const named = new RedisStore({ url: `redis://:right-password@127.0.0.1:${redis.port}/15` })
    const observed: string[] = []
    try {
      const limiter = new Limiter({ store, prefix: 'db16', onStoreFailure: 'closed', policies: { algorithm: 'fixed-window', limit: 2, windowMs: 60_000 }, observer: { storeCall: (_ms, _outcome, error) => observed.push(error?.message ?? '') } })
      for (let attempt = 0; attempt < 3; attempt++) {
        const decision = await limiter.limit('k')
        assert.deepEqual([decision.allowed, decision.reason], [false, 'store-error'])
        assert.match(observed.at(-1) ?? '', /^Redis refused to select the database the url names: ERR DB index is out of range \(a server has the databases its redis.conf `databases` says, 16 by default/)
      }
      await assert.rejects(store.ping(), (error: Error) => error instanceof StoreNotAppliedError && /refused to select/.test(error.message))
      assert.deepEqual(await scanKeys(redis.client({ password: 'right-password' }), 'db16:*'), [])
      // A database it has is selected, and counted in.
      const inFifteen = new Limiter({ store: named, prefix: 'db15', policies: { algorithm: 'fixed-window', limit: 2, windowMs: 60_000 } })
      assert.equal((await inFifteen.limit('k')).remaining, 1)
    } finally {
      await store.close()
      await named.close()
    }
  })
})

describe('RedisStore on rediss:// to a Redis that does not speak TLS', () => {
  let redis: RedisServer
  before(async () => { redis = await startRedis() })
  after(async () => { await redis.stop() })

  it('says the handshake may be why the connection timed out', async () => {
    const store = new RedisStore({ url: `rediss://127.0.0.1:${redis.port}` })
    try {
      // The first call waits out the connect timeout (2 s), then fails naming the connection's error.
      await assert.rejects(store.ping(), /connect ETIMEDOUT \(over TLS, as rediss:\/\/ asks: a server that does not speak TLS never completes the handshake; is this port the server's TLS port\?\)/)
    } finally {
      await store.close()
    }
  })
})

describe('RedisStore on rediss:// to a Redis whose certificate a private CA signed', () => {
  const tls = (file: string) => fileURLToPath(new URL(`../support/tls/${file}`, import.meta.url))
  let redis: RedisServer
  let url: string
  before(async () => {
    const tlsPort = await freePort()
    redis = await startRedis(['--tls-port', String(tlsPort), '--tls-cert-file', tls('server.pem'), '--tls-key-file', tls('server.key'), '--tls-ca-cert-file', tls('ca.pem'), '--tls-auth-clients', 'no'])
    url = `rediss://127.0.0.1:${tlsPort}`
  })
  after(async () => { await redis.stop() })

  /** Two calls on a limit of one, decided in a process of their own, with `env`. */
  const decideIn = (env: NodeJS.ProcessEnv): { decisions: Array<{ allowed: boolean; degraded: boolean }>; ping: string } => {
    const run = spawnSync(process.execPath, ['--import', 'tsx', fileURLToPath(new URL('../support/tls-client.ts', import.meta.url)), url], { env: { ...process.env, ...env }, encoding: 'utf8', timeout: 20_000 })
    assert.equal(run.status, 0, run.stderr)
    return JSON.parse(run.stdout) as ReturnType<typeof decideIn>
  }

  it('refuses the certificate against Node\'s CAs, naming why; decides on Redis once NODE_EXTRA_CA_CERTS names the CA', () => {
    const untrusted = decideIn({ NODE_EXTRA_CA_CERTS: '' })
    assert.deepEqual(untrusted.decisions, [{ allowed: false, degraded: true }, { allowed: false, degraded: true }])
    assert.match(untrusted.ping, /self-signed certificate in certificate chain/)
    const trusted = decideIn({ NODE_EXTRA_CA_CERTS: tls('ca.pem') })
    assert.deepEqual(trusted, { decisions: [{ allowed: true, degraded: false }, { allowed: false, degraded: false }], ping: 'ok' })
  })
})

describe('RedisStore on a URL whose port is not a Redis server', () => {
  it('says so, rather than the parser fault or the reset that follows it: an HTTP server named', async () => {
    const http = createServer((_request, response) => response.end('hello'))
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve))
    const store = new RedisStore({ url: `redis://127.0.0.1:${(http.address() as AddressInfo).port}` })
    const observed: string[] = []
    try {
      const limiter = new Limiter({ store, onStoreFailure: 'closed', storeTimeoutMs: 1500, policies: { algorithm: 'fixed-window', limit: 2, windowMs: 60_000 }, observer: { storeCall: (_ms, _outcome, error) => observed.push(error?.message ?? '') } })
      // The first connection's fault, and each reconnect's (with its EPIPE or reset) after it.
      for (let attempt = 0; attempt < 3; attempt++) {
        await sleep(150)
        const decision = await limiter.limit('k')
        assert.equal(decision.allowed, false)
        assert.equal(decision.reason, 'store-error')
        assert.match(observed.at(-1) ?? '', /not a Redis server: its reply starts with "H", as an HTTP server's does, which the Redis protocol never sends; check the host and port it connects to\)$/)
      }
    } finally {
      await store.close()
      http.closeAllConnections()
      await new Promise((resolve) => http.close(resolve))
    }
  })

  it('says so through a client of yours too (ioredis fails the call itself with the parser\'s words)', async () => {
    const http = createServer((_request, response) => response.end('hello'))
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve))
    const client = new Redis({ host: '127.0.0.1', port: (http.address() as AddressInfo).port, autoResendUnfulfilledCommands: false, maxRetriesPerRequest: 1 })
    client.on('error', () => {})
    const observed: string[] = []
    try {
      const limiter = new Limiter({ store: new RedisStore({ client }), onStoreFailure: 'closed', storeTimeoutMs: 1500, policies: { algorithm: 'fixed-window', limit: 2, windowMs: 60_000 }, observer: { storeCall: (_ms, _outcome, error) => observed.push(error?.message ?? '') } })
      const decision = await limiter.limit('k')
      assert.deepEqual([decision.allowed, decision.reason], [false, 'store-error'])
      assert.equal(observed.at(-1), 'not a Redis server: its reply starts with "H", as an HTTP server\'s does, which the Redis protocol never sends; check the host and port it connects to')
    } finally {
      client.disconnect()
      http.closeAllConnections()
      await new Promise((resolve) => http.close(resolve))
    }
  })
})

describe('RedisStore on a client of yours that re-sends commands after a reconnect', () => {
  it('warns once at construction, naming the setting; a client set up for a limiter, node-redis and a URL get no warning', async () => {
    const port = await freePort()
    const options = { host: '127.0.0.1', port, lazyConnect: true }
    const clients = [new Redis(options), new Redis({ ...options, autoResendUnfulfilledCommands: false })]
    const cluster = [new Cluster([{ host: '127.0.0.1', port }], { lazyConnect: true }), new Cluster([{ host: '127.0.0.1', port }], { lazyConnect: true, redisOptions: { autoResendUnfulfilledCommands: false } })]
    const nodeRedis = createClient({ url: `redis://127.0.0.1:${port}` })
    const warned = (client: unknown): string[] => {
      const warnings: string[] = []
      new RedisStore({ client: client as Redis, onWarning: (message) => warnings.push(message) })
      return warnings
    }
    try {
      const [defaults, forLimiter] = clients.map(warned)
      assert.equal(defaults?.length, 1)
      assert.match(defaults?.[0] ?? '', /autoResendUnfulfilledCommands.*charged, again/)
      assert.deepEqual(forLimiter, [])
      const [clusterDefaults, clusterForLimiter] = cluster.map(warned)
      assert.equal(clusterDefaults?.length, 1)
      assert.deepEqual(clusterForLimiter, [])
      assert.deepEqual(warned(nodeRedis), [])
      const fromUrl: string[] = []
      await new RedisStore({ url: `redis://127.0.0.1:${port}`, onWarning: (message) => fromUrl.push(message) }).close()
      assert.deepEqual(fromUrl, [])
      // Process warnings: once per client, however many stores are made over it (one per limiter, say).
      const emitted: string[] = []
      const collect = (warning: Error) => { if ((warning as Error & { code?: string }).code === 'SLUICE_REDIS') emitted.push(warning.message) }
      process.on('warning', collect)
      try {
        const shared = new Redis(options)
        clients.push(shared)
        for (let i = 0; i < 3; i++) new RedisStore({ client: shared })
        await new Promise((resolve) => setImmediate(resolve))
        assert.equal(emitted.length, 1, emitted.join('\n'))
      } finally {
        process.off('warning', collect)
      }
    } finally {
      for (const client of [...clients, ...cluster]) client.disconnect()
    }
  })
})

describe('RedisStore on a server that refuses TIME in scripts', () => {
  let redis: RedisServer
  before(async () => { redis = await startRedis(['--rename-command', 'TIME', '']) })
  after(async () => { await redis.stop() })

  it('warns once and decides on client time instead of failing every call', async () => {
    const warnings: string[] = []
    const limiter = new Limiter({ store: new RedisStore({ client: redis.client(), onWarning: (m) => warnings.push(m) }), prefix: 'notime', policies: { algorithm: 'sliding-log', limit: 2, windowMs: 60_000 } })
    const decisions = [await limiter.limit('k'), await limiter.limit('k'), await limiter.limit('k')]
    assert.deepEqual(decisions.map((d) => d.allowed), [true, true, false])
    assert.equal(warnings.length, 1)
    assert.match(warnings[0] as string, /refuses TIME inside scripts/)
  })

  it('an onWarning that throws fails no decision: the warning goes out as a process warning', async () => {
    const emitted = await processWarningsDuring('SLUICE_REDIS', async () => {
      const store = new RedisStore({ client: redis.client(), onWarning: () => { throw new Error('logger closed') } })
      const limiter = new Limiter({ store, prefix: 'notime-throwing', policies: { algorithm: 'sliding-log', limit: 1, windowMs: 60_000 } })
      assert.deepEqual([(await limiter.limit('k')).allowed, (await limiter.limit('k')).allowed], [true, false])
    })
    assert.equal(emitted.length, 1)
    assert.match(emitted[0] as string, /refuses TIME inside scripts.*\(onWarning threw: logger closed\)$/)
  })
})

describe('RedisStore on a Redis that evicts keys when full', () => {
  let redis: RedisServer
  before(async () => { redis = await startRedis(['--maxmemory', '64mb', '--maxmemory-policy', 'allkeys-lru']) })
  after(async () => { await redis.stop() })

  /** The warnings a store on `client` gives over a few calls (the check runs once Redis first answers). */
  async function warningsOn(store: (onWarning: (message: string) => void) => RedisStore): Promise<string[]> {
    const warnings: string[] = []
    const opened = store((message) => warnings.push(message))
    const limiter = new Limiter({ store: opened, prefix: 'evicting', policies: { algorithm: 'fixed-window', limit: 5, windowMs: 60_000 } })
    for (let i = 0; i < 3; i++) await limiter.limit('k')
    for (let waited = 0; warnings.length === 0 && waited < 500; waited += 25) await sleep(25)
    await sleep(50)
    await limiter.limit('k')
    await opened.close()
    return warnings
  }

  it('warns once that a limit can start again from zero, through ioredis, node-redis and a URL', async () => {
    const nodeRedis = createClient({ url: redis.url })
    await nodeRedis.connect()
    try {
      for (const [name, make] of [
        ['ioredis', (onWarning: (message: string) => void) => new RedisStore({ client: redis.client(), onWarning })],
        ['node-redis', (onWarning: (message: string) => void) => new RedisStore({ client: nodeRedis, onWarning })],
        ['url', (onWarning: (message: string) => void) => new RedisStore({ url: redis.url, onWarning })],
      ] as const) {
        const warnings = await warningsOn(make)
        assert.equal(warnings.length, 1, `${name}: ${warnings.join(' | ')}`)
        assert.match(warnings[0] as string, /evicts keys .*maxmemory-policy allkeys-lru, maxmemory 67108864 bytes.*starts again from zero/, name)
      }
    } finally {
      await nodeRedis.quit()
    }
  })

  it('keeps deciding when the onWarning it reports to throws', async () => {
    const limiter = new Limiter({ store: new RedisStore({ client: redis.client(), onWarning: () => { throw new Error('a broken logger') } }), prefix: 'evicting-throw', policies: { algorithm: 'fixed-window', limit: 5, windowMs: 60_000 } })
    const allowed: boolean[] = []
    for (let i = 0; i < 3; i++) {
      allowed.push((await limiter.limit('k')).allowed)
      await sleep(50)
    }
    assert.deepEqual(allowed, [true, true, true])
  })

  it('says nothing where a full Redis refuses writes instead (noeviction), or has no memory limit', async () => {
    const admin = redis.client()
    try {
      await admin.config('SET', 'maxmemory-policy', 'noeviction')
      assert.deepEqual(await warningsOn((onWarning) => new RedisStore({ client: redis.client(), onWarning })), [])
      await admin.config('SET', 'maxmemory-policy', 'allkeys-lru')
      await admin.config('SET', 'maxmemory', '0')
      assert.deepEqual(await warningsOn((onWarning) => new RedisStore({ client: redis.client(), onWarning })), [])
    } finally {
      await admin.config('SET', 'maxmemory', '64mb')
    }
  })
})
