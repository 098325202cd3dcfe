import { Limiter, type LimitOptions, type Policy, type Decision } from '../src/index.ts'

/** A limiter on a virtual clock: `at(t)` decides one call for key 'k' at time t. */
export function onVirtualClock(policies: Policy | Policy[], start = 0) {
  let now = start
  const limiter = new Limiter({ policies, clock: () => now })
  return {
    limiter,
    at(t: number, options?: LimitOptions, key = 'k'): Decision {
      now = t
      return limiter.limitSync(key, options)
    },
    peekAt(t: number, key = 'k'): Decision {
      now = t
      return limiter.peekSync(key)
    },
  }
}

/** Allowed flags of one call per listed time. */
export function admissions(policy: Policy, times: number[], cost = 1): boolean[] {
  const clock = onVirtualClock(policy)
  return times.map((t) => clock.at(t, { cost }).allowed)
}

/**
 * fast-check settings: a fixed seed so CI is reproducible (FC_SEED=random or a
 * number to explore), and FC_RUNS to run more cases locally.
 */
export function fcOptions(numRuns: number): { numRuns: number; seed?: number } {
  const runs = Number(process.env.FC_RUNS ?? numRuns)
  const seed = process.env.FC_SEED
  if (seed === 'random') return { numRuns: runs }
  return { numRuns: runs, seed: seed === undefined ? 20261122 : Number(seed) }
}

/** What `work` resolves to, and how many turns the event loop took while it ran: 0 for work that never lets the loop go. */
export async function turnsOfEventLoopDuring<T>(work: () => Promise<T>): Promise<{ result: T; turns: number }> {
  let turns = 0
  let working = true
  const turn = () => {
    if (!working) return
    turns++
    setImmediate(turn)
  }
  setImmediate(turn)
  try {
    return { result: await work(), turns }
  } finally {
    working = false
  }
}

/** The messages of the process warnings of `code` emitted while `work` runs (and the turn after it, when they are delivered). */
export async function processWarningsDuring(code: string, work: () => Promise<void>): Promise<string[]> {
  const messages: string[] = []
  const collect = (warning: Error & { code?: string }) => { if (warning.code === code) messages.push(warning.message) }
  process.on('warning', collect)
  try {
    await work()
    await new Promise((resolve) => setImmediate(resolve))
  } finally {
    process.off('warning', collect)
  }
  return messages
}
