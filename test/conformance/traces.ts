/**
 * The conformance traces: the same calls at the same virtual times, replayed
 * against every store. Stores must return identical decisions, field by field.
 */
import assert from 'node:assert/strict'
import { combine, Limiter, MemoryStore, resolvePolicies, type Decision, type Policy, type Store } from '../../src/index.ts'
import { seededRandom } from '../../src/simulate/traffic.ts'

export interface Step {
  t: number
  /** `refund`: give `cost` units back (buckets only; what a returned lease does). */
  op: 'limit' | 'peek' | 'reset' | 'refund'
  key: string
  cost?: number
  maxWaitMs?: number
  /** Keys of their own for some policies, by name (the limiter's `keys` option). */
  keys?: Record<string, string>
}

export interface Trace {
  name: string
  policies: Policy[]
  steps: Step[]
}

const fw: Policy = { algorithm: 'fixed-window', limit: 5, windowMs: 1000 }
const sl: Policy = { algorithm: 'sliding-log', limit: 5, windowMs: 1000 }
const sw: Policy = { algorithm: 'sliding-window', limit: 5, windowMs: 1000 }
const tb: Policy = { algorithm: 'token-bucket', capacity: 5, refillTokens: 2, refillIntervalMs: 700 }
const tbi: Policy = { algorithm: 'token-bucket', capacity: 5, refillTokens: 3, refillIntervalMs: 1000, refill: 'interval' }
const lb: Policy = { algorithm: 'leaky-bucket', capacity: 5, leakTokens: 3, leakIntervalMs: 1000 }
const lbs: Policy = { algorithm: 'leaky-bucket', capacity: 4, leakTokens: 2, leakIntervalMs: 500, mode: 'shape' }

const burst = (t: number, n: number, extra: Partial<Step> = {}): Step[] =>
  Array.from({ length: n }, () => ({ t, op: 'limit' as const, key: 'a', ...extra }))

