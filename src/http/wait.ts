/**
 * Waits `ms` for a queued request, or gives up when the client goes away:
 * the timer is cleared either way, so an aborted request leaves nothing behind.
 * Resolves true when the wait ran out (proceed), false when it was aborted.
 */
export function waitUnlessAborted(ms: number, onAbort: (abort: () => void) => () => void): Promise<boolean> {
  return new Promise((resolve) => {
    let stopListening: () => void = () => {}
    const timer = setTimeout(() => {
      stopListening()
      resolve(true)
    }, ms)
    stopListening = onAbort(() => {
      clearTimeout(timer)
      stopListening()
      resolve(false)
    })
  })
}
