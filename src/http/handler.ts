/**
 * The framework-neutral HTTP pipeline: route match -> identity key -> policies
 * -> decision -> status, headers and body. Adapters (node, fetch, ...) only
 * translate their request into `HttpRequest` and apply the `HttpOutcome`.
 */
import { monotonicClock, type Clock } from '../core/clock.ts'
import { GenerationalMap } from '../core/generational-map.ts'
import { ITEMS_PER_SLICE, runInSlices, runToEnd } from '../core/turn.ts'
import { isPromise, observing, warningTo } from '../core/callbacks.ts'
import { ArgumentError, inContext, messageOf } from '../core/errors.ts'
import type { Decision, Policy, PolicyDecision, ResolvedPolicy } from '../core/types.ts'
import { checkBoolean, checkChoice, checkOptions, elsewhere, rejectUnknown } from '../core/options.ts'
import { checkMaxWait, limitOf, POLICY_FIELD_NAMES } from '../core/policy.ts'
import { REFUNDABLE } from '../algorithms/index.ts'
import { checkObserver, checkPrefix, FALLBACK_KEYS, Limiter, MAX_PREFIX_LENGTH, type LimiterObserver, type LimiterOptions } from '../limiter/limiter.ts'
import { combine } from '../limiter/decision.ts'
import { StoreCallFailures } from '../limiter/store-failures.ts'
import { MemoryStore } from '../stores/memory/memory-store.ts'
import { isSyncStore, type Store } from '../stores/store.ts'
import { clientIpResolver, everyAddressWarning, type ClientIpOptions } from './client-ip.ts'
import { anyReading, buildCandidates, compileMatch, compilePaths, excludesAll, NODE_METHODS, unknownMethods, type MatchOptions } from './match.ts'
import { checkHeaderOptions, rateLimitHeaders, refusalRetryMs, type HeaderList, type HeaderOptions } from './headers.ts'

/** What the pipeline needs to know of a request. */
export interface HttpRequest {
  method: string
  /** The path, without the query string. */
  path: string
  /**
   * Set where a listener reading the target with WHATWG URL would see
   * another path: `new URL('//x/login', base).pathname` is `/login` (the
   * target's `//x` is read as a host). Rules match this path too (see
   * pathReadings).
   */
  pathAsUrl?: string
  host: string | undefined
  /**
   * Set where a listener reading the request's URL would see another host
   * than the Host field names: the authority of an absolute-form target
   * (`GET http://a.test/x` with `Host: b.test`). Host predicates match this
   * host too.
   */
  hostAsUrl?: string
  /**
   * The query string with its `?`, where the target has one (method readings
   * look there for `_method`: see methodReadings).
   */
  query?: string | undefined
  /** A request header by lower-case name (first value). */
  header(name: string): string | undefined
  /** The socket peer's address. */
  remoteAddress: string | undefined
}

/** Resolves a request to a key (with its kind as prefix, e.g. `user:42`), or undefined (or null) for "no identity". */
export type KeyResolver = (request: HttpRequest) => string | null | undefined | Promise<string | null | undefined>

export interface RuleOptions {
  /** Names the rule in logs and keys. Default `rule-<index>`. */
  name?: string
  /** Which requests the rule applies to: predicates, or a function of the request. Default: every request. */
  match?: MatchOptions | ((request: HttpRequest) => boolean)
  /**
   * The rule's policies; or give `tiers` instead. A function of the request
   * reads them per request (a customer's contract, looked up; it may return a
   * promise): each policy it gives must be named, and keep its name when its
   * numbers change, so that its state carries over.
   */
  policies?: Policy | Policy[] | ((request: HttpRequest) => Policy | Policy[] | Promise<Policy | Policy[]>)
  /**
   * Policies per tier (FREE / PRO / ...): `of` names the request's tier (e.g.
   * from a verified JWT claim or a lookup); an unknown or missing tier gets
   * `default`.
   */
  tiers?: {
    of: (request: HttpRequest) => string | null | undefined | Promise<string | null | undefined>
    policies: Record<string, Policy | Policy[]>
    default: string
  }
  /** Identity for this rule. Default: the handler's `key`. */
  key?: KeyResolver
  /** Units a request costs. Default 1. */
  cost?: number | ((request: HttpRequest) => number)
  /** Decide and report, never refuse. */
  shadow?: boolean
  /**
   * `reject` (default) answers 429 at once; `queue` lets a request that fits
   * within `maxWaitMs` wait its turn (charged at once), then proceed. Token
   * bucket, leaky bucket and fixed window policies only.
   */
  action?: 'reject' | 'queue'
  /** With `queue`: the longest a request waits. Default 10,000 ms. */
  maxWaitMs?: number
  /**
   * Which responses the rule counts: `all` (default), `failed` (status 400
   * and up: a login limit that successful logins do not spend) or `succeeded`.
   * A request is charged when it arrives, so a burst is held to the limit
   * exactly; one whose response does not count is refunded when it is sent.
   * Needs token-bucket, police leaky-bucket or sliding-log policies (the ones
   * that take units back: a sliding log gives back its oldest units).
   *
   * `in-flight` makes the rule a concurrency limit: a request holds its units
   * from its arrival until its response is sent (a client that leaves first:
   * until the handler ends the response), so
   * `limit` is the number of requests a key may have in progress. Needs
   * sliding-log policies, whose `windowMs` is the longest a request is
   * counted: the bound on a unit whose release was lost (an instance that
   * crashed mid-request) before it comes back. Its header items say
   * `qu="concurrent-requests"`, with no window and no reset time (no one
   * knows when a request in progress ends), and a refusal says `Retry-After: 1`.
   */
  count?: Count
}

/** Which responses a rule counts; `in-flight` counts requests only while they are in progress. */
export type Count = 'all' | 'failed' | 'succeeded' | 'in-flight'

export interface RateLimitOptions extends Pick<LimiterOptions, 'storeTimeoutMs' | 'onStoreFailure' | 'expectedInstances' | 'circuit' | 'blockCache' | 'observer'> {
  /** Ordered rules; a request is subject to every rule that matches it. */
  rules: RuleOptions[]
  /** Requests never limited: path patterns (health checks, metrics), or a predicate. */
  skip?: string | string[] | ((request: HttpRequest) => boolean)
  /**
   * Whether path patterns (rules, skip) match case-sensitively, as the
   * application routes. Default true; `sluice/express` defaults to false,
   * because Express routes `/API/login` to `/api/login` unless its
   * "case sensitive routing" setting is on.
   */
  caseSensitive?: boolean
  /** An allow-list: requests it accepts are never limited (e.g. internal callers). */
  allow?: (request: HttpRequest) => boolean | Promise<boolean>
  /** A deny-list: requests it accepts are refused with 403 before any limit is checked. */
  deny?: (request: HttpRequest) => boolean | Promise<boolean>
  /** Default identity: the client IP (see `clientIp`). */
  key?: KeyResolver
  /** How the default IP identity treats proxies and IPv6. */
  clientIp?: ClientIpOptions
  /** Requests with no identity: share one `anonymous` key (default), or refuse them with 403. */
  emptyKey?: 'anonymous' | 'forbid'
  headers?: HeaderOptions
  /** Shadow mode for every rule. */
  shadow?: boolean
  store?: Store
  prefix?: string
  clock?: Clock
  /** Every decision, allowed or not (shadow ones too). Should it throw, or return a promise that rejects, the error goes to onWarning and the request goes on. */
  onDecision?: (event: DecisionEvent) => void
  /** Each request refused with 429 (for logging). Should it throw, or return a promise that rejects, the error goes to onWarning and the 429 is sent. */
  onLimited?: (event: DecisionEvent) => void
  /**
   * Replaces the refusal's body (and, if given, its status and content type):
   * an HTML page, or the API's own error shape. The RateLimit fields and
   * Retry-After stay. Return undefined to send the default problem body;
   * should it throw (or return a promise: it must answer at once), the error
   * goes to onWarning and the default is sent.
   */
  limitedResponse?: (event: LimitedEvent) => LimitedResponse | undefined
  /** Misconfiguration noticed at run time (e.g. forwarding headers with no trusted proxy). */
  onWarning?: (message: string) => void
}

