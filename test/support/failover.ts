/**
 * A master killed under load, through each Redis client a deployment offers
 * (ioredis, node-redis): what every test of a failover checks, whatever
 * promotes the replica (Sentinel, a Cluster's own election).
 */
import assert from 'node:assert/strict'
import type { TestContext } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { Limiter, RedisStore, type RedisClient } from '../../src/index.ts'

const STORE_TIMEOUT_MS = 150

/**
 * Four callers per client decide `key(caller)` every 10 ms; a second in,
 * `kill` takes the master down. Each caller goes on until Redis decides again,
 * half a second after the kill at the soonest, and `forMs` at most. Then, per
 * client: no call outlived the store timeout (with slack for a busy host),
 * the outage was seen, and Redis decided again (how soon goes to the test's diagnostics).
 */
export async function decideThroughFailover(
  t: TestContext,
  clients: Record<string, RedisClient>,
  options: { prefix: string; key: (caller: number) => string; kill: () => void; forMs: number },
): Promise<void> {
  const limiters = Object.entries(clients).map(([label, client]) => ({
    label,
    limiter: new Limiter({
      store: new RedisStore({ client }),
      prefix: `${options.prefix}-${label}`,
      policies: { algorithm: 'fixed-window', limit: 1_000_000, windowMs: 3_600_000, name: 'fw' },
      storeTimeoutMs: STORE_TIMEOUT_MS,
      onStoreFailure: 'fallback',
      circuit: { failures: 2, probeIntervalMs: 200 },
    }),
  }))
  const origin = performance.now()
  let killedAt = Infinity
  const fault = (async () => {
    await sleep(1000)
    killedAt = performance.now() - origin
    options.kill()
  })()
  const runs = await Promise.all(limiters.map(async ({ label, limiter }) => {
    const samples: Array<{ at: number; ms: number; degraded: boolean; reason: string | undefined }> = []
    await Promise.all(Array.from({ length: 4 }, async (_, caller) => {
      for (let i = 0; i < 5000 && performance.now() - origin < options.forMs; i++) {
        const start = performance.now()
        const decision = await limiter.limit(options.key(caller))
        samples.push({ at: start - origin, ms: performance.now() - start, degraded: decision.degraded, reason: decision.reason })
        if (start - origin > killedAt + 500 && !decision.degraded) break
        await sleep(10)
      }
    }))
    return { label, samples }
  }))
  await fault
  for (const { label, samples } of runs) {
    const longest = Math.max(...samples.map((sample) => sample.ms))
    assert.ok(longest <= STORE_TIMEOUT_MS + 150, `${label}: a call took ${longest.toFixed(0)} ms`)
    const gap = samples.filter((sample) => sample.degraded)
    assert.ok(gap.length > 0, `${label}: the outage was seen`)
    const resumed = samples.filter((sample) => !sample.degraded && sample.at > killedAt)
    assert.ok(resumed.length > 0, `${label}: exact decisions resumed on the new master`)
    const byReason = Object.fromEntries(['timeout', 'store-error', 'circuit-open'].map((reason) => [reason, gap.filter((sample) => sample.reason === reason).length]))
    t.diagnostic(`${label} failover: ${JSON.stringify({ calls: samples.length, degraded: gap.length, byReason, longestMs: Math.round(longest), exactAgainAfterKillMs: Math.round(Math.min(...resumed.map((sample) => sample.at)) - killedAt) })}`)
  }
}

/** After the failover, through each client, a limit of 2 on `key` admits exactly 2. */
export async function decidesExactly(clients: Record<string, RedisClient>, prefix: string, key: string): Promise<void> {
  for (const [label, client] of Object.entries(clients)) {
    const exact = new Limiter({ store: new RedisStore({ client }), prefix: `${prefix}-${label}`, policies: { algorithm: 'fixed-window', limit: 2, windowMs: 3_600_000, name: 'fw' } })
    assert.deepEqual([(await exact.limit(key)).allowed, (await exact.limit(key)).allowed, (await exact.limit(key)).allowed], [true, true, false], label)
  }
}
