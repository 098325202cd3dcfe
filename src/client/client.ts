/**
 * The calling side: a `fetch` that remembers what each server said about its
 * limits and waits instead of sending what would be refused.
 *
 * One request goes: queue (per partition, by priority, bounded) -> the
 * partition's learned quota (quota.ts) and concurrency -> the user's pacing
 * policies -> the fleet's shared quota (when a store is given) -> fetch ->
 * learn from the response -> retry a 429/503 after Retry-After plus jitter.
 */
import { createHash } from 'node:crypto'
import { EventEmitter } from 'node:events'
import type { Dispatcher } from 'undici'
import { ArgumentError, inContext, messageOf, PolicyError, QueueFullError, QuotaExhaustedError } from '../core/errors.ts'
import { checkOptions, rejectUnknown } from '../core/options.ts'
import { MAX_WAIT_MS, numberHint, RESERVABLE } from '../core/policy.ts'
import type { Policy } from '../core/types.ts'
import { checkPrefix, checkStore, Limiter, MAX_PREFIX_LENGTH, type LimiterObserver } from '../limiter/limiter.ts'
import { StoreCallFailures, type StoreCallFailure } from '../limiter/store-failures.ts'
import { MemoryStore } from '../stores/memory/memory-store.ts'
import type { Store } from '../stores/store.ts'
import { readAnnouncement, type Announcement, type HeaderLookup } from './headers.ts'
import { PartitionQuota, unitsOf, type Held, type RequestCost, type Settlement } from './quota.ts'
import { InterceptedRequest } from './interceptor.ts'
import { abortReason, MAX_TIMER_MS, sleep, unlessAborted } from './sleep.ts'
import { readThrough } from '../core/streams.ts'

export interface RetryOptions {
  /** Retries after the first attempt. Default 5. */
  retries?: number
  /** First back-off step; doubles per attempt. Default 250 ms. */
  baseDelayMs?: number
  /** Cap on the back-off and on the jitter added to a server's wait. Default 30 s. */
  maxDelayMs?: number
  /** Statuses retried. Default [429, 503]. */
  statuses?: readonly number[]
  /**
   * Also retry methods that are not idempotent (POST, PATCH). Default false:
   * only GET, HEAD, OPTIONS, TRACE, PUT, DELETE and requests carrying an
   * `Idempotency-Key` are retried.
   */
  nonIdempotent?: boolean
}

/** What a partition function sees of a request (a fetch `Request` is one). */
export interface RequestSummary {
  method: string
  headers: Headers
}

export interface ClientOptions {
  /** The fetch to wrap. Default `globalThis.fetch`. */
  fetch?: (input: Request, init?: RequestInit) => Promise<Response>
  /** Which requests share a quota. Default: the URL's origin. */
  partition?: (url: URL, request: RequestSummary) => string
  /**
   * Longest a request waits for a quota it knows is spent (a server's reset or
   * Retry-After, or the pacing policies); beyond it the request rejects with
   * `QuotaExhaustedError`. 0 fails fast. Default 60 s.
   */
  maxWaitMs?: number
  /** Retries of refused responses, or `false` for none. */
  retry?: RetryOptions | false
  /**
   * Pacing applied before sending, for APIs that publish limits but send no
   * headers (Guava RateLimiter's role): any sluice policies, per partition.
   */
  pace?: Policy | readonly Policy[]
  /**
   * Units each request takes, read from the request itself (its body is a
   * copy, free to read): what an LLM SDK given `client.fetch` cannot pass per
   * request, e.g. `async (request) => ({ tokens: estimate(await request.json()) })`.
   * Asked once per request, before it queues; a request's own `rateLimit.cost` wins.
   */
  cost?: (request: Request) => RequestCost | Promise<RequestCost>
  /** Requests in progress at once, per partition. Default unlimited. */
  concurrency?: number
  /** Requests waiting, per partition, before new ones reject with `QueueFullError`. Default 10,000. */
  maxQueue?: number
  /**
   * A sluice store (MemoryStore, RedisStore) shared by several clients: the
   * quotas servers announce (with their window) and the pacing policies are
   * spent together, so a fleet of workers keeps to one quota.
   */
  store?: Store
  /** Key namespace in the store: up to 58 printable ASCII characters, no spaces or braces. Default `'sluice-client'`. */
  prefix?: string
  /**
   * After a 429 that announced no quota, send one request at a time to that
   * partition for this long (unless a response announces one). Default 60 s.
   */
  probeMs?: number
  /** Source of randomness for jitter, in [0, 1). Default `Math.random`. */
  random?: () => number
}

/** Per-request options, passed as `init.rateLimit`. */
export interface RequestLimitOptions {
  /** Higher goes first among requests waiting in the same partition. Default 0. */
  priority?: number
  /** Overrides the client's partition for this request. */
  partition?: string
  /** Overrides the client's `maxWaitMs` for this request. */
  maxWaitMs?: number
  /**
   * Units this request takes: a number from every policy, or per policy name
   * (`{ tokens: 1500 }` against an LLM API's token quota; 1 from each policy
   * it does not name). Default 1 from each.
   */
  cost?: number | Readonly<Record<string, number>>
}

export type ClientRequestInit = RequestInit & { rateLimit?: RequestLimitOptions }

export type WaitReason = 'quota' | 'retry-after' | 'probe' | 'concurrency' | 'pacing' | 'shared-quota'

