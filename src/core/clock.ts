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
