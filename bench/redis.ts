/**
 * Redis benchmark (not a test). Starts its own redis-server on a loopback port
 * and measures, in one run:
 *   1. decisions/s and p50/p99/p999 latency at 1, 16, 64 and 256 calls in
 *      flight, on one hot key and on 100,000 keys, for sluice (fixed window and
 *      token bucket) beside rate-limiter-flexible's RateLimiterRedis (its one
 *      algorithm, a fixed window) on the same Redis, each over one ioredis
 *      connection; each cell the median of three rounds, the systems taking turns;
 *      sluice runs both as a script (EVALSHA, the default) and as a Redis
 *      function (FCALL, `functions: true`);
 *   2. the ceiling: redis-benchmark running sluice's script with EVALSHA (and
 *      its function with FCALL) over one connection, in the batches the store
 *      would send for that many calls in flight (decisions/s = invocations/s x
 *      calls per batch);
 *   3. Lua versus compare-and-swap: the same token bucket done with
 *      WATCH/MULTI/EXEC retries, one hot key, 8/32/128 in flight.
 *
 *   npm run bench:redis                                (about 2.5 minutes)
 *   BENCH_MS=300 BENCH_ROUNDS=1 npm run bench:redis    (a smoke check)
 */
import { execFileSync } from 'node:child_process'
import { Redis } from 'ioredis'
import { RateLimiterRedis } from 'rate-limiter-flexible'
import { algorithms, Limiter, RedisStore, resolvePolicy, type Policy } from 'sluice'
import { batchSize } from '../dist/stores/redis/redis-store.js'
import { LIMIT_FUNCTION, LIMIT_LIBRARY, LIMIT_SCRIPT, LIMIT_SHA } from '../dist/stores/redis/script.js'
import { startRedis } from '../test/support/redis.ts'
import { emit, QUICK, ratio } from './report.ts'

const ROUND_MS = Number(process.env.BENCH_MS ?? 1000)
/** Each cell is the median of this many rounds, the systems taking turns: single runs on 2 cores vary by 15%. */
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? (QUICK ? 1 : 3))
const IN_FLIGHT = QUICK ? [1, 64] : [1, 16, 64, 256]
const KEYS = Array.from({ length: 100_000 }, (_, i) => `client-${i}`)
const HUGE = 1_000_000_000

interface Result { rate: number; p50: number; p99: number; p999: number }

/** Closed loop: `inFlight` callers each awaiting one decision after another for ROUND_MS. */
async function closedLoop(inFlight: number, keys: string[], decide: (key: string) => Promise<unknown>): Promise<Result> {
  const latencies: number[] = []
  let n = 0
  const end = performance.now() + ROUND_MS
  const start = performance.now()
  await Promise.all(Array.from({ length: inFlight }, async (_, worker) => {
    let i = worker
    while (performance.now() < end) {
      const t0 = performance.now()
      await decide(keys[i % keys.length] as string)
      latencies.push(performance.now() - t0)
      i += inFlight
      n++
    }
  }))
  const elapsed = performance.now() - start
  latencies.sort((a, b) => a - b)
  const at = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] as number
  return { rate: (n / elapsed) * 1000, p50: at(0.5), p99: at(0.99), p999: at(0.999) }
}

const ms = (x: number) => `${x.toFixed(2)}ms`.padStart(9)
const kps = (x: number) => `${(x / 1000).toFixed(1)}k/s`.padStart(9)

