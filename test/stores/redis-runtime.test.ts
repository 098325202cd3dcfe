/**
 * RedisStore where the runtime has no global setImmediate (Deno has none): it
 * batches in a microtask instead. Its own process, so the global can go before
 * sluice loads.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { startRedis, type RedisServer } from '../support/redis.ts'

const setImmediateOfNode = globalThis.setImmediate
// @ts-expect-error -- a runtime without it
delete globalThis.setImmediate
const { Limiter, RedisStore } = await import('../../src/index.ts')

describe('RedisStore without a global setImmediate', () => {
  let redis: RedisServer
  before(async () => { redis = await startRedis() })
  after(async () => {
    globalThis.setImmediate = setImmediateOfNode
    await redis.stop()
  })

  it('decides through Redis, in order', async () => {
    const store = new RedisStore({ client: redis.client() })
    const limiter = new Limiter({ store, prefix: 'runtime', policies: [{ algorithm: 'fixed-window', limit: 1, windowMs: 60_000 }], clock: () => 42_000 })
    const [first, second] = await Promise.all([limiter.limit('k'), limiter.limit('k')])
    assert.deepEqual([first.allowed, second.allowed], [true, false])
    assert.equal((await redis.client().keys('runtime:{k}:*')).length, 1, 'the state is in Redis')
  })
})
