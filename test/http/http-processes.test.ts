import assert from 'node:assert/strict'
import { fork, type ChildProcess } from 'node:child_process'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { httpStatePrefix, Limiter, RedisStore } from '../../src/index.ts'
import { startRedis, type RedisServer } from '../support/redis.ts'

describe('two server processes sharing one Redis', () => {
  let redis: RedisServer
  const servers: Array<{ child: ChildProcess; port: number }> = []
  let watching: RedisStore
  // The concurrency limit's state as the processes keep it, read without charging.
  let inProgress: Limiter
  /** Waits, bounded, until the processes have given back every unit: each a Redis call made once its response has ended, which can land after the client has read the last byte. */
  const allUnitsBack = async () => {
    for (let i = 0; i < 40 && (await inProgress.peek('ip:127.0.0.1')).remaining !== 4; i++) await sleep(50)
  }
  before(async () => {
    redis = await startRedis()
    watching = new RedisStore({ url: redis.url })
    inProgress = new Limiter({ store: watching, prefix: httpStatePrefix('two-servers'), blockCache: false, policies: { algorithm: 'sliding-log', name: 'in-progress', limit: 4, windowMs: 3_600_000 } })
    const policy = { algorithm: 'sliding-log', limit: 50, windowMs: 3_600_000, name: 'shared' }
    for (let i = 0; i < 2; i++) {
      const child = fork(new URL('../support/http-worker.ts', import.meta.url).pathname, [], {
        execArgv: ['--import', 'tsx'],
        env: { ...process.env, SLUICE_HTTP_WORKER: JSON.stringify({ url: redis.url, prefix: 'two-servers', policy }) },
      })
      const port = await new Promise<number>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('server process did not start within 20 s')), 20_000)
        child.once('message', (m: { port: number }) => { clearTimeout(timer); resolve(m.port) })
      })
      servers.push({ child, port })
    }
  })
  after(async () => {
    await Promise.all(servers.map(({ child }) => new Promise<void>((resolve) => {
      child.once('exit', () => resolve())
      child.send('exit')
      setTimeout(() => child.kill('SIGKILL'), 3000).unref()
    })))
    await watching.close()
    await redis.stop()
  })

  it('admit exactly the limit together, whichever server a request reaches', async () => {
    // 100 requests, alternating servers, 10 at a time: one client, one limit of 50.
    let ok = 0
    let refused = 0
    for (let batch = 0; batch < 10; batch++) {
      const statuses = await Promise.all(Array.from({ length: 10 }, (_, i) => fetch(`http://127.0.0.1:${servers[(batch + i) % 2]?.port}/`).then((r) => r.status)))
      ok += statuses.filter((s) => s === 200).length
      refused += statuses.filter((s) => s === 429).length
    }
    assert.deepEqual([ok, refused], [50, 50])
  })

  it('hold a concurrency limit together: exactly the limit in progress at once across both, every unit back as its response ends', async () => {
    // Three bursts of 10 requests of 500 ms, alternating servers, against 4 in progress at once.
    const rounds: number[][] = []
    for (let round = 0; round < 3; round++) {
      const statuses = await Promise.all(Array.from({ length: 10 }, (_, i) => fetch(`http://127.0.0.1:${servers[i % 2]?.port}/slow`).then(async (r) => {
        await r.arrayBuffer()
        return r.status
      })))
      rounds.push([statuses.filter((s) => s === 200).length, statuses.filter((s) => s === 429).length])
      await allUnitsBack()
    }
    assert.deepEqual(rounds, [[4, 6], [4, 6], [4, 6]])
  })

  it('a concurrency refusal in one process does not outlive the units the other gives back', async () => {
    const slow = (server: number, holdMs = 500) => fetch(`http://127.0.0.1:${servers[server]?.port}/slow`, { headers: { 'x-hold-ms': String(holdMs) } })
    // The first process admits four, and holds them while their bodies stream.
    const held = await Promise.all(Array.from({ length: 4 }, () => slow(0, 2000)))
    assert.deepEqual(held.map((res) => res.status), [200, 200, 200, 200])
    assert.equal((await inProgress.peek('ip:127.0.0.1')).remaining, 0)
    // The second refuses while the first holds every unit (it remembered such refusals until their
    // retry time, an hour for this log, though units come back as responses end).
    const refused = await slow(1)
    assert.equal(refused.status, 429)
    await refused.arrayBuffer()
    await Promise.all(held.map((res) => res.arrayBuffer()))
    await allUnitsBack()
    const admitted = await slow(1)
    assert.equal(admitted.status, 200)
    await admitted.arrayBuffer()
  })
})
