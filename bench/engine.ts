/**
 * Engine micro-benchmark (not a test): decisions per second for each algorithm
 * on one hot key and on 100,000 keys, on the sync and async paths, beside
 * rate-limiter-flexible's RateLimiterMemory measured in the same run.
 *
 *   npm run bench:engine            (about four minutes)
 *   BENCH_MS=300 npm run bench:engine   (shorter rounds)
 *
 * Every cell (one system, one path, one key set) runs in fresh processes: in
 * one process, the cells measured first leave V8's inline caches in shared code
 * (the store, the decision, the loop) specialised to them, and later cells ran
 * up to 30% slower for it. An application using one algorithm sees the fresh
 * case. Fresh processes differ too (V8 compiles each one's loop its own way: the
 * leaky bucket's async hot-key cell read 2.2-2.7M/s in some processes and
 * 4.2-4.9M/s in others), so each cell is the median of PROCESSES_PER_CELL of them. The peer is
 * measured again beside every algorithm, in turns, and compared by its median
 * (of its five processes per key set), so a drift of the machine during the run
 * reaches both.
 *
 * Every limit is set high enough that the calls are allowed, the common path,
 * and no peer rejects (RLF rejects its promise when limited).
 */
import { spawnSync } from 'node:child_process'
import { RateLimiterMemory } from 'rate-limiter-flexible'
import { Limiter, MemoryStore, monotonicClock, type Policy } from 'sluice'
import { emit, QUICK, ratio } from './report.ts'

const ROUND_MS = Number(process.env.BENCH_MS ?? 500)
const ROUNDS = QUICK ? 3 : 5
const PROCESSES_PER_CELL = QUICK ? 1 : 3
const KEY_SETS = { hot: 1, '100k': 100_000 } as const
type KeySet = keyof typeof KEY_SETS
type Path = 'sync' | 'async'

const HUGE = 1_000_000_000
/**
 * The peer's window (60 s) for the windowed algorithms, and buckets that take
 * hours to refill: every key's state lives through the run, as the peer's does.
 * (A bucket refilling faster than it is drained is full again, and its key
 * expired, a millisecond after each call: every call would create its key.)
 */
const policies: Record<string, Policy> = {
  'fixed-window': { algorithm: 'fixed-window', limit: HUGE, windowMs: 60_000 },
  'sliding-log': { algorithm: 'sliding-log', limit: HUGE, windowMs: 60_000 },
  'sliding-window': { algorithm: 'sliding-window', limit: HUGE, windowMs: 60_000 },
  'token-bucket': { algorithm: 'token-bucket', capacity: HUGE, refillTokens: 1, refillIntervalMs: 3_600_000 },
  'leaky-bucket': { algorithm: 'leaky-bucket', capacity: HUGE, leakTokens: 1, leakIntervalMs: 3_600_000 },
}
const PEER = 'rate-limiter-flexible'
const CLOCK = 'clock'

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

/** One cell, in this process: prints its decisions/s. */
async function cell(system: string, path: Path, keySet: KeySet): Promise<void> {
  if (system === CLOCK) {
    // The one clock read every decision makes: a floor no decision goes under.
    let sink = 0
    const rate = await measure(() => {
      for (let i = 0; i < 1000; i++) sink += monotonicClock()
    })
    console.log(sink > 0 ? rate : 0)
    return
  }
  const keys = Array.from({ length: KEY_SETS[keySet] }, (_, i) => (keySet === 'hot' ? 'hot' : `client-${i}`))
  let decide: (key: string) => unknown
  if (system === PEER) {
    const peer = new RateLimiterMemory({ points: HUGE, duration: 60 })
    decide = (key) => peer.consume(key)
  } else {
    const limiter = new Limiter({ policies: policies[system] as Policy, store: new MemoryStore({ maxKeys: 200_000 }) })
    decide = path === 'sync' ? (key) => limiter.limitSync(key) : (key) => limiter.limit(key)
  }
  const rate = path === 'sync'
    ? await measure((offset) => {
      for (let i = 0; i < 1000; i++) decide(keys[(offset + i) % keys.length] as string)
    })
    : await measure(async (offset) => {
      for (let i = 0; i < 1000; i++) await decide(keys[(offset + i) % keys.length] as string)
    })
  console.log(rate)
}

