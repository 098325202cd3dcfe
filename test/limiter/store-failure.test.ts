/**
 * Real faults against a real redis-server: SIGKILL and restart, SIGSTOP and
 * SIGCONT, under steady concurrent load. Every call must return within
 * storeTimeoutMs (plus a margin for a loaded 2-core machine), with the
 * outcome the limiter's failure policy prescribes, and the limiter must go back
 * to Redis once it answers again.
 */
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it, type TestContext } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { Limiter, MemoryStore, RedisStore, type Decision, type Policy, type Store } from '../../src/index.ts'
import { freePort, startRedis, type RedisServer } from '../support/redis.ts'
import { partitionable } from '../support/partition.ts'
import type { Redis } from 'ioredis'

const TIMEOUT_MS = 150
const PROBE_MS = 200
const MARGIN_MS = 150

interface Sample { start: number; duration: number; decision: Decision }

/** 8 callers in a loop for `durationMs`, one call each every ~5 ms, while `fault` runs. */
async function underLoad(limiter: Limiter, durationMs: number, fault: () => Promise<void>): Promise<Sample[]> {
  const samples: Sample[] = []
  const origin = performance.now()
  const end = origin + durationMs
  const callers = Array.from({ length: 8 }, async (_, caller) => {
    for (let i = 0; performance.now() < end && i < 2000; i++) {
      const start = performance.now()
      const decision = await limiter.limit(`user-${caller}`)
      samples.push({ start: start - origin, duration: performance.now() - start, decision })
      await sleep(5)
    }
  })
  await Promise.all([...callers, fault()])
  return samples
}

function summary(samples: Sample[]) {
  const count = (predicate: (s: Sample) => boolean) => samples.filter(predicate).length
  return {
    calls: samples.length,
    exact: count((s) => !s.decision.degraded),
    timeout: count((s) => s.decision.reason === 'timeout'),
    storeError: count((s) => s.decision.reason === 'store-error'),
    circuitOpen: count((s) => s.decision.reason === 'circuit-open'),
    longestMs: Math.round(Math.max(...samples.map((s) => s.duration))),
  }
}

function report(t: TestContext, label: string, samples: Sample[], recoveredAfterMs: number) {
  t.diagnostic(`${label}: ${JSON.stringify({ ...summary(samples), recoveredAfterMs: Math.round(recoveredAfterMs) })}`)
}

