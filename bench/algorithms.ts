/**
 * The algorithms on Redis, side by side (not a test): the blog table every
 * team draws before choosing, measured. The two classic hand-written limiters
 * (a fixed window with INCR + PEXPIRE, a sliding log with Lua over a sorted
 * set, both on the client's clock) beside sluice's five algorithms, each one
 * Lua call with the server's clock. Starts its own redis-server.
 *
 * Per system: decisions/s and mean latency (closed loop, 16 in flight, 100,000
 * keys), Redis CPU per decision (INFO cpu before and after), accuracy at a
 * window boundary (the limit sent just before a boundary and again just
 * after: how many were admitted, as a multiple of the limit), and bytes per
 * key in Redis (MEMORY USAGE) with each key's state full. Then the sliding
 * log's memory as its limit grows.
 *
 *   npm run bench:algorithms          (about a minute)
 *   BENCH_MS=1000 npm run bench:algorithms
 */
import { execFileSync } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import { Limiter, RedisStore, redisKey, type Policy } from 'sluice'
import { startRedis } from '../test/support/redis.ts'
import { emit, QUICK, ratio } from './report.ts'

const ROUND_MS = Number(process.env.BENCH_MS ?? 3000)
const IN_FLIGHT = 16
const KEYS = Array.from({ length: 100_000 }, (_, i) => `client-${i}`)
/** The limits under test: high for throughput (no key nears a million a second), small for the boundary and memory figures. */
const HIGH = 1_000_000
const BOUNDARY_LIMIT = 50
const BOUNDARY_WINDOW_MS = 1000

type Decide = (key: string) => Promise<boolean>

interface System {
  name: string
  /** A decide function for a limit of `limit` per `windowMs`, keys under `prefix`. */
  make(limit: number, windowMs: number, prefix: string): Decide
  /** The Redis keys holding `key`'s state now, for a limit with windows of `windowMs`. */
  keysOf(prefix: string, key: string, windowMs: number): string[]
}

const SLIDING_LOG_LUA = `
local key, now, window, limit, member = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
redis.call('ZREMRANGEBYSCORE', key, 0, now - window)
if redis.call('ZCARD', key) < limit then
  redis.call('ZADD', key, now, member)
  redis.call('PEXPIRE', key, window)
  return 1
end
return 0`

function systems(redis: Redis, url: string): System[] {
  let sequence = 0
  const classic: System[] = [
    {
      name: 'classic fixed window (INCR + PEXPIRE)',
      make: (limit, windowMs, prefix) => async (key) => {
        const k = `${prefix}:${key}:${Math.floor(Date.now() / windowMs)}`
        const count = await redis.incr(k)
        if (count === 1) await redis.pexpire(k, windowMs)
        return count <= limit
      },
      keysOf: (prefix, key, windowMs) => [`${prefix}:${key}:${Math.floor(Date.now() / windowMs)}`],
    },
    {
      name: 'classic sliding log (Lua + ZSET)',
      make: (limit, windowMs, prefix) => async (key) =>
        (await redis.eval(SLIDING_LOG_LUA, 1, `${prefix}:${key}`, Date.now(), windowMs, limit, `${Date.now()}-${sequence++}`)) === 1,
      keysOf: (prefix, key) => [`${prefix}:${key}`],
    },
  ]
  const sluice = (algorithm: string, policy: (limit: number, windowMs: number) => Policy): System => {
    const store = new RedisStore({ url })
    return {
      name: `sluice ${algorithm}`,
      make: (limit, windowMs, prefix) => {
        const limiter = new Limiter({ store, prefix, policies: policy(limit, windowMs), blockCache: false })
        return async (key) => (await limiter.limit(key)).allowed
      },
      keysOf: (prefix, key) => [redisKey(prefix, key, algorithm)],
    }
  }
  return [
    ...classic,
    sluice('fixed-window', (limit, windowMs) => ({ algorithm: 'fixed-window', name: 'fixed-window', limit, windowMs })),
    sluice('sliding-log', (limit, windowMs) => ({ algorithm: 'sliding-log', name: 'sliding-log', limit, windowMs })),
    sluice('sliding-window', (limit, windowMs) => ({ algorithm: 'sliding-window', name: 'sliding-window', limit, windowMs })),
    sluice('token-bucket', (limit, windowMs) => ({ algorithm: 'token-bucket', name: 'token-bucket', capacity: limit, refillTokens: limit, refillIntervalMs: windowMs })),
    sluice('leaky-bucket', (limit, windowMs) => ({ algorithm: 'leaky-bucket', name: 'leaky-bucket', capacity: limit, leakTokens: limit, leakIntervalMs: windowMs })),
  ]
}

async function redisCpuSeconds(redis: Redis): Promise<number> {
  const info = await redis.info('cpu')
  const field = (name: string) => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(info)?.[1] ?? Number.NaN)
  return field('used_cpu_sys') + field('used_cpu_user')
}

/** Closed loop: IN_FLIGHT callers, each awaiting one decision after another, for ROUND_MS. */
async function throughput(decide: Decide): Promise<{ rate: number; meanMs: number }> {
  let n = 0
  let busy = 0
  const start = performance.now()
  const end = start + ROUND_MS
  await Promise.all(Array.from({ length: IN_FLIGHT }, async (_, worker) => {
    for (let i = worker; performance.now() < end; i += IN_FLIGHT) {
      const t0 = performance.now()
      await decide(KEYS[i % KEYS.length] as string)
      busy += performance.now() - t0
      n++
    }
  }))
  return { rate: (n / (performance.now() - start)) * 1000, meanMs: busy / n }
}

