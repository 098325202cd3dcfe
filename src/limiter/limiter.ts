/**
 * The public `Limiter`: one key, several policies (all-or-nothing),
 * reservations, and the choice of store.
 */
import { createHash } from 'node:crypto'
import type { Clock } from '../core/clock.ts'
import { ArgumentError } from '../core/errors.ts'
import { checkCost, checkMaxWait, resolvePolicies } from '../core/policy.ts'
import type { Decision, Policy, ResolvedPolicy } from '../core/types.ts'
import { MemoryStore } from '../stores/memory/memory-store.ts'
import { isSyncStore, type Store, type StoreCall, type SyncStore } from '../stores/store.ts'
import { combine } from './decision.ts'

export interface LimiterOptions {
  /** Where state lives. Default: a new `MemoryStore` owned by this limiter. */
  store?: Store
  /** One policy, or several that must all allow a call (all-or-nothing). */
  policies: Policy | readonly Policy[]
  /** Key namespace, so limiters can share a store. Default `'sluice'`. */
  prefix?: string
  /**
   * Source of "now" in epoch milliseconds. Default: the store's own time (the
   * Redis server's clock, or a monotonic wall clock in memory). Tests and
   * simulations inject one.
   */
  clock?: Clock
}

export interface LimitOptions {
  /** Units this call costs: a positive integer. Default 1. */
  cost?: number
  /**
   * Longest wait the caller accepts: an allowed reservation says how long in
   * `waitMs`, already charged. Token bucket, leaky bucket and fixed window only.
   * Default 0 (refuse instead of waiting).
   */
  maxWaitMs?: number
}

const LIMITER_OPTIONS = new Set(['store', 'policies', 'prefix', 'clock'])
const LIMIT_OPTIONS = new Set(['cost', 'maxWaitMs'])

/** Keys longer than this are replaced by their SHA-256, so no key can blow up memory. */
export const MAX_KEY_LENGTH = 256

export class Limiter {
  readonly policies: readonly ResolvedPolicy[]
  readonly prefix: string
  readonly store: Store
  private readonly clock: Clock | undefined

  constructor(options: LimiterOptions) {
    if (typeof options !== 'object' || options === null) {
      throw new ArgumentError('options', options, 'must be an object with at least "policies"')
    }
    rejectUnknown('Limiter option', options, LIMITER_OPTIONS)
    this.policies = resolvePolicies(options.policies)
    this.prefix = checkPrefix(options.prefix ?? 'sluice')
    if (options.clock !== undefined && typeof options.clock !== 'function') {
      throw new ArgumentError('clock', options.clock, 'must be a function returning epoch milliseconds')
    }
    this.clock = options.clock
    const store = options.store ?? new MemoryStore()
    if (typeof store !== 'object' || store === null || typeof store.consume !== 'function') {
      throw new ArgumentError('store', store, 'must be a MemoryStore, a RedisStore or another Store')
    }
    this.store = store
  }

  /** Decides one call for `key`, charging it when allowed. */
  limit(key: string, options?: LimitOptions): Promise<Decision> {
    try {
      const call = this.call(key, options)
      // An in-process store decides at once: one settled promise, not a chain.
      if (isSyncStore(this.store)) return Promise.resolve(combine(this.store.consumeSync(call)))
      return this.store.consume(call).then(combine)
    } catch (error) {
      return Promise.reject(error as Error)
    }
  }

  /**
   * `limit` without a promise, for in-process callers on a synchronous store
   * (the default `MemoryStore`). Throws on a store that is not synchronous.
   */
  limitSync(key: string, options?: LimitOptions): Decision {
    return combine(this.syncStore().consumeSync(this.call(key, options)))
  }

  /** The decision a call of cost 1 would get, without changing any state. */
  peek(key: string): Promise<Decision> {
    try {
      return this.store.consume(this.peekCall(key)).then(combine)
    } catch (error) {
      return Promise.reject(error as Error)
    }
  }

  peekSync(key: string): Decision {
    return combine(this.syncStore().consumeSync(this.peekCall(key)))
  }

  /** Forgets the key's state in every policy. */
  async reset(key: string): Promise<void> {
    await this.store.reset(this.prefix, normalizeKey(key), this.policies)
  }

  resetSync(key: string): void {
    this.syncStore().resetSync(this.prefix, normalizeKey(key), this.policies)
  }

  private call(key: string, options: LimitOptions | undefined): StoreCall {
    let cost = 1
    let maxWaitMs = 0
    if (options !== undefined) {
      rejectUnknown('limit option', options, LIMIT_OPTIONS)
      if (options.cost !== undefined) cost = checkCost(options.cost, this.policies)
      if (options.maxWaitMs !== undefined) maxWaitMs = checkMaxWait(options.maxWaitMs, this.policies)
    }
    return { prefix: this.prefix, key: normalizeKey(key), policies: this.policies, cost, maxWaitMs, now: this.now() }
  }

  private peekCall(key: string): StoreCall {
    return { prefix: this.prefix, key: normalizeKey(key), policies: this.policies, cost: 0, maxWaitMs: 0, now: this.now() }
  }

  private now(): number | undefined {
    if (this.clock === undefined) return undefined
    const now = this.clock()
    if (typeof now !== 'number' || !Number.isFinite(now) || now < 0) {
      throw new ArgumentError('clock()', now, 'must return epoch milliseconds as a finite, non-negative number')
    }
    return Math.floor(now)
  }

  private syncStore(): SyncStore {
    if (!isSyncStore(this.store)) {
      throw new ArgumentError('store', this.store.constructor.name, 'cannot decide synchronously; use limit() / peek() / reset()')
    }
    return this.store
  }
}

/** Validates a key; keys over MAX_KEY_LENGTH become `sha256:<hex>`. */
export function normalizeKey(key: unknown): string {
  if (typeof key !== 'string' || key.length === 0) {
    throw new ArgumentError('key', key, 'must be a non-empty string')
  }
  if (key.length <= MAX_KEY_LENGTH) return key
  return `sha256:${createHash('sha256').update(key).digest('hex')}`
}

function checkPrefix(prefix: unknown): string {
  if (typeof prefix !== 'string' || !/^[\x21-\x7a\x7c\x7e]{1,64}$/.test(prefix)) {
    throw new ArgumentError('prefix', prefix, 'must be 1 to 64 printable ASCII characters without spaces or braces')
  }
  return prefix
}

function rejectUnknown(what: string, options: object, known: ReadonlySet<string>): void {
  for (const [name, value] of Object.entries(options)) {
    if (!known.has(name) && value !== undefined) {
      throw new ArgumentError(name, value, `is not a ${what} (known: ${[...known].join(', ')})`)
    }
  }
}