export interface ClientEvents {
  /** A request waited before being sent. */
  waited: [{ partition: string; waitedMs: number; reason: WaitReason }]
  /** A server refused a request (429, 503). */
  refused: [{ partition: string; status: number; retryAfterMs: number | undefined }]
  /** A refused request will be sent again after `delayMs`. */
  retried: [{ partition: string; status: number; attempt: number; delayMs: number }]
  /** A refused request's response is returned to the caller as it is. */
  gaveUp: [{ partition: string; status: number; attempts: number; reason: 'retries-exhausted' | 'not-retryable' | 'wait-too-long' }]
  /**
   * A call to the `store` failed (timeout or error), so this process paced alone, without the
   * fleet's counts: said when a failure first appears, then at most every 10 s while it lasts.
   * Without a listener it is a process warning (code SLUICE_CLIENT).
   */
  storeFailed: [StoreCallFailure]
}

/** Partitions a client keeps, about: the least recently used beyond it are forgotten (see forgetPartitions). */
const MAX_PARTITIONS = 10_000

const OPTIONS = new Set(['fetch', 'partition', 'maxWaitMs', 'retry', 'pace', 'cost', 'concurrency', 'maxQueue', 'store', 'prefix', 'probeMs', 'random'])
const RETRY_OPTIONS = new Set(['retries', 'baseDelayMs', 'maxDelayMs', 'statuses', 'nonIdempotent'])
const REQUEST_OPTIONS = new Set(['priority', 'partition', 'maxWaitMs', 'cost'])
const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE', 'PUT', 'DELETE'])
/** Learned quotas above this are shared as a sliding-window counter, not an exact log (memory O(limit)). */
const MAX_LOGGED_LIMIT = 10_000
/**
 * A shared log spans the announced window plus this share of it (at most
 * MAX_TRANSIT_MARGIN_MS): a request is charged when it leaves but counted by
 * the server when it arrives, and one that leaves at a window's end and is
 * delayed (network, a busy process) lands in the next window.
 */
const TRANSIT_MARGIN = 0.05
const MAX_TRANSIT_MARGIN_MS = 1000

/** One request's way through the client, across its attempts. */
export interface Trip {
  partition: string
  priority: number
  maxWaitMs: number
  /** Units it takes from each policy, learned or paced. */
  cost: RequestCost
  /** The client's `cost` option, asked before the first attempt when the request named no cost. */
  pricing: (() => RequestCost | Promise<RequestCost>) | undefined
  /** The request body's size in bytes, where it is known before sending: what it takes from a content-bytes quota. */
  bodyBytes: number | undefined
  signal: AbortSignal
  retryable: boolean
  /** Its place in the partition's queue, kept across retries. */
  place: number | undefined
  /** Attempts sent so far. */
  attempt: number
  /** The shared store learning from the last response, if any. */
  learning: Promise<void> | undefined
  /** What the last response holds of the server's concurrency quotas until its body ends. */
  held: Held | undefined
}

interface ResolvedRetry {
  retries: number
  baseDelayMs: number
  maxDelayMs: number
  statuses: ReadonlySet<number>
  nonIdempotent: boolean
}

/**
 * How long to wait before retry number `attempt` (1-based). With a server's
 * wait, that wait plus jitter spread over the policy's window (or the wait
 * itself), so refused clients do not all return at the same instant; without
 * one, exponential back-off with full jitter.
 */
export function retryDelayMs(
  attempt: number,
  serverWaitMs: number | undefined,
  windowMs: number | undefined,
  options: { baseDelayMs: number; maxDelayMs: number },
  random: () => number,
): number {
  const backoff = Math.min(options.maxDelayMs, options.baseDelayMs * 2 ** (attempt - 1))
  if (serverWaitMs === undefined) return Math.floor(random() * backoff)
  const spread = Math.min(options.maxDelayMs, Math.max(backoff, windowMs ?? serverWaitMs))
  return Math.ceil(serverWaitMs + random() * spread)
}

export class RateLimitClient extends EventEmitter<ClientEvents> {
  private readonly fetchImpl: (input: Request, init?: RequestInit) => Promise<Response>
  private readonly partitionOf: (url: URL, request: RequestSummary) => string
  private readonly costOf: ((request: Request) => RequestCost | Promise<RequestCost>) | undefined
  private readonly maxWaitMs: number
  private readonly retry: ResolvedRetry | undefined
  private readonly concurrency: number
  private readonly maxQueue: number
  private readonly probeMs: number
  private readonly random: () => number
  private readonly pacing: Limiter | undefined
  /**
   * The pace policies one by one, for a request whose cost differs between
   * them. Stores keep state per policy name, so these share the state of `pacing`.
   */
  private readonly pacingEach: Limiter[] = []
  private readonly shared: SharedQuotas | undefined
  private readonly partitions = new Map<string, Partition>()
  private sweepAtSize = MAX_PARTITIONS

