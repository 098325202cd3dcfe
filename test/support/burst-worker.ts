/**
 * A separate Node process for multi-process tests, driven over IPC. Each
 * message names a scenario; the worker answers with how many calls it was
 * allowed. SKEW_MS shifts this process's Date.now(), to play an app server
 * whose clock is off.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import { Limiter, RedisStore, type Decision, type Policy, type Store } from '../../src/index.ts'

const skew = Number(process.env.SKEW_MS ?? 0)
if (skew !== 0) {
  const realNow = Date.now.bind(Date)
  Date.now = () => realNow() + skew
}

export type Scenario =
  | { kind: 'burst'; url: string; prefix: string; policy: Policy; calls: number; startAt: number; shards?: number; lease?: { units: number }; sequential?: boolean; durationMs?: number; paceMs?: number }
  | { kind: 'naive'; url: string; key: string; limit: number; calls: number; startAt: number }
  | { kind: 'sequential'; url: string; prefix: string; policy: Policy; calls: number; time: 'server' | 'client' }
  /** `calls` concurrent calls over `users` keys of this worker's own (`user:<worker>:<n>`), each also spending from the key "all" (policy "global"). */
  | { kind: 'spanning'; url: string; prefix: string; worker: number; users: number; policies: Policy[]; calls: number; startAt: number }

const clients = new Map<string, Redis>()
/** Calls that reached the store in this process (burst scenarios). */
let storeCalls = 0
function client(url: string): Redis {
  let c = clients.get(url)
  if (c === undefined) {
    c = new Redis(url, { maxRetriesPerRequest: 1 })
    clients.set(url, c)
  }
  return c
}

/** Waits until the shared start time (on the real clock, whatever this process's skew). */
async function until(startAt: number): Promise<void> {
  const wait = startAt - (Date.now() - skew)
  if (wait > 0) await sleep(wait)
}

/** How many were allowed, all decided by Redis: a degraded decision fails the scenario, naming why. */
function allowedExactly(decisions: Decision[]): number {
  const degraded = decisions.filter((d) => d.degraded)
  if (degraded.length > 0) throw new Error(`${degraded.length} of ${decisions.length} decisions were not made by Redis (${[...new Set(degraded.map((d) => d.reason))].join(', ')})`)
  return decisions.filter((d) => d.allowed).length
}

async function run(scenario: Scenario): Promise<number> {
  const redis = client(scenario.url)
  await redis.ping()
  switch (scenario.kind) {
    case 'burst': {
      const store = new RedisStore({ client: redis })
      // Counts the calls that reach Redis (a lease spends most of them locally).
      const counted: Store = {
        consume: (call) => { storeCalls++; return store.consume(call) },
        reset: (prefix, key, policies) => store.reset(prefix, key, policies),
        ping: () => store.ping(),
      }
      // These scenarios check that Redis decides exactly; a CPU-starved CI machine can hold a
      // batch past the default 250 ms timeout, and the fallback would then admit on its own.
      const limiter = new Limiter({ store: counted, prefix: scenario.prefix, policies: scenario.policy, shards: scenario.shards ?? 1, storeTimeoutMs: 10_000, ...(scenario.lease ? { lease: scenario.lease } : {}) })
      await until(scenario.startAt)
      if (scenario.sequential) {
        // `calls` calls, or as many as fit in durationMs (still at most `calls`).
        const end = scenario.startAt + (scenario.durationMs ?? Infinity)
        const decisions: Decision[] = []
        for (let i = 0; i < scenario.calls && Date.now() - skew < end; i++) {
          decisions.push(await limiter.limit('hot'))
          if (scenario.paceMs !== undefined) await sleep(scenario.paceMs)
        }
        return allowedExactly(decisions)
      }
      const decisions = await Promise.all(Array.from({ length: scenario.calls }, () => limiter.limit('hot')))
      return allowedExactly(decisions)
    }
    case 'naive': {
      // The classic race: read, compare, then increment in a second command.
      await until(scenario.startAt)
      const results = await Promise.all(Array.from({ length: scenario.calls }, async () => {
        const count = Number((await redis.get(scenario.key)) ?? 0)
        if (count >= scenario.limit) return false
        await redis.incr(scenario.key)
        return true
      }))
      return results.filter(Boolean).length
    }
    case 'spanning': {
      const limiter = new Limiter({ store: new RedisStore({ client: redis }), prefix: scenario.prefix, policies: scenario.policies, storeTimeoutMs: 10_000 })
      await until(scenario.startAt)
      const decisions = await Promise.all(Array.from({ length: scenario.calls }, (_, i) => limiter.limit(`user:${scenario.worker}:${i % scenario.users}`, { keys: { global: 'all' } })))
      return allowedExactly(decisions)
    }
    case 'sequential': {
      const limiter = new Limiter({ store: new RedisStore({ client: redis, time: scenario.time }), prefix: scenario.prefix, policies: scenario.policy, storeTimeoutMs: 10_000 })
      const decisions: Decision[] = []
      for (let i = 0; i < scenario.calls; i++) decisions.push(await limiter.limit('shared'))
      return allowedExactly(decisions)
    }
  }
}

process.on('message', (message: { id: number; scenario: Scenario } | 'exit') => {
  if (message === 'exit') {
    for (const c of clients.values()) c.disconnect()
    process.exit(0)
  }
  storeCalls = 0
  run(message.scenario).then(
    (allowed) => process.send?.({ id: message.id, allowed, storeCalls }),
    (error: unknown) => process.send?.({ id: message.id, error: String(error) }),
  )
})
process.send?.('ready')
