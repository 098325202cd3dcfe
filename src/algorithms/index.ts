/**
 * The algorithm registry and the composite step every store runs: one call
 * against several policies is all-or-nothing.
 */
import type { PolicyDecision, ResolvedPolicy } from '../core/types.ts'
import { NO_WAIT, type AlgorithmOptions, type Transition } from './algorithm.ts'
import { fixedWindow, type FixedWindowState } from './fixed-window.ts'
import { leakyBucket, leakyBucketRefund, type LeakyBucketState } from './leaky-bucket.ts'
import { slidingLog, slidingLogRefund, type SlidingLogState } from './sliding-log.ts'
import { slidingWindow, type SlidingWindowState } from './sliding-window.ts'
import { tokenBucket, tokenBucketRefund, type TokenBucketState } from './token-bucket.ts'

export { NO_WAIT, type AlgorithmOptions, type Transition } from './algorithm.ts'
export { fixedWindow, type FixedWindowState } from './fixed-window.ts'
export { slidingLog, slidingLogRefund, type SlidingLogState } from './sliding-log.ts'
export { slidingWindow, type SlidingWindowState } from './sliding-window.ts'
export { tokenBucket, tokenBucketRefund, type TokenBucketState } from './token-bucket.ts'
export { leakyBucket, leakyBucketRefund, type LeakyBucketState } from './leaky-bucket.ts'

export type AlgorithmState =
  | FixedWindowState
  | SlidingLogState
  | SlidingWindowState
  | TokenBucketState
  | LeakyBucketState

/**
 * Runs the policy's algorithm. The state must be one this policy's algorithm
 * produced: stores keep states per policy name, and names encode parameters.
 */
export function step(
  policy: ResolvedPolicy,
  state: AlgorithmState | undefined,
  now: number,
  cost: number,
  options: AlgorithmOptions,
): Transition<AlgorithmState> {
  switch (policy.algorithm) {
    case 'fixed-window':
      return fixedWindow(state as FixedWindowState | undefined, now, cost, policy, options)
    case 'sliding-log':
      return slidingLog(state as SlidingLogState | undefined, now, cost, policy, options)
    case 'sliding-window':
      return slidingWindow(state as SlidingWindowState | undefined, now, cost, policy, options)
    case 'token-bucket':
      return tokenBucket(state as TokenBucketState | undefined, now, cost, policy, options)
    case 'leaky-bucket':
      return leakyBucket(state as LeakyBucketState | undefined, now, cost, policy, options)
  }
}

export interface Evaluation {
  /** One decision per policy, in policy order. */
  decisions: PolicyDecision[]
  /** The transitions to store, present only when every policy allowed a charged call. */
  commit: Transition<AlgorithmState>[] | undefined
  /**
   * Blocks to store, by policy index (epoch ms until which the policy refuses the key):
   * present when a charged call was refused by policies with `blockMs` that were not blocked already.
   */
  blocks?: Array<number | undefined>
}

const NOT_BLOCKED: ReadonlyArray<number | undefined> = []

/**
 * One call against every policy of a limiter, all-or-nothing: when any policy
 * refuses, nothing is charged anywhere, and the policies that would have
 * allowed report their state uncharged. Cost 0 is a peek: `remaining` and
 * `resetAfterMs` as they stand, `allowed` / `retryAfterMs` for a call of cost 1.
 */
