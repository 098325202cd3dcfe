/**
 * Calling the caller's callbacks that only observe or advise (metrics hooks,
 * log hooks, onWarning): what they throw, or the promise they return rejects
 * with (an async hook), fails nothing they observe, and is never an unhandled
 * rejection, which would end the process.
 */
import { messageOf } from './errors.ts'

export function isPromise<T>(value: T | Promise<T>): value is Promise<T> {
  return typeof (value as Promise<T> | undefined)?.then === 'function'
}

/** `callback` as sluice calls it: what it throws or rejects with goes to `report`, with the arguments it was given. */
export function observing<A extends unknown[]>(
  callback: (...args: A) => unknown,
  report: (how: 'threw' | 'rejected', error: unknown, args: A) => void,
): (...args: A) => void {
  return (...args) => {
    try {
      const returned = callback(...args)
      if (isPromise(returned)) Promise.resolve(returned).catch((error: unknown) => report('rejected', error, args))
    } catch (error) {
      report('threw', error, args)
    }
  }
}

/**
 * Where a part's warnings go: the caller's `onWarning`, else a process warning
 * under `code`. An onWarning that fails has its warning, and why it failed,
 * sent as a process warning instead: neither is lost.
 */
export function warningTo(onWarning: ((message: string) => unknown) | undefined, code: string): (message: string) => void {
  const processWarning = (message: string) => process.emitWarning(message, { code })
  if (onWarning === undefined) return processWarning
  return observing(onWarning, (how, error, [message]) => processWarning(`${message} (onWarning ${how}: ${messageOf(error)})`))
}
