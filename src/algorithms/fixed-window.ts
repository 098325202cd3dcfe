/**
 * Fixed window: windows aligned to the epoch, `floor(now / windowMs)`; a call is
 * allowed iff the window's count plus its cost stays within the limit, and only
 * allowed calls count.
 *
 * Known weakness: a client can spend the whole limit at the end of one window
 * and again at the start of the next, so up to 2 x limit pass within a span
 * shorter than one window (100 at t=59.9 s and 100 at t=60.0 s). Use
 * sliding-log or sliding-window where that burst matters.
 *
 * Reservations (`maxWaitMs > 0`) treat windows as a queue: calls fill the
 * window `state.window`, then the one after it, and never go back to an earlier
 * window, so a call that reserved the next window is not overtaken by a later
 * call squeezing into leftover room (fair ordering).
 */
import type { AlgorithmFn } from './algorithm.ts'

export interface FixedWindowState {
  /** Index of the window being filled: the current one, or a later one reserved ahead. */
  window: number
  /**
   * The windowMs that index counts in: read under another (a config changed
   * it), the window's start still means the same moment, and its count
   * carries into the window of the new length that holds it.
   */
  windowMs: number
  /** Units charged to that window. */
  used: number
}

export const fixedWindow: AlgorithmFn<'fixed-window', FixedWindowState> = (state, now, cost, policy, options) => {
  const { limit, windowMs } = policy
  const current = Math.floor(now / windowMs)
  // The stored window on this policy's grid; one behind the current window is simply over: start afresh.
  const stored = state === undefined ? undefined : state.windowMs === windowMs ? state.window : Math.floor((state.window * state.windowMs) / windowMs)
  const carried = stored !== undefined && stored >= current
  const window = carried ? stored : current
  const used = carried ? (state as FixedWindowState).used : 0

  const fits = used + cost <= limit
  const target = fits ? window : window + 1
  const usedAfter = fits ? used + cost : cost
  const neededWaitMs = Math.max(0, target * windowMs - now)
  const allowed = neededWaitMs <= options.maxWaitMs

  if (allowed) {
    const resetAfterMs = (target + 1) * windowMs - now
    return {
      state: { window: target, windowMs, used: usedAfter },
      ttlMs: resetAfterMs,
      decision: {
        policy: policy.name,
        allowed: true,
        limit,
        remaining: target === current ? limit - usedAfter : 0,
        resetAfterMs,
        moreAfterMs: resetAfterMs,
        retryAfterMs: 0,
        waitMs: neededWaitMs,
      },
    }
  }
  const resetAfterMs = (window + 1) * windowMs - now
  return {
    state: { window, windowMs, used },
    ttlMs: resetAfterMs,
    decision: {
      policy: policy.name,
      allowed: false,
      limit,
      // Above the limit only when a config lowered it: a count of units, never below zero.
      remaining: window === current ? Math.max(0, limit - used) : 0,
      resetAfterMs,
      moreAfterMs: resetAfterMs,
      retryAfterMs: neededWaitMs - options.maxWaitMs,
      waitMs: 0,
    },
  }
}
