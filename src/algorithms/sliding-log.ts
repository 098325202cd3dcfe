/**
 * Sliding window log: exact. A call is allowed iff the summed cost of allowed
 * calls with a timestamp > now - windowMs, plus its cost, stays within the
 * limit. It cannot reserve: an entry cannot be placed in the future without
 * changing what every later call sees.
 *
 * Calls admitted in the same millisecond share one entry (a time and the
 * summed cost): they leave the window together, so no decision can tell them
 * apart. Memory per key is O(min(limit, windowMs)) entries, however fast the
 * key is called.
 *
 * The newest entry (the tail) lives in the state itself; older ones in an
 * array that is append-only and shared by the successive states of one key,
 * so a call costs O(1) amortised instead of a copy of the log: a state
 * records which slice of the array is its own (`head`..`end`). The one rule
 * this brings: step only from a key's newest state (stores always do). A
 * transition that was not committed leaves entries past `end`, which the next
 * step discards; the tail, being the state's own, is never shared.
 */
import type { AlgorithmFn } from './algorithm.ts'
import type { ResolvedPolicyOf } from '../core/types.ts'

export interface SlidingLogState {
  /** Flat pairs `[time, cost, time, cost, ...]` older than the tail, in ascending time; live from `head` to `end`. */
  log: number[] | undefined
  head: number
  end: number
  /** The newest entry's time; it holds `tailCost`, 0 when the log is empty. */
  tailTime: number
  tailCost: number
  /** Summed cost of the live entries, the tail included. */
  used: number
}

/**
 * Compact the array once this many dead slots lead it and they are at least
 * half of it: a copy of the live entries, paid for by as many dead ones.
 */
const COMPACT_AFTER = 64

export const slidingLog: AlgorithmFn<'sliding-log', SlidingLogState> = (state, now, cost, policy) => {
  const { limit, windowMs } = policy
  let log = state?.log
  let head = state?.head ?? 0
  let end = state?.end ?? 0
  let tailTime = state?.tailTime ?? 0
  let tailCost = state?.tailCost ?? 0
  let used = state?.used ?? 0
  const cutoff = now - windowMs
  if (tailCost > 0 && tailTime <= cutoff) {
    // The newest entry has left, so every older one has too.
    log = undefined
    head = end = tailCost = used = 0
  } else if (log !== undefined) {
    while (head < end && (log[head] as number) <= cutoff) {
      used -= log[head + 1] as number
      head += 2
    }
  }
  const lastTime = tailCost > 0 ? tailTime : now

  if (cost === 0) {
    // A peek, or a policy shown uncharged beside one that refused: the log as it
    // stands, fully replenished when its newest entry leaves (an entry placed
    // now would put that a whole window away).
    const resetAfterMs = tailCost > 0 ? tailTime + windowMs - now : 0
    // Above the limit only when a config lowered it: a count of units, never below zero.
    const remaining = Math.max(0, limit - used)
    return {
      state: { log, head, end, tailTime, tailCost, used },
      ttlMs: resetAfterMs,
      decision: {
        policy: policy.name,
        allowed: true,
        limit,
        remaining,
        resetAfterMs,
        moreAfterMs: remaining === 0 ? untilFreed(used + 1 - limit, log, head, end, tailTime, windowMs, now) : resetAfterMs,
        retryAfterMs: 0,
        waitMs: 0,
      },
    }
  }

  if (used + cost <= limit) {
    // Never write an entry earlier than the last one: a clock stepping back
    // must not reorder the log or shorten how long earlier calls count.
    const time = Math.max(now, lastTime)
    if (tailCost > 0 && time !== tailTime) {
      // A new millisecond: the tail joins the array.
      if (log === undefined || head === end) {
        // Nothing live in it: a new array (the old one may still back a state that is not replaced).
        log = []
        head = end = 0
      } else {
        if (log.length !== end) log.length = end
        if (head >= COMPACT_AFTER && head * 2 >= end) {
          log = log.slice(head, end)
          end -= head
          head = 0
        }
      }
      log.push(tailTime, tailCost)
      end += 2
      tailCost = 0
    }
    tailTime = time
    tailCost += cost
    used += cost
    const resetAfterMs = time + windowMs - now
    return {
      state: { log, head, end, tailTime, tailCost, used },
      ttlMs: resetAfterMs,
      decision: {
        policy: policy.name,
        allowed: true,
        limit,
        remaining: limit - used,
        resetAfterMs,
        // With none left, one is back when the oldest entry leaves.
        moreAfterMs: used === limit ? untilFreed(1, log, head, end, tailTime, windowMs, now) : resetAfterMs,
        retryAfterMs: 0,
        waitMs: 0,
      },
    }
  }

  // The call fits once enough of the oldest entries have left the window.
  const resetAfterMs = tailCost > 0 ? tailTime + windowMs - now : 0
  const remaining = Math.max(0, limit - used)
  return {
    state: { log, head, end, tailTime, tailCost, used },
    ttlMs: resetAfterMs,
    decision: {
      policy: policy.name,
      allowed: false,
      limit,
      remaining,
      resetAfterMs,
      moreAfterMs: remaining === 0 ? untilFreed(used + 1 - limit, log, head, end, tailTime, windowMs, now) : resetAfterMs,
      retryAfterMs: untilFreed(used + cost - limit, log, head, end, tailTime, windowMs, now),
      waitMs: 0,
    },
  }
}

/** Milliseconds until the oldest entries holding `units` have left the window (the tail, the newest, last). */
function untilFreed(units: number, log: number[] | undefined, head: number, end: number, tailTime: number, windowMs: number, now: number): number {
  let freed = 0
  if (log !== undefined) {
    for (let i = head; i < end; i += 2) {
      freed += log[i + 1] as number
      if (freed >= units) return (log[i] as number) + windowMs - now
    }
  }
  return tailTime + windowMs - now
}

/**
 * Gives `units` back by taking them from the oldest entries still in the
 * window (the Lua script does the same to its sorted set). The count is exact;
 * which call's place goes is not recorded, so an older one's does: what stays
 * counted leaves the window no sooner than the units given back would have,
 * and no call is admitted that the exact log would refuse. Entries already out
 * of the window stay until a charged call trims them, as after any step.
 */
export function slidingLogRefund(state: SlidingLogState | undefined, now: number, units: number, policy: ResolvedPolicyOf<'sliding-log'>): SlidingLogState | undefined {
  if (state === undefined || state.tailCost === 0) return state
  const cutoff = now - policy.windowMs
  // The entries as pairs, oldest first, the tail last: a copy, since the array may back earlier states.
  const entries = state.log === undefined ? [] : state.log.slice(state.head, state.end)
  entries.push(state.tailTime, state.tailCost)
  let left = units
  let used = state.used
  for (let i = 0; i < entries.length && left > 0; i += 2) {
    if ((entries[i] as number) <= cutoff) continue
    const taken = Math.min(left, entries[i + 1] as number)
    entries[i + 1] = (entries[i + 1] as number) - taken
    left -= taken
    used -= taken
  }
  const kept: number[] = []
  for (let i = 0; i < entries.length; i += 2) if ((entries[i + 1] as number) > 0) kept.push(entries[i] as number, entries[i + 1] as number)
  if (kept.length === 0) return { log: undefined, head: 0, end: 0, tailTime: 0, tailCost: 0, used: 0 }
  const tailCost = kept.pop() as number
  const tailTime = kept.pop() as number
  return { log: kept.length === 0 ? undefined : kept, head: 0, end: kept.length, tailTime, tailCost, used }
}