/** Hand-written edges: boundaries, costs, refusals, reservations, peek and reset. */
export const handWritten: Trace[] = [
  { name: 'fixed window boundary burst', policies: [fw], steps: [...burst(999, 6), ...burst(1000, 6), { t: 1500, op: 'peek', key: 'a' }] },
  { name: 'sliding log refuses the boundary burst', policies: [sl], steps: [...burst(999, 6), ...burst(1000, 2), ...burst(1999, 2), { t: 1999, op: 'limit', key: 'a', cost: 5 }] },
  { name: 'sliding window weighted estimate', policies: [sw], steps: [...burst(900, 5), ...burst(1000, 1), ...burst(1100, 2), ...burst(1750, 3), ...burst(3100, 1)] },
  { name: 'token bucket fractional refill', policies: [tb], steps: [...burst(0, 6), ...burst(100, 1), ...burst(350, 1), ...burst(700, 2), { t: 10_000, op: 'limit', key: 'a', cost: 5 }, ...burst(10_000, 1)] },
  { name: 'token bucket interval refill', policies: [tbi], steps: [...burst(100, 6), ...burst(1099, 1), ...burst(1100, 4), ...burst(5000, 6)] },
  { name: 'leaky bucket police', policies: [lb], steps: [...burst(0, 6), ...burst(333, 1), ...burst(334, 1), ...burst(2000, 3)] },
  { name: 'leaky bucket shape', policies: [lbs], steps: [...burst(0, 5), ...burst(100, 2), ...burst(250, 1), { t: 250, op: 'limit', key: 'a', maxWaitMs: 200 }] },
  {
    name: 'reservations',
    policies: [fw, tb, lb],
    steps: [...burst(0, 5), ...burst(10, 3, { maxWaitMs: 2000 }), ...burst(20, 2, { maxWaitMs: 300 }), ...burst(3000, 2, { cost: 2, maxWaitMs: 5000 })],
  },
  {
    name: 'composite all-or-nothing with costs',
    policies: [sl, sw, tb],
    steps: [...burst(0, 3, { cost: 2 }), ...burst(500, 2), { t: 500, op: 'peek', key: 'a' }, ...burst(1200, 3), ...burst(1800, 2, { cost: 3 })],
  },
  {
    name: 'refunds give units back, never above capacity',
    policies: [tb, lb],
    steps: [...burst(0, 5), { t: 0, op: 'refund', key: 'a', cost: 2 }, ...burst(0, 3), { t: 400, op: 'refund', key: 'a', cost: 5 },
      ...burst(400, 6), { t: 900, op: 'refund', key: 'b', cost: 3 }, ...burst(900, 1, { key: 'b' })],
  },
  {
    // Shown uncharged (a peek, or beside a policy that refused), a log is replenished when its newest entry leaves.
    name: 'sliding log as it stands',
    policies: [sl, { algorithm: 'fixed-window', limit: 2, windowMs: 100_000 }],
    steps: [{ t: 0, op: 'peek', key: 'a' }, ...burst(0, 1), ...burst(137, 1), { t: 411, op: 'peek', key: 'a' }, ...burst(411, 1), ...burst(1200, 1)],
  },
  {
    // Refused by the bucket; the fixed window, reserved ahead, would allow and is shown allowed.
    name: 'composite refusal beside a window reserved ahead',
    policies: [{ algorithm: 'fixed-window', limit: 2, windowMs: 1000 }, { algorithm: 'token-bucket', capacity: 3, refillTokens: 1, refillIntervalMs: 10_000 }],
    steps: [...burst(0, 2), ...burst(100, 1, { maxWaitMs: 2000 }), ...burst(200, 1, { maxWaitMs: 9500 }), ...burst(200, 1)],
  },
  {
    name: 'peek and reset',
    policies: [fw, sl, sw, tbi, lbs],
    steps: [...burst(0, 3), { t: 1, op: 'peek', key: 'a' }, { t: 2, op: 'reset', key: 'a' }, { t: 3, op: 'peek', key: 'a' }, ...burst(3, 6), { t: 4, op: 'peek', key: 'b' }],
  },
  {
    // Refused at 999, blocked until 3999 though the window turns at 1000; not extended by the calls it refuses.
    name: 'a block outlasts the window',
    policies: [{ ...fw, blockMs: 3000 }],
    steps: [...burst(999, 6), ...burst(1000, 2), { t: 2000, op: 'peek', key: 'a' }, ...burst(3998, 1), ...burst(3999, 6), ...burst(4000, 1, { key: 'b' })],
  },
  {
    // The log blocks; the bucket beside it is not charged for refused calls, and blocks nobody itself.
    name: 'composite: one policy blocks, the other is not charged',
    policies: [{ ...sl, blockMs: 1500 }, tb],
    steps: [...burst(0, 6), { t: 10, op: 'peek', key: 'a' }, ...burst(900, 2), ...burst(1400, 1), ...burst(1500, 2), ...burst(1600, 3)],
  },
  {
    // A bucket that refuses for want of tokens blocks; the window beside it refuses first for a while and starts no block.
    name: 'composite: a refusal by the policy without a block starts none',
    policies: [{ algorithm: 'fixed-window', limit: 2, windowMs: 1000 }, { ...tb, blockMs: 5000 }],
    steps: [...burst(0, 3), ...burst(1000, 2), ...burst(2000, 2), ...burst(2100, 2), ...burst(6000, 1), ...burst(7200, 1)],
  },
  {
    name: 'sliding log refunds take the oldest units in the window, never an expired one, never below zero',
    policies: [sl, { ...sl, name: 'costly', limit: 9, windowMs: 700 }],
    steps: [...burst(0, 2, { cost: 2 }), ...burst(300, 1), { t: 350, op: 'refund', key: 'a', cost: 3 }, ...burst(400, 2), { t: 800, op: 'refund', key: 'a', cost: 1 },
      ...burst(800, 3), ...burst(1050, 1, { cost: 2 }), { t: 1100, op: 'refund', key: 'a', cost: 9 }, ...burst(1100, 5), ...burst(2500, 1), { t: 2500, op: 'refund', key: 'b', cost: 2 }],
  },
  {
    name: 'refunds and reset under a block',
    policies: [{ ...tb, blockMs: 2000 }, { ...lb, blockMs: 2500 }],
    steps: [...burst(0, 6), { t: 100, op: 'refund', key: 'a', cost: 3 }, ...burst(200, 1), { t: 300, op: 'reset', key: 'a' }, ...burst(300, 1),
      ...burst(400, 6), { t: 2300, op: 'peek', key: 'a' }, ...burst(2450, 1), ...burst(2950, 1)],
  },
  {
    name: 'sliding window and police leaky bucket with blocks, costs',
    policies: [{ ...sw, blockMs: 700 }, { ...lb, blockMs: 300 }],
    steps: [...burst(0, 2, { cost: 2 }), ...burst(10, 1, { cost: 3 }), ...burst(400, 1), ...burst(800, 1, { cost: 2 }), ...burst(1500, 2), ...burst(3000, 1, { cost: 5 })],
  },
]

