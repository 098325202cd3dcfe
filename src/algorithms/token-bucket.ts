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
 */
import { ceilDiv, type AlgorithmFn } from './algorithm.ts'

export interface TokenBucketState {
  /** Tokens x refillIntervalMs; negative while reservations are outstanding. */
  level: number
  /** When `level` was last brought up to date (for `interval`: an interval boundary). */
  updatedAt: number
}

export const tokenBucket: AlgorithmFn<'token-bucket', TokenBucketState> = (state, now, cost, policy, options) => {
  const { capacity, refillTokens, refillIntervalMs, refill } = policy
  const full = capacity * refillIntervalMs
  let level = full
  let updatedAt = now
  if (state !== undefined) {
    // A clock that steps back adds nothing: elapsed time is never negative.
    const elapsed = Math.max(0, now - state.updatedAt)
    if (refill === 'greedy') {
      level = Math.min(full, state.level + elapsed * refillTokens)
      updatedAt = Math.max(now, state.updatedAt)
    } else {
      const intervals = Math.floor(elapsed / refillIntervalMs)
      level = Math.min(full, state.level + intervals * refillTokens * refillIntervalMs)
      // A full bucket restarts its interval clock: the phase of a bucket at rest
      // is unobservable, and restarting it makes a full state and a missing key
      // (expired in the store) decide exactly alike.
      updatedAt = level === full ? now : state.updatedAt + intervals * refillIntervalMs
    }
  }

  const need = cost * refillIntervalMs
  const neededWaitMs = level >= need ? 0 : msUntil(need - level, now, updatedAt, policy.refill, refillTokens, refillIntervalMs)
  const allowed = neededWaitMs <= options.maxWaitMs
  const after = allowed ? level - need : level
  const resetAfterMs = after >= full ? 0 : msUntil(full - after, now, updatedAt, refill, refillTokens, refillIntervalMs)
  return {
    state: { level: after, updatedAt },
    ttlMs: resetAfterMs,
    decision: {
      policy: policy.name,
      allowed,
      limit: capacity,
      remaining: Math.max(0, Math.floor(after / refillIntervalMs)),
      resetAfterMs,
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