export interface DecisionEvent {
  rule: string
  key: string
  decision: Decision
  shadow: boolean
  request: HttpRequest
}

export interface LimitedEvent extends DecisionEvent {
  /** The Retry-After the response carries, in seconds. */
  retryAfterSeconds: number
  /** The RFC 9457 body sent by default, to reuse or reshape. */
  problem: Record<string, unknown>
}

export interface LimitedResponse {
  /** Default 429; any 4xx or 5xx. */
  status?: number
  /** A string is sent as is (`text/plain` unless `contentType` says otherwise); anything else as JSON. */
  body: unknown
  contentType?: string
}

export interface HttpOutcome {
  /** False: send `status`, `headers` and `body` instead of running the handler. */
  proceed: boolean
  status: number
  /** Headers for the response, allowed or refused. */
  headers: HeaderList
  body: string | undefined
  /** Greater than 0 when the request was queued: wait this long, then proceed. */
  waitMs: number
  /** The binding decision (the refusing one, else the one with the fewest units left); undefined when no rule applied. */
  decision?: Decision
  /**
   * Set when a rule counts only some responses or requests in progress
   * (`count`): call it with the response's status once it is sent (499 for a
   * client that left first), and the units that do not stay counted are given back.
   */
  settle?: (status: number) => void
  /**
   * Set with `settle` when a concurrency rule (`count: 'in-flight'`) counts the
   * request: it is in progress until the handler has ended its response, even
   * when its client leaves first.
   */
  inProgressUntilEnded?: boolean
}

/**
 * Where a request's decision is kept: a symbol-keyed property of the request
 * object itself. (A WeakMap doubled the pipeline's cost on node and Fastify
 * requests: an ephemeron per request for the garbage collector to trace.)
 */
const DECISION = Symbol('sluice.decision')

/**
 * Express requests keep theirs aside: Express 5 sets each request's prototype
 * to its app's (setPrototypeOf), after which adding a property to the request
 * costs about 2 µs. Express gives each response `locals`, a null-prototype
 * object (a hash table for V8, where adding a key moves no shape), reachable
 * from the request as `req.res.locals`: the decision goes there. A WeakMap,
 * where a request has no such object, costs an ephemeron per request for the
 * garbage collector (0.5 µs and more through Express's dispatch).
 */
const decisionsAside = new WeakMap<object, Decision>()

type WithLocals = { res?: { locals?: { [DECISION]?: Decision } } }

/**
 * The decision the rate limiter made for a request that reached the handler
 * (express-rate-limit's `req.rateLimit`): its `remaining`, `resetAfterMs`,
 * `policy` and per-policy entries, e.g. to show a quota in the response body.
 * Pass the request the handler got (node / Express `req`, Fastify `request`,
 * fetch `Request`); undefined when no rule applied to it.
 */
export function rateLimitOf(request: object): Decision | undefined {
  return (request as { [DECISION]?: Decision })[DECISION] ?? (request as WithLocals).res?.locals?.[DECISION] ?? decisionsAside.get(request)
}

/** Adapters: keeps an outcome's decision for rateLimitOf(request); `aside` for requests that are costly to add a property to (Express). */
export function recordDecision(request: object, outcome: HttpOutcome, aside = false): void {
  if (outcome.decision === undefined) return
  if (!aside) {
    (request as { [DECISION]?: Decision })[DECISION] = outcome.decision
    return
  }
  const locals = (request as WithLocals).res?.locals
  if (typeof locals === 'object' && locals !== null) locals[DECISION] = outcome.decision
  else decisionsAside.set(request, outcome.decision)
}

interface CompiledRule {
  name: string
  matches: (request: HttpRequest) => boolean
  /** The limiter for this request (one per tier). */
  limiter: (request: HttpRequest) => Limiter | Promise<Limiter>
  key: KeyResolver
  cost: (request: HttpRequest) => number
  /** For a cost read from the request: the 413 of a cost this limiter can never admit, else undefined. */
  beyondReach: ((limiter: Limiter, cost: number) => HttpOutcome | undefined) | undefined
  shadow: boolean
  maxWaitMs: number
  count: Count
}

const QUOTA_EXCEEDED = 'https://iana.org/assignments/http-problem-types#quota-exceeded'

const OPTIONS = new Set(['rules', 'skip', 'caseSensitive', 'allow', 'deny', 'key', 'clientIp', 'emptyKey', 'headers', 'shadow', 'store', 'prefix', 'clock', 'onDecision', 'onLimited', 'limitedResponse', 'onWarning',
  'storeTimeoutMs', 'onStoreFailure', 'expectedInstances', 'circuit', 'blockCache', 'observer'])
/** Distinct unknown tier names reported per pipeline, a bound on what a client-written tier can make it log. */
const MAX_UNKNOWN_TIERS = 10
/** Distinct policy sets a rule's policies function may give before the least recently given are made again when next given. */
const MAX_GIVEN_POLICY_SETS = 10_000
/** Policy names kept to tell rules' policies apart; past this, names a policies function gives are not checked against other rules'. */
const MAX_POLICY_NAMES = 100_000
const RULE_OPTIONS = new Set(['name', 'match', 'policies', 'tiers', 'key', 'cost', 'shadow', 'action', 'maxWaitMs', 'count'])
const MATCH_FIELDS = ['path', 'method', 'host', 'exclude']
/** Where the options of other things, given to the middleware or to a rule, go. */
const NOT_RATE_LIMIT_OPTIONS = elsewhere(
  [POLICY_FIELD_NAMES, "a policy's field: rules: [{ policies: { algorithm, limit, windowMs } }]"],
  [MATCH_FIELDS, 'a rule matches requests: rules: [{ match: { path, method }, policies }]'],
  [['tiers', 'cost', 'action', 'maxWaitMs', 'count'], 'a rule option: rules: [{ policies, cost, action, maxWaitMs }]'],
  [['trustProxy', 'ipv6Prefix'], 'a clientIp option: clientIp: { trustProxy, ipv6Prefix }'],
  [['maxKeys'], 'a MemoryStore option: store: new MemoryStore({ maxKeys })'],
  // express-rate-limit's and @fastify/rate-limit's names for what sluice has.
  [['standardHeaders', 'legacyHeaders', 'enableDraftSpec', 'addHeaders', 'addHeadersOnExceeding'], "the fields sent are the headers option: headers: { standard: 'draft-7', legacy: true }"],
  [['keyGenerator', 'identifier'], 'the key is a function of the request: key: (request) => string, or clientIpKey(), apiKey(), jwtClaim()'],
  [['message', 'statusCode', 'handler', 'errorResponseBuilder'], 'the refusal is limitedResponse: (event) => ({ status, body, contentType })'],
  [['skipSuccessfulRequests', 'skipFailedRequests', 'requestWasSuccessful'], "which responses count is a rule's count: rules: [{ policies, count: 'failed' }]"],
  [['allowList'], 'allow: (request) => boolean'],
  [['skipOnError', 'passOnStoreError'], "what a failed store does is onStoreFailure: 'open', 'closed' or 'fallback'"],
  [['requestPropertyName'], 'the decision is read with rateLimitOf(request)'],
)
const NOT_RULE_OPTIONS = elsewhere(
  [POLICY_FIELD_NAMES.filter((field) => !RULE_OPTIONS.has(field)), "a policy's field: policies: { algorithm, limit, windowMs }"],
  [MATCH_FIELDS, 'a match option: match: { path, method, host, exclude }'],
)
const TIERS_OPTIONS = new Set(['of', 'policies', 'default'])

/**
 * For options written as express-rate-limit's (`windowMs`, `limit` or `max`)
 * or @fastify/rate-limit's (`max`, `timeWindow`): the rule that says the same
 * (both count in fixed windows).
 */
function peerOptionsHint(given: Record<string, unknown>): string | undefined {
  const fastify = 'timeWindow' in given
  if (!fastify && !('windowMs' in given) && !('max' in given) && !('limit' in given)) return undefined
  const number = (value: unknown): string | undefined => (typeof value === 'number' && Number.isFinite(value) ? String(value) : undefined)
  const limit = number(given.limit) ?? number(given.max) ?? '100'
  const windowMs = number(given.windowMs) ?? number(given.timeWindow) ?? '60_000'
  return `${fastify ? "@fastify/rate-limit's" : "express-rate-limit's"} options: here a limit is a rule, as in rules: [{ policies: { algorithm: 'fixed-window', limit: ${limit}, windowMs: ${windowMs} } }]`
}