  constructor(options: ClientOptions = {}) {
    // An async listener's rejection comes to captureRejectionSymbol below, not to the process.
    super({ captureRejections: true })
    checkOptions('options', 'a client option', options, OPTIONS)
    this.fetchImpl = functionOr('fetch', options.fetch, (input: Request, init?: RequestInit) => globalThis.fetch(input, init))
    this.partitionOf = functionOr('partition', options.partition, (url: URL) => url.origin)
    this.costOf = options.cost === undefined ? undefined : functionOr('cost', options.cost, () => undefined)
    this.maxWaitMs = waitBudget('maxWaitMs', options.maxWaitMs ?? 60_000)
    this.retry = resolveRetry(options.retry)
    this.concurrency = countOption('concurrency', options.concurrency, Infinity)
    this.maxQueue = countOption('maxQueue', options.maxQueue, 10_000)
    this.probeMs = waitBudget('probeMs', options.probeMs ?? 60_000)
    this.random = functionOr('random', options.random, Math.random)
    // Checked here, not when the first quota is shared: a prefix no limiter takes would stop the sharing without a word.
    const prefix = checkPrefix(options.prefix ?? 'sluice-client', MAX_PREFIX_LENGTH - ':quota'.length)
    const store = options.store === undefined ? undefined : checkStore(options.store)
    // A failing store falls back to this process's own counts: the fleet no longer paces together, which its owner should hear.
    const failures = new StoreCallFailures((failure) => {
      if (this.listenerCount('storeFailed') > 0) this.tell('storeFailed', failure)
      else process.emitWarning(`sluice client: a store call failed (${failure.reason}): ${failure.error}; this process paces alone until the store answers`, { code: 'SLUICE_CLIENT' })
    })
    const observer: LimiterObserver = { storeCall: (_durationMs, outcome, error) => failures.observe(outcome, error) }
    const pace = options.pace
    if (pace !== undefined) {
      const paceStore = store ?? new MemoryStore()
      this.pacing = inContext('pace', () => new Limiter({ policies: pace, store: paceStore, prefix: `${prefix}:pace`, observer }))
      if (Array.isArray(pace) && pace.length > 1) {
        for (const policy of pace) this.pacingEach.push(new Limiter({ policies: policy, store: paceStore, prefix: `${prefix}:pace`, observer }))
      }
    }
    if (store !== undefined) this.shared = new SharedQuotas(store, `${prefix}:quota`, observer)
  }

  /** `fetch`, rate-limit aware: same arguments, same result, plus `init.rateLimit`. */
  readonly fetch = async (input: string | URL | Request, init?: ClientRequestInit): Promise<Response> => {
    const { rateLimit, ...fetchInit } = init ?? {}
    const request = new Request(input, fetchInit)
    // A body read once cannot be sent twice: such requests are sent once.
    const replayable = request.body === null || isReplayable(fetchInit.body)
    const trip = this.trip(new URL(request.url), request, request.signal, replayable, rateLimit, () => (request.body === null ? request : request.clone()), bodySize(fetchInit.body, request.headers))
    for (;;) {
      const partition = await this.depart(trip)
      let response: Response
      try {
        response = await this.fetchImpl(trip.retryable ? request.clone() : request)
        if (!isResponse(response)) throw new ArgumentError('fetch', response, 'must resolve to a Response (with status and headers)')
      } catch (error) {
        partition.abandon(trip.cost)
        throw error
      }
      const delayMs = this.arrive(trip, partition, response.status, lookup(response.headers))
      await trip.learning
      if (delayMs === undefined) return heldUntilEnd(response, partition, trip.held)
      await response.body?.cancel().catch(() => undefined)
      partition.release(trip.held)
      await sleep(delayMs, trip.signal)
    }
  }

  /**
   * The same for code that uses undici directly: an interceptor for
   * `new Agent().compose(client.interceptor())`. Requests with a streamed body
   * are sent once (never retried).
   */
  interceptor(): Dispatcher.DispatcherComposeInterceptor {
    return (dispatch) => (options, handler) => {
      const { origin, path, method } = options
      const headers = headersOf(options.headers)
      const url = new URL(path, origin)
      const body = options.body
      const replayable = body === undefined || body === null || typeof body === 'string' || body instanceof Uint8Array
      const intercepted = new InterceptedRequest(dispatch, options, handler, {
        depart: (trip) => this.depart(trip),
        arrive: (trip, partition, status, header) => this.arrive(trip, partition, status, header),
      })
      // What the cost option reads: the request as a fetch Request, with its body where it is at hand (not a stream).
      const asRequest = () => {
        try {
          return new Request(url, {
            method, headers, ...((typeof body === 'string' || body instanceof Uint8Array) && method !== 'GET' && method !== 'HEAD' ? { body } : {}),
          })
        } catch {
          // A request fetch cannot stand for (TRACE, CONNECT): its cost is the default, 1 from each policy.
          return undefined
        }
      }
      intercepted.start((signal) => this.trip(url, { method, headers }, signal, replayable, undefined, asRequest, bodySize(body, headers)))
      return true
    }
  }

  /**
   * Emits an event to the caller's listeners. One that throws (or, async,
   * rejects: see captureRejectionSymbol) fails no request and leaves no unit
   * held: it is reported as a process warning, SLUICE_CLIENT_LISTENER.
   */
  private tell<K extends keyof ClientEvents>(event: K, ...args: ClientEvents[K]): void {
    try {
      ;(this.emit as (event: K, ...args: ClientEvents[K]) => boolean)(event, ...args)
    } catch (error) {
      listenerFailed(event, 'threw', error)
    }
  }

  override [EventEmitter.captureRejectionSymbol](error: Error, event: unknown, ..._args: unknown[]): void {
    listenerFailed(event, 'rejected', error)
  }

