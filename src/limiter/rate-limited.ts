/**
 * Rate-limiting a function or a class method: the `@RateLimited(limit, window,
 * keyPrefix, action)` pattern of Spring AOP, as a wrapper and as a TC39
 * (standard, TypeScript 5+) method decorator.
 */
import { ArgumentError, RateLimitedError } from '../core/errors.ts'
import { checkChoice, checkOptions } from '../core/options.ts'
import { checkCost, checkMaxWait, resolvePolicies } from '../core/policy.ts'
import type { Decision, Policy } from '../core/types.ts'
import type { Store } from '../stores/store.ts'
import { Limiter } from './limiter.ts'

/** What a call over the limit does: throw `RateLimitedError`, or wait its turn. */
export const RateLimitAction = Object.freeze({ REJECT: 'reject', QUEUE: 'queue' } as const)
export type RateLimitAction = (typeof RateLimitAction)[keyof typeof RateLimitAction]

export interface RateLimitedOptions<Args extends unknown[]> {
  /** Shorthand for a fixed-window policy: calls per `windowMs`. */
  limit?: number
  windowMs?: number
  /** Any policies instead of `limit` / `windowMs`. */
  policies?: Policy | readonly Policy[]
  /** A limiter to share instead of one built from the options above (then give none of them, nor `store`). */
  limiter?: Limiter
  /** Store for the limiter built here. Default: a new MemoryStore. */
  store?: Store
  /**
   * Namespace of the keys. Default: the function's or method's name, so
   * functions on one shared `limiter` or `store` count apart by name (give two
   * methods of one name, in two classes, a keyPrefix each); an anonymous
   * function given either must have one.
   */
  keyPrefix?: string
  /**
   * The part of the key that depends on the call, e.g. `(userId) => userId`: a
   * non-empty string or a number, or the call is refused with an ArgumentError.
   * Default: none (one shared limit).
   */
  key?: (...args: Args) => string | number
  /** Units a call costs. Default 1. */
  cost?: number | ((...args: Args) => number)
  /** `reject` (default) throws `RateLimitedError`; `queue` waits for a reservation, at most `maxWaitMs`. */
  action?: RateLimitAction
  /** With `queue`: the longest wait before giving up with `RateLimitedError`. Default 30,000 ms. */
  maxWaitMs?: number
}

const DEFAULT_QUEUE_WAIT_MS = 30_000
const RATE_LIMITED_OPTIONS = new Set(['limit', 'windowMs', 'policies', 'limiter', 'store', 'keyPrefix', 'key', 'cost', 'action', 'maxWaitMs'])

/**
 * Wraps `fn` so that each call is decided first: refused calls throw
 * `RateLimitedError` (or, with `action: 'queue'`, wait their turn).
 *
 * @example
 * const send = rateLimited(sendEmail, { limit: 10, windowMs: 60_000, key: (to) => to })
 * await send('a@example.com', 'hello') // throws RateLimitedError on the 11th call within the minute
 */
export function rateLimited<Args extends unknown[], Return>(
  fn: (...args: Args) => Return,
  options: RateLimitedOptions<Args>,
): (...args: Args) => Promise<Awaited<Return>> {
  if (typeof fn !== 'function') throw new ArgumentError('fn', fn, 'must be a function')
  const guard = createGuard(options, fn.name)
  return async function rateLimitedCall(this: unknown, ...args: Args): Promise<Awaited<Return>> {
    await guard(args)
    return await fn.apply(this, args)
  }
}

/**
 * Standard method decorator. The method must be async (its callers may wait).
 *
 * @example
 * class Mailer {
 *   @RateLimited({ limit: 10, windowMs: 60_000, key: (to: string) => to, action: 'queue' })
 *   async send(to: string, body: string) { ... }
 * }
 */
export function RateLimited<Args extends unknown[] = unknown[]>(options: RateLimitedOptions<Args>) {
  // The method may take more arguments than `key` and `cost` look at: they see its first ones.
  return function decorate<This, MethodArgs extends [...Args, ...unknown[]], Return extends PromiseLike<unknown>>(
    method: (this: This, ...args: MethodArgs) => Return,
    context: ClassMethodDecoratorContext<This, (this: This, ...args: MethodArgs) => Return>,
  ): (this: This, ...args: MethodArgs) => Return {
    if (context.kind !== 'method') throw new ArgumentError('@RateLimited', context.kind, 'decorates methods only')
    const guard = createGuard(options, String(context.name))
    return async function rateLimitedMethod(this: This, ...args: MethodArgs) {
      await guard(args as unknown as Args)
      return await method.apply(this, args)
    } as unknown as (this: This, ...args: MethodArgs) => Return
  }
}