/** For a key given as the name of one (`'ip'`, as the gateway's YAML writes it): the resolver that makes it. */
function keyHint(key: unknown): string | undefined {
  if (typeof key !== 'string') return undefined
  const kind = key.toLowerCase().replace(/[^a-z]/g, '')
  const resolver = kind === 'ip' || kind === 'clientip' ? 'clientIpKey()'
    : kind === 'apikey' ? "apiKey('x-api-key')"
      : kind === 'jwt' || kind === 'user' ? "jwtClaim({ secret, algorithms: ['HS256'], claim: 'sub' })"
        : undefined
  return resolver === undefined ? 'a fixed text would put every request under one key: (request) => string' : `the ${key} key is made by a resolver: key: ${resolver}`
}

/** Compiles the options once (bad ones throw here, at start-up) and returns the per-request pipeline. */
export function createRateLimitHandler(options: RateLimitOptions): (request: HttpRequest) => Promise<HttpOutcome> {
  const pipeline = createRateLimitPipeline(options)
  return async function rateLimit(request) {
    return pipeline(request)
  }
}

/** What the gateway adds to the options, beyond the middleware's. */
export interface PipelineExtras {
  /** The header style for this request (the gateway's per-route `headers`), checked by the caller; default `options.headers`. */
  headersFor?: (request: HttpRequest) => HeaderOptions | undefined
  /** Where failing store calls are reported (the gateway's log and /status); default: a warning through onWarning. */
  storeFailures?: StoreCallFailures
  /**
   * The positions in `options.rules`, ascending, of the rules that may match this request (the
   * gateway's: those of every route and of the request's own); the rest are not tried. Default:
   * those its path and host can reach (see candidatesFor).
   */
  rulesFor?: (request: HttpRequest) => readonly number[]
  /**
   * The local store `onStoreFailure: 'fallback'` counts in while the store is
   * out (the gateway's, kept across reloads: a reload during an outage would
   * otherwise give every client a fresh local share). Default: a new one.
   */
  fallbackStore?: MemoryStore
}

/** The pipeline as adapters run it: see createRateLimitPipeline. */
export type RateLimitPipeline = (request: HttpRequest) => HttpOutcome | Promise<HttpOutcome>

/**
 * The pipeline as adapters run it: the outcome itself when every step could
 * answer at once (the in-process store and synchronous callbacks), else a
 * promise of it. A callback that throws synchronously throws here.
 */
export function createRateLimitPipeline(options: RateLimitOptions, extras: PipelineExtras = {}): RateLimitPipeline {
  return runToEnd(buildPipeline(options, extras))
}

/**
 * createRateLimitPipeline for thousands of rules (a gateway's reload): the
 * event loop is let go between slices of rules, so that the requests a running
 * pipeline serves meanwhile are not held while the new one is built.
 */
export function createRateLimitPipelineInSlices(options: RateLimitOptions, extras: PipelineExtras = {}): Promise<RateLimitPipeline> {
  return runInSlices(buildPipeline(options, extras))
}