  private trip(url: URL, request: RequestSummary, signal: AbortSignal, replayable: boolean, rateLimit: RequestLimitOptions | undefined, asRequest: () => Request | undefined, bodyBytes: number | undefined): Trip {
    const perRequest = requestOptions(rateLimit)
    const costOf = this.costOf
    const partitionKey = perRequest.partition ?? this.partitionOf(url, request)
    if (typeof partitionKey !== 'string' || partitionKey === '') throw new ArgumentError('partition', partitionKey, 'must return a non-empty string')
    return {
      partition: partitionKey,
      priority: perRequest.priority ?? 0,
      maxWaitMs: perRequest.maxWaitMs ?? this.maxWaitMs,
      cost: perRequest.cost,
      pricing: perRequest.cost !== undefined || costOf === undefined ? undefined : () => {
        const copy = asRequest()
        return copy === undefined ? undefined : costOf(copy)
      },
      bodyBytes,
      signal,
      retryable: this.retry !== undefined && replayable &&
        (IDEMPOTENT.has(request.method.toUpperCase()) || request.headers.has('idempotency-key') || this.retry.nonIdempotent),
      place: undefined,
      attempt: 0,
      learning: undefined,
      held: undefined,
    }
  }

  /** Waits until the request may be sent: its place in the partition's queue, then the pacing and shared quotas. */
  private async depart(trip: Trip): Promise<Partition> {
    if (trip.pricing !== undefined) {
      const cost = await unlessAborted(trip.pricing(), trip.signal)
      if (cost !== undefined) checkCost('cost', cost)
      trip.cost = cost
      trip.pricing = undefined
    }
    const partition = this.partition(trip.partition)
    // A retried request keeps its place in the queue: it is not the one to be refused again.
    trip.place = await partition.acquire(trip.priority, trip.signal, trip.maxWaitMs, trip, trip.place)
    try {
      await this.gates(trip.partition, partition, trip.signal, trip.maxWaitMs, trip.cost)
    } catch (error) {
      partition.abandon(trip.cost)
      throw error
    }
    trip.attempt++
    return partition
  }

  /** Learns from a response; returns how long to wait before sending the request again, or undefined to hand the response back. */
  private arrive(trip: Trip, partition: Partition, status: number, header: HeaderLookup): number | undefined {
    const now = Date.now()
    const announcement = readAnnouncement(header, now)
    const { retryAt, held } = partition.settle(announcement, status, now, trip.cost)
    trip.held = held
    trip.learning = this.shared?.learn(trip.partition, announcement).catch(() => undefined)
    if (!this.retry?.statuses.has(status)) return undefined

    const serverWaitMs = retryAt === undefined ? undefined : Math.max(0, retryAt - now)
    this.tell('refused', { partition: trip.partition, status, retryAfterMs: serverWaitMs })
    const reason = !trip.retryable || announcement.shouldRetry === false ? 'not-retryable'
      : trip.attempt > this.retry.retries ? 'retries-exhausted'
        : serverWaitMs !== undefined && serverWaitMs > trip.maxWaitMs ? 'wait-too-long' : undefined
    if (reason !== undefined) {
      this.tell('gaveUp', { partition: trip.partition, status, attempts: trip.attempt, reason })
      return undefined
    }
    const delayMs = retryDelayMs(trip.attempt, serverWaitMs, partition.quota.windowMs(), this.retry, this.random)
    this.tell('retried', { partition: trip.partition, status, attempt: trip.attempt, delayMs })
    return delayMs
  }

  /** Requests waiting in a partition's queue (for tests and metrics). */
  waiting(partition: string): number {
    return this.partitions.get(partition)?.queued ?? 0
  }

  /** Partitions the client keeps state for, about 10,000 at most (for tests and metrics). */
  get partitionCount(): number {
    return this.partitions.size
  }

  private partition(key: string): Partition {
    let partition = this.partitions.get(key)
    if (partition !== undefined) {
      // A Map iterates in insertion order: moved to the end, the least recently used come first.
      this.partitions.delete(key)
      this.partitions.set(key, partition)
      return partition
    }
    if (this.partitions.size >= this.sweepAtSize) this.forgetPartitions()
    partition = new Partition(key, new PartitionQuota(this.probeMs), this.concurrency, this.maxQueue, (event) => this.tell('waited', event))
    this.partitions.set(key, partition)
    return partition
  }

  /**
   * Holds the partitions near MAX_PARTITIONS. Idle ones go first; then, least
   * recently used first, those with nothing queued or in flight, whose learned
   * quota a later request learns again. A sweep reads every partition, so the
   * next waits for a tenth of the bound more: a client calling ever new origins
   * (a crawler, one partition per tenant) pays a constant cost per new one,
   * where a sweep per new partition made each request cost 16 ms at 40,000.
   */
  private forgetPartitions(): void {
    const now = Date.now()
    for (const [key, partition] of this.partitions) if (partition.idle(now)) this.partitions.delete(key)
    const keep = MAX_PARTITIONS - MAX_PARTITIONS / 10
    for (const [key, partition] of this.partitions) {
      if (this.partitions.size <= keep) break
      if (partition.unused) this.partitions.delete(key)
    }
    this.sweepAtSize = Math.max(MAX_PARTITIONS, this.partitions.size + MAX_PARTITIONS / 10)
  }

