/**
 * Engine micro-benchmark (not a test): decisions per second for each algorithm
 * on one hot key and on 100,000 keys, on the sync and async paths, beside
 * rate-limiter-flexible's RateLimiterMemory measured in the same run.
 *
 *   npm run bench:engine            (about a minute)
 *   BENCH_MS=300 npm run bench:engine   (shorter rounds)
 *
 * Every limit is set high enough that the calls are allowed, the common path,
 * and no peer rejects (RLF rejects its promise when limited).
 */
import { RateLimiterMemory } from 'rate-limiter-flexible'
import { Limiter, MemoryStore, type Policy } from 'sluice'
import { emit, QUICK, ratio } from './report.ts'

const ROUND_MS = Number(process.env.BENCH_MS ?? 500)
const ROUNDS = QUICK ? 3 : 5
const KEYS = Array.from({ length: 100_000 }, (_, i) => `client-${i}`)
const HOT = ['hot']

const HUGE = 1_000_000_000
const policies: Record<string, Policy> = {
  'fixed-window': { algorithm: 'fixed-window', limit: HUGE, windowMs: 60_000 },
  'sliding-log': { algorithm: 'sliding-log', limit: HUGE, windowMs: 1 },
  'sliding-window': { algorithm: 'sliding-window', limit: 1_000_000, windowMs: 60_000 },
  'token-bucket': { algorithm: 'token-bucket', capacity: HUGE, refillTokens: HUGE, refillIntervalMs: 1000 },
  'leaky-bucket': { algorithm: 'leaky-bucket', capacity: HUGE, leakTokens: 1000, leakIntervalMs: 1 },
}

/**
 * Median decisions/s over ROUNDS rounds of ROUND_MS each. `batch(offset)` makes
 * 1000 decisions; awaiting it once per 1000 costs the sync path nothing measurable.
 */
async function measure(batch: (offset: number) => unknown): Promise<number> {
  const rates: number[] = []
  for (let round = 0; round < ROUNDS; round++) {
    let n = 0
    const start = performance.now()
    const end = start + ROUND_MS
    let now = start
    while (now < end) {
      await batch(n)
      n += 1000
      now = performance.now()
    }
    rates.push((n / (now - start)) * 1000)
  }
  return median(rates)
}

function measureSync(decide: (key: string) => unknown, keys: string[]): Promise<number> {
  return measure((offset) => {
    for (let i = 0; i < 1000; i++) decide(keys[(offset + i) % keys.length] as string)
  })
}

function measureAsync(decide: (key: string) => Promise<unknown>, keys: string[]): Promise<number> {
  return measure(async (offset) => {
    for (let i = 0; i < 1000; i++) await decide(keys[(offset + i) % keys.length] as string)
  })
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)] as number
}

function fmt(rate: number): string {
  return `${(rate / 1e6).toFixed(2)}M/s`.padStart(10)
}

async function main(): Promise<void> {
  console.log(`sluice engine benchmark: node ${process.version}, ${ROUNDS} rounds x ${ROUND_MS} ms, median`)
  const peerFor = () => new RateLimiterMemory({ points: HUGE, duration: 60 })
  const peerHot = peerFor()
  const peerMany = peerFor()
  const peer = {
    hot: await measureAsync((key) => peerHot.consume(key), HOT),
    many: await measureAsync((key) => peerMany.consume(key), KEYS),
  }
  console.log(`\nrate-limiter-flexible RateLimiterMemory (async only): hot key ${fmt(peer.hot)}, 100k keys ${fmt(peer.many)}\n`)
  console.log(`${'algorithm'.padEnd(16)}${'key set'.padEnd(10)}${'sync'.padStart(10)}${'async'.padStart(10)}   sync/peer  async/peer`)
  const ratios: { sync: number[]; async: number[] } = { sync: [], async: [] }
  const rows: Array<Array<string | number>> = []
  for (const [name, policy] of Object.entries(policies)) {
    for (const [label, keys, peerRate] of [['hot', HOT, peer.hot], ['100k', KEYS, peer.many]] as const) {
      const store = new MemoryStore({ maxKeys: 200_000 })
      const limiter = new Limiter({ policies: policy, store })
      const sync = await measureSync((key) => limiter.limitSync(key), keys as unknown as string[])
      const limiterAsync = new Limiter({ policies: policy, store: new MemoryStore({ maxKeys: 200_000 }) })
      const asyncRate = await measureAsync((key) => limiterAsync.limit(key), keys as unknown as string[])
      rows.push([name, label, fmt(sync).trim(), fmt(asyncRate).trim(), ratio(sync, peerRate), ratio(asyncRate, peerRate)])
      ratios.sync.push(sync / peerRate)
      ratios.async.push(asyncRate / peerRate)
      console.log(
        `${name.padEnd(16)}${label.padEnd(10)}${fmt(sync)}${fmt(asyncRate)}   ${(sync / peerRate).toFixed(2).padStart(8)}x ${(asyncRate / peerRate).toFixed(2).padStart(9)}x`,
      )
    }
  }
  const lowest = `lowest ratio: sync ${Math.min(...ratios.sync).toFixed(2)}x (target >= 3x), async ${Math.min(...ratios.async).toFixed(2)}x (target >= 1x)`
  console.log(`\n${lowest}`)
  emit({
    bench: 'engine',
    title: 'In-process decisions per second (MemoryStore) beside rate-limiter-flexible RateLimiterMemory',
    columns: ['algorithm', 'keys', 'sync', 'async', 'sync / peer', 'async / peer'],
    rows,
    notes: [`peer (async only): hot key ${fmt(peer.hot).trim()}, 100k keys ${fmt(peer.many).trim()}; median of ${ROUNDS} rounds x ${ROUND_MS} ms`, lowest],
  })
}

await main()