/** Checks the options and compiles the rules, pausing (`yield`) after each slice of them. */
function* buildPipeline(options: RateLimitOptions, extras: PipelineExtras): Generator<void, RateLimitPipeline, void> {
  if (typeof options !== 'object' || options === null || !Array.isArray(options.rules) || options.rules.length === 0) {
    // The likely slips: `policies` at the top, as the Limiter takes them; the factory itself
    // handed to the framework (`app.use(rateLimit)`), which then calls it with a request.
    const given = typeof options === 'object' && options !== null ? options as object : {}
    const hint = 'policies' in given && !('rules' in given) ? 'policies go in a rule: rules: [{ policies }]'
      : 'socket' in given && 'rawHeaders' in given ? 'this is a request: call the factory with the options, as in app.use(rateLimit({ rules }))'
        : peerOptionsHint(given as Record<string, unknown>)
    const oneRule = typeof options?.rules === 'object' && options.rules !== null && !Array.isArray(options.rules) ? 'a list, even of one rule: rules: [{ ... }]' : undefined
    throw new ArgumentError('rules', options?.rules, 'must be a non-empty array of rules', oneRule ?? hint)
  }
  rejectUnknown('a rate-limit option', options, OPTIONS, NOT_RATE_LIMIT_OPTIONS)
  const warn = warningSink(options)
  const warned = new Set<string>()
  /** `about`: what is warned of once, where the message itself varies (a count in it). */
  const warnOnce = (message: string, about = message) => {
    if (warned.has(about)) return
    warned.add(about)
    warn(message)
  }
  // A hook that throws or rejects must not fail the request it observes: the error is reported, the request goes on.
  const hooks = {
    onDecision: options.onDecision === undefined ? undefined : observing(options.onDecision, (how, error) => warn(`onDecision ${how}, and the request went on: ${messageOf(error)}`)),
    onLimited: options.onLimited === undefined ? undefined : observing(options.onLimited, (how, error) => warn(`onLimited ${how}, and the request went on: ${messageOf(error)}`)),
  }
  const notify = (hook: 'onDecision' | 'onLimited', event: DecisionEvent) => hooks[hook]?.(event)
  const resolveIp = clientIpResolver(options.clientIp)
  const trustsEveryone = everyAddressWarning(options.clientIp?.trustProxy, 'sluice: clientIp.trustProxy')
  if (trustsEveryone !== undefined) warn(trustsEveryone)
  const ipKey: KeyResolver = (request) => {
    const { key, ignoredForwarding } = resolveIp(request.remoteAddress, request.header)
    if (ignoredForwarding) {
      warnOnce('sluice: requests carry X-Forwarded-For / Forwarded but no trusted proxy is configured; they are ignored and the socket address is the key. Set clientIp.trustProxy if a proxy is in front of this server.')
    }
    if (request.remoteAddress === undefined) {
      // Every such request shares one key: one client could spend everybody's quota.
      warnOnce("sluice: a request came without a client address, so it shares the 'anonymous' key with every other such request. With sluice/fetch, pass the runtime's client address: withRateLimit's third argument, or check(request, address).")
    }
    return key
  }
  const defaultKey = options.key ?? ipKey
  if (options.caseSensitive !== undefined && typeof options.caseSensitive !== 'boolean') {
    throw new ArgumentError('caseSensitive', options.caseSensitive, 'must be a boolean')
  }
  const caseSensitive = options.caseSensitive ?? true
  // Path patterns, once: they decide skipping per request and, at start-up, which rules can never match.
  const skipPatterns = typeof options.skip === 'function' ? [] : options.skip ?? []
  const skippedPath = compilePaths(skipPatterns, 'skip', caseSensitive)
  // A path is skipped only when every server would read it as a skipped one (see pathReadings).
  const notSkippedPath = (path: string): boolean => !skippedPath(path)
  const skipped = typeof options.skip === 'function' ? decidedAtOnce(options.skip, 'skip') : (request: HttpRequest) => !anyReading(request, notSkippedPath)
  for (const hook of ['allow', 'deny', 'onDecision', 'onLimited', 'limitedResponse', 'onWarning', 'key'] as const) {
    if (options[hook] !== undefined && typeof options[hook] !== 'function') throw new ArgumentError(hook, options[hook], 'must be a function', hook === 'key' ? keyHint(options.key) : undefined)
  }
  checkBoolean('shadow', options.shadow)
  const emptyKey = options.emptyKey ?? 'anonymous'
  checkChoice('emptyKey', emptyKey, ['anonymous', 'forbid'])
  const clock = options.clock ?? Date.now
  // Durations (how long a request held its units) must not jump with the wall clock.
  const elapsedClock = options.clock ?? monotonicClock
  const headerOptions = options.headers ?? {}
  checkHeaderOptions(headerOptions)
  const statePrefix = httpStatePrefix(checkPrefix(options.prefix ?? 'sluice', MAX_PREFIX_LENGTH - ':http'.length))
  // One store for every limiter here, the default one too: rules that share a key are decided by a
  // limiter over all their policies, which must see the state each rule's own limiter wrote.
  const store = options.store ?? new MemoryStore()
  // And one fallback, for the same reason, where a remote store is out.
  const fallbackStore = extras.fallbackStore ?? new MemoryStore({ maxKeys: FALLBACK_KEYS })
  // An in-process store decides at once: no promise to await per request.
  const synchronous = isSyncStore(store)
  // A store that fails says why, once per failure while it lasts: the decisions only say 'store-error'.
  const storeFailures = extras.storeFailures ?? new StoreCallFailures((failure) => {
    const more = failure.failedSinceLastLog === undefined ? '' : ` (${failure.failedSinceLastLog} more calls failed since the last such warning)`
    warn(`sluice: a store call failed (${failure.reason}): ${failure.error}; the failure policy (onStoreFailure) decides${more}`)
  })
  const userObserver = checkObserver(options.observer, warn)
  const observer: LimiterObserver = {
    ...userObserver,
    storeCall: (durationMs, outcome, error) => {
      storeFailures.observe(outcome, error)
      userObserver?.storeCall?.(durationMs, outcome, error)
    },
  }
  /**
   * Limiters of rules that count only some requests. Their units come back when responses end, in
   * any instance, which a refusal remembered here (the block cache) would not see: the key would stay
   * refused until the retry time, an hour for a concurrency limit's log, however many came back.
   */
  const refunded = new WeakSet<Limiter>()
  const makeLimiter = (policies: Policy | Policy[], prefix: string, refundable: boolean) => {
    const limiter = new Limiter({
      policies,
      prefix,
      observer,
      store,
      fallbackStore,
      ...(options.clock !== undefined ? { clock: options.clock } : {}),
      ...pick(options, ['storeTimeoutMs', 'onStoreFailure', 'expectedInstances', 'circuit', 'blockCache']),
      ...(refundable && { blockCache: false }),
    })
    if (refundable) refunded.add(limiter)
    return limiter
  }

  const compiler = new RuleCompiler({ statePrefix, caseSensitive, skipPatterns, defaultKey, shadow: options.shadow, makeLimiter, warn })
  const { inFlightPolicies } = compiler
  const rules: CompiledRule[] = []
  for (const [index, rule] of options.rules.entries()) {
    rules.push(compiler.compile(rule, index))
    if ((index + 1) % ITEMS_PER_SLICE === 0) yield
  }

  // A request is tried on the rules its path and host can reach (see candidatesFor), not on each in turn.
  const rulesFor = extras.rulesFor ?? (rules.length < 2 ? undefined : yield* buildCandidates(rules.map((_, index) => index), (index) => {
    const match = options.rules[index]?.match
    return typeof match === 'function' ? undefined : match
  }, caseSensitive))

  // Whether any rule counts only some responses: only then can an allowed request need a refund later.
  const counting = rules.some((rule) => rule.count !== 'all')
  // Which keys one store call can span: any, those of one span (a Redis Cluster: one hash tag), or only one.
  // Rules whose keys one call can span are decided together, all-or-nothing.
  const spansKeys = store.spansKeys === true
  const spanOf: (key: string) => string = spansKeys ? () => '' : store.spanOf?.bind(store) ?? ((key) => key)

  // Limiters over the union of several rules' policies, one per combination that occurs.
  // Bounded, and weakly held: rules whose policies function gives new ones make new limiters, and combinations of them.
  const combinations = new GenerationalMap<Limiter>(MAX_GIVEN_POLICY_SETS)
  const ids = new WeakMap<Limiter, number>()
  let nextId = 0
  const idOf = (limiter: Limiter): number => {
    let id = ids.get(limiter)
    if (id === undefined) ids.set(limiter, id = nextId++)
    return id
  }
  const combined = (limiters: Limiter[]): Limiter => {
    const id = limiters.map(idOf).join(',')
    let limiter = combinations.get(id)
    if (limiter === undefined) {
      limiter = makeLimiter(limiters.flatMap((l) => [...l.policies]), statePrefix, limiters.some((l) => refunded.has(l)))
      combinations.set(id, limiter)
    }
    return limiter
  }

  const settler = (entries: Array<{ count: Count; limiter: Limiter; key: string; cost: number; rules: string; decision: Decision }>) => {
    let settled = false
    // A sliding log lets a unit go after its window: a request held longer gives back none (another's would go).
    const chargedAt = elapsedClock()
    return (status: number) => {
      if (settled) return
      settled = true
      const failed = status >= 400
      const heldMs = Math.max(0, elapsedClock() - chargedAt)
      for (const { count, limiter, key, cost, rules, decision } of entries) {
        // A response that counts keeps its units; in-flight ones all come back, the request being over.
        const counts = count === 'failed' ? failed : count === 'succeeded' && !failed
        if (counts) continue
        const unrefunded = (error: unknown) => warn(`rule "${rules}": a response that does not count (${status}) could not be refunded: ${messageOf(error)}`)
        try {
          if (synchronous) limiter.refundSync(key, cost, decision, heldMs)
          else limiter.refund(key, cost, decision, heldMs).catch(unrefunded)
        } catch (error) {
          unrefunded(error)
        }
      }
    }
  }

  // Failing open, a decision the store could not make carries a fresh key's numbers: they describe nothing, so no fields.
  const fieldsOf = ({ limiter, decision, key, cost }: { limiter: Limiter; decision: Decision; key: string; cost: number }, style: HeaderOptions, now: number): HeaderList =>
    failedAs(limiter, decision) === 'open' ? [] : rateLimitHeaders(decision, limiter.policies, style, key, now, cost, inFlightPolicies)

  // The pipeline runs synchronously as long as every step answers at once (in-process store,
  // synchronous resolvers): no promise, no microtask per request. A step that returns a
  // promise continues the rest of the pipeline from there, once it settles.
  type Matched = { rule: CompiledRule; limiter: Limiter; key: string; cost: number }
  /**
   * A rule's (or same-key rules') part in a request's decision. `charged`: whether its units were taken, which is
   * whether the whole store call allowed: of a refused call spanning keys, a part that would have allowed took none.
   */
  type Applied = { rules: string; shadow: boolean; count: Count; limiter: Limiter; decision: Decision; charged: boolean; key: string; cost: number }
  /**
   * Rules charged for a request whose response decides whether they keep the units (`count` other than all).
   * A fallback's decision charged the local fallback store, and is refunded there; one failing open charged nothing.
   */
  const provisional = (applied: Applied[]) => applied.filter((entry) => entry.count !== 'all' && entry.charged && failedAs(entry.limiter, entry.decision) !== 'open')

  const resolveRule = (request: HttpRequest, rule: CompiledRule): Matched | HttpOutcome | undefined | Promise<Matched | HttpOutcome | undefined> => {
    const resolved = rule.key(request)
    return isPromise(resolved) ? resolved.then((key) => withKey(request, rule, key)) : withKey(request, rule, resolved)
  }
  const withKey = (request: HttpRequest, rule: CompiledRule, resolvedKey: string | null | undefined): Matched | HttpOutcome | undefined | Promise<Matched | HttpOutcome | undefined> => {
    let key = resolvedKey
    if (key !== undefined && key !== null && typeof key !== 'string') throw new ArgumentError(`rule "${rule.name}" key()`, key, 'must return a string, or undefined (or null) for a request with no identity')
    if (key === undefined || key === null || key === '') {
      if (emptyKey === 'forbid') return problem(403, 'Forbidden', 'The request carries no identity this API accepts.', [])
      key = 'anonymous'
    }
    const chosen = rule.limiter(request)
    return isPromise(chosen) ? chosen.then((limiter) => costed(request, rule, limiter, key)) : costed(request, rule, chosen, key)
  }
  /** The rule's entry with its cost; undefined for a shadow rule's cost it could never admit (it would answer 413, and never enforces). */
  const costed = (request: HttpRequest, rule: CompiledRule, limiter: Limiter, key: string): Matched | HttpOutcome | undefined => {
    const cost = rule.cost(request)
    const refusal = rule.beyondReach?.(limiter, cost)
    if (refusal === undefined) return { rule, limiter, key, cost }
    if (!rule.shadow) return refusal
    warnOnce(`sluice: shadow rule "${rule.name}" met a request costing ${cost} units, more than one of its policies admits at once; enforcing, it would answer 413. It is left out of such requests' decisions`, `beyond reach\u0000${rule.name}`)
    return undefined
  }
  /**
   * Every matching rule from `from` on, with its key, limiter (tier) and cost; or the 403 of a request with no identity.
   * The list is made by the first match, one entry long (an empty array's first push reserves room for 16, per request).
   */
  const matchRules = (request: HttpRequest, from: number, matched: Matched[] | undefined, only: readonly number[] | undefined): Matched[] | HttpOutcome | Promise<Matched[] | HttpOutcome> => {
    for (let i = from; i < (only ?? rules).length; i++) {
      const rule = rules[only === undefined ? i : only[i] as number] as CompiledRule
      if (!rule.matches(request)) continue
      const entry = resolveRule(request, rule)
      if (isPromise(entry)) {
        return entry.then((settled) => {
          if (settled === undefined) return matchRules(request, i + 1, matched, only)
          if (!('rule' in settled)) return settled
          return matchRules(request, i + 1, appended(matched, settled), only)
        })
      }
      if (entry === undefined) continue
      if (!('rule' in entry)) return entry
      matched = appended(matched, entry)
    }
    return matched ?? NO_MATCH
  }
  const limitMatched = (request: HttpRequest, matched: Matched[] | HttpOutcome): HttpOutcome | Promise<HttpOutcome> => {
    if (!Array.isArray(matched)) return matched
    if (matched.length === 0) return unlimited()
    if (matched.length === 1 && synchronous) {
      // The common case, without the grouping below.
      const { limiter, key, cost, rule } = matched[0] as Matched
      return respond(request, [record(request, matched, limiter, limiter.limitSync(key, limitOptions(cost, rule)))])
    }
    // Enforcing rules that share cost, wait and what they count are one all-or-nothing store call, whatever their
    // keys where the store spans keys, else those whose keys it can span (on a Redis Cluster, keys with one hash
    // tag); the rest go one by one, in order. Each key's
    // part of a call is refunded on its own (see settler), and only if the call charged it.
    let groups: Iterable<Matched[]>
    if (matched.length === 1 || oneCall(matched)) {
      groups = [matched]
    } else {
      const byId = new Map<string, Matched[]>()
      for (const entry of matched) {
        const { rule } = entry
        const id = rule.shadow ? `shadow:${byId.size}` : `${entry.cost}\u0000${rule.maxWaitMs}\u0000${rule.count}\u0000${spanOf(entry.key)}`
        byId.set(id, [...(byId.get(id) ?? []), entry])
      }
      groups = byId.values()
    }
    if (!synchronous) return limitGroups(request, groups)
    let applied: Applied[] | undefined
    for (const group of groups) {
      const limiter = groupLimiter(group)
      const { key, cost, rule } = group[0] as Matched
      const keys = keysOf(group)
      const decision = limiter.limitSync(key, limitOptions(cost, rule, keys))
      applied = recordGroup(request, group, limiter, decision, keys !== undefined, applied)
      if (!decision.allowed && !rule.shadow) break
    }
    return respond(request, applied ?? [])
  }
  const limitGroups = async (request: HttpRequest, groups: Iterable<Matched[]>): Promise<HttpOutcome> => {
    let applied: Applied[] | undefined
    for (const group of groups) {
      const limiter = groupLimiter(group)
      const { key, cost, rule } = group[0] as Matched
      const keys = keysOf(group)
      const decision = await limiter.limit(key, limitOptions(cost, rule, keys))
      applied = recordGroup(request, group, limiter, decision, keys !== undefined, applied)
      if (!decision.allowed && !rule.shadow) break
    }
    return respond(request, applied ?? [])
  }
  /** Whether every matched rule goes in one store call (what the grouping below would find, without building it). */
  const oneCall = (matched: Matched[]): boolean => {
    const { cost, rule, key } = matched[0] as Matched
    return matched.every((entry) => !entry.rule.shadow && entry.cost === cost && entry.rule.maxWaitMs === rule.maxWaitMs && entry.rule.count === rule.count && (spansKeys || entry.key === key || spanOf(entry.key) === spanOf(key)))
  }
  const groupLimiter = (group: Matched[]): Limiter => (group.length === 1 ? (group[0] as Matched).limiter : combined(group.map((entry) => entry.limiter)))
  const limitOptions = (cost: number, rule: CompiledRule, keys?: Record<string, string>) =>
    (cost === 1 && rule.maxWaitMs === 0 && keys === undefined ? undefined : { cost, maxWaitMs: rule.maxWaitMs, ...(keys !== undefined && { keys }) })
  /** The keys of a group's policies that are not its first rule's key, by policy name; undefined when all share it. */
  const keysOf = (group: Matched[]): Record<string, string> | undefined => {
    const { key } = group[0] as Matched
    let keys: Record<string, string> | undefined
    for (const entry of group) {
      if (entry.key === key) continue
      keys ??= {}
      for (const policy of entry.limiter.policies) keys[policy.name] = entry.key
    }
    return keys
  }
  /** Notes a group's decision: whole, or per key where its call spanned keys. */
  const recordGroup = (request: HttpRequest, group: Matched[], limiter: Limiter, decision: Decision, spanned: boolean, applied: Applied[] | undefined): Applied[] =>
    (spanned ? recordByKey(request, group, decision, applied) : appended(applied, record(request, group, limiter, decision)))
  /**
   * Notes the decision of a group spanning keys as the rules of each key would have had it: per key, its
   * policies' part of the decision (events, header items, refusals name the rules and key they are about).
   * The group's limiter holds its rules' policies in order, so each rule's part is a slice of the decision.
   */
  const recordByKey = (request: HttpRequest, group: Matched[], decision: Decision, applied: Applied[] | undefined): Applied[] => {
    const parts: Array<{ entries: Matched[]; decisions: PolicyDecision[] }> = []
    let at = 0
    for (const entry of group) {
      const slice = decision.policies.slice(at, (at += entry.limiter.policies.length))
      const part = parts.find((candidate) => (candidate.entries[0] as Matched).key === entry.key)
      if (part === undefined) {
        parts.push({ entries: [entry], decisions: slice })
      } else {
        part.entries.push(entry)
        part.decisions.push(...slice)
      }
    }
    for (const { entries, decisions } of parts) {
      const own = combine(decisions)
      const degraded = decision.degraded ? { ...own, degraded: true, ...(decision.reason !== undefined && { reason: decision.reason }) } : own
      applied = appended(applied, record(request, entries, groupLimiter(entries), degraded, decision.allowed))
    }
    return applied as Applied[]
  }
  /** Notes a group's decision. One that refuses (and is not shadow) ends the request: later groups are not charged. */
  const record = (request: HttpRequest, group: Matched[], limiter: Limiter, decision: Decision, charged = decision.allowed): Applied => {
    const { key, cost, rule } = group[0] as Matched
    const names = group.length === 1 ? rule.name : group.map((entry) => entry.rule.name).join('+')
    if (options.onDecision !== undefined) notify('onDecision', { rule: names, key, decision, shadow: rule.shadow, request })
    return { rules: names, shadow: rule.shadow, count: rule.count, limiter, decision, charged, key, cost }
  }
  const retryMsOf = (decision: Decision): number => (decision.degraded ? decision.retryAfterMs : refusalRetryMs(decision, inFlightPolicies))
  const respond = (request: HttpRequest, applied: Applied[]): HttpOutcome => {
    if (applied.length === 0) return unlimited()
    // The rule whose numbers single-valued fields carry: the refusing one (of several, from one call spanning keys,
    // the one that frees up last: the request passes no sooner), else the one with the fewest units left.
    let refused: Applied | undefined
    let refusals = 0
    let binding = applied[0] as Applied
    let waitMs = 0
    for (const entry of applied) {
      if (!entry.decision.allowed && !entry.shadow) {
        refusals++
        if (refused === undefined || retryMsOf(entry.decision) > retryMsOf(refused.decision)) refused = entry
      }
      if (entry.decision.remaining < binding.decision.remaining) binding = entry
      // A shadow rule reports the wait it would impose; only enforcing rules delay the request.
      if (!entry.shadow && entry.decision.waitMs > waitMs) waitMs = entry.decision.waitMs
    }
    if (refused !== undefined) binding = refused
    // Only the legacy Reset field is a timestamp.
    const style = extras.headersFor?.(request) ?? headerOptions
    const now = style.legacy === true ? clock() : 0
    let headers: HeaderList
    if (applied.length === 1) {
      headers = fieldsOf(binding, style, now)
    } else {
      const perRule = applied.map((entry) => fieldsOf(entry, style, now))
      headers = mergeHeaders(perRule, applied.indexOf(binding), style.standard ?? 'draft-10')
    }
    if (refused === undefined) {
      const outcome: HttpOutcome = { proceed: true, status: 200, headers, body: undefined, waitMs, decision: binding.decision }
      // Charged at once (a burst meets the limit exactly); given back once the response shows it does not count.
      if (counting) {
        const charged = provisional(applied)
        if (charged.length > 0) {
          outcome.settle = settler(charged)
          if (charged.some((entry) => entry.count === 'in-flight')) outcome.inProgressUntilEnded = true
        }
      }
      return outcome
    }
    // Rules that charged this request before another refused it: its 429 is its response (it fails, and is not in progress).
    if (counting) {
      const charged = provisional(applied)
      if (charged.length > 0) settler(charged)(429)
    }
    const { decision } = refused
    if (options.onLimited !== undefined) notify('onLimited', { rule: refused.rules, key: refused.key, decision, shadow: false, request })
    const refusing = refusals === 1 ? [refused] : applied.filter((entry) => !entry.decision.allowed && !entry.shadow)
    const violated = refusing.flatMap((entry) => entry.decision.policies.filter((p) => !p.allowed).map((p) => p.policy))
    const retryAfterMs = retryMsOf(decision)
    const retryAfterSeconds = Math.max(1, Math.ceil(retryAfterMs / 1000))
    if (failedAs(refused.limiter, decision) === 'closed') {
      // Not over a limit: the limit could not be checked. A 429 would tell the client it sent too much,
      // and hide the outage from whoever watches error rates; its RateLimit numbers would be made up.
      return problem(503, 'Service Unavailable', `The rate limit could not be checked (store ${decision.reason ?? 'unavailable'}) and fails closed. Retry after ${retryAfterSeconds} s.`, [['Retry-After', String(retryAfterSeconds)]], {
        'retry-after': retryAfterSeconds,
      })
    }
    const title = 'Too Many Requests'
    const detail = `Rate limit exceeded for policy "${decision.policy}". Retry after ${retryAfterSeconds} s.`
    const extra = { 'violated-policies': violated, limit: decision.limit, remaining: decision.remaining, 'retry-after': retryAfterSeconds }
    const refusalHeaders: HeaderList = [...headers, ['Retry-After', String(retryAfterSeconds)]]
    const refusal = problem(429, title, detail, refusalHeaders, extra)
    if (options.limitedResponse === undefined) return refusal
    try {
      const event = { rule: refused.rules, key: refused.key, decision, shadow: false, request, retryAfterSeconds, problem: problemBody(429, title, detail, extra) }
      const custom: unknown = options.limitedResponse(event)
      if (isPromise(custom)) {
        // The refusal is sent now; what the promise comes to is only reported (a rejection left alone would end the process).
        Promise.resolve(custom).catch((error: unknown) => warn(`limitedResponse rejected: ${messageOf(error)}`))
        throw new ArgumentError('limitedResponse()', custom, 'must return its response at once, not a promise (an async function): the refusal is sent in the same turn')
      }
      return custom === undefined ? refusal : customRefusal(custom as LimitedResponse, refusalHeaders)
    } catch (error) {
      warn(`limitedResponse failed, and the default 429 was sent: ${messageOf(error)}`)
      return refusal
    }
  }
  const afterAllow = (request: HttpRequest): HttpOutcome | Promise<HttpOutcome> => {
    const matched = matchRules(request, 0, undefined, rulesFor?.(request))
    return isPromise(matched) ? matched.then((settled) => limitMatched(request, settled)) : limitMatched(request, matched)
  }
  const afterDeny = (request: HttpRequest): HttpOutcome | Promise<HttpOutcome> => {
    if (options.allow === undefined) return afterAllow(request)
    const allowed = options.allow(request)
    if (isPromise(allowed)) return allowed.then((yes) => (yes ? unlimited() : afterAllow(request)))
    return allowed ? unlimited() : afterAllow(request)
  }
  const forbidden = () => problem(403, 'Forbidden', 'This client is not allowed to use this API.', [])

  return function rateLimitPipeline(request: HttpRequest): HttpOutcome | Promise<HttpOutcome> {
    if (skipped(request)) return unlimited()
    if (options.deny === undefined) return afterDeny(request)
    const denied = options.deny(request)
    if (isPromise(denied)) return denied.then((yes) => (yes ? forbidden() : afterDeny(request)))
    return denied ? forbidden() : afterDeny(request)
  }
}

