import assert from 'node:assert/strict'
import { fork, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { after, before, describe, it } from 'node:test'
import { createClient } from '../../src/client/index.ts'
import { RedisStore } from '../../src/index.ts'
import type { StoreCallFailure } from '../../src/limiter/store-failures.ts'
import { startRedis, type RedisServer } from '../support/redis.ts'
import { refusalsAfterFirstWindow, startLimitedServer, type LimitedServer } from './servers.ts'

const WORKERS = 4
const LIMIT = 40
const PER_WORKER = 40

/** Four processes, each offering 200 requests a second (the fleet: 20x the quota of 40 a second). */
async function fleet(server: LimitedServer, redis: RedisServer, shared: boolean): Promise<number[]> {
  const worker = new URL('./fleet-worker.ts', import.meta.url).pathname
  const workers: ChildProcess[] = Array.from({ length: WORKERS }, () => fork(worker, {
    execArgv: ['--import', 'tsx'],
    env: { ...process.env, REDIS_URL: redis.url, TARGET: server.url, COUNT: String(PER_WORKER), INTERVAL_MS: '5', SHARED: shared ? '1' : '0' },
    timeout: 60_000,
  }))
  try {
    const ready = workers.map((child) => once(child, 'message'))
    await Promise.all(ready)
    // Every worker is up before the fleet starts, just after a window opens, so
    // the first window (when the fleet learns the quota) is a whole one.
    const startAt = Math.ceil(Date.now() / 1000) * 1000 + 50
    const results = workers.map((child) => once(child, 'message') as Promise<[number[]]>)
    for (const child of workers) child.send(startAt)
    return (await Promise.all(results)).flatMap(([statuses]) => statuses)
  } finally {
    for (const child of workers) child.kill()
  }
}

describe('a fleet of clients sharing one quota through Redis', () => {
  let redis: RedisServer
  before(async () => { redis = await startRedis() })
  after(() => redis.stop())

  it('4 processes with one quota stay within it; without sharing they do not', async (t) => {
    const alone = await startLimitedServer({ dialect: 'draft-10', limit: LIMIT })
    const together = await startLimitedServer({ dialect: 'draft-10', limit: LIMIT })
    try {
      // One fleet after the other: eight processes at once on a small machine delay requests past window ends.
      const unshared = await fleet(alone, redis, false)
      const shared = await fleet(together, redis, true)
      const perWindowAlone = refusalsAfterFirstWindow(alone)
      const perWindowTogether = refusalsAfterFirstWindow(together)
      t.diagnostic(`each client on its own: ${alone.refused} x 429 (${perWindowAlone.join(' ')} per window after the first)`)
      t.diagnostic(`sharing through Redis: ${together.refused} x 429 (${perWindowTogether.join(' ')} per window after the first)`)
      assert.deepEqual(shared.filter((status) => status !== 200), [], 'every request of the sharing fleet completes')
      assert.equal(unshared.length, WORKERS * PER_WORKER)
      assert.ok(perWindowTogether.every((refusals) => refusals <= 1), `sharing: at most one 429 per window after the first: ${perWindowTogether.join(' ')}`)
      // Alone, 60-85 refusals on an idle machine; 15 under the whole suite's load, whose slower workers collide less.
      assert.ok(alone.refused > together.refused + 5, `without sharing, the fleet is refused more often: ${alone.refused} against ${together.refused}`)
    } finally {
      await Promise.all([alone.close(), together.close()])
    }
  })

  it('a client whose Redis stops answering says so, and goes on pacing alone', async () => {
    const own = await startRedis()
    const server = await startLimitedServer({ dialect: 'draft-10', limit: LIMIT })
    const store = new RedisStore({ url: own.url })
    try {
      const client = createClient({ store })
      const failures: StoreCallFailure[] = []
      client.on('storeFailed', (failure) => failures.push(failure))
      const url = `${server.url}/items`
      for (let i = 0; i < 3; i++) assert.equal((await client.fetch(url)).status, 200)
      assert.equal(failures.length, 0, 'a store that answers is not reported')
      own.signal('SIGSTOP')
      try {
        const statuses = []
        for (let i = 0; i < 3; i++) statuses.push((await client.fetch(url)).status)
        assert.deepEqual(statuses, [200, 200, 200])
        // Reported once, not per call: the next report of the same failure waits 10 s.
        assert.equal(failures.length, 1, JSON.stringify(failures))
        assert.equal(failures[0]?.reason, 'timeout')
      } finally {
        own.signal('SIGCONT')
      }
    } finally {
      await store.close()
      await server.close()
      await own.stop()
    }
  })
})
