/**
 * Memory per key in the embedded store (not a test): heap bytes per key for
 * each algorithm after one decision on each of 1,000,000 keys (100,000 with
 * --quick), beside rate-limiter-flexible's RateLimiterMemory filled alike.
 * Each system is measured in a fresh process, so nothing else is on its heap.
 *
 *   npm run bench:memory
 */
import { execFileSync } from 'node:child_process'
import { RateLimiterMemory } from 'rate-limiter-flexible'
import { Limiter, MemoryStore, type Policy } from 'sluice'
import { emit, QUICK, ratio } from './report.ts'

const KEYS = QUICK ? 100_000 : 1_000_000

const policies: Record<string, Policy> = {
  'fixed-window': { algorithm: 'fixed-window', limit: 100, windowMs: 3_600_000 },
  'sliding-log (1 entry)': { algorithm: 'sliding-log', limit: 100, windowMs: 3_600_000 },
  'sliding-window': { algorithm: 'sliding-window', limit: 100, windowMs: 3_600_000 },
  'token-bucket': { algorithm: 'token-bucket', capacity: 100, refillTokens: 100, refillIntervalMs: 3_600_000 },
  'leaky-bucket': { algorithm: 'leaky-bucket', capacity: 100, leakTokens: 100, leakIntervalMs: 3_600_000 },
}

function heap(): number {
  const gc = (globalThis as { gc?: () => void }).gc
  if (gc === undefined) throw new Error('run with node --expose-gc')
  for (let i = 0; i < 3; i++) gc()
  return process.memoryUsage().heapUsed
}

/** In a child: fills one system with KEYS keys and prints its bytes per key. */
async function measureOne(system: string): Promise<void> {
  const names = Array.from({ length: KEYS }, (_, i) => `client-${i}`)
  const before = heap()
  if (system === 'peer') {
    const peer = new RateLimiterMemory({ points: 100, duration: 3600 })
    for (let i = 0; i < KEYS; i += 10_000) await Promise.all(names.slice(i, i + 10_000).map((name) => peer.consume(name)))
    const bytes = (heap() - before) / KEYS
    if ((await peer.get(names[KEYS - 1] as string))?.consumedPoints !== 1) throw new Error('the peer lost its keys')
    process.stdout.write(String(bytes))
    return
  }
  const store = new MemoryStore({ maxKeys: KEYS })
  const limiter = new Limiter({ policies: policies[system] as Policy, store })
  for (const name of names) limiter.limitSync(name)
  const bytes = (heap() - before) / KEYS
  // Read after measuring, so the store is alive while the heap is measured.
  if (store.size !== KEYS) throw new Error(`${system}: the store holds ${store.size} keys, expected ${KEYS}`)
  process.stdout.write(String(bytes))
}

function inChild(system: string): number {
  const output = execFileSync(process.execPath, ['--expose-gc', '--import', 'tsx', new URL(import.meta.url).pathname, 'one', system], {
    encoding: 'utf8', env: process.env, maxBuffer: 1024 * 1024,
  })
  return Number(output.trim())
}

if (process.argv[2] === 'one') {
  await measureOne(process.argv[3] as string)
} else {
  console.log(`sluice memory per key: node ${process.version}, ${KEYS.toLocaleString('en')} keys, one decision each, one fresh process per system\n`)
  const peerBytes = inChild('peer')
  console.log(`rate-limiter-flexible RateLimiterMemory: ${Math.round(peerBytes)} B/key`)
  const rows: Array<Array<string | number>> = []
  for (const name of Object.keys(policies)) {
    const bytes = inChild(name)
    rows.push([name, Math.round(bytes), ratio(peerBytes, bytes)])
    console.log(`${name.padEnd(24)}${Math.round(bytes).toString().padStart(6)} B/key   (rate-limiter-flexible uses ${ratio(peerBytes, bytes)} that)`)
  }
  emit({
    bench: 'memory',
    title: `MemoryStore heap bytes per key, ${KEYS.toLocaleString('en')} keys, one decision each, beside rate-limiter-flexible RateLimiterMemory`,
    columns: ['algorithm', 'bytes/key', 'peer bytes / ours'],
    rows,
    notes: [`rate-limiter-flexible RateLimiterMemory: ${Math.round(peerBytes)} B/key. The key strings are allocated before measuring and held by the caller: neither side is charged for them.`],
  })
}