/** What compiling a rule takes from the pipeline it is for. */
interface RuleSetting {
  /** One prefix for every rule: rules that share a key are decided in one store call, which needs their state under one prefix; policy names keep it apart. */
  statePrefix: string
  caseSensitive: boolean
  /** The pipeline's `skip` paths: a rule whose every path they skip can never match. */
  skipPatterns: string | string[]
  defaultKey: KeyResolver
  /** The pipeline's `shadow`, for rules that do not say. */
  shadow: boolean | undefined
  makeLimiter: (policies: Policy | Policy[], prefix: string, refundable: boolean) => Limiter
  warn: (message: string) => void
}

/** Checks and compiles a pipeline's rules one by one, keeping their names, and their policies' names, unique across them. */
class RuleCompiler {
  /** Policies of concurrency (`in-flight`) rules: their header items and refusals say so. */
  readonly inFlightPolicies = new Set<string>()
  private readonly ruleNames = new Map<string, number>()
  /** Each policy's rule: a policy's name is its state key and its header item. */
  private readonly policyNames = new Map<string, string>()
  /** Tier names a rule has no policies for, reported (see unknownTier). */
  private readonly unknownTiers = new Set<string>()

  constructor(private readonly setting: RuleSetting) {}

  /** The rule checked (a mistake is an error naming it, at start-up) and made ready: its matcher, limiter per tier, key and cost. */
  compile(rule: RuleOptions, index: number): CompiledRule {
    const { statePrefix, caseSensitive, skipPatterns, defaultKey, makeLimiter, warn } = this.setting
    if (typeof rule !== 'object' || rule === null) throw new ArgumentError(`rules[${index}]`, rule, 'must be a rule object')
    rejectUnknown(`a rule option (rules[${index}])`, rule, RULE_OPTIONS, NOT_RULE_OPTIONS)
    if (rule.name !== undefined && (typeof rule.name !== 'string' || rule.name === '')) throw new ArgumentError(`rules[${index}].name`, rule.name, 'must be a non-empty string')
    const name = rule.name ?? `rule-${index}`
    // The name is how onDecision and onLimited tell rules apart.
    const sameName = this.ruleNames.get(name)
    if (sameName !== undefined) {
      throw rule.name === undefined
        ? new ArgumentError(`rules[${index}]`, name, `has no name, so it is called "${name}", as rules[${sameName}] is named; give each rule its own name (onDecision and onLimited report it)`)
        : new ArgumentError(`rules[${index}].name`, name, `is also the name of rules[${sameName}]; give each rule its own name (onDecision and onLimited report it)`)
    }
    this.ruleNames.set(name, index)
    const cost = rule.cost ?? 1
    if (typeof cost !== 'number' && typeof cost !== 'function') throw new ArgumentError(`rule "${name}" cost`, cost, 'must be a positive integer, or a function of the request returning one')
    if (typeof cost === 'number' && (!Number.isSafeInteger(cost) || cost < 1)) throw new ArgumentError(`rule "${name}" cost`, cost, 'must be a positive integer or a function')
    if (rule.key !== undefined && typeof rule.key !== 'function') throw new ArgumentError(`rule "${name}" key`, rule.key, 'must be a function of the request (e.g. apiKey(), jwtClaim(), clientIpKey(), or firstOf() of them)', keyHint(rule.key))
    checkBoolean(`rule "${name}" shadow`, rule.shadow)
    const action = rule.action ?? 'reject'
    checkChoice(`rule "${name}" action`, action, ['reject', 'queue'])
    if (action === 'reject' && rule.maxWaitMs !== undefined) {
      throw new ArgumentError(`rule "${name}" maxWaitMs`, rule.maxWaitMs, "applies to action 'queue' only: a refused request does not wait")
    }
    const maxWaitMs = action === 'queue' ? checkMaxWait(rule.maxWaitMs ?? 10_000, []) : 0
    const count = rule.count ?? 'all'
    checkChoice(`rule "${name}" count`, count, ['all', 'failed', 'succeeded', 'in-flight'])
    const refundable = count !== 'all'
    // Policies a function gives per request: checked as each new set comes, and their names may come again.
    const given = typeof rule.policies === 'function'
    /** A limiter of the rule's checked against what the rule asks of its policies (at start-up, or when a policies function first gives them). */
    const admit = (limiter: Limiter): Limiter => {
      const { policies } = limiter
      // A policy's name is its state key and its header item: unique across all rules and tiers.
      for (const policyName of policies.map((policy) => policy.name)) {
        const other = this.policyNames.get(policyName)
        if (other !== undefined && !(given && other === name)) {
          throw given
            ? new ArgumentError(`rule "${name}" policies()`, policyName, `gives a policy the name of one of rule "${other}"; give each policy its own name (it keys the state and the headers)`)
            : new ArgumentError('rules', name, `${other === name ? 'has two tiers with' : `and rule "${other}" both have`} a policy named "${policyName}"; give each policy its own name (it keys the state and the headers)`)
        }
        if (this.policyNames.size < MAX_POLICY_NAMES) this.policyNames.set(policyName, name)
      }
      // The Limiter checks costs per call; a constant one can be checked now, at start-up (a policies function's, per request: see beyondReach).
      if (typeof cost === 'number' && !given) checkStaticCost(cost, policies, name)
      // A policy that cannot reserve is named at start-up.
      if (action === 'queue') inContext(`rule "${name}"`, () => checkMaxWait(maxWaitMs, policies))
      if (count === 'in-flight') {
        // A bucket would refill while requests are in progress, and a window would let a new one start as it turns.
        const other = policies.find((policy) => policy.algorithm !== 'sliding-log')
        if (other !== undefined) {
          throw new ArgumentError(`rule "${name}" count`, count, `needs sliding-log policies (limit: requests in progress at once; windowMs: the longest one is counted, should its release be lost); "${other.name}" is ${other.algorithm}`)
        }
        for (const policy of policies) if (this.inFlightPolicies.size < MAX_POLICY_NAMES) this.inFlightPolicies.add(policy.name)
      }
      const unrefundable = count === 'all' ? undefined : policies.find((policy) => !REFUNDABLE(policy))
      if (unrefundable !== undefined) {
        throw new ArgumentError(`rule "${name}" count`, count, `needs token-bucket, police leaky-bucket or sliding-log policies, which give back the units of a response that does not count; "${unrefundable.name}" is ${unrefundable.algorithm}`)
      }
      return limiter
    }
    let limiterFor: CompiledRule['limiter']
    if ((rule.policies === undefined) === (rule.tiers === undefined)) {
      throw new ArgumentError(`rules[${index}]`, name, 'needs either policies or tiers')
    }
    if (rule.tiers !== undefined) {
      checkOptions(`rule "${name}" tiers`, `a tiers option (rule "${name}")`, rule.tiers, TIERS_OPTIONS)
      const { of, policies, default: fallback } = rule.tiers
      if (typeof of !== 'function') throw new ArgumentError(`rule "${name}" tiers.of`, of, 'must be a function of the request')
      if (typeof policies !== 'object' || policies === null || Array.isArray(policies) || Object.keys(policies).length === 0) {
        throw new ArgumentError(`rule "${name}" tiers.policies`, policies, 'must be an object of policies by tier name, as { free: {...}, pro: [...] }')
      }
      const byTier = new Map(Object.entries(policies).map(([tier, p]) => [tier, inContext(`rule "${name}" tier "${tier}"`, () => makeLimiter(p, statePrefix, refundable))]))
      const fallbackLimiter = byTier.get(fallback)
      if (fallbackLimiter === undefined) throw new ArgumentError(`rule "${name}" tiers.default`, fallback, `must name one of the tiers (${[...byTier.keys()].join(', ')})`)
      for (const limiter of byTier.values()) admit(limiter)
      limiterFor = async (request) => {
        const tier = await of(request)
        const limiter = tier === undefined || tier === null ? fallbackLimiter : byTier.get(tier)
        if (limiter !== undefined) return limiter
        this.unknownTier(name, tier, fallback, [...byTier.keys()])
        return fallbackLimiter
      }
    } else if (typeof rule.policies === 'function') {
      limiterFor = givenPolicies(rule.policies, name, (policies) => admit(inContext(`rule "${name}" policies()`, () => makeLimiter(policies, statePrefix, refundable))))
    } else {
      const limiter = admit(inContext(`rule "${name}"`, () => makeLimiter(rule.policies as Policy | Policy[], statePrefix, refundable)))
      limiterFor = () => limiter
    }
    const matches = typeof rule.match === 'function' ? decidedAtOnce(rule.match, `rule "${name}" match`) : compileMatch(rule.match ?? {}, `rule "${name}" match`, caseSensitive)
    for (const method of typeof rule.match === 'function' ? [] : unknownMethods(rule.match ?? {})) {
      warn(`sluice: rule "${name}" match.method ${JSON.stringify(method)} is not a method node's HTTP parser accepts (it answers 400 to all but ${[...NODE_METHODS].join(', ')}): on node:http, Express and Fastify the rule never applies for it. Only a fetch runtime outside node can receive it`)
    }
    if (typeof rule.match !== 'function' && excludesAll(rule.match ?? {}, skipPatterns, caseSensitive)) {
      throw new ArgumentError(`rule "${name}" match`, rule.match?.path ?? '/**', 'can never match: every path it names is excluded (by its exclude or by skip); narrow those, or remove the rule')
    }
    return {
      name,
      matches,
      limiter: limiterFor,
      key: rule.key ?? defaultKey,
      cost: typeof cost === 'function' ? checkedCost(cost, name) : () => cost,
      // A cost read from the request, or policies that are: a request may cost more than one of them ever admits.
      beyondReach: typeof cost === 'function' || given ? costBeyondReach() : undefined,
      shadow: rule.shadow ?? this.setting.shadow ?? false,
      maxWaitMs,
      count,
    }
  }