function randomPolicy(random: () => number, index: number): Policy {
  const int = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo + 1))
  const name = `p${index}`
  switch (int(0, 6)) {
    case 0: return { name, algorithm: 'fixed-window', limit: int(1, 12), windowMs: int(1, 40) * 50 }
    case 1: return { name, algorithm: 'sliding-log', limit: int(1, 12), windowMs: int(1, 40) * 50 }
    case 2: return { name, algorithm: 'sliding-window', limit: int(1, 12), windowMs: int(1, 40) * 50 }
    case 3: return { name, algorithm: 'token-bucket', capacity: int(1, 12), refillTokens: int(1, 5), refillIntervalMs: int(1, 2000) }
    case 4: return { name, algorithm: 'token-bucket', capacity: int(1, 12), refillTokens: int(1, 5), refillIntervalMs: int(1, 2000), refill: 'interval' }
    case 5: return { name, algorithm: 'leaky-bucket', capacity: int(1, 12), leakTokens: int(1, 5), leakIntervalMs: int(1, 2000) }
    default: return { name, algorithm: 'leaky-bucket', capacity: int(1, 12), leakTokens: int(1, 5), leakIntervalMs: int(1, 2000), mode: 'shape' }
  }
}

/**
 * Calls that span keys (a policy under a key of its own, decided with the
 * others all-or-nothing), for stores that can: on a Redis Cluster, only keys
 * with one hash tag (see withHashTag).
 */
export const spanningKeys: Trace[] = [
  {
    name: 'per-user and global: a refusal by either charges neither',
    policies: [{ ...sl, name: 'user', limit: 3 }, { ...fw, name: 'global' }],
    steps: [...['a', 'a', 'b', 'a', 'a', 'b', 'c'].map((user, i) => ({ t: 10 * i, op: 'limit' as const, key: user, keys: { global: 'all' } })),
      { t: 100, op: 'peek', key: 'c', keys: { global: 'all' } }, { t: 100, op: 'peek', key: 'all' }, ...burst(1000, 4, { key: 'c', keys: { global: 'all' } }),
      { t: 1100, op: 'reset', key: 'c', keys: { global: 'all' } }, ...burst(1100, 2, { key: 'a', keys: { global: 'all' } })],
  },
  {
    name: 'keys with costs, blocks and refunds',
    policies: [{ ...tb, name: 'user' }, { ...sl, name: 'tenant', limit: 8 }, { ...lb, name: 'global', blockMs: 800 }],
    steps: [...burst(0, 3, { key: 'u1', cost: 2, keys: { tenant: 't1', global: 'g' } }), ...burst(10, 2, { key: 'u2', keys: { tenant: 't1', global: 'g' } }),
      ...burst(20, 2, { key: 'u3', keys: { tenant: 't2', global: 'g' } }), { t: 30, op: 'peek', key: 'u2', keys: { tenant: 't1', global: 'g' } },
      ...burst(900, 2, { key: 'u4', keys: { tenant: 't2', global: 'g' } }), ...burst(1200, 3, { key: 'u4', keys: { global: 'g' } }),
      { t: 1300, op: 'refund', key: 'u1', cost: 2, keys: { tenant: 't1', global: 'g' } }],
  },
  {
    name: 'keys on reservations',
    policies: [{ ...fw, name: 'user' }, { ...tb, name: 'global' }],
    steps: [...burst(0, 4, { key: 'a', keys: { global: 'g' } }), ...burst(5, 4, { key: 'b', maxWaitMs: 1500, keys: { global: 'g' } }), ...burst(6, 1, { key: 'g' })],
  },
]

