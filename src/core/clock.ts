/** A source of "now" in epoch milliseconds. Tests and simulations inject one. */
export type Clock = () => number

/**
 * Wall-clock epoch milliseconds that never step backwards within this process:
 * anchored to the wall clock once at start-up, then advanced by the monotonic
 * timer. An NTP step therefore cannot reopen a window or mint tokens.
 */
export const monotonicClock: Clock = () => Math.floor(performance.timeOrigin + performance.now())
