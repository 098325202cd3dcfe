/**
 * Sliding window counter: the rolling window approximated from two epoch-aligned
 * counters, assuming the previous window's calls were spread evenly over it:
 *
 *   estimate = previous x (1 - elapsed / windowMs) + current
 *
 * and a call is allowed iff estimate + cost <= limit. O(1) memory. The
 * comparison is done multiplied through by windowMs, in integers, so it is exact.
 *
 * Bound: since every allowed call keeps the estimate within the limit, any
 * rolling window of length windowMs admits less than 2 x limit, and exactly
 * `limit` when calls arrive evenly; bursts at the end of one window are
 * over-weighted (the estimate is pessimistic), so it errs towards refusing.
 */
import type { AlgorithmFn } from './algorithm.ts'

export interface SlidingWindowState {
  /** Index of the window `current` counts in. */
  window: number
  /** The windowMs that index counts in: read under another (a config changed it), its start still means the same moment. */
  windowMs: number
  /** Units allowed in the window before it. */
  previous: number
  /** Units allowed in window `window`. */
  current: number
}

export const slidingWindow: AlgorithmFn<'sliding-window', SlidingWindowState> = (state, now, cost, policy) => {
  const { limit, windowMs } = policy
  let window = Math.floor(now / windowMs)
  let elapsed = now - window * windowMs
  let previous = 0
  let current = 0
  if (state !== undefined) {
    const stored = state.windowMs === windowMs ? state.window : Math.floor((state.window * state.windowMs) / windowMs)
    if (stored > window) {
      // The clock stepped back: stay in the stored window, at its start, where
      // the previous window weighs most. Never reopen a window.
      window = stored
      elapsed = 0
    }
    if (stored === window) {
      previous = state.previous
      current = state.current
    } else if (stored === window - 1) {
      previous = state.current
    }
  }

  // previous x (windowMs - elapsed) is the previous window's weight, scaled by windowMs.
  const weighted = previous * (windowMs - elapsed)
  const room = (limit - current - cost) * windowMs - weighted
  // After a clock step back, `elapsed` counts from the stored window's start, which is still ahead.
  const lag = window * windowMs + elapsed - now

  if (room >= 0) {
    const resetAfterMs = (window + 2) * windowMs - now
    const remaining = Math.floor(room / windowMs)
    return {
      state: { window, windowMs, previous, current: current + cost },
      ttlMs: resetAfterMs,
      decision: {
        policy: policy.name,
        allowed: true,
        limit,
        remaining,
        resetAfterMs,
        moreAfterMs: remaining === 0 ? lag + retryAfter(previous, current + cost, 1, limit, windowMs, elapsed) : resetAfterMs,
        retryAfterMs: 0,
        waitMs: 0,
      },
    }
  }

  const retryAfterMs = lag + retryAfter(previous, current, cost, limit, windowMs, elapsed)
  const resetAfterMs = current > 0
    ? (window + 2) * windowMs - now
    : previous > 0 ? (window + 1) * windowMs - now : 0
  const remaining = Math.max(0, Math.floor(((limit - current) * windowMs - weighted) / windowMs))
  return {
    state: { window, windowMs, previous, current },
    ttlMs: resetAfterMs,
    decision: {
      policy: policy.name,
      allowed: false,
      limit,
      remaining,
      resetAfterMs,
      moreAfterMs: remaining === 0 ? lag + retryAfter(previous, current, 1, limit, windowMs, elapsed) : resetAfterMs,
      retryAfterMs,
      waitMs: 0,
    },
  }
}

/** Milliseconds until `cost` fits, assuming no other call is allowed meanwhile. */
function retryAfter(
  previous: number,
  current: number,
  cost: number,
  limit: number,
  windowMs: number,
  elapsed: number,
): number {
  // Later in this window, as the previous window's weight decays: the first
  // elapsed e with previous x (windowMs - e) <= (limit - current - cost) x windowMs.
  const spare = limit - current - cost
  if (spare >= 0 && previous > 0) {
    const span = Math.floor((spare * windowMs) / previous)
    if (span > 0) return windowMs - span - elapsed
  }
  // In the next window, where this window's count becomes the previous one.
  const untilNext = windowMs - elapsed
  if (current <= limit - cost) return untilNext
  const span = Math.floor(((limit - cost) * windowMs) / current)
  return untilNext + windowMs - span
}
