/**
 * The public `Limiter`: one key, several policies (all-or-nothing),
 * reservations, and the choice of store.
 */
import { createHash } from 'node:crypto'
import { evaluate, NO_WAIT, REFUNDABLE } from '../algorithms/index.ts'
import { monotonicClock, readClock, type Clock } from '../core/clock.ts'
import { observing, warningTo } from '../core/callbacks.ts'
import { ArgumentError, asError, messageOf, SluiceError, StoreNotAppliedError } from '../core/errors.ts'
import { checkChoice, checkOptions, elsewhere, rejectUnknown } from '../core/options.ts'
import { checkCost, checkMaxWait, limitOf, numberHint, POLICY_FIELD_NAMES, resolvePolicies } from '../core/policy.ts'
import type { Decision, Policy, PolicyDecision, ResolvedPolicy } from '../core/types.ts'
import { MemoryStore } from '../stores/memory/memory-store.ts'
import { isRedisClient } from '../stores/redis/detect.ts'
import { clusterSpanError, RedisStore } from '../stores/redis/redis-store.ts'
import { answerProblem, isSyncStore, spans, type Store, type StoreCall, type SyncStore } from '../stores/store.ts'
import { BlockCache } from './block-cache.ts'
import { Circuit, withTimeout, type CircuitOptions, type FailureReason, type Outcome } from './circuit.ts'
import { combine } from './decision.ts'
import { scalePolicies } from './fallback.ts'
import { LeaseBook } from './lease.ts'

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
  /**
   * Longest a decision waits on the store (Redis), including while its client
   * is disconnected; then `onStoreFailure` decides. Default 250 ms.
   */
  storeTimeoutMs?: number
  /**
   * What a decision does when the store fails, times out, or its circuit is
   * open: `open` allows, `closed` refuses (retry after the next probe),
   * `fallback` (default) decides on a local MemoryStore with each instance's
   * share of the limits (see `expectedInstances`). Such decisions carry
   * `degraded: true` and a `reason`. Stores in this process never fail this way.
   */
  onStoreFailure?: 'open' | 'closed' | 'fallback'
  /** Instances sharing the store: the fallback gives each `limit / expectedInstances`. Default 1. */
  expectedInstances?: number
  /**
   * Where the fallback counts. Default: a MemoryStore of 100,000 keys of this
   * limiter's own. Limiters that share state through the store (one prefix,
   * the same policies by name) share this too, or each counts its own share
   * while the store is out. It is cleared when the store is back.
   */
  fallbackStore?: MemoryStore
  /** When to stop calling a failing store, and how often to probe it. */
  circuit?: CircuitOptions
  /**
   * Remember refused keys in this process until their retry time and refuse
   * them again without a round trip (for stores outside the process). Default
   * on, 10,000 keys; `false` turns it off, as it must be where other processes
   * `refund` units: a refusal remembered here would outlive them.
   */
  blockCache?: boolean | { maxKeys: number }
  /**
   * Hot-key sharding, for stores outside the process: each key's state is
   * spread over this many store keys (`key#0` ... , on different Cluster slots),
   * each holding `limit / shards` and `rate / shards`. A call goes to a random
   * shard, and to one other shard if that one refuses. Never admits more than
   * the limit; admits less when calls spread unevenly over the shards, and
   * `remaining` is estimated from one shard. At most the smallest limit, and a
   * call's cost must fit one shard (`limit / shards`). Default 1 (off).
   */
  shards?: number
  /**
   * Leases for hot keys (local + global hybrid), for stores outside the
   * process and token / leaky (police) buckets: a call that finds no lease
   * takes `units` more than it needs in the same store call, and later calls
   * spend them here without a round trip; after `maxAgeMs` (default 1000) what
   * is left is given back. Worst case, each instance holds `units` the others
   * cannot see: over any span the buckets admit at most `instances x units`
   * beyond their limit, and may refuse as many while leases sit unspent.
   */
  lease?: { units: number; maxAgeMs?: number }
  /** Hears what metrics need and decisions do not carry: store latency and failures, block-cache hits. */
  observer?: LimiterObserver
}

/**
 * Callbacks for metrics; each should be cheap. One that throws, or returns a
 * promise that rejects, is reported (a process warning, or the middleware's
 * onWarning) and fails no call.
 */
export interface LimiterObserver {
  /**
   * Each call that reached a store outside the process: how long it took and
   * how it ended, with what the store said when it failed (for a timeout, an
   * error naming the time waited).
   */
  storeCall?: (durationMs: number, outcome: 'ok' | 'timeout' | 'store-error', error?: Error) => void
  /** A refusal answered from the block cache, with no store call. */
  blockCacheHit?: () => void
  /**
   * A refund the store did not take is owed (`refund`); later it is given,
   * or dropped: it stopped mattering (or more were owed than are kept) before
   * the store answered, or the store failed in a way that may have taken it.
   */
  refundOwed?: (event: 'owed' | 'given' | 'dropped') => void
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
  /**
   * Keys of their own for some policies, by policy name: `{ global: 'all' }`
   * counts policy "global" under key "all" and the others under the call's
   * key, all decided together (all-or-nothing: a refusal charges none). The
   * store must span keys in one call (the memory store, a single Redis; not a
   * Redis Cluster), and the limiter may have no `shards` or `lease`.
   */
  keys?: Readonly<Record<string, string>>
}

/** Options of `peek` and `reset`: the keys of their own that calls give some policies. */
export interface KeyOptions {
  keys?: Readonly<Record<string, string>>
}

/** `refund`'s options: its third and fourth arguments by name, and the `keys` the call gave its policies. */
export interface RefundOptions extends KeyOptions {
  /** The decision that took the units (a fallback's are given back where it charged them). */
  charged?: Decision
  /** How long ago they were charged (a sliding log lets a unit go after its window). */
  heldMs?: number
}