  /** A tier name the rule has no policies for (a claim's "Pro" for "pro") is decided as the default tier: said, for the first few names. */
  private unknownTier(rule: string, tier: unknown, fallback: string, known: string[]): void {
    const named = `${rule}\u0000${String(tier)}`
    if (this.unknownTiers.has(named) || this.unknownTiers.size > MAX_UNKNOWN_TIERS) return
    this.unknownTiers.add(named)
    this.setting.warn(this.unknownTiers.size > MAX_UNKNOWN_TIERS
      ? `sluice: rule "${rule}": more tier names no tier is named for; no more are reported`
      : `sluice: rule "${rule}": tiers.of gave ${JSON.stringify(tier)}, which names none of its tiers (${known.join(', ')}), so the default tier "${fallback}" decided; tier names are matched exactly`)
  }
}

/** A refusal in the application's own shape (limitedResponse), keeping the rate-limit fields. */
function customRefusal(custom: LimitedResponse, headers: HeaderList): HttpOutcome {
  if (typeof custom !== 'object' || custom === null) throw new ArgumentError('limitedResponse()', custom, 'must return { status?, body, contentType? } or undefined')
  const status = custom.status ?? 429
  if (!Number.isInteger(status) || status < 400 || status > 599) throw new ArgumentError('limitedResponse() status', status, 'must be an integer from 400 to 599')
  // Bytes would go out as their JSON ({"type":"Buffer",...}), which no page or client reads.
  if (ArrayBuffer.isView(custom.body) || custom.body instanceof ArrayBuffer) {
    throw new ArgumentError('limitedResponse() body', custom.body, 'must be a string or a JSON value, not bytes', 'give the text, as body: page.toString(\'utf8\')')
  }
  const text = typeof custom.body === 'string'
  const body = text ? custom.body as string : JSON.stringify(custom.body)
  if (body === undefined) throw new ArgumentError('limitedResponse() body', custom.body, 'must be a string or a JSON value')
  const contentType = custom.contentType ?? (text ? 'text/plain; charset=utf-8' : 'application/json')
  if (typeof contentType !== 'string' || !/^[\x20-\x7e]+$/.test(contentType)) throw new ArgumentError('limitedResponse() contentType', contentType, 'must be a printable ASCII media type')
  return { proceed: false, status, headers: [...headers, ['Content-Type', contentType]], body, waitMs: 0 }
}

