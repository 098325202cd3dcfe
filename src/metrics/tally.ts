/**
 * What the decision metrics count, whichever library exports them
 * (prom-client in decisions.ts, OpenTelemetry in otel.ts): decisions by
 * subject (a route or a rule), binding policy and outcome, the allowed ones
 * near their limit, whether the latest was degraded, and refunds owed.
 */
import type { Decision } from '../core/types.ts'
import { TwoLabelCounts } from './counter.ts'

export type DecisionOutcome = 'allowed' | 'limited' | 'shadow_limited' | 'degraded'
export const OUTCOMES: readonly DecisionOutcome[] = ['allowed', 'limited', 'shadow_limited', 'degraded']
/** In a subject and policy's counts, the slot after the outcomes': allowed decisions near the limit. */
export const NEAR_LIMIT = OUTCOMES.length

/**
 * Policies counted by name under one route or rule; decisions binding on
 * others (a policies function that names one per customer, against the
 * README's advice) are counted under the policy `*`.
 */
export const MAX_POLICIES_PER_SUBJECT = 1000
export const OTHER_POLICIES = '*'

/** A decision is near its limit when less than this share of the binding policy is left. */
export const NEAR_LIMIT_SHARE = 0.2

/** What each measure means, in the help (Prometheus) or description (OpenTelemetry) of either exporter. */
export const MEANING = {
  decisions: (subject: string) => `Rate-limit decisions by ${subject}, binding policy and outcome (allowed, limited, shadow_limited, degraded).`,
  nearLimit: `Allowed decisions that left less than ${NEAR_LIMIT_SHARE * 100}% of the binding policy's limit.`,
  storeLatency: 'Time of each call to a store outside the process (Redis).',
  storeErrors: 'Store calls that failed or timed out.',
  fallbackActive: '1 while decisions are made by the failure policy (fallback, open or closed) instead of the store.',
  blockCacheHits: 'Refusals answered from the local cache of blocked keys, without a store call.',
  refundsOwed: 'Refunds the store did not take (down, cut off), to be given once it answers: the units they give back (of concurrency and other counting limits) stay held meanwhile.',
  refundsDropped: 'Owed refunds never given: they stopped mattering before the store answered, more were owed than are kept, or the store failed in a way that may have taken them.',
} as const

/** Upper bounds, in seconds, of the store latency histogram's buckets. */
export const STORE_LATENCY_BUCKETS: readonly number[] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1]

/** Each outcome's slot in a subject and policy's counts. */
const SLOT = Object.fromEntries(OUTCOMES.map((outcome, slot) => [outcome, slot])) as Record<DecisionOutcome, number>

/** What came of a decision: degraded (the store could not decide), allowed, or refused, by a shadow rule or not. */
function outcomeOf(decision: Decision, shadow: boolean): DecisionOutcome {
  return decision.degraded === true ? 'degraded' : decision.allowed ? 'allowed' : shadow ? 'shadow_limited' : 'limited'
}

export class DecisionTally {
  /** Decisions by subject and policy: a count per outcome (in OUTCOMES' order), then the near-limit count. */
  readonly counts = new TwoLabelCounts<string>(OUTCOMES.length + 1, { most: MAX_POLICIES_PER_SUBJECT, overflow: OTHER_POLICIES })
  /** Whether the latest decision was degraded: a fallback gauge reads it when collected, not per decision. */
  lastDegraded = false
  /** Refunds the store did not take, owed by the limiters observed (a reloaded config's too) and not yet given or dropped. */
  owed = 0

  /** Counts one decision of `subject` (a route's or a rule's name); says its outcome. */
  decision(subject: string, decision: Decision, shadow: boolean): DecisionOutcome {
    const outcome = outcomeOf(decision, shadow)
    const counts = this.counts.of(subject, decision.policy)
    ;(counts[SLOT[outcome]] as number)++
    if (decision.allowed && decision.remaining < decision.limit * NEAR_LIMIT_SHARE) (counts[NEAR_LIMIT] as number)++
    this.lastDegraded = outcome === 'degraded'
    return outcome
  }

  /** A refund the store did not take is owed, or one owed was given or dropped. */
  refundOwed(event: 'owed' | 'given' | 'dropped'): void {
    this.owed += event === 'owed' ? 1 : -1
  }
}
