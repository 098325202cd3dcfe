/**
 * Errors thrown by sluice. Being rate limited is never an error here: it is a
 * `Decision` with `allowed: false`. Exceptions are kept for misuse (bad policy,
 * bad argument) and, in the function wrapper only, for a rejected call.
 */
import { didYouMean, withHint } from './suggest.ts'
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

  /** `hint`, after the value: what the caller most likely meant. */
  constructor(field: string, value: unknown, problem: string, policy?: string, hint?: string) {
    const where = policy === undefined ? '' : `policy "${policy}": `
    // A missing field needs no "(got undefined)": "limit is required" says it.
    const got = value === undefined && problem.startsWith('is required') ? '' : ` (got ${describe(value)})`
    super('ERR_SLUICE_POLICY', withHint(`${where}${field} ${problem}${got}`, hint))
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
    super('ERR_SLUICE_ARGUMENT', withHint(`${argument} ${problem} (got ${describe(value)})`, hint))
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
 * A store's rejection for a call it knows did nothing: never sent (no
 * connection, the client refused to queue it) or refused by the server before
 * it ran (a replica's READONLY after a failover, LOADING, BUSY). The limiter
 * gives a refund that met it again once the store answers; any other failure
 * may have been applied before it failed, and a refund is never given twice.
 * A custom store may reject with it where it knows as much.
 */
export class StoreNotAppliedError extends SluiceError {
  constructor(message: string, options?: ErrorOptions) {
    super('ERR_SLUICE_STORE_NOT_APPLIED', message, options)
  }
}

/**
 * Thrown by the client (`sluice/client`) when a request would have to wait
 * longer than its `maxWaitMs` for the server's quota (or its own pacing), or
 * takes more of a policy than its whole announced quota (`retryAfterMs` Infinity).
 */
export class QuotaExhaustedError extends SluiceError {
  readonly retryAfterMs: number
  readonly partition: string

  constructor(partition: string, retryAfterMs: number, why: string) {
    super('ERR_SLUICE_QUOTA_EXHAUSTED', Number.isFinite(retryAfterMs)
      ? `requests to ${partition} must wait ${Math.ceil(retryAfterMs)} ms (${why}), longer than maxWaitMs allows`
      : `a request to ${partition} can never be sent: ${why}`)
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
  if (typeof value === 'symbol') return 'a symbol'
  if (typeof (value as { then?: unknown }).then === 'function') return 'a promise'
  return `an object`
}

/**
 * A URL's user and password masked wherever one appears in `text`
 * (`redis://admin:pw@host` reads `redis://***@host`): errors land in logs.
 * What `/([a-z][a-z0-9+.-]*:\/{0,2})[^/@\s"]+@/gi` would replace with `$1***@`,
 * in linear time: that regex backtracks quadratically over a long run of
 * letters (a 1 MB config file given by mistake took minutes). Each `@` is
 * looked back from only as far as the one before it, which no match crosses.
 */
export function maskCredentials(text: string): string {
  let masked = ''
  let copied = 0
  for (let at = text.indexOf('@'); at !== -1; at = text.indexOf('@', at + 1)) {
    let start = at
    while (start > copied && !NOT_USERINFO.test(text[start - 1] as string)) start--
    const secret = start < at ? secretStart(text, copied, start, at) : undefined
    if (secret === undefined) continue
    masked += `${text.slice(copied, secret)}***`
    copied = at
  }
  return masked + text.slice(copied)
}

const NOT_USERINFO = /[\s/@"]/
const SCHEME = /[a-z0-9+.-]/i
const LETTER = /[a-z]/i

/**
 * Where the masked part of `text[start, at)` (no `/`, `@`, space or quote in
 * it) begins: all of it after `scheme:/` or `scheme://`, else what follows the
 * first `scheme:` inside it; undefined when neither is there.
 */
function secretStart(text: string, floor: number, start: number, at: number): number | undefined {
  let slashes = start
  while (slashes > floor && start - slashes < 2 && text[slashes - 1] === '/') slashes--
  if (slashes < start && slashes - 1 > floor && text[slashes - 1] === ':') {
    for (let i = slashes - 2; i >= floor && SCHEME.test(text[i] as string); i--) {
      if (LETTER.test(text[i] as string)) return start
    }
  }
  let letter = false
  for (let i = start; i < at - 1; i++) {
    const char = text[i] as string
    if (char === ':' && letter) return i + 1
    letter = SCHEME.test(char) ? letter || LETTER.test(char) : false
  }
  return undefined
}

/**
 * A mistake node's `parseArgs` found on a command line, said as the rest of
 * the CLI says things: `unknown option --bogus`, `--config needs a value`.
 */
export function commandLineProblem(thrown: unknown, usage?: string): string {
  const { code } = thrown as { code?: unknown }
  const message = messageOf(thrown)
  const quoted = /'([^']*)'/.exec(message)?.[1]
  switch (code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION': {
      // The options a command takes are the ones its usage shows.
      const hint = quoted === undefined || usage === undefined ? undefined : didYouMean(quoted, new Set(usage.match(/--[a-z][\w-]*/g)))
      return withHint(`unknown option ${quoted ?? message}`, hint)
    }
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE': {
      const option = quoted?.match(/--[\w-]+/)?.[0] ?? quoted ?? message
      if (message.endsWith('argument missing')) return `${option} needs a value`
      // `--limit -3`: parseArgs will not take a value that starts with a dash as a value.
      if (message.includes('ambiguous')) return `${option} needs a value; write one that starts with "-" as ${option}=VALUE`
      return `${option} takes no value`
    }
    case 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL':
      return `unexpected argument ${JSON.stringify(quoted ?? message)}`
    default:
      return message
  }
}

/**
 * Runs `build`; a SluiceError it throws goes on with `context` before its
 * message (which rule, which option), so a mistake in one of many policies
 * says where it is.
 */
export function inContext<T>(context: string, build: () => T): T {
  try {
    return build()
  } catch (error) {
    if (error instanceof SluiceError) error.message = `${context}: ${error.message}`
    throw error
  }
}