  /** The pacing policies, then the fleet's shared quota. */
  private async gates(key: string, partition: Partition, signal: AbortSignal, maxWaitMs: number, cost: RequestCost): Promise<void> {
    const waited = (waitedMs: number, reason: WaitReason) => this.tell('waited', { partition: key, waitedMs, reason })
    if (this.pacing !== undefined) {
      const pacing = this.pacing
      const paced = (ms: number) => waited(ms, 'pacing')
      // Most requests take the same from every policy (nothing said: 1 each): one all-or-nothing call.
      const units = typeof cost === 'object' ? pacing.policies.map((policy) => unitsOf(cost, policy.name)) : [cost ?? 1]
      if (units.every((each) => each === units[0])) {
        if ((units[0] as number) > 0) await take(pacing, key, signal, maxWaitMs, units[0] as number, paced)
      } else {
        // Costs that differ between policies cannot be one all-or-nothing call: each policy is
        // charged in turn (units taken before a later one refuses are spent).
        for (const [i, limiter] of this.pacingEach.entries()) {
          if ((units[i] as number) > 0) await take(limiter, key, signal, maxWaitMs, units[i] as number, paced)
        }
      }
    }
    if (this.shared !== undefined) {
      for (const { name, limiter } of this.shared.limitersFor(key, partition.quota)) {
        const units = unitsOf(cost, name)
        if (units > 0) await take(limiter, key, signal, maxWaitMs, units, (ms) => waited(ms, 'shared-quota'))
      }
    }
  }
}

/** A fetch Response, or one of another fetch's making (node-fetch's): what the client reads of it. */
function isResponse(value: unknown): value is Response {
  const response = value as Partial<Response> | undefined
  return typeof response?.status === 'number' && typeof response.headers?.get === 'function'
}

/** Creates a rate-limit aware client; `client.fetch` is a drop-in `fetch`. */
export function createClient(options?: ClientOptions): RateLimitClient {
  return new RateLimitClient(options)
}

interface Waiter {
  priority: number
  seq: number
  enqueuedAt: number
  /** The partition's serverWaitedMs when the request joined the queue. */
  serverWaitedAtEnqueue: number
  reason: WaitReason | undefined
  maxWaitMs: number
  /** The request's trip: its cost is priced against what the partition knows when it reaches the head of the queue. */
  trip: Pick<Trip, 'cost' | 'bodyBytes'>
  resolve: () => void
  reject: (error: unknown) => void
  signal: AbortSignal
  onAbort: () => void
}

function before(a: Waiter, b: Waiter): boolean {
  return a.priority > b.priority || (a.priority === b.priority && a.seq < b.seq)
}

/** One partition: its learned quota, its queue, and the one timer that wakes the queue. */
class Partition {
  private readonly queue: Waiter[] = []
  private active = 0
  private seq = 0
  private timer: NodeJS.Timeout | undefined
  /**
   * How long the queue has stood still on the server's account (a spent quota,
   * a Retry-After, a request gone alone for the answer that says more), in all:
   * time behind the concurrency limit, the caller's own, is not counted.
   * What a queued request has waited of it is held against its maxWaitMs.
   */
  private serverWaitedMs = 0
  private serverWaitSince: number | undefined
  /** The wait refuseBehind last went through the line for, and the line's head then: while both stand, the same line gets the same answers. */
  private refusedBehindFor: { until: number; since: number; head: Waiter | undefined } | undefined

  constructor(
    readonly key: string,
    readonly quota: PartitionQuota,
    private readonly concurrency: number,
    private readonly maxQueue: number,
    private readonly waited: (event: ClientEvents['waited'][0]) => void,
  ) {}

  get queued(): number {
    return this.queue.length
  }

  /**
   * Resolves when the request may go: the quota is charged and it counts as
   * active. Resolves with the request's place in line, which a retry passes back.
   */
  acquire(priority: number, signal: AbortSignal, maxWaitMs: number, trip: Waiter['trip'], place?: number): Promise<number> {
    if (signal.aborted) return Promise.reject(abortReason(signal))
    if (this.queue.length >= this.maxQueue) return Promise.reject(new QueueFullError(this.key, this.maxQueue))
    const seq = place ?? this.seq++
    const now = Date.now()
    return new Promise<number>((resolve, reject) => {
      const waiter: Waiter = {
        priority, seq, enqueuedAt: now, serverWaitedAtEnqueue: this.serverWaited(now), reason: undefined, maxWaitMs, trip, resolve: () => resolve(seq), reject, signal,
        onAbort: () => {
          const at = this.queue.indexOf(waiter)
          if (at === -1) return
          this.queue.splice(at, 1)
          reject(abortReason(signal))
          this.pump()
        },
      }
      signal.addEventListener('abort', waiter.onAbort, { once: true })
      // Ordered by priority, then place in line.
      let at = this.queue.length
      while (at > 0 && before(waiter, this.queue[at - 1] as Waiter)) at--
      this.queue.splice(at, 0, waiter)
      this.pump()
    })
  }

  settle(announcement: Announcement, status: number, now: number, cost: RequestCost): Settlement {
    const settlement = this.quota.settle(announcement, status, now, cost)
    this.active--
    this.pump()
    return settlement
  }

  /** A response's body has ended: what it held of the server's concurrency quotas comes back. */
  release(held: Held | undefined): void {
    if (held === undefined) return
    this.quota.release(held)
    this.pump()
  }

  abandon(cost: RequestCost): void {
    this.quota.abandon(cost)
    this.active--
    this.pump()
  }

  /** Nothing queued, in flight or holding a server's concurrency quota: forgetting it loses only what it learned. */
  get unused(): boolean {
    return this.queue.length === 0 && this.active === 0 && !this.quota.holds
  }

  idle(now: number): boolean {
    return this.unused && this.quota.idle(now)
  }

