import { waitUnlessAborted } from '../http/wait.ts'

/** Node fires longer timers after 1 ms instead: longer waits are taken in steps. */
export const MAX_TIMER_MS = 2 ** 31 - 1

/** An abortable sleep that rejects with the signal's own reason (as fetch does) and leaves no timer behind. */
export async function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  for (let left = ms; left > 0; left -= MAX_TIMER_MS) await step(Math.min(left, MAX_TIMER_MS), signal)
  if (signal?.aborted) throw abortReason(signal)
}

async function step(ms: number, signal: AbortSignal | undefined): Promise<void> {
  if (signal?.aborted) throw abortReason(signal)
  const ran = await waitUnlessAborted(ms, (abort) => {
    signal?.addEventListener('abort', abort, { once: true })
    return () => signal?.removeEventListener('abort', abort)
  })
  if (!ran) throw abortReason(signal as AbortSignal)
}

/** `value`, or the signal's reason as soon as it aborts: a caller's callback that never settles cannot hold an aborted request. */
export function unlessAborted<T>(value: T | Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(abortReason(signal))
  return new Promise<T>((resolve, reject) => {
    const abort = () => reject(abortReason(signal))
    signal.addEventListener('abort', abort, { once: true })
    Promise.resolve(value).then(
      (settled) => { signal.removeEventListener('abort', abort); resolve(settled) },
      (error: unknown) => { signal.removeEventListener('abort', abort); reject(error) },
    )
  })
}

export function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('This operation was aborted', 'AbortError')
}
