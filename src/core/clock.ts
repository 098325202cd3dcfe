import { isPromise } from './callbacks.ts'
import { ArgumentError } from './errors.ts'

/** A source of "now" in epoch milliseconds. Tests and simulations inject one. */
export type Clock = () => number

let latest = 0

/**
 * Wall-clock epoch milliseconds that never step backwards within this process:
 * when the system clock steps back (NTP), time stands still until it catches up,
 * so a step can neither reopen a window nor mint tokens. (`Date.now()` rather
 * than `performance.now()`: it is several times cheaper, and this is on the
 * path of every decision.)
 */
export const monotonicClock: Clock = () => {
  const now = Date.now()
  if (now > latest) latest = now
  return latest
}

/**
 * The latest time a clock may give: the end of the year 9999. Far past it,
 * arithmetic on windows and refill loses the milliseconds that keep a limit
 * (at 1e300 every call was admitted); just past it are clocks in microseconds
 * and nanoseconds.
 */
export const LATEST_CLOCK_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999)

/** Reads an injected clock, refusing what is not epoch milliseconds; whole milliseconds, as the algorithms count. */
export function readClock(clock: Clock): number {
  const now: unknown = clock()
  // A clock is read at once: a promise's rejection, left alone, would end the process.
  if (isPromise(now)) Promise.resolve(now).catch(() => {})
  if (typeof now !== 'number' || !Number.isFinite(now) || now < 0 || now > LATEST_CLOCK_MS) {
    throw new ArgumentError('clock()', now, `must return epoch milliseconds: a number from 0 to ${LATEST_CLOCK_MS} (the end of the year 9999; a clock in microseconds or nanoseconds is past it)`)
  }
  return Math.floor(now)
}