  private pump(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer)
      this.timer = undefined
    }
    while (this.queue.length > 0) {
      const head = this.queue[0] as Waiter
      if (this.active >= this.concurrency) {
        this.serverWaitEnds(Date.now())
        head.reason ??= 'concurrency'
        return
      }
      const now = Date.now()
      // Priced now, not when it queued: requests queued behind the first answer learn the server's units from it.
      head.trip.cost = this.quota.priced(head.trip.cost, head.trip.bodyBytes)
      const admission = this.quota.admit(now, head.trip.cost)
      if (admission.kind === 'never') {
        this.queue.shift()
        head.signal.removeEventListener('abort', head.onAbort)
        head.reject(new QuotaExhaustedError(this.key, Infinity, `it takes ${admission.units} of policy "${admission.policy}", whose whole quota is ${admission.limit}`))
        continue
      }
      if (admission.kind === 'response') {
        this.serverWaitStarts(now)
        head.reason = admission.reason
        return
      }
      if (admission.kind === 'wait') {
        this.serverWaitStarts(now)
        this.refuseBehind(now, admission.until, admission.reason)
        // Its time in line before it led counts too, as it did behind the head.
        const waitedMs = this.serverWaited(now) - head.serverWaitedAtEnqueue
        if (waitedMs + admission.until - now > head.maxWaitMs) {
          const answersDueBy = head.enqueuedAt + head.maxWaitMs
          if (admission.reason === 'quota' && this.active > 0 && now < answersDueBy) {
            // Spent as counted here, with answers still on their way: the last of them may bring a
            // sooner reset (a sliding window's "more than 0" comes long before its "more than 4").
            // Not for longer than maxWaitMs: answers slower than that (a slow server, a request
            // without a timeout) would hold the request past the wait it accepts, only to refuse
            // it. maxWaitMs 0 fails fast all the same.
            head.reason = admission.reason
            this.timer = setTimeout(() => {
              this.timer = undefined
              this.pump()
            }, Math.min(answersDueBy - now, MAX_TIMER_MS))
            return
          }
          this.queue.shift()
          this.refuse(head, admission.until - now, admission.reason, waitedMs)
          continue
        }
        head.reason = admission.reason
        this.timer = setTimeout(() => {
          this.timer = undefined
          this.pump()
        }, Math.min(admission.until - now, MAX_TIMER_MS))
        return
      }
      this.queue.shift()
      this.active++
      this.serverWaitEnds(now)
      head.signal.removeEventListener('abort', head.onAbort)
      if (head.reason !== undefined) this.waited({ partition: this.key, waitedMs: now - head.enqueuedAt, reason: head.reason })
      head.resolve()
    }
    this.serverWaitEnds(Date.now())
  }

  private serverWaited(now: number): number {
    return this.serverWaitedMs + (this.serverWaitSince === undefined ? 0 : now - this.serverWaitSince)
  }

  private serverWaitStarts(now: number): void {
    this.serverWaitSince ??= now
  }

  private serverWaitEnds(now: number): void {
    if (this.serverWaitSince === undefined) return
    this.serverWaitedMs += now - this.serverWaitSince
    this.serverWaitSince = undefined
  }

  /**
   * The requests behind the head wait at least until `until`, on top of what
   * they have waited in line on the server's account: those for which that is
   * more than their maxWaitMs reject now, as the head does when its own wait is
   * too long (one joining later is held to its wait when it is the head). Otherwise,
   * behind a request the server refuses again and again (each retry keeping
   * its place), each would wait out every retry of every request before it.
   */
  private refuseBehind(now: number, until: number, reason: WaitReason): void {
    // Each request joining a standing line pumps it: not a walk of the whole line each time (quadratic in a crawler's thousands).
    const since = this.serverWaitSince ?? now
    const head = this.queue[0]
    const last = this.refusedBehindFor
    if (last !== undefined && last.until === until && last.since === since && last.head === head) return
    this.refusedBehindFor = { until, since, head }
    const serverWaited = this.serverWaited(now)
    for (let at = 1; at < this.queue.length;) {
      const waiter = this.queue[at] as Waiter
      const waitedMs = serverWaited - waiter.serverWaitedAtEnqueue
      if (waitedMs + (until - now) <= waiter.maxWaitMs) {
        at++
        continue
      }
      this.queue.splice(at, 1)
      this.refuse(waiter, until - now, reason, waitedMs)
    }
  }

  /** Rejects a waiter taken out of the line: the wait ahead, and what it had waited, are more than its maxWaitMs. */
  private refuse(waiter: Waiter, waitMs: number, reason: WaitReason, waitedMs: number): void {
    waiter.signal.removeEventListener('abort', waiter.onAbort)
    const why = reason === 'quota' ? 'its quota is spent' : 'the server asked to retry later'
    const waited = Math.round(waitedMs)
    waiter.reject(new QuotaExhaustedError(this.key, waitMs, waited > 0 ? `${why}, and it has waited ${waited} ms in line for the server already` : why))
  }
}

/**
 * Quotas servers announced, kept in a shared store so a fleet spends them
 * together: one sliding log per announced policy (any `limit` calls in any
 * `window`, which no server-side algorithm with that quota refuses), brought
 * down to the server's `remaining` when the server has seen more than the log.
 */
class SharedQuotas {
  private readonly limiters = new Map<string, Limiter>()

  constructor(private readonly store: Store, private readonly prefix: string, private readonly observer: LimiterObserver) {}