/** Seeded random traces: 1 to 3 policies, 60 steps over two keys; `blocking`: some policies with blockMs; `spanning`: some calls put a policy under a key of its own. */
export function randomTraces(count: number, seed = 1, blocking = false, spanning = false): Trace[] {
  const random = seededRandom(seed)
  return Array.from({ length: count }, (_, n) => {
    let policies = Array.from({ length: 1 + Math.floor(random() * 3) }, (_, i) => randomPolicy(random, i))
    if (blocking) {
      policies = policies.map((p) => (p.algorithm === 'leaky-bucket' && p.mode === 'shape') || random() < 0.3 ? p : { ...p, blockMs: 1 + Math.floor(random() * 3000) })
    }
    const reservable = policies.every((p) => p.algorithm !== 'sliding-log' && p.algorithm !== 'sliding-window' && p.blockMs === undefined)
    const refundable = policies.every((p) => p.algorithm === 'token-bucket' || p.algorithm === 'sliding-log' || (p.algorithm === 'leaky-bucket' && p.mode !== 'shape'))
    const limit = Math.min(...policies.map((p) => ('limit' in p ? p.limit : p.capacity)))
    let t = 1_700_000_000_000 + Math.floor(random() * 1_000_000)
    const steps: Step[] = []
    for (let i = 0; i < 60; i++) {
      t += Math.floor(random() * random() * 600)
      const r = random()
      const key = random() < 0.8 ? 'a' : 'b'
      let step: Step
      if (r < 0.06) step = { t, op: 'peek', key }
      else if (r < 0.08) step = { t, op: 'reset', key }
      else if (refundable && r < 0.16) step = { t, op: 'refund', key, cost: 1 + Math.floor(random() * limit) }
      else {
        step = { t, op: 'limit', key, cost: 1 + Math.floor(random() * limit) }
        if (reservable && random() < 0.3) step.maxWaitMs = Math.floor(random() * 3000)
      }
      // One policy counted under a key every call of this kind shares ('a' and 'b' both spend from 'g').
      if (spanning && random() < 0.6) step.keys = { [policies[Math.floor(random() * policies.length)]?.name as string]: 'g' }
      steps.push(step)
    }
    return { name: `random #${n} (seed ${seed})`, policies, steps }
  })
}

/** The trace with every key starting with `{tag}`: on a Redis Cluster, all its keys in one slot. */
export function withHashTag(trace: Trace, tag: string): Trace {
  const tagged = (key: string): string => `{${tag}}${key}`
  return {
    ...trace,
    name: `${trace.name} (keys tagged {${tag}})`,
    steps: trace.steps.map((step) => ({
      ...step,
      key: tagged(step.key),
      ...(step.keys !== undefined && { keys: Object.fromEntries(Object.entries(step.keys).map(([name, key]) => [name, tagged(key)])) }),
    })),
  }
}

/** Replays a trace on a limiter over `store`, with the clock at each step's time. */
export async function replay(trace: Trace, store: Store, prefix: string, between?: () => Promise<void>): Promise<Array<Decision | 'reset'>> {
  const policies = resolvePolicies(trace.policies)
  let now = 0
  // The block cache answers some refusals without asking the store: off, since the store is under test.
  const limiter = new Limiter({ policies: trace.policies, store, prefix, clock: () => now, blockCache: false })
  const results: Array<Decision | 'reset'> = []
  for (const step of trace.steps) {
    now = step.t
    if (between) await between()
    const keys = step.keys === undefined ? {} : { keys: step.keys }
    if (step.op === 'reset') {
      await limiter.reset(step.key, keys)
      results.push('reset')
    } else if (step.op === 'refund') {
      const own = step.keys === undefined ? {} : { keys: policies.map((policy) => step.keys?.[policy.name] ?? step.key) }
      results.push(combine(await store.consume({ prefix, key: step.key, policies, cost: -(step.cost as number), maxWaitMs: 0, now, ...own })))
    } else if (step.op === 'peek') {
      results.push(await limiter.peek(step.key, keys))
    } else {
      const options: { cost?: number; maxWaitMs?: number; keys?: Record<string, string> } = { ...keys }
      if (step.cost !== undefined) options.cost = step.cost
      if (step.maxWaitMs !== undefined) options.maxWaitMs = step.maxWaitMs
      results.push(await limiter.limit(step.key, options))
    }
  }
  return results
}

/** Replays `trace` on `store` and on a fresh MemoryStore, and asserts each step's decision is the same. */
export async function assertSameAsMemory(trace: Trace, store: Store, prefix: string, between?: () => Promise<void>): Promise<void> {
  const expected = await replay(trace, new MemoryStore(), prefix)
  const actual = await replay(trace, store, prefix, between)
  for (let i = 0; i < expected.length; i++) {
    assert.deepEqual(actual[i], expected[i], `${trace.name}: step ${i} ${JSON.stringify(trace.steps[i])}`)
  }
}
