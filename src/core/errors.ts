/**
 * Errors thrown by sluice. Being rate limited is never an error here: it is a
 * `Decision` with `allowed: false`. Exceptions are kept for misuse (bad policy,
 * bad argument) and, in the function wrapper only, for a rejected call.
 */
import type { Decision } from './types.ts'


/** What was thrown, as an Error: callbacks and stores may throw anything. */
export function asError(thrown: unknown): Error {
  return thrown instanceof Error ? thrown : new Error(String(thrown))
}

/** What was thrown, for a warning or a log line. */
export function messageOf(thrown: unknown): string {
  return thrown instanceof Error ? thrown.message : String(thrown)
}

/** Base class of every error sluice throws; `code` is stable and documented. */
export class SluiceError extends Error {
  readonly code: string

  constructor(code: string, message: string, options?: ErrorOptions) {
    super(message, options)
    this.name = new.target.name
    this.code = code
  }
}

/** A policy that cannot be honoured: names the policy, the field and the bad value. */
export class PolicyError extends SluiceError {
  readonly policy: string | undefined
  readonly field: string
  readonly value: unknown

  constructor(field: string, value: unknown, problem: string, policy?: string) {
    const where = policy === undefined ? '' : `policy "${policy}": `
    // A missing field needs no "(got undefined)": "limit is required" says it.
    const got = value === undefined && problem === 'is required' ? '' : ` (got ${describe(value)})`
    super('ERR_SLUICE_POLICY', `${where}${field} ${problem}${got}`)
    this.policy = policy
    this.field = field
    this.value = value
  }
}

/** A bad argument to a call or constructor (cost, maxWaitMs, key, options). */
export class ArgumentError extends SluiceError {
  readonly argument: string
  readonly value: unknown

  /** `hint`, after the value: what the caller most likely meant. */
  constructor(argument: string, value: unknown, problem: string, hint?: string) {
    super('ERR_SLUICE_ARGUMENT', `${argument} ${problem} (got ${describe(value)})${hint === undefined ? '' : `; ${hint}`}`)
    this.argument = argument
    this.value = value
  }
}

/**
 * Thrown by `rateLimited` / `@RateLimited` when a call is refused. Carries the
 * decision so the caller can honour `retryAfterMs` (and tell, by
 * `decision.degraded`, a store outage under a closed limit from a limit reached).
 */
export class RateLimitedError extends SluiceError {
  readonly retryAfterMs: number
  readonly decision: Decision

  constructor(decision: Decision, what: string) {
    super(
      'ERR_SLUICE_RATE_LIMITED',
      decision.degraded
        ? `${what} is refused: its limit could not be checked (store ${decision.reason ?? 'unavailable'}) and fails closed; retry after ${decision.retryAfterMs} ms`
        : `${what} is rate limited by policy "${decision.policy}"; retry after ${decision.retryAfterMs} ms`,
    )
    this.retryAfterMs = decision.retryAfterMs
    this.decision = decision
  }
}

/**
 * Thrown by the client (`sluice/client`) when a request would have to wait
 * longer than its `maxWaitMs` for the server's quota (or its own pacing).
 */
export class QuotaExhaustedError extends SluiceError {
  readonly retryAfterMs: number
  readonly partition: string

  constructor(partition: string, retryAfterMs: number, why: string) {
    super('ERR_SLUICE_QUOTA_EXHAUSTED', `requests to ${partition} must wait ${Math.ceil(retryAfterMs)} ms (${why}), longer than maxWaitMs allows`)
    this.retryAfterMs = retryAfterMs
    this.partition = partition
  }
}

/** Thrown by the client when a partition's queue of waiting requests is full. */
export class QueueFullError extends SluiceError {
  readonly partition: string

  constructor(partition: string, maxQueue: number) {
    super('ERR_SLUICE_QUEUE_FULL', `${maxQueue} requests to ${partition} are already waiting (maxQueue)`)
    this.partition = partition
  }
}

/** Short, safe rendering of a bad value for an error message. */
export function describe(value: unknown): string {
  if (typeof value === 'string') {
    const shown = maskCredentials(value)
    return JSON.stringify(shown.length > 64 ? `${shown.slice(0, 61)}...` : shown)
  }
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') {
    return String(value)
  }
  if (value === undefined || value === null) return String(value)
  if (Array.isArray(value)) return `an array of ${value.length}`
  if (typeof value === 'function') return 'a function'
  if (typeof (value as { then?: unknown }).then === 'function') return 'a promise'
  return `an object`
}

/** A URL's user and password masked wherever one appears in `text` (`redis://admin:pw@host` reads `redis://***@host`): errors land in logs. */
export function maskCredentials(text: string): string {
  return text.replace(/([a-z][a-z0-9+.-]*:\/{0,2})[^/@\s"]+@/gi, '$1***@')
}
