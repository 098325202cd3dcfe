import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import type { Policy } from '../../src/index.ts'
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
