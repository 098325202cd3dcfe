/**
 * Token bucket: starts full with `capacity` tokens; `greedy` refill adds
 * refillTokens / refillIntervalMs continuously, `interval` refill adds
 * refillTokens at each whole interval, counted from the first call that
 * took a token from a full bucket.
 * Never above capacity. A call is allowed iff tokens >= cost; a denied call
 * consumes nothing.
 *
 * Tokens are kept as an integer `level` in token-milliseconds (tokens x
 * refillIntervalMs), so greedy refill (elapsed x refillTokens) never produces a
 * fraction: fractional tokens are exact, in TypeScript and in Lua alike.
 *
 * Reservations (`maxWaitMs > 0`) may take the level below zero: the debt is
 * repaid by refill before any later call, which is what orders callers fairly.
 *
 * The state names the refillIntervalMs its level is scaled by: a policy whose
 * numbers a new config changes reads the same tokens at the new rate, at most
 * a full bucket of them and at most a full bucket of debt.
 */
import type { ResolvedPolicyOf } from '../core/types.ts'
import { ceilDiv, type AlgorithmFn } from './algorithm.ts'

export interface TokenBucketState {
  /** Tokens x refillIntervalMs; negative while reservations are outstanding. */
  level: number
  /** When `level` was last brought up to date (for `interval`: an interval boundary). */
  updatedAt: number
  /** The refillIntervalMs `level` is scaled by. */
  intervalMs: number
}

/** The level brought up to `now` by refill (never above full), and when it was. */
function refilled(state: TokenBucketState | undefined, now: number, policy: ResolvedPolicyOf<'token-bucket'>): TokenBucketState {
  const { capacity, refillTokens, refillIntervalMs, refill } = policy
  const full = capacity * refillIntervalMs
  if (state === undefined) return { level: full, updatedAt: now, intervalMs: refillIntervalMs }
  const stored = state.intervalMs === refillIntervalMs ? state.level : rescaled(state.level, state.intervalMs, full, refillIntervalMs)
  // A clock that steps back adds nothing: elapsed time is never negative.
  const elapsed = Math.max(0, now - state.updatedAt)
  if (refill === 'greedy') {
    return { level: Math.min(full, stored + elapsed * refillTokens), updatedAt: Math.max(now, state.updatedAt), intervalMs: refillIntervalMs }
  }
  const intervals = Math.floor(elapsed / refillIntervalMs)
  const level = Math.min(full, stored + intervals * refillTokens * refillIntervalMs)
  // A full bucket restarts its interval clock: the phase of a bucket at rest
  // is unobservable, and restarting it makes a full state and a missing key
  // (expired in the store) decide exactly alike.
  return { level, updatedAt: level === full ? now : state.updatedAt + intervals * refillIntervalMs, intervalMs: refillIntervalMs }
}

/**
 * A level scaled by another refillIntervalMs (a config changed it), as the same
 * tokens on this scale, rounded down; within one full bucket either way, so a
 * new rate never inherits a debt it would take longer than a bucket to repay.
 */
function rescaled(level: number, fromIntervalMs: number, full: number, toIntervalMs: number): number {
  return Math.min(full, Math.max(-full, Math.floor((level * toIntervalMs) / fromIntervalMs)))
}

export const tokenBucket: AlgorithmFn<'token-bucket', TokenBucketState> = (state, now, cost, policy, options) => {
  const { capacity, refillTokens, refillIntervalMs, refill } = policy
  const full = capacity * refillIntervalMs
  const { level, updatedAt } = refilled(state, now, policy)

  const need = cost * refillIntervalMs
  const neededWaitMs = level >= need ? 0 : msUntil(need - level, now, updatedAt, policy.refill, refillTokens, refillIntervalMs)
  const allowed = neededWaitMs <= options.maxWaitMs
  const after = allowed ? level - need : level
  const resetAfterMs = after >= full ? 0 : msUntil(full - after, now, updatedAt, refill, refillTokens, refillIntervalMs)
  const remaining = Math.max(0, Math.floor(after / refillIntervalMs))
  return {
    state: { level: after, updatedAt, intervalMs: refillIntervalMs },
    ttlMs: resetAfterMs,
    decision: {
      policy: policy.name,
      allowed,
      limit: capacity,
      remaining,
      resetAfterMs,
      // Until a token more than those left: the next one, or the first after a debt is repaid (a
      // bucket's time to full says far more).
      moreAfterMs: after >= full ? 0 : msUntil((remaining + 1) * refillIntervalMs - after, now, updatedAt, refill, refillTokens, refillIntervalMs),
      retryAfterMs: allowed ? 0 : neededWaitMs - options.maxWaitMs,
      waitMs: allowed ? neededWaitMs : 0,
    },
  }
}

/** Milliseconds from `now` until refill has added `deficit` (token-milliseconds, > 0). */
function msUntil(
  deficit: number,
  now: number,
  updatedAt: number,
  refill: 'greedy' | 'interval',
  refillTokens: number,
  refillIntervalMs: number,
): number {
  if (refill === 'greedy') return ceilDiv(deficit, refillTokens)
  const intervals = ceilDiv(deficit, refillTokens * refillIntervalMs)
  return updatedAt + intervals * refillIntervalMs - now
}

/**
 * Gives back `units` taken earlier and not spent (a lease returned): the level
 * rises by them, never above capacity. Pure, like the transition.
 */
export function tokenBucketRefund(state: TokenBucketState | undefined, now: number, units: number, policy: ResolvedPolicyOf<'token-bucket'>): TokenBucketState | undefined {
  if (state === undefined) return undefined
  const { level, updatedAt } = refilled(state, now, policy)
  const full = policy.capacity * policy.refillIntervalMs
  return { level: Math.min(full, level + units * policy.refillIntervalMs), updatedAt, intervalMs: policy.refillIntervalMs }
}