const LIMITER_OPTIONS = new Set([
  'store', 'policies', 'prefix', 'clock', 'storeTimeoutMs', 'onStoreFailure', 'expectedInstances', 'fallbackStore', 'circuit', 'blockCache', 'shards', 'lease', 'observer',
])
/** Where the options of other things, given to a Limiter, go. */
const NOT_LIMITER_OPTIONS = elsewhere(
  [POLICY_FIELD_NAMES, "a policy's field: new Limiter({ policies: { algorithm, limit, windowMs } })"],
  [['maxKeys'], "a MemoryStore option: new Limiter({ store: new MemoryStore({ maxKeys }), policies })"],
  [['url', 'client'], "a RedisStore option: new Limiter({ store: new RedisStore({ url }), policies })"],
  [['cost', 'maxWaitMs', 'keys'], 'an option of each call: limiter.limit(key, { cost, maxWaitMs })'],
  // rate-limiter-flexible's, as users moving from it write them first.
  [['points', 'duration'], "rate-limiter-flexible's { points, duration } is here policies: { algorithm: 'fixed-window', limit: points, windowMs: duration * 1000 }"],
  [['blockDuration'], "rate-limiter-flexible's blockDuration is here a policy's blockMs, in milliseconds"],
  [['keyPrefix'], "rate-limiter-flexible's keyPrefix is here prefix"],
  [['storeClient'], "rate-limiter-flexible's storeClient is here store: new RedisStore({ client })"],
)
const LIMIT_OPTIONS = new Set(['cost', 'maxWaitMs', 'keys'])
const KEY_OPTIONS = new Set(['keys'])
const REFUND_OPTIONS = new Set(['charged', 'heldMs', 'keys'])

/** Keys longer than this are replaced by their SHA-256, so no key can blow up memory. */
export const MAX_KEY_LENGTH = 256

/** Keys a fallback store holds unless one is given (`fallbackStore`). */
export const FALLBACK_KEYS = 100_000

export class Limiter {
  readonly policies: readonly ResolvedPolicy[]
  /** Each policy's place in `policies`, by name (a call's `keys` name them). */
  private readonly policyIndex: ReadonlyMap<string, number>
  readonly prefix: string
  readonly store: Store
  readonly onStoreFailure: 'open' | 'closed' | 'fallback'
  private readonly clock: Clock | undefined
  /** Set for an in-process store: decided synchronously, never fails over. */
  private readonly local: SyncStore | undefined
  private readonly circuit: Circuit
  /** The store's consume; for a store of the caller's making, its answers checked. */
  private readonly consumeOnStore: (call: StoreCall) => Promise<PolicyDecision[]>
  private readonly storeTimeoutMs: number
  private readonly probeIntervalMs: number
  private readonly blocked: BlockCache | undefined
  /**
   * Refusals of calls spanning keys, by their keys together: one holds for the
   * same combination until its retry time (only time frees units), not for
   * another that shares the refusing key. Apart from `blocked`, so that no key
   * of one call can be read as the keys of another. A `reset` of one of its
   * keys made without the call's `keys` is seen when the entry expires.
   */
  private spanBlocked: BlockCache | undefined
  private readonly fallbackPolicies: readonly ResolvedPolicy[]
  private readonly fallbackStore: MemoryStore
  private readonly shards: number
  private readonly shardPolicies: readonly ResolvedPolicy[]
  private readonly lease: { units: number; maxAgeMs: number; book: LeaseBook; taking: Map<string, Promise<unknown>> } | undefined
  private readonly observer: LimiterObserver | undefined
  private readonly owed: OwedRefund[] = []
  private paying = false
  /** Pays owed refunds on a limiter no call reaches any more (a gateway's old config, an idle rule). */
  private payTimer: NodeJS.Timeout | undefined

