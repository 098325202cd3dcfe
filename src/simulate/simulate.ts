/**
 * Replays traffic through policies on a simulated clock and measures what
 * each one did: what it admitted over time, the most it admitted in any
 * window of its own length (the boundary-burst figure), the share it refused,
 * and for the sliding-window counter, how often it disagreed with the exact
 * rule it approximates.
 */
import { resolvePolicies } from '../core/policy.ts'
import type { Policy, ResolvedPolicy } from '../core/types.ts'
import { Limiter } from '../limiter/limiter.ts'
import { MemoryStore } from '../stores/memory/memory-store.ts'
import type { Traffic, TrafficEvent } from './traffic.ts'

export interface WorstWindow {
  /** Units admitted in the busiest window of the policy's length. */
  admitted: number
  /** That window's start (ms since the start) and key. */
  startsAt: number
  key: string
}

/** Where the counter approximation and the exact sliding log disagree, on the counter's own history. */
export interface CounterError {
  /** Admitted although the exact rule would have refused. */
  falseAllows: number
  /** Refused although the exact rule would have admitted. */
  falseDenies: number
  decisions: number
}

export interface PolicyResult {
  policy: ResolvedPolicy
  /** The window the policy's limit refers to (for buckets, the time to refill from empty). */
  windowMs: number
  limit: number
  offered: number
  admitted: number
  rejectedFraction: number
  worstWindow: WorstWindow
  /** Units offered and admitted per bucket of `bucketMs`; a shaped call counts when it is let through. */
  timeline: { offered: number[]; admitted: number[] }
  counterError?: CounterError
  /** For each event, in order: admitted (true) or refused. */
  decisions: boolean[]
  /** Total delay given to admitted calls (leaky bucket in shape mode). */
  delayedMs: number
}

export interface Simulation {
  traffic: { name: string; description: string; events: number; keys: number; durationMs: number }
  bucketMs: number
  results: PolicyResult[]
}

export interface SimulateOptions {
  /** Timeline resolution. Default: the duration in 120 buckets. */
  bucketMs?: number
}

/** The window a policy's limit refers to. */
export function policyWindowMs(policy: ResolvedPolicy): number {
  switch (policy.algorithm) {
    case 'token-bucket':
      return Math.ceil((policy.capacity * policy.refillIntervalMs) / policy.refillTokens)
    case 'leaky-bucket':
      return Math.ceil((policy.capacity * policy.leakIntervalMs) / policy.leakTokens)
    default:
      return policy.windowMs
  }
}

export function policyLimit(policy: ResolvedPolicy): number {
  return policy.algorithm === 'token-bucket' || policy.algorithm === 'leaky-bucket' ? policy.capacity : policy.limit
}

export function simulate(traffic: Traffic, policies: Policy | readonly Policy[], options: SimulateOptions = {}): Simulation {
  const resolved = resolvePolicies(policies)
  const bucketMs = options.bucketMs ?? Math.max(1, Math.ceil(traffic.durationMs / 120))
  const buckets = Math.max(1, Math.ceil(traffic.durationMs / bucketMs) + 1)
  const keys = new Set(traffic.events.map((event) => event.key))
  return {
    traffic: { name: traffic.name, description: traffic.description, events: traffic.events.length, keys: keys.size, durationMs: traffic.durationMs },
    bucketMs,
    results: resolved.map((policy) => replay(traffic.events, policy, bucketMs, buckets)),
  }
}

function replay(events: readonly TrafficEvent[], policy: ResolvedPolicy, bucketMs: number, buckets: number): PolicyResult {
  let now = 0
  // The simulated clock starts at 0, a boundary of every window.
  const limiter = new Limiter({ policies: policy, store: new MemoryStore({ maxKeys: 10_000_000 }), clock: () => now })
  const limit = policyLimit(policy)
  const windowMs = policyWindowMs(policy)
  const offeredLine = new Array<number>(buckets).fill(0)
  const admittedLine = new Array<number>(buckets).fill(0)
  const admittedByKey = new Map<string, Array<[at: number, cost: number]>>()
  const decisions: boolean[] = []
  const exact = policy.algorithm === 'sliding-window' ? new ExactLog(policy.limit, policy.windowMs) : undefined
  let offered = 0
  let admitted = 0
  let delayedMs = 0
  for (const event of events) {
    now = event.at
    offered += event.cost
    offeredLine[Math.min(buckets - 1, Math.floor(event.at / bucketMs))]! += event.cost
    // A call costing more than the limit can never be admitted.
    const decision = event.cost <= limit ? limiter.limitSync(event.key, { cost: event.cost }) : undefined
    const allowed = decision?.allowed ?? false
    exact?.judge(event, allowed)
    decisions.push(allowed)
    if (!allowed || decision === undefined) continue
    const at = event.at + decision.waitMs
    delayedMs += decision.waitMs
    admitted += event.cost
    admittedLine[Math.min(buckets - 1, Math.floor(at / bucketMs))]! += event.cost
    let history = admittedByKey.get(event.key)
    if (history === undefined) admittedByKey.set(event.key, (history = []))
    history.push([at, event.cost])
  }
  const result: PolicyResult = {
    policy,
    windowMs,
    limit,
    offered,
    admitted,
    rejectedFraction: offered === 0 ? 0 : (offered - admitted) / offered,
    worstWindow: worstWindow(admittedByKey, windowMs),
    timeline: { offered: offeredLine, admitted: admittedLine },
    decisions,
    delayedMs,
  }
  if (exact !== undefined) result.counterError = exact.error()
  return result
}

/** The most units admitted for one key in any half-open window [t, t + windowMs). */
export function worstWindow(admittedByKey: ReadonlyMap<string, ReadonlyArray<readonly [number, number]>>, windowMs: number): WorstWindow {
  const worst: WorstWindow = { admitted: 0, startsAt: 0, key: '' }
  for (const [key, history] of admittedByKey) {
    let sum = 0
    let tail = 0
    for (let head = 0; head < history.length; head++) {
      const [at, cost] = history[head] as readonly [number, number]
      sum += cost
      while ((history[tail] as readonly [number, number])[0] <= at - windowMs) sum -= (history[tail++] as readonly [number, number])[1]
      if (sum > worst.admitted) Object.assign(worst, { admitted: sum, startsAt: (history[tail] as readonly [number, number])[0], key })
    }
  }
  return worst
}

/** The exact sliding-log rule, judged on the counter's own admitted history. */
class ExactLog {
  private readonly logs = new Map<string, { entries: Array<[number, number]>; head: number; sum: number }>()
  private falseAllows = 0
  private falseDenies = 0
  private decisions = 0

  constructor(private readonly limit: number, private readonly windowMs: number) {}

  judge(event: TrafficEvent, allowed: boolean): void {
    let log = this.logs.get(event.key)
    if (log === undefined) this.logs.set(event.key, (log = { entries: [], head: 0, sum: 0 }))
    // Entries count while their time is after now - windowMs.
    while (log.head < log.entries.length && (log.entries[log.head] as [number, number])[0] <= event.at - this.windowMs) {
      log.sum -= (log.entries[log.head++] as [number, number])[1]
    }
    const exactAllows = log.sum + event.cost <= this.limit
    this.decisions++
    if (allowed && !exactAllows) this.falseAllows++
    if (!allowed && exactAllows) this.falseDenies++
    if (allowed) {
      log.entries.push([event.at, event.cost])
      log.sum += event.cost
    }
  }

  error(): CounterError {
    return { falseAllows: this.falseAllows, falseDenies: this.falseDenies, decisions: this.decisions }
  }
}