async function main(): Promise<void> {
  const redis = await startRedis()
  const connections: Redis[] = []
  const connect = () => {
    const client = new Redis(redis.url, { maxRetriesPerRequest: 1, autoResendUnfulfilledCommands: false })
    connections.push(client)
    return client
  }
  try {
    const version = execFileSync('redis-server', ['--version'], { encoding: 'utf8' }).trim().split(' ')[2]
    console.log(`sluice Redis benchmark: node ${process.version}, redis ${version}, median of ${ROUNDS} rounds x ${ROUND_MS} ms per cell, one connection per system\n`)
    const fixedWindow: Policy = { algorithm: 'fixed-window', limit: HUGE, windowMs: 3_600_000, name: 'fw' }
    // Limits never reached, and state that lives through the run, as the peer's
    // one-hour window does. (A bucket refilling 1e9 tokens a second is full
    // again 1 ms after a call, so its key expires at once: on 100k keys every
    // call then creates a key and Redis expires it: measured 10-15% fewer decisions.)
    const tokenBucket: Policy = { algorithm: 'token-bucket', capacity: HUGE, refillTokens: 1, refillIntervalMs: 3_600_000, name: 'tb' }
    const systems: Array<[string, (key: string) => Promise<unknown>]> = [
      ['sluice fixed-window', ((l) => (key: string) => l.limit(key))(new Limiter({ store: new RedisStore({ client: connect() }), prefix: 'bfw', policies: fixedWindow }))],
      ['sluice token-bucket', ((l) => (key: string) => l.limit(key))(new Limiter({ store: new RedisStore({ client: connect() }), prefix: 'btb', policies: tokenBucket }))],
      ['sluice fixed-window (fn)', ((l) => (key: string) => l.limit(key))(new Limiter({ store: new RedisStore({ client: connect(), functions: true }), prefix: 'ffw', policies: fixedWindow }))],
      ['sluice token-bucket (fn)', ((l) => (key: string) => l.limit(key))(new Limiter({ store: new RedisStore({ client: connect(), functions: true }), prefix: 'ftb', policies: tokenBucket }))],
      ['rate-limiter-flexible', ((r) => (key: string) => r.consume(key))(new RateLimiterRedis({ storeClient: connect(), points: HUGE, duration: 3600, keyPrefix: 'rlf' }))],
    ]

    console.log(`${'system'.padEnd(24)}${'keys'.padEnd(6)}${'in flight'.padStart(10)}${'rate'.padStart(9)}${'p50'.padStart(9)}${'p99'.padStart(9)}${'p999'.padStart(9)}`)
    const table = new Map<string, Result>()
    for (const inFlight of IN_FLIGHT) {
      for (const [label, keys] of [['hot', ['hot']], ['100k', KEYS]] as const) {
        const rounds = new Map<string, Result[]>()
        for (let round = 0; round < ROUNDS; round++) {
          for (const [name, decide] of systems) {
            const runs = rounds.get(name) ?? []
            runs.push(await closedLoop(inFlight, keys as unknown as string[], decide))
            rounds.set(name, runs)
          }
        }
        for (const [name, runs] of rounds) {
          const result = [...runs].sort((a, b) => a.rate - b.rate)[Math.floor(runs.length / 2)] as Result
          table.set(`${name}|${label}|${inFlight}`, result)
          console.log(`${name.padEnd(24)}${label.padEnd(6)}${String(inFlight).padStart(10)}${kps(result.rate)}${ms(result.p50)}${ms(result.p99)}${ms(result.p999)}`)
        }
      }
    }

    // The ceiling: the same script invoked as the store invokes it (the calls in
    // flight split into batches, the batches pipelined), driven by
    // redis-benchmark (C, no Node in the loop).
    const admin = connect()
    await admin.script('LOAD', LIMIT_SCRIPT)
    await admin.call('FUNCTION', 'LOAD', 'REPLACE', LIMIT_LIBRARY)
    console.log('\nceiling: redis-benchmark, EVALSHA of the same script (FCALL of the same function) in the same batches, 1 connection')
    const ceiling = new Map<string, number>()
    for (const inFlight of IN_FLIGHT) {
      const batch = batchSize(inFlight)
      const pipeline = Math.ceil(inFlight / batch)
      for (const [label, key, extra] of [['hot', 'bfw:{hot}:fw', []], ['100k', 'bfw:{__rand_int__}:fw', ['-r', '100000']]] as const) {
        const rates = [['EVALSHA', LIMIT_SHA], ['FCALL', LIMIT_FUNCTION]].map(([command, name]) => {
          const args = ['-p', String(redis.port), '-c', '1', '-P', String(pipeline), '-n', String(Math.ceil((inFlight === 1 ? 50_000 : 300_000) / batch)), '--csv', ...extra,
            command as string, name as string, String(batch), ...Array.from({ length: batch }, () => key),
            '1', '1', 'fixed-window', String(HUGE), '3600000', '', '', '', '', '1', '0', '1', String(batch)]
          const csv = execFileSync('redis-benchmark', args, { encoding: 'utf8' }).trim().split('\n')
          return Number(JSON.parse(`[${csv[csv.length - 1]}]`)[1]) * batch
        }) as [number, number]
        ceiling.set(`${label}|${inFlight}`, rates[0])
        ceiling.set(`fn|${label}|${inFlight}`, rates[1])
        const ours = table.get(`sluice fixed-window|${label}|${inFlight}`) as Result
        const fn = table.get(`sluice fixed-window (fn)|${label}|${inFlight}`) as Result
        console.log(`${label.padEnd(6)}${String(inFlight).padStart(10)}${kps(rates[0])}   (${pipeline} x ${batch} calls)   sluice fixed-window reaches ${((ours.rate / rates[0]) * 100).toFixed(0)}%;   FCALL${kps(rates[1])}, sluice (fn) reaches ${((fn.rate / rates[1]) * 100).toFixed(0)}%`)
      }
    }

    console.log('\nat 64 in flight:')
    const notes: string[] = []
    for (const label of ['hot', '100k']) {
      const peer = table.get(`rate-limiter-flexible|${label}|64`) as Result
      for (const name of ['sluice fixed-window', 'sluice token-bucket', 'sluice fixed-window (fn)', 'sluice token-bucket (fn)']) {
        const ours = table.get(`${name}|${label}|64`) as Result
        const top = ceiling.get(`${name.endsWith('(fn)') ? 'fn|' : ''}${label}|64`) as number
        const line = `${label.padEnd(5)} ${name}: ${(ours.rate / peer.rate).toFixed(2)}x rate-limiter-flexible's throughput (target >= 1.5x), p99 ${ours.p99.toFixed(2)} vs ${peer.p99.toFixed(2)} ms; ${((ours.rate / top) * 100).toFixed(0)}% of the ceiling (target >= 70%)`
        notes.push(line)
        console.log(`  ${line}`)
      }
    }
    emit({
      bench: 'redis',
      title: `Redis store: decisions/s and latency, closed loop, one ioredis connection per system, median of ${ROUNDS} rounds x ${ROUND_MS} ms per cell`,
      columns: ['system', 'keys', 'in flight', 'decisions/s', 'p50 ms', 'p99 ms', 'p999 ms', 'vs rate-limiter-flexible', 'vs redis-benchmark ceiling'],
      rows: [...table].map(([id, r]) => {
        const [name, label, inFlight] = id.split('|') as [string, string, string]
        const peer = table.get(`rate-limiter-flexible|${label}|${inFlight}`) as Result
        const top = ceiling.get(`${name.endsWith('(fn)') ? 'fn|' : ''}${label}|${inFlight}`)
        return [name, label, Number(inFlight), Math.round(r.rate), r.p50.toFixed(2), r.p99.toFixed(2), r.p999.toFixed(2),
          name === 'rate-limiter-flexible' ? '' : ratio(r.rate, peer.rate), name.startsWith('sluice fixed-window') && top !== undefined ? `${((r.rate / top) * 100).toFixed(0)}%` : '']
      }),
      notes,
    })

    // Lua versus optimistic compare-and-swap on one hot key.
    console.log('\nLua vs WATCH/MULTI/EXEC (token bucket, one hot key)')
    const policy = resolvePolicy(tokenBucket)
    console.log(`${'in flight'.padStart(10)}${'lua rate'.padStart(11)}${'lua p99'.padStart(10)}${'cas rate'.padStart(11)}${'cas p99'.padStart(10)}  cas retries/decision`)
    const casRows: Array<Array<string | number>> = []
    for (const inFlight of QUICK ? [32] : [8, 32, 128]) {
      const lua = await closedLoop(inFlight, ['cas-hot'], systems[1]![1])
      // WATCH is per connection, so each caller of the CAS version needs its own.
      const pool = Array.from({ length: inFlight }, connect)
      let retries = 0
      let next = 0
      const cas = await closedLoop(inFlight, ['cas'], async (key) => {
        const client = pool[next++ % inFlight] as Redis
        for (;;) {
          await client.watch(key)
          const raw = await client.get(key)
          const [level, updatedAt, intervalMs] = raw === null ? [undefined, undefined, undefined] : raw.split(':').map(Number)
          const state = level === undefined ? undefined : { level, updatedAt: updatedAt as number, intervalMs: intervalMs as number }
          const [seconds, micros] = await client.time()
          const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)
          const t = algorithms.step(policy, state, now, 1, algorithms.NO_WAIT)
          const s = t.state as algorithms.TokenBucketState
          const done = await client.multi().set(key, `${s.level}:${s.updatedAt}:${s.intervalMs}`, 'PX', Math.max(1, t.ttlMs)).exec()
          if (done !== null) return t.decision
          retries++
        }
      })
      const casN = cas.rate * (ROUND_MS / 1000)
      console.log(`${String(inFlight).padStart(10)}${kps(lua.rate)}  ${ms(lua.p99)}${kps(cas.rate)}  ${ms(cas.p99)}  ${(retries / casN).toFixed(2)}`)
      casRows.push([inFlight, Math.round(lua.rate), lua.p99.toFixed(2), Math.round(cas.rate), cas.p99.toFixed(2), (retries / casN).toFixed(2), ratio(lua.rate, cas.rate)])
      pool.forEach((c) => c.disconnect())
    }
    emit({
      bench: 'redis',
      title: 'One Lua call vs optimistic WATCH/MULTI/EXEC (Bucket4j-style compare-and-swap): token bucket, one hot key',
      columns: ['in flight', 'Lua decisions/s', 'Lua p99 ms', 'CAS decisions/s', 'CAS p99 ms', 'CAS retries per decision', 'Lua / CAS'],
      rows: casRows,
    })
  } finally {
    connections.forEach((c) => c.disconnect())
    await redis.stop()
  }
}

await main()