/** The failure policy that made a decision the store could not make; undefined for one the store made. */
function failedAs(limiter: Limiter, decision: Decision): Limiter['onStoreFailure'] | undefined {
  return decision.degraded ? limiter.onStoreFailure : undefined
}

/** Where the HTTP layer's warnings go: `onWarning`, else a process warning (code SLUICE_HTTP). */
export function warningSink(options: Pick<RateLimitOptions, 'onWarning'>): (message: string) => void {
  return warningTo(options.onWarning, 'SLUICE_HTTP')
}

/** `list` with `item` at its end: a new list of one for none. */
function appended<T>(list: T[] | undefined, item: T): T[] {
  if (list === undefined) return [item]
  list.push(item)
  return list
}

const NO_MATCH = Object.freeze([]) as never[]

/** A request no rule limits: it proceeds with no headers. */
function unlimited(): HttpOutcome {
  return { proceed: true, status: 200, headers: [], body: undefined, waitMs: 0 }
}

/** Where the handler keeps its limiters' state: read it with a `Limiter` on this prefix (and the same store and policies). */
export function httpStatePrefix(prefix = 'sluice'): string {
  return `${prefix}:http`
}

/** An RFC 9457 problem response (also the gateway's own 400 / 404 / 502 / 504). */
export function problem(status: number, title: string, detail: string, headers: HeaderList, extra: Record<string, unknown> = {}): HttpOutcome {
  const body = JSON.stringify(problemBody(status, title, detail, extra))
  return { proceed: false, status, headers: [...headers, ['Content-Type', 'application/problem+json']], body, waitMs: 0 }
}