  /** The shared log of each quota the partition knows, with the name the server gave its policy. */
  limitersFor(key: string, quota: PartitionQuota): Array<{ name: string; limiter: Limiter }> {
    const limiters: Array<{ name: string; limiter: Limiter }> = []
    for (const policy of quota.knownPolicies()) {
      const limiter = this.limiter(key, policy.name, policy.limit, policy.windowMs)
      if (limiter !== undefined) limiters.push({ name: policy.name, limiter })
    }
    return limiters
  }

  /** Charges the log with what the server counted and the fleet did not (other callers, or requests before the quota was known). */
  async learn(key: string, announcement: Announcement): Promise<void> {
    for (const announced of announcement.quotas) {
      if (announced.limit === undefined || announced.windowMs === undefined || announced.remaining === undefined) continue
      const limiter = this.limiter(key, announced.name, announced.limit, announced.windowMs)
      if (limiter === undefined) continue
      const seen = await limiter.peek(key)
      const unseen = seen.remaining - announced.remaining
      if (unseen > 0 && !seen.degraded) await limiter.limit(key, { cost: unseen })
    }
  }

  private limiter(key: string, name: string, limit: number, windowMs: number): Limiter | undefined {
    const id = `${key}\n${name}\n${limit}\n${windowMs}`
    let limiter = this.limiters.get(id)
    if (limiter === undefined) {
      if (this.limiters.size >= 10_000) this.limiters.clear()
      try {
        limiter = new Limiter({
          store: this.store,
          prefix: this.prefix,
          observer: this.observer,
          policies: {
            algorithm: limit <= MAX_LOGGED_LIMIT ? 'sliding-log' : 'sliding-window',
            name: storeName(name),
            limit,
            windowMs: windowMs + Math.min(MAX_TRANSIT_MARGIN_MS, Math.ceil(windowMs * TRANSIT_MARGIN)),
          },
        })
      } catch (error) {
        // A quota no policy can hold (absurd limit or window): not shared.
        if (error instanceof PolicyError) return undefined
        throw error
      }
      this.limiters.set(id, limiter)
    }
    return limiter
  }
}

/** A server's policy name as a store key part: itself when it is a valid policy name, else a digest of it. */
function storeName(name: string): string {
  return /^[\x21-\x7e]{1,64}$/.test(name) && !/["\\{}]/.test(name) ? name : `h-${createHash('sha256').update(name).digest('hex').slice(0, 16)}`
}

/** Takes `cost` units from `limiter`, waiting (a reservation where the policies allow it) up to `budgetMs`. */
async function take(limiter: Limiter, key: string, signal: AbortSignal, budgetMs: number, cost: number, waited: (ms: number) => void): Promise<void> {
  const reservable = limiter.policies.every((policy) => RESERVABLE.has(policy.algorithm))
  let spent = 0
  for (;;) {
    const decision = await limiter.limit(key, { cost, maxWaitMs: reservable ? Math.min(MAX_WAIT_MS, Math.max(0, budgetMs - spent)) : 0 })
    if (decision.allowed) {
      if (decision.waitMs > 0) {
        waited(decision.waitMs)
        await sleep(decision.waitMs, signal)
      }
      return
    }
    if (spent + decision.retryAfterMs > budgetMs) throw new QuotaExhaustedError(key, decision.retryAfterMs, `policy "${decision.policy}"`)
    waited(decision.retryAfterMs)
    await sleep(decision.retryAfterMs, signal)
    spent += decision.retryAfterMs
  }
}

/**
 * Bytes of a body read before the caller asks, where its response holds a server's concurrency
 * quota: the server counts the request until it has sent the last byte, which a socket's buffers
 * take in whether or not anyone reads them, so a caller that never reads a short body must not
 * hold the unit for ever. A longer body unread holds it, at the server too.
 */
const READ_AHEAD_BYTES = 256 * 1024

/**
 * The response handed back, its body read through so that what it holds of the server's
 * concurrency quotas comes back when the body ends (or fails, or is cancelled). A rebuilt
 * response keeps the original's `url`, `redirected` and `type`.
 */
function heldUntilEnd(response: Response, partition: Partition, held: Held | undefined): Response {
  if (held === undefined) return response
  if (response.body === null) {
    partition.release(held)
    return response
  }
  const body = readThrough(response.body, () => partition.release(held), READ_AHEAD_BYTES)
  return keepingIdentity(new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers }), response)
}

/**
 * `rebuilt` with `original`'s `url`, `redirected` and `type`, which the Response constructor
 * cannot set; its clones keep them too (a clone is made from the rebuilt response's own state).
 */
function keepingIdentity(rebuilt: Response, original: Response): Response {
  const kept = (name: 'url' | 'redirected' | 'type') => ({ value: original[name], enumerable: true })
  const clone = Response.prototype.clone
  return Object.defineProperties(rebuilt, {
    url: kept('url'),
    redirected: kept('redirected'),
    type: kept('type'),
    clone: { value: function cloneKeepingIdentity(this: Response) { return keepingIdentity(clone.call(this), original) } },
  })
}

function lookup(headers: Headers): HeaderLookup {
  return (name) => headers.get(name) ?? undefined
}

