/**
 * Leaky bucket as GCRA (generic cell rate algorithm): one stored timestamp, the
 * theoretical arrival time (TAT) at which the bucket would be empty if it kept
 * leaking `leakTokens` per `leakIntervalMs`.
 *
 * Each unit takes T = leakIntervalMs / leakTokens ms to leak. The bucket holds
 * `capacity` units, so the tolerance is capacity x T: a call is allowed iff,
 * with its cost added, the bucket would empty no later than capacity x T from
 * now. `police` admits or rejects at once, and admits exactly what a token
 * bucket of the same capacity and rate admits. `shape` admits calls with a
 * `waitMs` that releases them at the leak rate, refusing only when more than
 * `capacity` units would be queued (nginx `limit_req` without `nodelay`, with
 * capacity = burst + 1).
 *
 * Time is counted in units of 1/leakTokens ms, so T is the integer
 * leakIntervalMs and every quantity stays an integer. The TAT is stored as a
 * whole millisecond plus a remainder in those units.
 */
import type { ResolvedPolicyOf } from '../core/types.ts'
import { ceilDiv, type AlgorithmFn } from './algorithm.ts'

export interface LeakyBucketState {
  /** Whole milliseconds of the theoretical arrival time. */
  tat: number
  /** The TAT's fraction of a millisecond, in 1/leakTokens ms (0 <= tatRem < leakTokens). */
  tatRem: number
}

export const leakyBucket: AlgorithmFn<'leaky-bucket', LeakyBucketState> = (state, now, cost, policy, options) => {
  const { capacity, leakTokens, leakIntervalMs, mode } = policy
  // How far the bucket's TAT lies ahead of now; a TAT in the past is an empty bucket.
  const queued = state === undefined ? 0 : Math.max(0, (state.tat - now) * leakTokens + state.tatRem)
  const tolerance = capacity * leakIntervalMs
  const queuedAfter = queued + cost * leakIntervalMs
  const overflowMs = queuedAfter > tolerance ? ceilDiv(queuedAfter - tolerance, leakTokens) : 0

  let neededWaitMs: number
  let retryAfterMs: number
  if (mode === 'police') {
    neededWaitMs = overflowMs
    retryAfterMs = Math.max(0, overflowMs - options.maxWaitMs)
  } else {
    // Shaping: the call leaves when the units ahead of it have leaked. The queue
    // bound is capacity; a positive maxWaitMs caps the wait further.
    neededWaitMs = ceilDiv(queued, leakTokens)
    const tooLong = options.maxWaitMs > 0 ? Math.max(0, neededWaitMs - options.maxWaitMs) : 0
    retryAfterMs = Math.max(overflowMs, tooLong)
  }
  const allowed = retryAfterMs === 0
  const held = allowed ? queuedAfter : queued
  const resetAfterMs = ceilDiv(held, leakTokens)
  const remaining = Math.max(0, Math.floor((tolerance - held) / leakIntervalMs))
  const tatOffset = Math.floor(held / leakTokens)
  return {
    state: { tat: now + tatOffset, tatRem: held - tatOffset * leakTokens },
    ttlMs: resetAfterMs,
    decision: {
      policy: policy.name,
      allowed,
      limit: capacity,
      remaining,
      resetAfterMs,
      // Until room for one more than those left has leaked free (a bucket's time to empty says far more).
      moreAfterMs: held === 0 ? 0 : ceilDiv(held - (capacity - remaining - 1) * leakIntervalMs, leakTokens),
      retryAfterMs,
      waitMs: allowed ? neededWaitMs : 0,
    },
  }
}

/**
 * Gives back `units` taken earlier and not spent (a lease returned): the TAT
 * moves back by their emission time, never before now. Pure, like the transition.
 */
export function leakyBucketRefund(state: LeakyBucketState | undefined, now: number, units: number, policy: ResolvedPolicyOf<'leaky-bucket'>): LeakyBucketState | undefined {
  if (state === undefined) return undefined
  const queued = Math.max(0, (state.tat - now) * policy.leakTokens + state.tatRem - units * policy.leakIntervalMs)
  const offset = Math.floor(queued / policy.leakTokens)
  return { tat: now + offset, tatRem: queued - offset * policy.leakTokens }
}
