/**
 * Sliding window log: exact. A call is allowed iff the summed cost of allowed
 * calls with a timestamp > now - windowMs, plus its cost, stays within the
 * limit. Memory is O(limit) per key: one entry per allowed call, each costing
 * at least 1. It cannot reserve: an entry cannot be placed in the future
 * without changing what every later call sees.
 *
 * The log is append-only and shared by the successive states of one key, so a
 * call costs O(1) amortised instead of a copy of the log: a state records
 * which slice of the array is its own (`head`..`end`). The one rule this
 * brings: step only from a key's newest state (stores always do). A
 * transition that was not committed leaves entries past `end`, which the next
 * step discards.
 */
import type { AlgorithmFn } from './algorithm.ts'

export interface SlidingLogState {
  /** Flat pairs `[time, cost, time, cost, ...]` in ascending time; live from `head` to `end`. */
  log: number[]
  head: number
  end: number
  /** Summed cost of the live entries. */
  used: number
}

/**
 * Compact the array once this many dead slots lead it and they are at least
 * half of it: a copy of the live entries, paid for by as many dead ones.
 */
const COMPACT_AFTER = 64

export const slidingLog: AlgorithmFn<'sliding-log', SlidingLogState> = (state, now, cost, policy) => {
  const { limit, windowMs } = policy
  let log = state?.log ?? []
  let head = state?.head ?? 0
  let end = state?.end ?? 0
  let used = state?.used ?? 0
  const lastTime = end > head ? (log[end - 2] as number) : now
  const cutoff = now - windowMs
  while (head < end && (log[head] as number) <= cutoff) {
    used -= log[head + 1] as number
    head += 2
  }

  if (used + cost <= limit) {
    if (head === end) {
      // Nothing live: a new array (the old one may still back a state that is not replaced).
      if (end > 0) log = []
      head = end = 0
    } else {
      if (log.length !== end) log.length = end
      if (head >= COMPACT_AFTER && head * 2 >= end) {
        log = log.slice(head, end)
        end -= head
        head = 0
      }
    }
    // Never write an entry earlier than the last one: a clock stepping back
    // must not reorder the log or shorten how long earlier calls count.
    const time = Math.max(now, lastTime)
    log.push(time, cost)
    const resetAfterMs = time + windowMs - now
    return {
      state: { log, head, end: end + 2, used: used + cost },
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
  for (let i = head; i < end; i += 2) {
    freed += log[i + 1] as number
    if (freed >= excess) {
      retryAfterMs = (log[i] as number) + windowMs - now
      break
    }
  }
  const resetAfterMs = used > 0 ? lastTime + windowMs - now : 0
  return {
    state: { log, head, end, used },
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