/** undici's request headers (an object, a flat array of names and values, or an iterable of pairs) as `Headers`. */
function headersOf(raw: Dispatcher.DispatchOptions['headers']): Headers {
  const headers = new Headers()
  if (raw === undefined || raw === null) return headers
  const add = (name: unknown, value: unknown) => {
    if (typeof name !== 'string' || value === undefined) return
    for (const one of Array.isArray(value) ? value : [value]) headers.append(name, String(one))
  }
  if (Array.isArray(raw)) {
    for (let i = 0; i + 1 < raw.length; i += 2) add(raw[i], raw[i + 1])
  } else if (typeof (raw as Iterable<unknown>)[Symbol.iterator] === 'function') {
    for (const pair of raw as Iterable<[string, string | string[] | undefined]>) add(pair[0], pair[1])
  } else {
    for (const [name, value] of Object.entries(raw)) add(name, value)
  }
  return headers
}

/** A request body's size in bytes where it is known before it is sent (a stream's only from its Content-Length). */
function bodySize(body: unknown, headers: Headers): number | undefined {
  if (body === undefined || body === null) return 0
  if (typeof body === 'string') return Buffer.byteLength(body)
  if (body instanceof ArrayBuffer || ArrayBuffer.isView(body)) return body.byteLength
  if (body instanceof Blob) return body.size
  if (body instanceof URLSearchParams) return Buffer.byteLength(body.toString())
  const declared = Number(headers.get('content-length') ?? NaN)
  return Number.isSafeInteger(declared) && declared >= 0 ? declared : undefined
}

function isReplayable(body: RequestInit['body']): boolean {
  return typeof body === 'string' || body instanceof ArrayBuffer || ArrayBuffer.isView(body) ||
    body instanceof Blob || body instanceof URLSearchParams || body instanceof FormData
}

function resolveRetry(retry: RetryOptions | false | undefined): ResolvedRetry | undefined {
  if (retry === false) return undefined
  if (retry !== undefined && (typeof retry !== 'object' || retry === null)) throw new ArgumentError('retry', retry, 'must be false or an object')
  const options = retry ?? {}
  rejectUnknown('a retry option', options, RETRY_OPTIONS)
  const statuses = options.statuses ?? [429, 503]
  if (!Array.isArray(statuses) || !statuses.every((status) => Number.isInteger(status) && status >= 400 && status <= 599)) {
    throw new ArgumentError('retry.statuses', statuses, 'must be an array of HTTP error statuses (400-599)')
  }
  if (options.nonIdempotent !== undefined && typeof options.nonIdempotent !== 'boolean') {
    throw new ArgumentError('retry.nonIdempotent', options.nonIdempotent, 'must be a boolean')
  }
  return {
    retries: countOption('retry.retries', options.retries, 5, 0),
    baseDelayMs: waitBudget('retry.baseDelayMs', options.baseDelayMs ?? 250),
    maxDelayMs: waitBudget('retry.maxDelayMs', options.maxDelayMs ?? 30_000),
    statuses: new Set(statuses),
    nonIdempotent: options.nonIdempotent ?? false,
  }
}

function requestOptions(options: RequestLimitOptions | undefined): RequestLimitOptions {
  if (options === undefined) return {}
  checkOptions('rateLimit', 'a rateLimit request option', options, REQUEST_OPTIONS)
  if (options.priority !== undefined && !Number.isFinite(options.priority)) throw new ArgumentError('rateLimit.priority', options.priority, 'must be a finite number')
  if (options.partition !== undefined && (typeof options.partition !== 'string' || options.partition === '')) {
    throw new ArgumentError('rateLimit.partition', options.partition, 'must be a non-empty string')
  }
  if (options.maxWaitMs !== undefined) waitBudget('rateLimit.maxWaitMs', options.maxWaitMs)
  if (options.cost !== undefined) checkCost('rateLimit.cost', options.cost)
  return options
}

const unitCount = (value: unknown): boolean => typeof value === 'number' && Number.isSafeInteger(value) && value >= 0

function checkCost(name: string, cost: unknown): void {
  const why = name.startsWith('rateLimit') ? 'must be' : 'must return'
  if (typeof cost === 'number') {
    if (!unitCount(cost)) throw new ArgumentError(name, cost, `${why} a whole number of units, 0 or more, or an object of them by policy name`)
    return
  }
  if (typeof cost !== 'object' || cost === null || Array.isArray(cost)) {
    throw new ArgumentError(name, cost, `${why} a whole number of units, 0 or more, or an object of them by policy name`)
  }
  for (const [policy, units] of Object.entries(cost)) {
    if (!unitCount(units)) throw new ArgumentError(`${name}.${policy}`, units, `${why} a whole number of units, 0 or more`)
  }
}

function functionOr<T>(name: string, value: T | undefined, fallback: T): T {
  if (value === undefined) return fallback
  if (typeof value !== 'function') throw new ArgumentError(name, value, 'must be a function')
  return value
}

/** Milliseconds: a non-negative number, Infinity allowed. */
function waitBudget(name: string, value: unknown): number {
  if (typeof value !== 'number' || Number.isNaN(value) || value < 0) throw new ArgumentError(name, value, 'must be a number of milliseconds, 0 or more', numberHint(name, value))
  return value
}

function countOption(name: string, value: unknown, fallback: number, min = 1): number {
  if (value === undefined) return fallback
  if (value === Infinity) return Infinity
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) throw new ArgumentError(name, value, `must be an integer of at least ${min}`)
  return value
}

function listenerFailed(event: unknown, how: 'threw' | 'rejected', error: unknown): void {
  process.emitWarning(`sluice client: a '${String(event)}' listener ${how}, and the request went on: ${messageOf(error)}`, { code: 'SLUICE_CLIENT_LISTENER' })
}