/** The limit sent 40 ms before a window boundary and again 10 ms after it, on a fresh key: admitted / limit. */
async function boundary(decide: Decide, key: string): Promise<number> {
  const next = Math.ceil((Date.now() + 200) / BOUNDARY_WINDOW_MS) * BOUNDARY_WINDOW_MS
  await sleep(next - 40 - Date.now())
  const before = await Promise.all(Array.from({ length: BOUNDARY_LIMIT }, () => decide(key)))
  await sleep(Math.max(0, next + 10 - Date.now()))
  const after = await Promise.all(Array.from({ length: BOUNDARY_LIMIT }, () => decide(key)))
  return [...before, ...after].filter(Boolean).length / BOUNDARY_LIMIT
}

async function main(): Promise<void> {
  const server = await startRedis()
  const redis = new Redis(server.url)
  try {
    const version = execFileSync('redis-server', ['--version'], { encoding: 'utf8' }).trim().split(' ')[2]
    console.log(`sluice algorithms on Redis: node ${process.version}, redis ${version}, ${IN_FLIGHT} in flight x ${ROUND_MS} ms, 100k keys\n`)
    const rows: Array<Array<string | number>> = []
    const measured = new Map<string, number>()
    for (const [index, system] of systems(redis, server.url).entries()) {
      const prefix = `s${index}`
      const decide = system.make(HIGH, 1000, prefix)
      await throughput(decide) // warm-up: scripts loaded, JIT
      const cpuBefore = await redisCpuSeconds(redis)
      const { rate, meanMs } = await throughput(decide)
      const cpuPerDecisionUs = (((await redisCpuSeconds(redis)) - cpuBefore) * 1e6) / (rate * (ROUND_MS / 1000))
      measured.set(system.name, rate)

      const small = system.make(BOUNDARY_LIMIT, BOUNDARY_WINDOW_MS, `${prefix}b`)
      const accuracy = await boundary(small, 'edge')
      // Memory: one key whose state is full (the limit reached), as a busy client's is.
      const full = system.make(BOUNDARY_LIMIT, 60_000, `${prefix}m`)
      for (let i = 0; i < BOUNDARY_LIMIT; i++) await full('mem')
      let bytes = 0
      for (const k of system.keysOf(`${prefix}m`, 'mem', 60_000)) bytes += Number(await redis.memory('USAGE', k, 'SAMPLES', 0) ?? 0)
      rows.push([system.name, Math.round(rate), meanMs.toFixed(3), cpuPerDecisionUs.toFixed(1), `${accuracy.toFixed(2)}x`, bytes])
      console.log(`${system.name.padEnd(40)}${(rate / 1000).toFixed(1).padStart(8)}k/s  mean ${meanMs.toFixed(3)} ms  redis cpu ${cpuPerDecisionUs.toFixed(1)} us/decision  boundary ${accuracy.toFixed(2)}x  ${bytes} B/key`)
    }
    const classicLog = measured.get('classic sliding log (Lua + ZSET)') as number
    emit({
      bench: 'algorithms',
      title: `The algorithms on Redis: classic hand-written limiters beside sluice's five (${IN_FLIGHT} in flight, 100k keys, ${ROUND_MS} ms)`,
      columns: ['system', 'decisions/s', 'mean latency ms', 'Redis CPU us/decision', `admitted across a boundary (limit ${BOUNDARY_LIMIT})`, `bytes/key, ${BOUNDARY_LIMIT} calls in`],
      rows,
      notes: [
        'boundary: the limit sent 40 ms before a window boundary and again 10 ms after it; 2.00x means twice the limit got through within 50 ms.',
        `sluice sliding-log / classic sliding log throughput: ${ratio(measured.get('sluice sliding-log') as number, classicLog)}; the classic limiters read the client's clock and the fixed window's INCR and PEXPIRE are two round trips that can be split by a crash (a key that never expires).`,
      ],
    })

    // The sliding log's memory grows with the limit. sluice's log keeps one entry per millisecond
    // (calls of one millisecond share it), the classic one an entry per call: filled one call
    // per millisecond, sluice's worst case, as a steady client's calls arrive.
    const growth: Array<Array<string | number>> = []
    const logSystems = systems(redis, server.url).filter((s) => s.name.includes('sliding log') || s.name === 'sluice sliding-log')
    for (const limit of QUICK ? [10, 1000] : [10, 100, 1000, 10_000]) {
      const row: Array<string | number> = [limit]
      for (const [index, system] of logSystems.entries()) {
        const decide = system.make(limit, 3_600_000, `g${index}-${limit}`)
        for (let sent = 0; sent < limit; sent++) {
          await decide('grow')
          await sleep(1)
        }
        let bytes = 0
        for (const k of system.keysOf(`g${index}-${limit}`, 'grow', 3_600_000)) bytes += Number(await redis.memory('USAGE', k, 'SAMPLES', 0) ?? 0)
        row.push(bytes, (bytes / limit).toFixed(1))
      }
      growth.push(row)
      console.log(`sliding log at limit ${limit}: ${row.slice(1).join(' / ')}`)
    }
    emit({
      bench: 'algorithms',
      title: 'The sliding log\'s Redis memory as its limit grows (one key, full: one call a millisecond)',
      columns: ['limit', ...logSystems.flatMap((s) => [`${s.name} bytes`, 'bytes per entry'])],
      rows: growth,
      notes: ['Every other algorithm keeps a fixed-size state per key, whatever its limit.'],
    })
  } finally {
    redis.disconnect()
    await server.stop()
  }
  process.exit(0)
}

await main()