describe('store failures under load (real redis-server)', () => {
  let redis: RedisServer
  before(async () => { redis = await startRedis() })
  after(async () => { await redis.stop() })

  /** A client as users configure it: reconnects quickly, re-sends nothing. */
  const client = () => redis.client({ retryStrategy: () => 50, autoResendUnfulfilledCommands: false, maxRetriesPerRequest: 1 })

  for (const onStoreFailure of ['open', 'closed', 'fallback'] as const) {
    it(`SIGKILL then restart: every call within the timeout, '${onStoreFailure}' during the outage, back on Redis after`, async (t) => {
      const limiter = new Limiter({
        store: new RedisStore({ client: client() }),
        prefix: `kill-${onStoreFailure}`,
        policies: { algorithm: 'fixed-window', limit: 1_000_000, windowMs: 60_000 },
        storeTimeoutMs: TIMEOUT_MS,
        onStoreFailure,
        circuit: { failures: 2, probeIntervalMs: PROBE_MS },
      })
      let restartedAt = 0
      const samples = await underLoad(limiter, 2200, async () => {
        await sleep(500)
        redis.signal('SIGKILL')
        await sleep(700)
        await redis.restart()
        restartedAt = performance.now()
      })
      const origin = performance.now() - Math.max(...samples.map((s) => s.start + s.duration))
      for (const s of samples) assert.ok(s.duration <= TIMEOUT_MS + MARGIN_MS, `a call took ${s.duration.toFixed(0)} ms`)
      const degraded = samples.filter((s) => s.decision.degraded)
      assert.ok(degraded.length > 0, 'the outage was seen')
      for (const { decision } of degraded) {
        assert.ok(decision.reason === 'timeout' || decision.reason === 'store-error' || decision.reason === 'circuit-open')
        if (onStoreFailure === 'open') assert.equal(decision.allowed, true)
        if (onStoreFailure === 'closed') assert.deepEqual([decision.allowed, decision.retryAfterMs], [false, PROBE_MS])
        if (onStoreFailure === 'fallback') assert.equal(decision.allowed, true, 'the local share of 1,000,000 is far from spent')
      }
      const afterRestart = samples.filter((s) => s.start + origin >= restartedAt - origin && !s.decision.degraded)
      assert.ok(afterRestart.length > 0, 'decisions came from Redis again')
      const firstExact = Math.min(...samples.filter((s) => !s.decision.degraded && s.start > 1200).map((s) => s.start))
      const recoveredAfterMs = firstExact - 1200
      assert.ok(recoveredAfterMs <= PROBE_MS + TIMEOUT_MS + 500, `recovered after ${recoveredAfterMs.toFixed(0)} ms`)
      assert.equal(limiter.storeUnavailable, false)
      report(t, `kill/${onStoreFailure}`, samples, recoveredAfterMs)
      // Exact again: a fresh key gets exactly its limit from Redis.
      const exact = new Limiter({ store: new RedisStore({ client: client() }), prefix: `after-${onStoreFailure}`, policies: { algorithm: 'sliding-log', limit: 3, windowMs: 60_000 } })
      const verdicts = []
      for (let i = 0; i < 4; i++) verdicts.push(await exact.limit('k'))
      assert.deepEqual(verdicts.map((d) => [d.allowed, d.degraded]), [[true, false], [true, false], [true, false], [false, false]])
    })
  }

  it('SIGKILL with a default ioredis client, which queues commands while disconnected: still never past the timeout', async (t) => {
    // Defaults: offline queue on, 20 retries per request: without storeTimeoutMs a call would wait for seconds.
    const { Redis } = await import('ioredis')
    const plain = new Redis(redis.url)
    plain.on('error', () => {})
    const limiter = new Limiter({
      store: new RedisStore({ client: plain }),
      prefix: 'kill-default-client',
      policies: { algorithm: 'token-bucket', capacity: 1_000_000, refillTokens: 1000, refillIntervalMs: 1000 },
      storeTimeoutMs: TIMEOUT_MS,
      onStoreFailure: 'open',
      circuit: { failures: 2, probeIntervalMs: PROBE_MS },
    })
    try {
      const samples = await underLoad(limiter, 2200, async () => {
        await sleep(500)
        redis.signal('SIGKILL')
        await sleep(700)
        await redis.restart()
      })
      for (const s of samples) assert.ok(s.duration <= TIMEOUT_MS + MARGIN_MS, `a call took ${s.duration.toFixed(0)} ms`)
      const stats = summary(samples)
      assert.ok(stats.timeout > 0, `queued commands were cut off by the timeout: ${JSON.stringify(stats)}`)
      assert.ok(samples.filter((s) => s.decision.degraded).every((s) => s.decision.allowed))
      const firstExact = Math.min(...samples.filter((s) => !s.decision.degraded && s.start > 1200).map((s) => s.start))
      assert.ok(Number.isFinite(firstExact), 'back on Redis after the restart')
      report(t, 'kill/open/default-client', samples, firstExact - 1200)
    } finally {
      plain.disconnect()
    }
  })

  it('SIGSTOP then SIGCONT: calls time out instead of hanging, late replies change nothing, each call is charged at most once', async (t) => {
    const admin = client()
    const limiter = new Limiter({
      store: new RedisStore({ client: client() }),
      prefix: 'freeze',
      policies: { algorithm: 'fixed-window', limit: 1_000_000, windowMs: 3_600_000, name: 'fw' },
      storeTimeoutMs: TIMEOUT_MS,
      onStoreFailure: 'fallback',
      circuit: { failures: 2, probeIntervalMs: PROBE_MS },
    })
    const samples = await underLoad(limiter, 2200, async () => {
      await sleep(500)
      redis.signal('SIGSTOP')
      await sleep(700)
      redis.signal('SIGCONT')
    })
    for (const s of samples) assert.ok(s.duration <= TIMEOUT_MS + MARGIN_MS, `a call took ${s.duration.toFixed(0)} ms`)
    const stats = summary(samples)
    assert.ok(stats.timeout > 0 && stats.circuitOpen > 0, JSON.stringify(stats))
    const firstExact = Math.min(...samples.filter((s) => !s.decision.degraded && s.start > 1200).map((s) => s.start))
    report(t, 'freeze/fallback', samples, firstExact - 1200)
    await sleep(200) // let every late reply arrive
    // Counted in Redis: every exact allowed call, plus calls that timed out but ran once Redis woke.
    // Never more than the calls that were sent: none ran twice.
    const sent = stats.exact + stats.timeout
    let counted = 0
    for (const key of await admin.keys('freeze:*')) counted += Number((await admin.get(key))?.split(':')[1])
    assert.ok(counted >= stats.exact && counted <= sent, `Redis counted ${counted}; exact ${stats.exact}, sent ${sent}`)
  })

  it("a degraded decision says why, and the fallback scales limits to the instance's share", async () => {
    // Nothing listens on this port: every call fails fast.
    const { freePort } = await import('../support/redis.ts')
    const port = await freePort()
    const store = new RedisStore({ url: `redis://127.0.0.1:${port}` })
    const limiter = new Limiter({
      store,
      prefix: 'down',
      policies: { algorithm: 'fixed-window', limit: 10, windowMs: 60_000 },
      clock: () => 90_000, // the fallback's five calls in one window, wherever the wall clock is
      storeTimeoutMs: 100,
      expectedInstances: 3,
      circuit: { failures: 1, probeIntervalMs: 60_000 },
    })
    const decisions = []
    for (let i = 0; i < 5; i++) decisions.push(await limiter.limit('k'))
    assert.deepEqual(decisions.map((d) => d.allowed), [true, true, true, false, false], '10 / 3 instances = 3 locally')
    assert.ok(decisions.every((d) => d.degraded && d.limit === 3))
    assert.ok(decisions[0]?.reason === 'store-error' || decisions[0]?.reason === 'timeout')
    assert.equal(decisions[4]?.reason, 'circuit-open')
    await assert.rejects(limiter.reset('k'), /ERR_SLUICE_STORE|reset of "k" failed/)
    await store.close()
  })

  it('a refund that never reached Redis (a partition) is given once Redis answers again: an outage loses no slot of a concurrency limit; one that timed out is not given twice', async () => {
    const partition = await partitionable(redis.port)
    const store = new RedisStore({ url: `redis://127.0.0.1:${partition.port}` })
    const limiter = new Limiter({
      store,
      prefix: 'owed',
      blockCache: false,
      onStoreFailure: 'closed',
      storeTimeoutMs: TIMEOUT_MS,
      circuit: { failures: 1, probeIntervalMs: PROBE_MS },
      policies: { algorithm: 'sliding-log', name: 'jobs-running', limit: 1, windowMs: 600_000 },
    })
    // Waits, bounded, for Redis to say the tenant's slot is free (the owed refund given).
    const slotFreed = async () => {
      const deadline = performance.now() + 5000
      for (;;) {
        const decision = await limiter.peek('tenant')
        if ((!decision.degraded && decision.remaining === 1) || performance.now() > deadline) return decision
        await sleep(50)
      }
    }
    try {
      const job = await limiter.limit('tenant')
      assert.deepEqual([job.allowed, job.degraded ?? false], [true, false])
      partition.cut()
      // The job ends while the partition lasts (one in flight as it began could have reached Redis: below).
      for (let i = 0; i < 20 && !(await limiter.peek('tenant')).degraded; i++) await sleep(25)
      await assert.rejects(limiter.refund('tenant', 1, job, 2000), /^SluiceError: refund to "tenant" failed \((store-error: .*|circuit-open)\); given again once the store answers, until /)
      assert.equal(limiter.refundsOwed, 1)
      // Without knowing how long the unit was held, a late refund could free another job's unit: not kept.
      await assert.rejects(limiter.refund('tenant', 1), /failed \(circuit-open\); not given again: without heldMs/)
      assert.equal(limiter.refundsOwed, 1)
      await partition.heal()
      // Given with no call to carry it (nothing else reaches this limiter), within a few probe intervals.
      for (let i = 0; i < 100 && limiter.refundsOwed > 0; i++) await sleep(50)
      assert.equal(limiter.refundsOwed, 0)
      const freed = await slotFreed()
      assert.deepEqual([freed.degraded ?? false, freed.remaining], [false, 1])
      // Given once: the slot holds one job again.
      assert.deepEqual([(await limiter.limit('tenant')).allowed, (await limiter.limit('tenant')).allowed], [true, false])
      // A refund whose answer timed out may have been taken (here it is, late): it is not owed as well.
      redis.signal('SIGSTOP')
      try {
        await assert.rejects(limiter.refund('tenant', 1, job, 2000), /failed \(timeout\); not given again: the store may have taken it/)
        assert.equal(limiter.refundsOwed, 0)
      } finally {
        redis.signal('SIGCONT')
      }
      const late = await slotFreed()
      assert.deepEqual([late.degraded ?? false, late.remaining], [false, 1])
    } finally {
      await store.close()
      partition.cut()
    }
  })

  it('a refund Redis ran but whose answer was lost with the connection is not owed: given once, never twice', async () => {
    const partition = await partitionable(redis.port)
    const store = new RedisStore({ url: `redis://127.0.0.1:${partition.port}` })
    const watching = new RedisStore({ url: redis.url })
    const policies = { algorithm: 'sliding-log', name: 'jobs-running', limit: 2, windowMs: 600_000 } as const
    // A store timeout longer than the reconnect: the refund fails with the dropped connection, not a timeout.
    const limiter = new Limiter({ store, prefix: 'dropped', blockCache: false, onStoreFailure: 'closed', storeTimeoutMs: 5000, circuit: { failures: 1, probeIntervalMs: PROBE_MS }, policies })
    const watcher = new Limiter({ store: watching, prefix: 'dropped', blockCache: false, policies })
    const freeSlots = async (expected: number) => {
      let remaining = -1
      for (let i = 0; i < 100 && remaining !== expected; i++) {
        remaining = (await watcher.peek('tenant')).remaining
        if (remaining !== expected) await sleep(20)
      }
      return remaining
    }
    try {
      const first = await limiter.limit('tenant')
      const second = await limiter.limit('tenant')
      assert.deepEqual([first.allowed, second.allowed], [true, true])
      partition.holdReplies()
      const refunding = limiter.refund('tenant', 1, first, 1000)
      // Redis gives the unit back; its answer never arrives, and the connection drops.
      assert.equal(await freeSlots(1), 1)
      partition.cut()
      await assert.rejects(refunding, /^SluiceError: refund to "tenant" failed \(store-error: Reached the max retries per request limit .*\); not given again: the store may have taken it$/)
      assert.equal(limiter.refundsOwed, 0)
      await partition.heal()
      for (let i = 0; i < 100 && (await limiter.peek('tenant')).degraded; i++) await sleep(50)
      await sleep(PROBE_MS * 2)
      // Given once: the second job still holds its unit (owed and given again, both would be free).
      assert.equal((await watcher.peek('tenant')).remaining, 1)
      assert.deepEqual([(await limiter.limit('tenant')).allowed, (await limiter.limit('tenant')).allowed], [true, false])
    } finally {
      await store.close()
      await watching.close()
      partition.cut()
    }
  })

  /**
   * A refund Redis refuses unrun (`refuse` makes it so, `allow` undoes it) is owed: still owed while Redis
   * answers PING and goes on refusing, and given once it takes writes again, freeing the unit.
   */
  const owedWhileRefused = async (options: { serverArgs?: string[]; user?: string; policy: Policy; refuse: (admin: Redis) => Promise<unknown>; allow: (admin: Redis) => Promise<unknown>; refusal: string }) => {
    const node = await startRedis(options.serverArgs)
    const admin = node.client()
    // The limiter as an ACL user of its own, who may do all, until refuse() says otherwise.
    if (options.user !== undefined) await admin.call('ACL', 'SETUSER', options.user, 'on', '>secret', '~*', '&*', '+@all')
    const store = new RedisStore({ url: options.user === undefined ? node.url : node.url.replace('//', `//${options.user}:secret@`) })
    const limiter = new Limiter({ store, prefix: 'refused', blockCache: false, onStoreFailure: 'closed', storeTimeoutMs: 1000, circuit: { failures: 1, probeIntervalMs: PROBE_MS }, policies: options.policy })
    try {
      const job = await limiter.limit('tenant')
      assert.equal(job.allowed, true)
      await options.refuse(admin)
      await assert.rejects(limiter.refund('tenant', 1, job, 1000), (error: Error) => error.message.startsWith(`refund to "tenant" failed (store-error: ${options.refusal}`) && / given again once the store answers, until /.test(error.message))
      assert.equal(limiter.refundsOwed, 1)
      // Still refused: kept, not dropped.
      await sleep(PROBE_MS * 3)
      assert.equal(limiter.refundsOwed, 1)
      await options.allow(admin)
      for (let i = 0; i < 100 && limiter.refundsOwed > 0; i++) await sleep(50)
      assert.equal(limiter.refundsOwed, 0)
      assert.deepEqual([(await limiter.limit('tenant')).allowed, (await limiter.limit('tenant')).allowed], [true, false])
    } finally {
      await store.close()
      await node.stop()
    }
  }

  it('a refund a demoted primary refuses (READONLY) is owed, and given once it is promoted again', async () => {
    await owedWhileRefused({
      policy: { algorithm: 'sliding-log', name: 'jobs-running', limit: 1, windowMs: 600_000 },
      // A replica of a primary it cannot reach keeps its data and refuses writes, as a demoted primary does.
      refuse: async (admin) => admin.call('REPLICAOF', '127.0.0.1', String(await freePort())),
      allow: (admin) => admin.call('REPLICAOF', 'NO', 'ONE'),
      refusal: "READONLY You can't write against a read only replica.",
    })
  })

  it('a refund a full Redis refuses (OOM under noeviction) is owed, and given once it has room', async () => {
    await owedWhileRefused({
      serverArgs: ['--maxmemory-policy', 'noeviction'],
      // A sliding log's refund only removes, which a full Redis allows; a bucket's writes its level.
      policy: { algorithm: 'token-bucket', name: 'jobs', capacity: 1, refillTokens: 1, refillIntervalMs: 600_000 },
      // A maxmemory below what Redis already holds: every write that may grow it refused, as when it fills up.
      refuse: (admin) => admin.config('SET', 'maxmemory', '1'),
      allow: (admin) => admin.config('SET', 'maxmemory', '0'),
      refusal: "OOM command not allowed when used memory > 'maxmemory'.",
    })
  })

  it('a refund Redis refuses for want of replicas (NOREPLICAS under min-replicas-to-write) is owed, and given once they are back', async () => {
    await owedWhileRefused({
      policy: { algorithm: 'token-bucket', name: 'jobs', capacity: 1, refillTokens: 1, refillIntervalMs: 600_000 },
      refuse: (admin) => admin.config('SET', 'min-replicas-to-write', '1'),
      allow: (admin) => admin.config('SET', 'min-replicas-to-write', '0'),
      refusal: 'NOREPLICAS Not enough good replicas to write.',
    })
  })

  it('a refund Redis refuses after a failed snapshot (MISCONF) is owed, and given once writes are allowed again', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-misconf-'))
    await owedWhileRefused({
      serverArgs: ['--enable-protected-configs', 'yes'],
      policy: { algorithm: 'token-bucket', name: 'jobs', capacity: 1, refillTokens: 1, refillIntervalMs: 600_000 },
      // A snapshot into a directory gone (a disk lost or full): Redis then refuses every write, as it does by default.
      refuse: async (admin) => {
        await admin.config('SET', 'dir', dir)
        await admin.config('SET', 'save', '3600 1')
        rmSync(dir, { recursive: true, force: true })
        await admin.bgsave()
        for (let i = 0; i < 100 && !(await admin.info('persistence')).includes('rdb_last_bgsave_status:err'); i++) await sleep(20)
      },
      allow: (admin) => admin.config('SET', 'stop-writes-on-bgsave-error', 'no'),
      refusal: 'MISCONF Redis is configured to save RDB snapshots',
    })
  })

  it('a refund an ACL refuses (NOPERM, checked before the script runs) is owed, and given once the user may again', async () => {
    await owedWhileRefused({
      user: 'limiter',
      policy: { algorithm: 'token-bucket', name: 'jobs', capacity: 1, refillTokens: 1, refillIntervalMs: 600_000 },
      refuse: (admin) => admin.call('ACL', 'SETUSER', 'limiter', '-@scripting'),
      allow: (admin) => admin.call('ACL', 'SETUSER', 'limiter', '+@scripting'),
      refusal: 'NOPERM this user has no permissions to run the',
    })
  })

  it("a Redis that answers the probe but refuses every call keeps the fallback's counts: the store is back when a call succeeds, not when PING does", async () => {
    const node = await startRedis()
    const store = new RedisStore({ url: node.url })
    const admin = node.client()
    const probeIntervalMs = 40
    const limiter = new Limiter({ store, prefix: 'refusing', onStoreFailure: 'fallback', circuit: { failures: 3, probeIntervalMs }, policies: { algorithm: 'fixed-window', name: 'hourly', limit: 4, windowMs: 3_600_000 } })
    try {
      // Writes refused (as under MISCONF or OOM too), while PING, the probe, answers.
      await admin.config('SET', 'min-replicas-to-write', '1')
      const decisions: Decision[] = []
      const until = Date.now() + probeIntervalMs * 15
      while (Date.now() < until && decisions.length < 500) {
        decisions.push(await limiter.limit('tenant'))
        await sleep(5)
      }
      assert.ok(decisions.every((d) => d.degraded))
      // Before, each answered probe counted as the store back and emptied the fallback: 4 more a probe.
      assert.equal(decisions.filter((d) => d.allowed).length, 4)
      // Each answered probe lets one call try the store, whose failure opens the circuit again at once.
      const tried = decisions.filter((d) => d.reason === 'store-error').length
      assert.ok(tried > 3 && tried <= 3 + 16, `${tried} calls went to the store`)
      await admin.config('SET', 'min-replicas-to-write', '0')
      let back: Decision | undefined
      for (let i = 0; i < 100 && (back === undefined || back.degraded); i++) {
        await sleep(10)
        back = await limiter.limit('tenant')
      }
      // Redis decides again, from its own count (nothing was written during the refusals).
      assert.deepEqual([back?.degraded, back?.allowed, back?.remaining], [false, true, 3])
    } finally {
      await store.close()
      await node.stop()
    }
  })

  it("the fallback's counts outlive the store's returns: a store that decides some keys and not others (a Cluster with a master down) gives no key a fresh local share", async () => {
    const memory = new MemoryStore()
    // The keys of one master fail; the rest, and the probe, are answered.
    const halfDown: Store = {
      consume: (call) => (call.key.startsWith('down') ? Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:7002')) : memory.consume(call)),
      reset: (prefix, key, policies) => memory.reset(prefix, key, policies),
    }
    let now = 90_000
    const limiter = new Limiter({ store: halfDown, clock: () => now, onStoreFailure: 'fallback', circuit: { failures: 1, probeIntervalMs: 10 }, policies: { algorithm: 'fixed-window', name: 'hourly', limit: 3, windowMs: 3_600_000 } })
    const allowed = { down: 0, up: 0 }
    for (let i = 0; i < 40; i++) {
      now += 20 // past each probe interval: the circuit is probed, found answering, and opened again by the next failure
      if ((await limiter.limit('down-tenant')).allowed) allowed.down++
      await sleep(1) // the probe, in the background
      if ((await limiter.limit('up-tenant')).allowed) allowed.up++
    }
    // Before, each return of the store emptied the whole fallback: the failing key took 3 more each time.
    assert.equal(allowed.down, 3)
    // The answered key, degraded while the circuit was open: the limit on the store, and the fallback's share once, however often the circuit opened.
    assert.equal(allowed.up, 3 + 3)
  })

  it('limiters given one fallbackStore count one local share together', async () => {
    const down: Store = { consume: () => Promise.reject(new Error('connection refused')), reset: () => Promise.resolve() }
    const policy = { algorithm: 'fixed-window', limit: 3, windowMs: 60_000, name: 'api' } as const
    const fallbackStore = new MemoryStore()
    // One instant for all four calls: on the wall clock they could straddle a minute's boundary.
    const clock = () => 90_000
    const alone = new Limiter({ store: down, policies: policy, fallbackStore, clock, circuit: { failures: 1, probeIntervalMs: 60_000 } })
    const withLogin = new Limiter({ store: down, policies: [policy, { algorithm: 'fixed-window', limit: 10, windowMs: 60_000, name: 'login' }], fallbackStore, clock })
    const allowed = []
    for (const limiter of [alone, withLogin, alone, withLogin]) allowed.push((await limiter.limit('k')).allowed)
    assert.deepEqual(allowed, [true, true, true, false])
    assert.throws(() => new Limiter({ store: down, policies: policy, fallbackStore: {} as MemoryStore }), /^ArgumentError: fallbackStore must be a MemoryStore \(got an object\)/)
  })
})
