/**
 * Sliding window log: exact. A call is allowed iff the summed cost of allowed
 * calls with a timestamp > now - windowMs, plus its cost, stays within the
 * limit. Memory is O(limit) per key: one entry per allowed call, each costing
 * at least 1. It cannot reserve: an entry cannot be placed in the future
 * without changing what every later call sees.
 */
import type { AlgorithmFn } from './algorithm.ts'

export interface SlidingLogState {
  /** Flat pairs `[time, cost, time, cost, ...]` in ascending time. */
  log: readonly number[]
}

export const slidingLog: AlgorithmFn<'sliding-log', SlidingLogState> = (state, now, cost, policy) => {
  const { limit, windowMs } = policy
  const log = state?.log ?? []
  const cutoff = now - windowMs
  let first = 0
  while (first < log.length && (log[first] as number) <= cutoff) first += 2
  let used = 0
  for (let i = first + 1; i < log.length; i += 2) used += log[i] as number
  const lastTime = log.length > 0 ? (log[log.length - 2] as number) : now

  if (used + cost <= limit) {
    const kept = log.slice(first)
    // Never write an entry earlier than the last one: a clock stepping back
    // must not reorder the log or shorten how long earlier calls count.
    const time = Math.max(now, lastTime)
    kept.push(time, cost)
    const resetAfterMs = time + windowMs - now
    return {
      state: { log: kept },
      ttlMs: resetAfterMs,
      decision: {
        policy: policy.name,
        allowed: true,
        limit,
        remaining: limit - used - cost,
        resetAfterMs,
        retryAfterMs: 0,
        waitMs: 0,
      },
    }
  }

  // The call fits once enough of the oldest entries have left the window.
  const excess = used + cost - limit
  let freed = 0
  let retryAfterMs = 0
  for (let i = first; i < log.length; i += 2) {
    freed += log[i + 1] as number
    if (freed >= excess) {
      retryAfterMs = (log[i] as number) + windowMs - now
      break
    }
  }
  const resetAfterMs = used > 0 ? lastTime + windowMs - now : 0
  return {
    state: { log },
    ttlMs: resetAfterMs,
    decision: {
      policy: policy.name,
      allowed: false,
      limit,
      remaining: limit - used,
      resetAfterMs,
      retryAfterMs,
      waitMs: 0,
    },
  }
}