  constructor(options: LimiterOptions) {
    if (typeof options !== 'object' || options === null) {
      throw new ArgumentError('options', options, 'must be an object with at least "policies"')
    }
    rejectUnknown('a Limiter option', options, LIMITER_OPTIONS, NOT_LIMITER_OPTIONS)
    this.policies = resolvePolicies(options.policies)
    this.policyIndex = new Map(this.policies.map((policy, i) => [policy.name, i]))
    this.prefix = checkPrefix(options.prefix ?? 'sluice')
    if (options.clock !== undefined && typeof options.clock !== 'function') {
      throw new ArgumentError('clock', options.clock, 'must be a function returning epoch milliseconds')
    }
    this.clock = options.clock
    const store = options.store === undefined ? new MemoryStore() : checkStore(options.store)
    this.store = store
    // A store of the caller's making has its answers checked (answerProblem); sluice's own are taken at their word.
    const checked = store instanceof MemoryStore || store instanceof RedisStore ? store : checkingAnswers(store)
    this.local = isSyncStore(checked) ? checked : undefined
    this.consumeOnStore = (call) => checked.consume(call)

    this.storeTimeoutMs = positiveNumber('storeTimeoutMs', options.storeTimeoutMs, 250)
    const failure = options.onStoreFailure ?? 'fallback'
    checkChoice('onStoreFailure', failure, ['open', 'closed', 'fallback'])
    this.onStoreFailure = failure
    const instances = options.expectedInstances ?? 1
    if (!Number.isSafeInteger(instances) || instances < 1) {
      throw new ArgumentError('expectedInstances', instances, 'must be a positive integer')
    }
    this.fallbackPolicies = instances === 1 ? this.policies : scalePolicies(this.policies, instances)
    if (options.fallbackStore !== undefined && !(options.fallbackStore instanceof MemoryStore)) {
      throw new ArgumentError('fallbackStore', options.fallbackStore, 'must be a MemoryStore')
    }
    this.fallbackStore = options.fallbackStore ?? new MemoryStore({ maxKeys: FALLBACK_KEYS })
    // A call keeps one entry per policy: a store holding fewer would evict the call's own state as it wrote it, and never refuse.
    for (const [name, memory] of [['store', store], ['fallbackStore', this.fallbackStore]] as const) {
      if (memory instanceof MemoryStore && memory.maxKeys < this.policies.length) {
        throw new ArgumentError(`${name}.maxKeys`, memory.maxKeys, `is below the ${this.policies.length} entries each key takes here (one per policy): every call would forget what the last one spent`)
      }
    }
    const circuit = options.circuit ?? {}
    checkOptions('circuit', 'a circuit option', circuit, new Set(['failures', 'probeIntervalMs']))
    this.probeIntervalMs = positiveNumber('circuit.probeIntervalMs', circuit.probeIntervalMs, 1000)
    const failures = circuit.failures ?? 3
    if (!Number.isSafeInteger(failures) || failures < 1) throw new ArgumentError('circuit.failures', failures, 'must be a positive integer')
    this.circuit = new Circuit(
      this.storeTimeoutMs,
      { failures, probeIntervalMs: this.probeIntervalMs },
      () => this.localNow(),
      () => (this.store.ping ? this.store.ping() : this.store.consume(this.peekCall('sluice-probe'))),
      // Back on the store: what it is owed is given. The fallback keeps its counts until they expire: a
      // store that comes and goes (or answers for some keys only, a Cluster with a master down) would
      // otherwise hand each key a fresh local share at each return.
      () => this.payOwed(),
    )
    const cache = options.blockCache ?? true
    if (cache !== true && cache !== false && !(typeof cache === 'object' && cache !== null && Number.isSafeInteger(cache.maxKeys) && cache.maxKeys >= 2)) {
      throw new ArgumentError('blockCache', cache, 'must be true, false, or { maxKeys: an integer of at least 2 }')
    }
    this.blocked = cache === false || this.local !== undefined ? undefined : new BlockCache(cache === true ? 10_000 : cache.maxKeys)
    const shards = options.shards ?? 1
    if (!Number.isSafeInteger(shards) || shards < 1 || shards > 1024) {
      throw new ArgumentError('shards', shards, 'must be an integer from 1 to 1024')
    }
    if (shards > 1 && this.local !== undefined) {
      throw new ArgumentError('shards', shards, 'spreads load over a remote store; an in-process store needs none')
    }
    for (const policy of this.policies) {
      // Each shard holds at least one unit, so more shards than units would admit more than the limit.
      if (shards > limitOf(policy)) {
        throw new ArgumentError('shards', shards, `exceeds the limit ${limitOf(policy)} of policy "${policy.name}": each shard holds limit / shards, at least one unit, so ${shards} shards would admit ${shards}`)
      }
    }
    const blocking = this.blockingPolicy()
    if (shards > 1 && blocking !== undefined) {
      throw new ArgumentError('shards', shards, `cannot be combined with policy "${blocking.name}"'s blockMs: a block on one shard would leave the others open`)
    }
    this.shards = shards
    this.shardPolicies = shards === 1 ? this.policies : scalePolicies(this.policies, shards)
    this.lease = this.leaseOptions(options.lease)
    this.observer = checkObserver(options.observer)
  }

  /** True while the store is being bypassed after failures (decisions are degraded). */
  get storeUnavailable(): boolean {
    return this.circuit.isOpen
  }

