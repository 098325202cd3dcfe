/**
 * Two keys per request on Redis (not a test): a limit per client IP AND one
 * per user, the pair users stack, on Express and Fastify. sluice decides both
 * in one all-or-nothing store call (`keys-together`); beside it, the same rules
 * on a store that hides that it can span keys, so each key is a call of its
 * own, as before calls could span keys (`keys-apart`); and on Express the
 * peer's way, two express-rate-limit middlewares on rate-limit-redis, each a
 * round trip. One rule on one key (`one-key`) is the floor. Each server runs in
 * its own process; every cell is the median of ROUNDS, the variants taking turns.
 *
 *   npm run bench:keys              (about a minute)
 *   BENCH_SECONDS=2 BENCH_ROUNDS=1 npm run bench:keys
 */
import { startRedis } from '../test/support/redis.ts'
import { CONNECTIONS, measure, median, medianOf, type Row } from './http-measure.ts'
import { emit, QUICK } from './report.ts'

const SECONDS = Number(process.env.BENCH_SECONDS ?? (QUICK ? 2 : 3))
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? (QUICK ? 1 : 3))
const VARIANTS: Record<string, Record<string, string>> = {
  express: { 'one-key': 'sluice-redis', 'keys-together': 'sluice-redis-keys', 'keys-apart': 'sluice-redis-keys-apart', 'express-rate-limit x2': 'peer-redis-keys' },
  fastify: { 'one-key': 'sluice-redis', 'keys-together': 'sluice-redis-keys', 'keys-apart': 'sluice-redis-keys-apart' },
}

const redis = await startRedis()
try {
  console.log(`sluice two-key benchmark on Redis: node ${process.version}, autocannon ${CONNECTIONS} connections x ${SECONDS} s, median of ${ROUNDS} server processes per cell\n`)
  const table: Array<Array<string | number>> = []
  for (const [framework, variants] of Object.entries(VARIANTS)) {
    const names = Object.keys(variants)
    const samples: Record<string, Row[]> = {}
    for (let round = 0; round < ROUNDS; round++) {
      for (let i = 0; i < names.length; i++) {
        const name = names[(i + round) % names.length] as string
        ;(samples[name] ??= []).push(await measure(framework, variants[name] as string, redis.url, SECONDS))
      }
    }
    const together = samples['keys-together'] as Row[]
    for (const name of names) {
      const row = median(samples[name] as Row[])
      const vsTogether = name === 'keys-together' ? '' : `${medianOf(together.map((run, round) => run.rps / ((samples[name] as Row[])[round] as Row).rps)).toFixed(2)}x`
      const cpu = row.cpuUsPerRequest === undefined ? '' : row.cpuUsPerRequest.toFixed(1)
      table.push([framework, name, Math.round(row.rps), row.p99, vsTogether, cpu])
      console.log(`${framework.padEnd(10)}${name.padEnd(24)}${row.rps.toFixed(0).padStart(8)} req/s  p99 ${String(row.p99).padStart(3)} ms  keys-together / this ${vsTogether.padStart(6)}  CPU ${cpu} us/req${row.errors + row.non2xx > 0 ? `  (${row.errors} errors, ${row.non2xx} non-2xx)` : ''}`)
    }
  }
  emit({
    bench: 'keys',
    title: `Two keys per request on Redis (per IP AND per user): requests/s with autocannon (${CONNECTIONS} connections x ${SECONDS} s), median of ${ROUNDS}; "keys-together / this": the median of each round's ratio`,
    columns: ['framework', 'limits', 'req/s', 'p99 ms', 'keys-together / this', 'server CPU µs/req'],
    rows: table,
    notes: ['keys-together: both keys in one all-or-nothing store call; keys-apart: a call per key (the store hides that it spans keys); express-rate-limit x2: two middlewares on rate-limit-redis; one-key: one rule, the floor'],
  })
} finally {
  await redis.stop()
}
