import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Limiter, RedisStore, type Policy } from '../../src/index.ts'
import { startRedis, type RedisServer } from '../support/redis.ts'
import { startWorkers, type Workers } from '../support/workers.ts'

const HOUR = 3_600_000
const DAY = 24 * HOUR

describe('RedisStore across processes', () => {
  let redis: RedisServer
  let workers: Workers
  before(async () => {
    redis = await startRedis()
    // Worker 3 runs with its clock 30 s ahead: on server time that must not matter.
    workers = await startWorkers(4, (i) => (i === 3 ? { SKEW_MS: '30000' } : {}))
  })
  after(async () => {
    await workers.stop()
    await redis.stop()
  })

  // Windows long enough that no window boundary falls inside the burst.
  const exact: Array<[string, Policy]> = [
    ['fixed window', { algorithm: 'fixed-window', limit: 100, windowMs: DAY }],
    ['sliding log', { algorithm: 'sliding-log', limit: 100, windowMs: HOUR }],
    ['token bucket', { algorithm: 'token-bucket', capacity: 100, refillTokens: 1, refillIntervalMs: HOUR }],
    ['leaky bucket', { algorithm: 'leaky-bucket', capacity: 100, leakTokens: 1, leakIntervalMs: HOUR }],
  ]

  for (const [name, policy] of exact) {
    it(`4 processes x 250 concurrent calls on one key, limit 100: exactly 100 admitted (${name})`, async () => {
      const startAt = Date.now() + 300
      const counts = await workers.run({ kind: 'burst', url: redis.url, prefix: `burst-${name.replace(' ', '-')}`, policy, calls: 250, startAt })
      assert.equal(counts.reduce((a, b) => a + b, 0), 100, `per process: ${counts.join(', ')}`)
    })
  }

  it('calls spanning keys across processes: per user AND global, exactly the binding limit admitted, and a refusal charges no key', async () => {
    // 4 processes x 250 calls over 40 users (10 per process) of 5 calls each: 200 fit the users' limits.
    const userLog: Policy = { algorithm: 'sliding-log', limit: 5, windowMs: HOUR, name: 'user' }
    const run = (prefix: string, globalLimit: number) => workers.run((worker) => ({
      kind: 'spanning', url: redis.url, prefix, worker, users: 10, calls: 250, startAt: Date.now() + 300,
      policies: [userLog, { algorithm: 'fixed-window', limit: globalLimit, windowMs: DAY, name: 'global' }],
    }))
    const peek = (prefix: string, globalLimit: number) => {
      const limiter = new Limiter({ store: new RedisStore({ client: redis.client() }), prefix, policies: [userLog, { algorithm: 'fixed-window', limit: globalLimit, windowMs: DAY, name: 'global' }] })
      return async (key: string) => (await limiter.peek(key, { keys: { global: 'all' } })).policies.map((p) => p.limit - p.remaining)
    }
    const users = Array.from({ length: 40 }, (_, i) => `user:${Math.floor(i / 10)}:${i % 10}`)

    // The global limit binds: 100 admitted, and the users' logs hold those 100 and not one refused call.
    const globalBinds = await run('span-global', 100)
    assert.equal(globalBinds.reduce((a, b) => a + b, 0), 100, `per process: ${globalBinds.join(', ')}`)
    const used = await Promise.all(users.map(peek('span-global', 100)))
    assert.equal(used.reduce((sum, [own]) => sum + (own as number), 0), 100, 'calls counted in the users\' logs')
    assert.ok(used.every(([own]) => (own as number) <= 5))

    // The users' limits bind: 200 admitted, and the global count holds those 200 and not one refused call.
    const usersBind = await run('span-users', 1000)
    assert.equal(usersBind.reduce((a, b) => a + b, 0), 200, `per process: ${usersBind.join(', ')}`)
    assert.deepEqual(await peek('span-users', 1000)('user:0:0'), [5, 200])
  })

  it('the sliding-window counter stays within its bound (at most the limit in one window)', async () => {
    const startAt = Date.now() + 300
    const counts = await workers.run({ kind: 'burst', url: redis.url, prefix: 'burst-sw', policy: { algorithm: 'sliding-window', limit: 100, windowMs: HOUR }, calls: 250, startAt })
    const total = counts.reduce((a, b) => a + b, 0)
    assert.ok(total <= 100, `admitted ${total}`)
    assert.ok(total >= 99, `admitted ${total}: a fresh key in one instant has no previous window to weigh`)
  })

  it('counter-example: the naive GET-then-INCR admits far more than the limit', async () => {
    const startAt = Date.now() + 300
    const counts = await workers.run({ kind: 'naive', url: redis.url, key: 'naive-counter', limit: 100, calls: 250, startAt })
    const total = counts.reduce((a, b) => a + b, 0)
    assert.ok(total > 100, `the race should over-admit, admitted ${total}`)
  })

  it('clock skew: processes 30 s apart share one limit exactly on server time (and split it on client time)', async () => {
    // A sliding log has no window boundary for the two runs to fall either side of.
    const policy: Policy = { algorithm: 'sliding-log', limit: 10, windowMs: 10_000 }
    // One process spends its calls, then the other (30 s ahead) tries the same key.
    const onServerTime = (worker: number) => workers.run({ kind: 'sequential', url: redis.url, prefix: 'skew-server', policy, calls: 10, time: 'server' }, [worker])
    const server = [...(await onServerTime(0)), ...(await onServerTime(3))]
    assert.deepEqual(server, [10, 0], 'one shared window: the second process gets nothing')
    // The same processes on their own clocks: the first one's calls are 30 s old to the second.
    const onClientTime = (worker: number) => workers.run({ kind: 'sequential', url: redis.url, prefix: 'skew-client', policy, calls: 10, time: 'client' }, [worker])
    const client = [...(await onClientTime(0)), ...(await onClientTime(3))]
    assert.deepEqual(client, [10, 10])
  })
})
