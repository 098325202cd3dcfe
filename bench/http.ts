/**
 * HTTP benchmark (not a test): requests/s and p99 with autocannon against a
 * trivial handler, for Express, Fastify and Koa, each bare, with sluice (memory
 * and Redis) and with its own peer limiter configured alike (express-rate-limit,
 * @fastify/rate-limit, koa-ratelimit), in memory and on the same Redis
 * (rate-limit-redis, the plugin's own Redis store, koa-ratelimit's redis
 * driver), in one run. sluice on Redis (by EVALSHA, and by
 * FCALL with `functions: true`: sluice-redis-fn) is compared with the peer on
 * Redis. Two floors sit beside them: a no-op middleware (or async hook), what
 * one more layer costs; and a layer that writes the two draft-10 fields sluice
 * sends here and decides nothing, what the fields alone cost (on Fastify, as
 * much as the 5% budget or more). Each server runs in its own process, so
 * the load generator and the server each have a core. On a small machine two
 * processes running the same code differ by 10% or more, so every cell is the
 * median of ROUNDS fresh server processes, the variants taking turns, and
 * ratios are the median of the ratios within each round.
 *
 * Throughput on a shared small machine moves with whatever else the host runs;
 * the server's own CPU time per request (from /proc, Linux only) moves less,
 * so each row also shows it: what the middleware adds to every request.
 *
 *   npm run bench:http                  (about ten minutes)
 *   BENCH_SECONDS=2 BENCH_ROUNDS=1 npm run bench:http
 *   BENCH_FRAMEWORKS=koa npm run bench:http          (one framework's rows)
 */
import { startRedis } from '../test/support/redis.ts'
import { CONNECTIONS, measure, median, medianOf, type Row } from './http-measure.ts'
import { emit, QUICK } from './report.ts'

const SECONDS = Number(process.env.BENCH_SECONDS ?? (QUICK ? 2 : 3))
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? (QUICK ? 1 : 5))
// `bare-again` is a second bare server, the same code: how far it lands from `bare` is what this
// run can resolve; a smaller difference between two other rows is noise.
const VARIANTS = ['bare', 'bare-again', 'noop', 'fields', 'peer', 'peer-redis', 'sluice-memory', 'sluice-redis', 'sluice-redis-fn']

const LABEL_WIDTH = 26
const FRAMEWORKS = (process.env.BENCH_FRAMEWORKS ?? 'express,fastify,koa').split(',')
/** Each framework's own limiter, configured as sluice is: in memory, and on the same Redis. */
const PEERS: Record<string, string> = { express: 'express-rate-limit', fastify: '@fastify/rate-limit', koa: 'koa-ratelimit' }

function cpuCell(row: Row, bare: Row): string {
  if (row.cpuUsPerRequest === undefined || bare.cpuUsPerRequest === undefined) return ''
  const added = row.cpuUsPerRequest - bare.cpuUsPerRequest
  return row === bare ? row.cpuUsPerRequest.toFixed(1) : `${row.cpuUsPerRequest.toFixed(1)} (${added >= 0 ? '+' : ''}${added.toFixed(1)})`
}

const redis = await startRedis()
try {
  console.log(`sluice HTTP benchmark: node ${process.version}, autocannon ${CONNECTIONS} connections x ${SECONDS} s, median of ${ROUNDS} server processes per cell\n`)
  console.log(`${'framework'.padEnd(10)}${'limiter'.padEnd(LABEL_WIDTH)}${'req/s'.padStart(10)}${'p99 ms'.padStart(9)}${'vs bare'.padStart(10)}${'vs peer'.padStart(10)}  server CPU us/req (vs bare)`)
  const table: Array<Array<string | number>> = []
  const noise: string[] = []
  for (const framework of FRAMEWORKS) {
    const rows: Record<string, Row> = {}
    const samples: Record<string, Row[]> = {}
    for (let round = 0; round < ROUNDS; round++) {
      // Each round starts with the next variant, so none always takes the same place in the sequence
      // (trials here measured the first server of a round slowest more often than chance, cause not found).
      const order = VARIANTS.map((_, i) => VARIANTS[(i + round) % VARIANTS.length] as string)
      for (const limiter of order) (samples[limiter] ??= []).push(await measure(framework, limiter, redis.url, SECONDS))
    }
    for (const [limiter, runs] of Object.entries(samples)) rows[limiter] = median(runs)
    const bare = rows.bare as Row
    // Ratios pair the runs of one round (measured minutes apart at most), then take the median of those.
    const paired = (limiter: string, against: string, of: (a: Row, b: Row) => number) =>
      medianOf((samples[limiter] as Row[]).map((run, round) => of(run, (samples[against] as Row[])[round] as Row)))
    for (const [limiter, row] of Object.entries(rows)) {
      const peerName = PEERS[framework] as string
      const label = limiter === 'peer' ? peerName
        : limiter === 'peer-redis' ? `${peerName}-redis`
        : limiter === 'noop' ? (framework === 'fastify' ? 'no-op async hook' : 'no-op middleware')
        : limiter === 'fields' ? 'two fields, no limit'
        : limiter === 'bare-again' ? 'bare, again' : limiter
      const vsBare = `${(paired(limiter, 'bare', (a, b) => (a.rps - b.rps) / b.rps) * 100).toFixed(1)}%`
      // Each store against the peer on the same store.
      const peerRatio = paired(limiter, limiter.startsWith('sluice-redis') ? 'peer-redis' : 'peer', (a, b) => a.rps / b.rps)
      const vsPeer = limiter.startsWith('sluice') ? `${peerRatio.toFixed(2)}x` : ''
      const cpu = cpuCell(row, bare)
      if (limiter === 'bare-again') noise.push(`${framework} ${vsBare}`)
      table.push([framework, label, Math.round(row.rps), row.p99, vsBare, vsPeer, cpu])
      console.log(`${framework.padEnd(10)}${label.padEnd(LABEL_WIDTH)}${row.rps.toFixed(0).padStart(10)}${String(row.p99).padStart(9)}${vsBare.padStart(10)}${vsPeer.padStart(10)}  ${cpu}${row.errors + row.non2xx > 0 ? `  (${row.errors} errors, ${row.non2xx} non-2xx)` : ''}`)
    }
  }
  const target = 'targets: sluice (memory) costs at most 5% of bare throughput and is no slower than the peer on the same framework; "vs peer" pairs memory with memory and Redis with Redis'
  const resolution = `resolution: "bare, again" is a second bare server, the same code, measured like the others; its distance from bare (${noise.join(', ')}) is this run's noise`
  console.log(`\n${target}\n${resolution}`)
  emit({
    bench: 'http',
    title: `HTTP middleware: requests/s with autocannon (${CONNECTIONS} connections x ${SECONDS} s), each server in its own process, median of ${ROUNDS}; "vs" columns: the median of each round's ratio`,
    columns: ['framework', 'limiter', 'req/s', 'p99 ms', 'vs bare', 'vs peer', 'server CPU µs/req (vs bare)'],
    rows: table,
    notes: [target, resolution],
  })
} finally {
  await redis.stop()
}