export function evaluate(
  policies: readonly ResolvedPolicy[],
  states: ReadonlyArray<AlgorithmState | undefined>,
  now: number,
  cost: number,
  options: AlgorithmOptions,
  blockedUntil: ReadonlyArray<number | undefined> = NOT_BLOCKED,
): Evaluation {
  const blocked = (i: number): boolean => (blockedUntil[i] ?? 0) > now
  if (cost < 0) return refund(policies, states, now, -cost, blockedUntil)
  if (cost === 0) {
    return {
      decisions: policies.map((policy, i) => blocked(i) ? blockedDecision(policy, states[i], now, blockedUntil[i] as number) : peekDecision(policy, states[i], now)),
      commit: undefined,
    }
  }
  // A blocked policy refuses without deciding: its algorithm's state is not read for this call.
  const transitions = policies.map((policy, i) => (blocked(i) ? undefined : step(policy, states[i], now, cost, options)))
  if (transitions.every((transition) => transition?.decision.allowed === true)) {
    const committed = transitions as Transition<AlgorithmState>[]
    return { decisions: committed.map((transition) => transition.decision), commit: committed }
  }
  let blocks: Array<number | undefined> | undefined
  const decisions = transitions.map((transition, i) => {
    const policy = policies[i] as ResolvedPolicy
    if (transition === undefined) return blockedDecision(policy, states[i], now, blockedUntil[i] as number)
    // Allowed it stays: its state uncharged (a view of cost 0 without waiting would refuse a fixed
    // window reserved ahead, and could name it as the refusal's binding policy).
    if (transition.decision.allowed) return { ...unchargedDecision(policy, states[i], now), allowed: true, retryAfterMs: 0 }
    if (policy.blockMs === undefined) return transition.decision
    // Refused by a policy that blocks: nothing is charged, and the key is blocked on it from now.
    blocks ??= []
    blocks[i] = now + policy.blockMs
    return blockedView(transition.decision, policy.blockMs)
  })
  return blocks === undefined ? { decisions, commit: undefined } : { decisions, commit: undefined, blocks }
}

/** A decision of a policy that blocks the key for `leftMs` more: nothing left until then. */
function blockedView(decision: PolicyDecision, leftMs: number): PolicyDecision {
  return {
    ...decision,
    allowed: false,
    remaining: 0,
    resetAfterMs: Math.max(decision.resetAfterMs, leftMs),
    moreAfterMs: Math.max(decision.moreAfterMs, leftMs),
    retryAfterMs: Math.max(decision.retryAfterMs, leftMs),
    waitMs: 0,
  }
}

/** A blocked policy's decision: its state as it stands, refusing until the block ends. */
function blockedDecision(policy: ResolvedPolicy, state: AlgorithmState | undefined, now: number, until: number): PolicyDecision {
  return blockedView({ ...unchargedDecision(policy, state, now), retryAfterMs: 0 }, until - now)
}

/**
 * Algorithms whose units can be given back (leases, responses that do not
 * count): buckets, exactly, and the sliding log, from its oldest entries (see
 * slidingLogRefund). A window's counter cannot tell which window a unit was
 * charged in, and a shaping bucket has already scheduled its calls.
 */
export const REFUNDABLE = (policy: ResolvedPolicy): boolean =>
  policy.algorithm === 'token-bucket' || policy.algorithm === 'sliding-log' || (policy.algorithm === 'leaky-bucket' && policy.mode === 'police')

/**
 * Gives `units` back to every policy (a negative cost: returned, unspent
 * units of a lease). Decisions show each policy after the refund.
 */
function refund(policies: readonly ResolvedPolicy[], states: ReadonlyArray<AlgorithmState | undefined>, now: number, units: number, blockedUntil: ReadonlyArray<number | undefined>): Evaluation {
  const transitions = policies.map((policy, i) => {
    const state = states[i]
    let refunded: AlgorithmState | undefined
    if (policy.algorithm === 'token-bucket') refunded = tokenBucketRefund(state as TokenBucketState | undefined, now, units, policy)
    else if (policy.algorithm === 'leaky-bucket' && policy.mode === 'police') refunded = leakyBucketRefund(state as LeakyBucketState | undefined, now, units, policy)
    else if (policy.algorithm === 'sliding-log') refunded = slidingLogRefund(state as SlidingLogState | undefined, now, units, policy)
    else throw new Error(`${policy.algorithm} cannot take units back`)
    const view = step(policy, refunded, now, 0, NO_WAIT)
    // Units given back do not lift a block: only time does.
    const until = blockedUntil[i] ?? 0
    const decision = until > now ? blockedDecision(policy, refunded, now, until) : { ...view.decision, waitMs: 0 }
    return { decision, state: view.state, ttlMs: view.ttlMs }
  })
  return { decisions: transitions.map((t) => t.decision), commit: transitions }
}

function peekDecision(policy: ResolvedPolicy, state: AlgorithmState | undefined, now: number): PolicyDecision {
  const single = step(policy, state, now, 1, NO_WAIT).decision
  return { ...unchargedDecision(policy, state, now), allowed: single.allowed, retryAfterMs: single.retryAfterMs }
}

function unchargedDecision(policy: ResolvedPolicy, state: AlgorithmState | undefined, now: number): PolicyDecision {
  return { ...step(policy, state, now, 0, NO_WAIT).decision, waitMs: 0 }
}
