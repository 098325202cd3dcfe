/** Node fires longer timers after 1 ms instead: longer waits are taken in steps. */
export const MAX_TIMER_MS = 2 ** 31 - 1

/** An abortable sleep that rejects with the signal's own reason (as fetch does) and leaves no timer behind. */
export async function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  for (let left = ms; left > 0; left -= MAX_TIMER_MS) await step(Math.min(left, MAX_TIMER_MS), signal)
  if (signal?.aborted) throw abortReason(signal)
}

function step(ms: number, signal: AbortSignal | undefined): Promise<void> {
  if (signal?.aborted) return Promise.reject(abortReason(signal))
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer)
      reject(abortReason(signal as AbortSignal))
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort)
      resolve()
    }, ms)
    signal?.addEventListener('abort', onAbort, { once: true })
  })
}

export function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('This operation was aborted', 'AbortError')
}