function problemBody(status: number, title: string, detail: string, extra: Record<string, unknown>): Record<string, unknown> {
  return { type: status === 429 ? QUOTA_EXCEEDED : 'about:blank', title, status, detail, ...extra }
}

/**
 * Several rules produce the same fields. List-valued ones (`RateLimit-Policy`,
 * and `RateLimit` in draft-10 / draft-8) carry every rule's members; the
 * single-valued ones carry the binding rule's numbers.
 */
function mergeHeaders(perRule: HeaderList[], binding: number, standard: string | false): HeaderList {
  const lists = standard === 'draft-10' || standard === 'draft-8' ? LIST_FIELDS : POLICY_LIST_FIELD
  const merged = new Map<string, string>()
  for (let i = 0; i < perRule.length; i++) {
    for (const [name, value] of perRule[i] as HeaderList) {
      if (lists.has(name)) {
        const before = merged.get(name)
        merged.set(name, before === undefined ? value : `${before}, ${value}`)
      } else if (i === binding) {
        merged.set(name, value)
      }
    }
  }
  return Array.from(merged)
}

/** The fields whose items every rule adds to (structured-field lists); the others come from the binding rule. */
const LIST_FIELDS: ReadonlySet<string> = new Set(['RateLimit-Policy', 'RateLimit'])
const POLICY_LIST_FIELD: ReadonlySet<string> = new Set(['RateLimit-Policy'])

/** A constant cost (a positive integer: see compile) that a policy can never admit refuses every request. */
function checkStaticCost(cost: number, policies: readonly ResolvedPolicy[], rule: string): void {
  for (const policy of policies) {
    const limit = limitOf(policy)
    if (cost > limit) throw new ArgumentError(`rule "${rule}" cost`, cost, `exceeds the limit ${limit} of policy "${policy.name}", so the rule would refuse every request`)
  }
}

/** A rule's cost function, its answer checked: a bug in it (NaN, 0, a fraction, a promise) fails the request with the rule's name. */
function checkedCost(cost: (request: HttpRequest) => number, rule: string): (request: HttpRequest) => number {
  return (request) => {
    const units: unknown = cost(request)
    if (typeof units === 'number' && Number.isSafeInteger(units) && units >= 1) return units
    if (isPromise(units)) Promise.resolve(units).catch(() => {}) // the request fails here; its rejection must not also crash the process
    throw new ArgumentError(`rule "${rule}" cost()`, units, 'must return a positive integer at once (not a promise)')
  }
}

/**
 * A cost read from the request can exceed what a policy ever admits at once
 * (a 5 MB upload against 1 MB a minute, an endpoint a tier cannot afford).
 * No wait would admit it: a 429 would send a retrying client round forever,
 * so it is a 413 that names the policy, and nothing is charged.
 */
function costBeyondReach(): (limiter: Limiter, cost: number) => HttpOutcome | undefined {
  const tightest = new WeakMap<Limiter, { name: string; limit: number }>()
  return (limiter, cost) => {
    let policy = tightest.get(limiter)
    if (policy === undefined) {
      const least = limiter.policies.reduce((least, p) => (limitOf(p) < limitOf(least) ? p : least))
      policy = { name: least.name, limit: limitOf(least) }
      tightest.set(limiter, policy)
    }
    if (cost <= policy.limit) return undefined
    const detail = `This request costs ${cost} units; policy "${policy.name}" admits at most ${policy.limit} at once, so no wait would admit it. Send a smaller request.`
    return problem(413, 'Content Too Large', detail, [], { 'violated-policies': [policy.name], limit: policy.limit, cost })
  }
}

/**
 * A rule's policies read from the request (a customer's contract, looked up):
 * a limiter per distinct answer, made when it is first given, and kept for
 * the requests that give it again. Names must be given, and stay the same
 * when the numbers change: the name keys the state, which carries over.
 */
function givenPolicies(policiesOf: (request: HttpRequest) => Policy | Policy[] | Promise<Policy | Policy[]>, rule: string, make: (policies: Policy | Policy[]) => Limiter): (request: HttpRequest) => Limiter | Promise<Limiter> {
  const limiters = new GenerationalMap<Limiter>(MAX_GIVEN_POLICY_SETS)
  const limiterOf = (given: unknown): Limiter => {
    let id: string | undefined
    try {
      id = JSON.stringify(given)
    } catch {
      // Not JSON (a cycle, a BigInt): the Limiter names what is wrong with it below.
    }
    const known = id === undefined ? undefined : limiters.get(id)
    if (known !== undefined) return known
    const unnamed = (Array.isArray(given) ? given : [given]).find((policy: unknown) => typeof policy === 'object' && policy !== null && (policy as Policy).name === undefined)
    if (unnamed !== undefined) {
      throw new ArgumentError(`rule "${rule}" policies()`, unnamed, 'must give each policy a name: the name keys its state, which should carry over when the numbers change')
    }
    const limiter = make(given as Policy | Policy[])
    if (id !== undefined) limiters.set(id, limiter)
    return limiter
  }
  return (request) => {
    const given: unknown = policiesOf(request)
    return isPromise(given) ? Promise.resolve(given).then(limiterOf) : limiterOf(given)
  }
}

/**
 * A predicate that must answer at once (`match`, `skip`): a promise would be
 * truthy, so an async one would match (or skip) every request. Such a call
 * fails the request, naming the option, instead.
 */
function decidedAtOnce(predicate: (request: HttpRequest) => boolean, name: string): (request: HttpRequest) => boolean {
  return (request) => {
    const answer: unknown = predicate(request)
    if (isPromise(answer)) {
      Promise.resolve(answer).catch(() => {}) // the request fails here; its rejection must not also crash the process
      throw new ArgumentError(name, answer, 'must return true or false at once, not a promise (use allow / deny for lookups that await)')
    }
    return answer as boolean
  }
}

function pick<T extends object, K extends keyof T>(object: T, keys: K[]): Partial<Pick<T, K>> {
  const picked: Partial<Pick<T, K>> = {}
  for (const key of keys) if (object[key] !== undefined) picked[key] = object[key]
  return picked
}