function inFreshProcess(system: string, path: Path, keySet: KeySet): number {
  const run = spawnSync(process.execPath, [...process.execArgv, new URL(import.meta.url).pathname, '--cell', system, path, keySet], { encoding: 'utf8', env: process.env })
  const rate = Number(run.stdout.trim())
  if (run.status !== 0 || !Number.isFinite(rate)) throw new Error(`cell ${system} ${path} ${keySet} failed: ${run.stderr}${run.stdout}`)
  return rate
}

/** A cell's rate: the median of PROCESSES_PER_CELL fresh processes. */
function medianOfProcesses(system: string, path: Path, keySet: KeySet): number {
  return median(Array.from({ length: PROCESSES_PER_CELL }, () => inFreshProcess(system, path, keySet)))
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)] as number
}

function fmt(rate: number): string {
  return `${(rate / 1e6).toFixed(2)}M/s`.padStart(10)
}

async function main(): Promise<void> {
  console.log(`sluice engine benchmark: node ${process.version}, ${ROUNDS} rounds x ${ROUND_MS} ms, median; every cell the median of ${PROCESSES_PER_CELL} fresh processes`)
  console.log(`${'algorithm'.padEnd(16)}${'key set'.padEnd(10)}${'sync'.padStart(10)}${'async'.padStart(10)}${'peer'.padStart(10)}   sync/peer  async/peer`)
  const results: Array<{ name: string; keySet: KeySet; sync: number; async: number }> = []
  const peerRuns: Record<KeySet, number[]> = { hot: [], '100k': [] }
  for (const name of Object.keys(policies)) {
    for (const keySet of Object.keys(KEY_SETS) as KeySet[]) {
      peerRuns[keySet].push(inFreshProcess(PEER, 'async', keySet))
      const result = { name, keySet, sync: medianOfProcesses(name, 'sync', keySet), async: medianOfProcesses(name, 'async', keySet) }
      results.push(result)
      const peerSoFar = median(peerRuns[keySet])
      console.log(`${name.padEnd(16)}${keySet.padEnd(10)}${fmt(result.sync)}${fmt(result.async)}${fmt(peerSoFar)}   ${(result.sync / peerSoFar).toFixed(2).padStart(8)}x ${(result.async / peerSoFar).toFixed(2).padStart(9)}x`)
    }
  }
  const peer = { hot: median(peerRuns.hot), '100k': median(peerRuns['100k']) }
  const rows = results.map(({ name, keySet, sync, async }) => [name, keySet, fmt(sync).trim(), fmt(async).trim(), ratio(sync, peer[keySet]), ratio(async, peer[keySet])])
  const lowest = `lowest ratio: sync ${Math.min(...results.map((r) => r.sync / peer[r.keySet])).toFixed(2)}x (target >= 3x), async ${Math.min(...results.map((r) => r.async / peer[r.keySet])).toFixed(2)}x (target >= 1x)`
  const clockNs = 1e9 / inFreshProcess(CLOCK, 'sync', 'hot')
  const clockNote = `the clock every decision reads (monotonicClock, one Date.now()) costs ${clockNs.toFixed(0)} ns a read here; 3x the peer's hot-key rate leaves ${(1e9 / (3 * peer.hot)).toFixed(0)} ns for a whole decision, clock included`
  const peerNote = `peer (async only), median of its ${peerRuns.hot.length} runs per key set, one beside each algorithm: hot key ${fmt(peer.hot).trim()}, 100k keys ${fmt(peer['100k']).trim()}`
  console.log(`\n${peerNote}\n${lowest}\n${clockNote}`)
  emit({
    bench: 'engine',
    title: `In-process decisions per second (MemoryStore) beside rate-limiter-flexible RateLimiterMemory, every cell the median of ${PROCESSES_PER_CELL} fresh processes`,
    columns: ['algorithm', 'keys', 'sync', 'async', 'sync / peer', 'async / peer'],
    rows,
    notes: [`${peerNote}; each process the median of ${ROUNDS} rounds x ${ROUND_MS} ms`, lowest, clockNote],
  })
}

const cellAt = process.argv.indexOf('--cell')
if (cellAt === -1) await main()
else await cell(process.argv[cellAt + 1] as string, process.argv[cellAt + 2] as Path, process.argv[cellAt + 3] as KeySet)