  /** Decides one call for `key`, charging it when allowed. */
  limit(key: string, options?: LimitOptions): Promise<Decision> {
    try {
      return this.decide(this.call(key, options))
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

  /**
   * Gives back `units` a call was charged, for a call that should not count
   * after all (a successful login under a limit on failed ones). Every policy
   * must be a token bucket, a police leaky bucket (both take units back
   * exactly) or a sliding log (from its oldest entries: the count is exact, and
   * what stays counted leaves no sooner). Resolves what a peek then shows; rejects with a
   * `SluiceError` (ERR_SLUICE_STORE) if the store fails.
   *
   * `charged`, the decision that took the units: one the fallback made while
   * the store was out (`degraded`, under onStoreFailure 'fallback') is refunded
   * where it was charged, to the local fallback store.
   *
   * `heldMs`, how long ago they were charged: a sliding log lets a unit go
   * `windowMs` after it took it, and a refund after that would give back
   * another call's instead (a job that ran past the window would free a slot
   * of one still running), so it gives nothing back and resolves a peek.
   *
   * A refund the store did not apply (the circuit open, or a store error that
   * says so: a `StoreNotAppliedError`, such as a disconnected Redis's or a
   * demoted primary's READONLY) is owed: given again, in the background, once
   * the store answers, while it still matters (for a sliding log, with
   * `heldMs` given, until the unit would have left the window). One that timed
   * out, or whose connection dropped before the answer, may have been taken,
   * and is not given twice.
   */
  refund(key: string, units: number, charged?: Decision, heldMs?: number): Promise<Decision>
  /** The same, the decision and time given by name, with the `keys` the call gave its policies (a call spanning keys is refunded under each). */
  refund(key: string, units: number, options: RefundOptions): Promise<Decision>
  async refund(key: string, units: number, chargedOrOptions?: Decision | RefundOptions, heldMsGiven?: number): Promise<Decision> {
    const { charged, heldMs, keys } = this.refundOptions(key, chargedOrOptions, heldMsGiven)
    const call = this.refundCall(key, units, heldMs, keys)
    if (call === undefined) return this.decide(this.peekCall(key, keys))
    if (this.local !== undefined) return combine(this.local.consumeSync(call))
    if (this.chargedLocally(charged)) return this.refundLocally(call)
    const outcome = await this.circuit.run(() => this.consumeOnStore(call))
    if (!outcome.ok) {
      const then = notApplied(outcome) ? this.owe(call, heldMs) : 'not given again: the store may have taken it'
      throw new SluiceError('ERR_SLUICE_STORE', `refund to "${call.key}" failed (${whyFailed(outcome)}); ${then}`, { cause: outcome.error })
    }
    this.payOwed()
    return combine(outcome.value)
  }

  refundSync(key: string, units: number, charged?: Decision, heldMs?: number): Decision
  refundSync(key: string, units: number, options: RefundOptions): Decision
  refundSync(key: string, units: number, chargedOrOptions?: Decision | RefundOptions, heldMsGiven?: number): Decision {
    const { charged, heldMs, keys } = this.refundOptions(key, chargedOrOptions, heldMsGiven)
    const call = this.refundCall(key, units, heldMs, keys)
    if (call === undefined) return combine(this.syncStore().consumeSync(this.peekCall(key, keys)))
    if (this.chargedLocally(charged)) return this.refundLocally(call)
    return combine(this.syncStore().consumeSync(call))
  }

  /** Refunds owed to the store (`refund` above), how many. */
  get refundsOwed(): number {
    return this.owed.length
  }

  /** Keeps a refund that never reached the store, to give once it answers, if it can; says what becomes of it. */
  private owe(call: StoreCall, heldMs: number | undefined): string {
    const now = this.localNow()
    let until = now + MAX_OWED_MS
    for (const policy of this.policies) {
      if (policy.algorithm === 'sliding-log') {
        // Not knowing when the unit was taken, a late refund could free another call's.
        if (heldMs === undefined) return `not given again: without heldMs, given late it could free another call's unit of "${policy.name}"`
        until = Math.min(until, now + this.countedForMs(policy.windowMs, heldMs))
      } else {
        // A bucket full again has no use for it.
        until = Math.min(until, now + fullAfterMs(policy))
      }
    }
    if (until <= now) return 'not given again: the units would be back by now'
    if (this.owed.length >= MAX_OWED) {
      this.owed.shift()
      this.observer?.refundOwed?.('dropped')
    }
    this.owed.push({ call, until })
    this.observer?.refundOwed?.('owed')
    this.schedulePayment()
    return `given again once the store answers, until ${new Date(until).toISOString()}`
  }

  /** Tries the owed refunds again after probeIntervalMs, unless calls get there first; never keeps the process alive. */
  private schedulePayment(): void {
    if (this.payTimer !== undefined || this.owed.length === 0) return
    this.payTimer = setTimeout(() => {
      this.payTimer = undefined
      this.payOwed()
    }, this.probeIntervalMs)
    this.payTimer.unref()
  }

  /** Gives the owed refunds still worth giving, one after the other, in the background; stops at the first the store cannot take. */
  private payOwed(): void {
    if (this.owed.length === 0 || this.paying) return
    this.paying = true
    void (async () => {
      try {
        while (this.owed.length > 0) {
          const { call, until } = this.owed[0] as OwedRefund
          if (this.localNow() >= until) {
            this.owed.shift()
            this.observer?.refundOwed?.('dropped')
            continue
          }
          const outcome = await this.circuit.run(() => this.consumeOnStore({ ...call, now: this.now() }))
          if (!outcome.ok && notApplied(outcome)) return
          this.owed.shift()
          this.observer?.refundOwed?.(outcome.ok ? 'given' : 'dropped')
          this.forgetRefusals(call)
        }
      } finally {
        this.paying = false
        this.schedulePayment()
      }
    })()
  }

  /** Whether `charged` was a fallback's decision, whose units the local fallback store took. */
  private chargedLocally(charged: Decision | undefined): boolean {
    return charged?.degraded === true && this.onStoreFailure === 'fallback' && charged.allowed
  }

  private refundLocally(call: StoreCall): Decision {
    // Given back to a key the fallback may have dropped since (expired, or evicted): a bucket stays full, a log empty.
    return { ...combine(this.fallbackStore.consumeSync({ ...call, policies: this.fallbackPolicies, now: call.now ?? this.localNow() })), degraded: true }
  }

  /** The decision a call of cost 1 would get, without changing any state. */
  peek(key: string, options?: KeyOptions): Promise<Decision> {
    try {
      return this.decide(this.peekCall(key, this.keyOptions(key, options)))
    } catch (error) {
      return Promise.reject(error as Error)
    }
  }

  peekSync(key: string, options?: KeyOptions): Decision {
    return combine(this.syncStore().consumeSync(this.peekCall(key, this.keyOptions(key, options))))
  }

  /**
   * Forgets the key's state in every policy. Rejects with a `SluiceError`
   * (ERR_SLUICE_STORE) if the store fails or takes longer than storeTimeoutMs.
   */
  async reset(key: string, options?: KeyOptions): Promise<void> {
    const normalized = normalizeKey(key)
    const own = this.keyOptions(normalized, options)
    if (own !== undefined) return this.resetKeys(normalized, own)
    this.blocked?.forget(normalized)
    this.lease?.book.take(normalized)
    this.fallbackStore.resetSync(this.prefix, normalized, this.fallbackPolicies)
    if (this.local !== undefined) return this.local.resetSync(this.prefix, normalized, this.policies)
    const keys = this.shards === 1 ? [normalized] : Array.from({ length: this.shards }, (_, i) => `${normalized}#${i}`)
    for (const key of keys) this.blocked?.forget(key)
    const outcome = await withTimeout(
      () => Promise.all(keys.map((key) => this.store.reset(this.prefix, key, this.shardPolicies))),
      this.storeTimeoutMs,
    )
    if (!outcome.ok) {
      throw new SluiceError('ERR_SLUICE_STORE', `reset of "${normalized}" failed: ${whyFailed(outcome)}`, { cause: outcome.error })
    }
  }

  resetSync(key: string, options?: KeyOptions): void {
    const store = this.syncStore()
    const normalized = normalizeKey(key)
    const keys = this.keyOptions(normalized, options)
    if (keys === undefined) return store.resetSync(this.prefix, normalized, this.policies)
    this.resetEach(store, this.policies, keys)
  }

  /** Forgets each policy's state under its own key, on a store in this process. */
  private resetEach(store: SyncStore, policies: readonly ResolvedPolicy[], keys: readonly string[]): void {
    policies.forEach((policy, i) => store.resetSync(this.prefix, keys[i] as string, [policy]))
  }

  /** `reset` of a call spanning keys: each policy's state under its own key. */
  private async resetKeys(key: string, keys: readonly string[]): Promise<void> {
    this.spanBlocked?.forget(spanCacheKey(key, keys))
    for (const own of new Set(keys)) this.blocked?.forget(own)
    this.resetEach(this.fallbackStore, this.fallbackPolicies, keys)
    if (this.local !== undefined) return this.resetEach(this.local, this.policies, keys)
    // One store call per key, for the policies counted under it.
    const byKey = new Map<string, ResolvedPolicy[]>()
    this.policies.forEach((policy, i) => byKey.set(keys[i] as string, [...(byKey.get(keys[i] as string) ?? []), policy]))
    const outcome = await withTimeout(
      () => Promise.all([...byKey].map(([own, policies]) => this.store.reset(this.prefix, own, policies))),
      this.storeTimeoutMs,
    )
    if (!outcome.ok) {
      throw new SluiceError('ERR_SLUICE_STORE', `reset of "${key}" (with keys ${keys.join(', ')}) failed: ${whyFailed(outcome)}`, { cause: outcome.error })
    }
  }

  /** An in-process store settles the promise at once. (Bad arguments reject it rather than throw: see limit and peek.) */
  private decide(call: StoreCall): Promise<Decision> {
    if (this.local !== undefined) return Promise.resolve(combine(this.local.consumeSync(call)))
    return this.decideRemotely(call)
  }

  private async decideRemotely(call: StoreCall): Promise<Decision> {
    const now = call.now ?? this.localNow()
    if (this.lease !== undefined && call.cost > 0 && call.maxWaitMs === 0) return this.decideLeased(call, now)
    if (this.shards === 1) return this.decideOn(call, call, now)
    // A random shard, and one other if that one refuses (a peek looks at one).
    const first = Math.floor(Math.random() * this.shards)
    const decision = await this.decideOn(this.shardCall(call, first), call, now)
    if (decision.allowed || decision.degraded || call.cost === 0) return this.unshard(decision)
    const second = (first + 1 + Math.floor(Math.random() * (this.shards - 1))) % this.shards
    return this.unshard(await this.decideOn(this.shardCall(call, second), call, now))
  }

  /** Decides `call` on the store; when the store cannot, `logical` (the call as made) is degraded. */
  private async decideOn(call: StoreCall, logical: StoreCall, now: number): Promise<Decision> {
    // Only a plain charge may be answered from the cache: a reservation or a peek asks something else.
    const cache = call.cost > 0 && call.maxWaitMs === 0 ? this.blockCacheOf(call) : undefined
    const cached = cache === undefined || call.keys === undefined ? call.key : spanCacheKey(call.key, call.keys)
    if (cache !== undefined) {
      const known = cache.check(cached, call.cost, now)
      if (known !== undefined) {
        this.observer?.blockCacheHit?.()
        return known
      }
    }
    const observed = this.observer?.storeCall
    const started = observed === undefined ? 0 : performance.now()
    const outcome = await this.circuit.run(() => this.consumeOnStore(call))
    if (observed !== undefined && (outcome.ok || outcome.reason !== 'circuit-open')) {
      const durationMs = performance.now() - started
      if (outcome.ok) observed(durationMs, 'ok')
      else if (outcome.reason === 'timeout') observed(durationMs, 'timeout', new Error(`no answer within the store timeout (${this.storeTimeoutMs} ms)`))
      else observed(durationMs, 'store-error', asError(outcome.error))
    }
    if (!outcome.ok) return this.degrade(logical, outcome.reason, now)
    // The store answers again after failures the circuit did not open for.
    if (this.owed.length > 0) this.payOwed()
    const decision = combine(outcome.value)
    if (cache !== undefined && !decision.allowed) cache.remember(cached, call.cost, decision, now)
    return decision
  }

  /**
   * Spends from the key's lease, or takes a new one: one store call charges
   * this call's cost plus the lease. Calls arriving while a lease is being
   * taken for their key wait for it rather than take their own.
   */
  private async decideLeased(call: StoreCall, now: number): Promise<Decision> {
    const lease = this.lease as NonNullable<Limiter['lease']>
    for (;;) {
      const spent = lease.book.spend(call.key, call.cost, now)
      if (spent !== undefined) return spent
      const inFlight = lease.taking.get(call.key)
      if (inFlight === undefined) break
      await inFlight
    }
    const leftover = lease.book.take(call.key)
    if (leftover > 0) this.giveBack(call, leftover)
    const units = Math.min(lease.units, ...this.policies.map((policy) => limitOf(policy) - call.cost))
    if (units <= 0) return this.decideOn(call, call, now)
    const taking = this.decideOn({ ...call, cost: call.cost + units }, call, now)
    lease.taking.set(call.key, taking)
    try {
      const decision = await taking
      if (decision.allowed && !decision.degraded) return lease.book.grant(call.key, units, decision, now, lease.maxAgeMs)
      // Degraded decisions were made for this call's own cost; a refusal may still fit the call alone.
      if (decision.degraded) return decision
    } finally {
      lease.taking.delete(call.key)
    }
    return this.decideOn(call, call, now)
  }

  /** Returns unspent lease units to the store, in the background: nobody waits, a failure only loses them. */
  private giveBack(call: StoreCall, units: number): void {
    void this.circuit.run(() => this.consumeOnStore({ ...call, cost: -units, maxWaitMs: 0 }))
  }

  private leaseOptions(input: LimiterOptions['lease']): Limiter['lease'] {
    if (input === undefined) return undefined
    if (typeof input !== 'object' || input === null) throw new ArgumentError('lease', input, 'must be { units, maxAgeMs? }')
    rejectUnknown('a lease option', input, new Set(['units', 'maxAgeMs']))
    if (!Number.isSafeInteger(input.units) || input.units < 1) throw new ArgumentError('lease.units', input.units, 'must be a positive integer')
    const maxAgeMs = positiveNumber('lease.maxAgeMs', input.maxAgeMs, 1000)
    if (this.local !== undefined) throw new ArgumentError('lease', input, 'is for a store outside the process; an in-process store needs none')
    if (this.shards > 1) throw new ArgumentError('lease', input, 'cannot be combined with shards')
    const blocking = this.blockingPolicy()
    if (blocking !== undefined) throw new ArgumentError('lease', input, `cannot be combined with policy "${blocking.name}"'s blockMs: calls served from a lease would not see the block`)
    for (const policy of this.policies) {
      // A sliding log would count a lease's units from when it was taken, not from when they are spent.
      if (!REFUNDABLE(policy) || policy.algorithm === 'sliding-log') {
        throw new ArgumentError('lease', input, `needs token-bucket or police leaky-bucket policies, whose units can be given back; "${policy.name}" is ${policy.algorithm}`)
      }
    }
    return { units: input.units, maxAgeMs, book: new LeaseBook(10_000), taking: new Map() }
  }

  /** The first policy with blockMs: what shards and leases cannot keep. */
  private blockingPolicy(): ResolvedPolicy | undefined {
    return this.policies.find((policy) => policy.blockMs !== undefined)
  }

  private shardCall(call: StoreCall, shard: number): StoreCall {
    return { ...call, key: `${call.key}#${shard}`, policies: this.shardPolicies }
  }

  /** A shard's decision in terms of the whole key: its limit, and remaining estimated from the shard. */
  private unshard(decision: Decision): Decision {
    if (decision.degraded) return decision
    const scale = (d: PolicyDecision, i: number): PolicyDecision => ({
      ...d,
      limit: limitOf(this.policies[i] as ResolvedPolicy),
      remaining: Math.min(limitOf(this.policies[i] as ResolvedPolicy), d.remaining * this.shards),
    })
    return { ...combine(decision.policies.map(scale)), degraded: false }
  }

  /** The block cache for `call`, if the limiter keeps one. */
  private blockCacheOf(call: StoreCall): BlockCache | undefined {
    if (this.blocked === undefined || call.keys === undefined) return this.blocked
    return (this.spanBlocked ??= new BlockCache(this.blocked.maxKeys))
  }

  /** The decision `onStoreFailure` prescribes when the store could not decide. */
  private degrade(call: StoreCall, reason: FailureReason, now: number): Decision {
    const fits = this.fallbackPolicies.every((policy) => call.cost <= limitOf(policy))
    if (this.onStoreFailure === 'fallback' && fits) {
      const decisions = this.fallbackStore.consumeSync({ ...call, policies: this.fallbackPolicies, now })
      return { ...combine(decisions), degraded: true, reason }
    }
    if (this.onStoreFailure === 'open') {
      // What a key with no history would get: the limits are not being counted.
      const options = call.maxWaitMs === 0 ? NO_WAIT : { maxWaitMs: call.maxWaitMs }
      return { ...combine(evaluate(this.policies, [], now, call.cost, options).decisions), degraded: true, reason }
    }
    // Closed (or a cost no instance's share can ever fit): refused until the next probe.
    const retryAfterMs = this.probeIntervalMs
    const refused = this.policies.map((policy) => ({
      policy: policy.name,
      allowed: false,
      limit: limitOf(policy),
      remaining: 0,
      resetAfterMs: retryAfterMs,
      moreAfterMs: retryAfterMs,
      retryAfterMs,
      waitMs: 0,
    }))
    return { ...combine(refused), degraded: true, reason }
  }

  private localNow(): number {
    return this.now() ?? monotonicClock()
  }

  private call(key: string, options: LimitOptions | undefined): StoreCall {
    let cost = 1
    let maxWaitMs = 0
    let keys: readonly string[] | undefined
    const normalized = normalizeKey(key)
    if (options !== undefined) {
      checkOptions('options', 'a limit option', options, LIMIT_OPTIONS)
      if (options.cost !== undefined) cost = this.checkShardCost(checkCost(options.cost, this.policies))
      if (options.maxWaitMs !== undefined) maxWaitMs = checkMaxWait(options.maxWaitMs, this.policies)
      if (options.keys !== undefined) keys = this.ownKeys(normalized, options.keys)
    }
    const call: StoreCall = { prefix: this.prefix, key: normalized, policies: this.policies, cost, maxWaitMs, now: this.now() }
    if (keys !== undefined) call.keys = keys
    return call
  }

  /** The `keys` of `peek` and `reset`'s options, checked: see `ownKeys`. */
  private keyOptions(key: string, options: KeyOptions | undefined): readonly string[] | undefined {
    if (options === undefined) return undefined
    checkOptions('options', 'a key option', options, KEY_OPTIONS)
    return options.keys === undefined ? undefined : this.ownKeys(normalizeKey(key), options.keys)
  }

  /**
   * Each policy's key, in policy order, from a call's `keys` (policy name to
   * key; `key` for the policies it does not name); undefined when every policy
   * is under `key` after all.
   */
  private ownKeys(key: string, keys: unknown): readonly string[] | undefined {
    if (typeof keys !== 'object' || keys === null || Array.isArray(keys)) {
      throw new ArgumentError('keys', keys, 'must be an object of policy names to keys, e.g. { global: \'all\' }')
    }
    let resolved: string[] | undefined
    for (const name of Object.keys(keys)) {
      const own: unknown = (keys as Record<string, unknown>)[name]
      const at = this.policyIndex.get(name)
      if (at === undefined) throw new ArgumentError(`keys["${name}"]`, own, `names no policy of this limiter (its policies: ${this.policies.map((p) => `"${p.name}"`).join(', ')})`)
      if (typeof own !== 'string' || own.length === 0) throw new ArgumentError(`keys["${name}"]`, own, 'must be a non-empty string')
      const normalized = normalizeKey(own)
      if (normalized === key) continue
      resolved ??= this.policies.map(() => key)
      resolved[at] = normalized
    }
    if (resolved === undefined) return undefined
    if (this.shards > 1) throw new ArgumentError('keys', keys, 'cannot be used with shards: a call goes to one shard of its key')
    if (this.lease !== undefined) throw new ArgumentError('keys', keys, 'cannot be used with a lease: a lease holds units of one key')
    if (!spans(this.store, resolved)) {
      if (this.store instanceof RedisStore) throw clusterSpanError(this.policies, resolved)
      const store = this.store.constructor.name
      const named = store === 'Object' ? 'this store' : store
      throw this.store.spanOf !== undefined
        ? new ArgumentError('keys', keys, `name keys ${named} cannot decide together, its spanOf differing between them (${this.policies.map((policy, i) => `${policy.name}: "${resolved[i]}"`).join(', ')})`)
        : new ArgumentError('keys', keys, `cannot be used with ${named}: it does not say it decides a call's keys together, atomically (a store that does declares spansKeys: true)`)
    }
    return resolved
  }

  /** A call is decided by one shard, so its cost must fit what one shard holds, or it is refused forever. */
  private checkShardCost(cost: number): number {
    if (this.shards === 1) return cost
    this.shardPolicies.forEach((shard, i) => {
      if (cost > limitOf(shard)) {
        const policy = this.policies[i] as ResolvedPolicy
        throw new ArgumentError('cost', cost, `exceeds the ${limitOf(shard)} units each of the ${this.shards} shards of policy "${policy.name}" holds (limit ${limitOf(policy)}), so it could never be allowed`)
      }
    })
    return cost
  }

  /** `refund`'s arguments, either way they are given, checked. */
  private refundOptions(key: string, chargedOrOptions: Decision | RefundOptions | undefined, heldMs: number | undefined): { charged: Decision | undefined; heldMs: number | undefined; keys: readonly string[] | undefined } {
    // A decision always says whether it allowed; options never do.
    if (chargedOrOptions === undefined || chargedOrOptions === null || typeof chargedOrOptions !== 'object' || 'allowed' in chargedOrOptions) {
      return { charged: chargedOrOptions as Decision | undefined, heldMs, keys: undefined }
    }
    checkOptions('options', 'a refund option', chargedOrOptions, REFUND_OPTIONS)
    if (heldMs !== undefined) throw new ArgumentError('heldMs', heldMs, 'goes in the options object when one is given ({ charged, heldMs, keys })')
    const keys = chargedOrOptions.keys === undefined ? undefined : this.ownKeys(normalizeKey(key), chargedOrOptions.keys)
    return { charged: chargedOrOptions.charged, heldMs: chargedOrOptions.heldMs, keys }
  }

  /** The store call giving `units` back; undefined when a sliding log has let them go already (`heldMs`). */
  private refundCall(key: string, units: number, heldMs: number | undefined, keys: readonly string[] | undefined): StoreCall | undefined {
    if (heldMs !== undefined && !(typeof heldMs === 'number' && Number.isFinite(heldMs) && heldMs >= 0)) {
      throw new ArgumentError('heldMs', heldMs, 'must be a finite number of milliseconds, 0 or more')
    }
    for (const policy of this.policies) {
      if (!REFUNDABLE(policy)) {
        throw new ArgumentError('refund', policy.name, `needs token-bucket, police leaky-bucket or sliding-log policies, whose units can be given back; "${policy.name}" is ${policy.algorithm}`)
      }
    }
    if (this.shards > 1) throw new ArgumentError('refund', key, 'is not available with shards: the units were charged to one shard of several')
    if (!Number.isSafeInteger(units) || units < 1) throw new ArgumentError('units', units, 'must be a positive integer')
    for (const policy of this.policies) {
      const limit = limitOf(policy)
      if (units > limit) throw new ArgumentError('units', units, `exceeds the capacity ${limit} of policy "${policy.name}": more than one call could have been charged`)
    }
    if (heldMs !== undefined && this.policies.some((policy) => policy.algorithm === 'sliding-log' && this.countedForMs(policy.windowMs, heldMs) <= 0)) return undefined
    const call: StoreCall = { prefix: this.prefix, key: normalizeKey(key), policies: this.policies, cost: -units, maxWaitMs: 0, now: this.now() }
    if (keys !== undefined) call.keys = keys
    this.forgetRefusals(call)
    return call
  }

  /** A refund can free keys the caches hold as refused. */
  private forgetRefusals(call: StoreCall): void {
    this.blocked?.forget(call.key)
    if (call.keys === undefined) return
    this.spanBlocked?.forget(spanCacheKey(call.key, call.keys))
    for (const own of call.keys) this.blocked?.forget(own)
  }

  /**
   * How much longer a sliding log of `windowMs` counts a unit charged `heldMs`
   * ago (0 or less: it has let it go). `heldMs` is measured here, the window
   * on a remote store's own clock: nearer the end than STORE_CLOCK_MARGIN_MS,
   * the unit is taken as gone (the safe side: one refund not given).
   */
  private countedForMs(windowMs: number, heldMs: number): number {
    const margin = this.local === undefined && this.clock === undefined ? STORE_CLOCK_MARGIN_MS : 0
    return windowMs - heldMs - margin
  }

  private peekCall(key: string, keys?: readonly string[]): StoreCall {
    const call: StoreCall = { prefix: this.prefix, key: normalizeKey(key), policies: this.policies, cost: 0, maxWaitMs: 0, now: this.now() }
    if (keys !== undefined) call.keys = keys
    return call
  }

  private now(): number | undefined {
    return this.clock === undefined ? undefined : readClock(this.clock)
  }

  private syncStore(): SyncStore {
    if (this.local === undefined) {
      throw new ArgumentError('store', this.store.constructor.name, 'cannot decide synchronously; use limit() / peek() / reset()')
    }
    return this.local
  }
}

/**
 * An `observer` option: undefined, or an object of the known callbacks, each a
 * function. Returned with each callback reporting what it throws or rejects
 * with to `warn` (default: a process warning, code SLUICE_OBSERVER).
 */
export function checkObserver(observer: unknown, warn?: (message: string) => void): LimiterObserver | undefined {
  if (observer === undefined) return undefined
  if (typeof observer !== 'object' || observer === null) {
    throw new ArgumentError('observer', observer, 'must be an object of callbacks (storeCall, blockCacheHit, refundOwed)')
  }
  rejectUnknown('an observer callback', observer, new Set(['storeCall', 'blockCacheHit', 'refundOwed']))
  const report = warn ?? warningTo(undefined, 'SLUICE_OBSERVER')
  const reporting: Record<string, (...args: never[]) => void> = {}
  for (const [name, callback] of Object.entries(observer)) {
    if (callback === undefined) continue
    if (typeof callback !== 'function') throw new ArgumentError(`observer.${name}`, callback, 'must be a function')
    reporting[name] = observing(callback as (...args: unknown[]) => unknown, (how, error) => report(`observer.${name} ${how}, and the call it observed went on: ${messageOf(error)}`))
  }
  return reporting
}

/** `answer` if it is one decision per policy of `call`; else the store's error saying what it answered. */
function checkedAnswer(store: Store, answer: unknown, call: StoreCall): PolicyDecision[] {
  const problem = answerProblem(answer, call.policies.length)
  if (problem !== undefined) throw new SluiceError('ERR_SLUICE_STORE', `${store.constructor.name}'s answer ${problem}`)
  return answer as PolicyDecision[]
}

/** A store of the caller's making, with its answers checked; in-process (SyncStore) when it is. */
function checkingAnswers(store: Store): Store {
  const checked: Store = {
    consume: (call) => Promise.resolve(store.consume(call)).then((answer) => checkedAnswer(store, answer, call)),
    reset: (prefix, key, policies) => store.reset(prefix, key, policies),
  }
  if (!isSyncStore(store)) return checked
  const sync: SyncStore = {
    ...checked,
    consumeSync: (call) => checkedAnswer(store, store.consumeSync(call), call),
    resetSync: (prefix, key, policies) => store.resetSync(prefix, key, policies),
  }
  return sync
}

/** A refund that never reached the store, and until when (the limiter's time) it is worth giving. */
interface OwedRefund {
  call: StoreCall
  until: number
}

/** Whether a failed store call is known to have done nothing: the circuit kept it from the store, or the store says so. */
function notApplied(outcome: Outcome<unknown> & { ok: false }): boolean {
  return outcome.reason === 'circuit-open' || (outcome.reason === 'store-error' && outcome.error instanceof StoreNotAppliedError)
}

/** A call spanning keys as the block cache of such calls remembers it: its keys in policy order. */
function spanCacheKey(key: string, keys: readonly string[]): string {
  return `${key}\u0000${keys.join('\u0000')}`
}

/** Owed refunds kept at most (the oldest go first), and for at most a day. */
const MAX_OWED = 10_000
const MAX_OWED_MS = 86_400_000

/** See Limiter.countedForMs. */
const STORE_CLOCK_MARGIN_MS = 100

/** How long a bucket takes from empty to full: after that, a refund to it changes nothing. */
function fullAfterMs(policy: ResolvedPolicy): number {
  if (policy.algorithm === 'token-bucket') return Math.ceil(policy.capacity / policy.refillTokens) * policy.refillIntervalMs
  if (policy.algorithm === 'leaky-bucket') return Math.ceil(policy.capacity / policy.leakTokens) * policy.leakIntervalMs
  return 0
}

/**
 * Validates a key. Keys over MAX_KEY_LENGTH, and keys that are not well-formed
 * UTF-16 (which Redis clients would encode with U+FFFD, merging distinct keys),
 * become `sha256:<hex>` of their UTF-16 code units.
 */
export function normalizeKey(key: unknown): string {
  if (typeof key !== 'string' || key.length === 0) {
    throw new ArgumentError('key', key, 'must be a non-empty string')
  }
  // isWellFormed: no lone surrogate, so the string has an exact UTF-8 form.
  if (key.length <= MAX_KEY_LENGTH && key.isWellFormed()) return key
  return `sha256:${createHash('sha256').update(Buffer.from(key, 'utf16le')).digest('hex')}`
}

function positiveNumber(name: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0 || value > 2 ** 31 - 1) {
    throw new ArgumentError(name, value, 'must be a positive number of milliseconds', numberHint(name, value))
  }
  return value
}

/** The longest key prefix: a namespace, not a place for data. */
export const MAX_PREFIX_LENGTH = 64

/**
 * The `store` option, checked. A Redis client handed over as it is (as
 * rate-limiter-flexible's `storeClient` takes it) is the likely mistake, so
 * the error says how to wrap it.
 */
export function checkStore(value: unknown): Store {
  if (typeof value === 'object' && value !== null && typeof (value as Partial<Store>).consume === 'function') return value as Store
  const hint = isRedisClient(value) ? 'a Redis client goes in a RedisStore: store: new RedisStore({ client })' : undefined
  throw new ArgumentError('store', value, 'must be a MemoryStore, a RedisStore or another Store', hint)
}

/** A key prefix: printable ASCII without spaces or braces (a brace would change the Cluster hash tag). */
export function checkPrefix(prefix: unknown, maxLength = MAX_PREFIX_LENGTH): string {
  if (typeof prefix !== 'string' || prefix.length > maxLength || !/^[\x21-\x7a\x7c\x7e]+$/.test(prefix)) {
    throw new ArgumentError('prefix', prefix, `must be 1 to ${maxLength} printable ASCII characters without spaces or braces`)
  }
  return prefix
}

/** A store call's failure in words: its reason, and what the store said (`store-error: Connection is closed.`). */
function whyFailed(outcome: { reason: string; error?: unknown }): string {
  return outcome.error === undefined ? outcome.reason : `${outcome.reason}: ${messageOf(outcome.error)}`
}