/** Validates the options once and returns the check each call runs. */
function createGuard<Args extends unknown[]>(
  options: RateLimitedOptions<Args>,
  defaultPrefix: string,
): (args: Args) => Promise<Decision> {
  checkOptions('options', 'a rateLimited option', options, RATE_LIMITED_OPTIONS)
  const action = options.action ?? 'reject'
  checkChoice('action', action, ['reject', 'queue'])
  const limiter = limiterOf(options)
  if (action === 'reject' && options.maxWaitMs !== undefined) {
    throw new ArgumentError('maxWaitMs', options.maxWaitMs, "applies to action 'queue' only: a rejected call does not wait")
  }
  const maxWaitMs = action === 'queue' ? checkMaxWait(options.maxWaitMs ?? DEFAULT_QUEUE_WAIT_MS, limiter.policies) : 0
  const prefix = options.keyPrefix ?? (defaultPrefix || unnamedPrefix(options))
  if (typeof prefix !== 'string' || prefix === '') throw new ArgumentError('keyPrefix', prefix, 'must be a non-empty string')
  const { key, cost } = options
  if (key !== undefined && typeof key !== 'function') throw new ArgumentError('key', key, 'must be a function of the call arguments')
  // A constant cost that no call could pay is found now, not on the first call.
  if (cost !== undefined && typeof cost !== 'function') checkCost(cost, limiter.policies)
  const limitOptions = (args: Args) => ({ cost: typeof cost === 'function' ? cost(...args) : cost ?? 1, maxWaitMs })

  return async (args) => {
    const fullKey = key === undefined ? prefix : `${prefix}:${callKey(key(...args))}`
    const decision = await limiter.limit(fullKey, limitOptions(args))
    if (!decision.allowed) throw new RateLimitedError(decision, `${prefix}`)
    if (decision.waitMs > 0) await sleep(decision.waitMs)
    return decision
  }
}

/**
 * The key prefix of an anonymous function. On a limiter or store of its own it
 * counts alone whatever its prefix; on a shared one, every anonymous function
 * would count under one prefix, each spending the others' limit.
 */
function unnamedPrefix<Args extends unknown[]>(options: RateLimitedOptions<Args>): string {
  if (options.limiter === undefined && options.store === undefined) return 'function'
  const shared = options.limiter !== undefined ? 'limiter' : 'store'
  throw new ArgumentError(
    'keyPrefix',
    undefined,
    `is required for an anonymous function given a ${shared}: the default prefix is the function's name`,
    `give each function on the ${shared} a keyPrefix of its own, e.g. 'send-email'; unnamed ones would all count under one limit`,
  )
}

/**
 * What `key` gave, as a key. Anything but a string or a number (an id that is
 * `undefined`, an object) would read as "undefined" or "[object Object]" and
 * put every such caller under one shared limit.
 */
function callKey(value: unknown): string {
  if ((typeof value === 'string' && value !== '') || (typeof value === 'number' && Number.isFinite(value))) return String(value)
  throw new ArgumentError('key(...)', value, 'must return a non-empty string or a finite number: callers it cannot tell apart would share one limit')
}

/** The shared limiter, or one built from the options; never both, or the options would be ignored. */
function limiterOf<Args extends unknown[]>(options: RateLimitedOptions<Args>): Limiter {
  if (options.limiter === undefined) return new Limiter({ policies: policiesOf(options), ...(options.store ? { store: options.store } : {}) })
  if (!(options.limiter instanceof Limiter)) throw new ArgumentError('limiter', options.limiter, 'must be a Limiter')
  const ignored = (['limit', 'windowMs', 'policies', 'store'] as const).filter((name) => options[name] !== undefined)
  if (ignored.length > 0) {
    throw new ArgumentError('limiter', ignored.join(', '), 'cannot be combined with limit, windowMs, policies or store: the limiter has its own')
  }
  return options.limiter
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

function policiesOf<Args extends unknown[]>(options: RateLimitedOptions<Args>): ReturnType<typeof resolvePolicies> {
  if (options.policies !== undefined) {
    if (options.limit !== undefined || options.windowMs !== undefined) {
      throw new ArgumentError('policies', options.policies, 'cannot be combined with limit / windowMs')
    }
    return resolvePolicies(options.policies)
  }
  if (options.limit === undefined || options.windowMs === undefined) {
    throw new ArgumentError('limit', options.limit, 'and windowMs are required unless policies or a limiter are given')
  }
  return resolvePolicies({ algorithm: 'fixed-window', limit: options.limit, windowMs: options.windowMs })
}
