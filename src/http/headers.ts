/**
 * Rate-limit response header fields, serialized as RFC 9651 structured fields.
 * Each policy's names and parameters go through the structured-headers
 * library once and are cached; per request only integers are added, whose
 * serialization is their digits (a property test holds the result equal to
 * the library's).
 *
 * - `draft-10`: the IETF httpapi fields, one named item per policy that applied:
 *   `RateLimit-Policy: "minute";q=100;w=60` and `RateLimit: "minute";r=42;t=18`.
 * - `draft-8`, `draft-7`, `draft-6`: the shapes express-rate-limit emits under
 *   those names, for users migrating from it.
 * - `legacy`: `X-RateLimit-Limit / -Remaining / -Reset` (Reset in epoch seconds).
 * - `springCloudGateway`: the fields of Spring Cloud Gateway's RequestRateLimiter.
 */
import { createHash } from 'node:crypto'
import { serializeByteSequence, serializeItem, serializeString } from 'structured-headers'
import { ArgumentError } from '../core/errors.ts'
import { checkBoolean, checkOptions } from '../core/options.ts'
import { choiceHint } from '../core/suggest.ts'
import type { Decision, PolicyDecision, ResolvedPolicy } from '../core/types.ts'

export type StandardHeaders = 'draft-10' | 'draft-8' | 'draft-7' | 'draft-6'

export interface HeaderOptions {
  /** The standard fields to send, or `false` for none. Default `'draft-10'`. */
  standard?: StandardHeaders | false | undefined
  /** Also send `X-RateLimit-Limit / -Remaining / -Reset`. Default false. */
  legacy?: boolean | undefined
  /**
   * draft-10 / draft-8: add `pk`, a partition key derived from the client's key:
   * the first 12 hex digits of its SHA-256, as a byte sequence (never the key
   * itself). Default false.
   */
  partitionKey?: boolean | undefined
  /**
   * Also send Spring Cloud Gateway's RequestRateLimiter fields, for clients
   * written against it: `X-RateLimit-Remaining`, `-Replenish-Rate` (units per
   * second), `-Burst-Capacity` and `-Requested-Tokens` (the call's cost), for
   * the binding policy. Default false.
   */
  springCloudGateway?: boolean | undefined
}

export type HeaderList = Array<[name: string, value: string]>

/** Every field rateLimitHeaders can write, under any options, and Retry-After: what a browser page must be let read (gateway `cors`). */
export const RATE_LIMIT_FIELDS: readonly string[] = [
  'RateLimit', 'RateLimit-Policy', 'RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset', 'Retry-After',
  'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset',
  'X-RateLimit-Replenish-Rate', 'X-RateLimit-Burst-Capacity', 'X-RateLimit-Requested-Tokens',
]

const HEADER_OPTIONS = new Set(['standard', 'legacy', 'partitionKey', 'springCloudGateway'])
const STANDARDS: ReadonlyArray<StandardHeaders | false> = ['draft-10', 'draft-8', 'draft-7', 'draft-6', false]

/** Refuses header options that would silently send other fields than meant (a misspelt standard or option). */
export function checkHeaderOptions(options: unknown, argument = 'headers'): asserts options is HeaderOptions {
  checkOptions(argument, 'a headers option', options, HEADER_OPTIONS)
  const { standard } = options as HeaderOptions
  if (standard !== undefined && !STANDARDS.includes(standard)) {
    throw new ArgumentError(`${argument}.standard`, standard, "must be 'draft-10', 'draft-8', 'draft-7', 'draft-6' or false", choiceHint(standard, ['draft-10', 'draft-8', 'draft-7', 'draft-6']))
  }
  for (const flag of ['legacy', 'partitionKey', 'springCloudGateway'] as const) checkBoolean(`${argument}.${flag}`, (options as HeaderOptions)[flag])
  const unsent = partitionKeyProblem(options as HeaderOptions)
  if (unsent !== undefined) throw new ArgumentError(`${argument}.partitionKey`, true, unsent)
}

/** Why `partitionKey: true` would send nothing under these options: only the draft-10 and draft-8 fields carry `pk`. */
export function partitionKeyProblem(options: HeaderOptions): string | undefined {
  const standard = options.standard ?? 'draft-10'
  if (options.partitionKey !== true || standard === 'draft-10' || standard === 'draft-8') return undefined
  return `is a parameter of the draft-10 and draft-8 fields; standard ${standard === false ? 'false sends none' : `${standard} has no place for it`}, so no partition key would be sent`
}

const NO_FIELDS = Object.freeze([]) as unknown as HeaderList

/** The window a policy's quota refers to, in whole seconds (at least 1). */
export function windowSeconds(policy: ResolvedPolicy): number {
  switch (policy.algorithm) {
    case 'fixed-window':
    case 'sliding-log':
    case 'sliding-window':
      return Math.max(1, Math.ceil(policy.windowMs / 1000))
    case 'token-bucket':
      // The time the bucket takes to refill from empty.
      return Math.max(1, Math.ceil((policy.capacity * policy.refillIntervalMs) / policy.refillTokens / 1000))
    case 'leaky-bucket':
      return Math.max(1, Math.ceil((policy.capacity * policy.leakIntervalMs) / policy.leakTokens / 1000))
  }
}

const seconds = (ms: number) => Math.max(0, Math.ceil(ms / 1000))

/**
 * Structured-field integers have at most 15 digits (RFC 9651 3.3.1), policies
 * up to 2^53: a larger number is as good as unlimited and is sent as the largest.
 */
const SF_MAX_INTEGER = 999_999_999_999_999
const sfInteger = (n: number) => Math.min(n, SF_MAX_INTEGER)

/**
 * When a client refused by a concurrency limit may ask again, in ms: a request
 * in progress may end at any moment, and Retry-After cannot say less than a second.
 */
const IN_FLIGHT_RETRY_MS = 1000

const NO_NAMES: ReadonlySet<string> = new Set()

/** Whether a decision's entry is of a policy that limits requests in progress (named in `inFlight`). */
const concurrent = (entry: PolicyDecision, inFlight: ReadonlySet<string>): boolean => inFlight.size > 0 && inFlight.has(entry.policy)

/**
 * The header fields for a decision. `policies` are the resolved policies the
 * decision's entries come from (same order); `key` is the client's key, used
 * only for `pk`; `now` (epoch ms) only for the legacy Reset timestamp.
 * `inFlight` names the policies that limit requests in progress (an HTTP
 * rule's `count: 'in-flight'`): their quota unit is `concurrent-requests`,
 * they have no window, and when more comes is not known.
 */
export function rateLimitHeaders(
  decision: Decision,
  policies: readonly ResolvedPolicy[],
  options: HeaderOptions,
  key: string,
  now: number,
  cost = 1,
  inFlight: ReadonlySet<string> = NO_NAMES,
): HeaderList {
  // Each list is made whole where it can be: an empty array's first push reserves room for 16 fields.
  let headers: HeaderList = NO_FIELDS
  const standard = options.standard ?? 'draft-10'

  if (standard === 'draft-10' || standard === 'draft-8') {
    const pk = options.partitionKey === true ? `;pk=${serializeByteSequence(partitionKey(key))}` : ''
    let quota = ''
    let left = ''
    for (let i = 0; i < decision.policies.length; i++) {
      const entry = decision.policies[i] as PolicyDecision
      const inProgress = concurrent(entry, inFlight)
      const { remainingStart, quotaItem } = itemsOf(policies[i] as ResolvedPolicy, entry.limit, inProgress)
      const separator = i === 0 ? '' : ', '
      quota += `${separator}${quotaItem}${pk}`
      // Only r and t change per request (non-negative integers, so their text is their digits); the rest is cached.
      // t is optional: a concurrency limit's units come back when requests in progress end, which no one knows.
      const until = inProgress ? '' : `;t=${sfInteger(seconds(untilMoreMs(entry)))}`
      left += `${separator}${remainingStart}${sfInteger(entry.remaining)}${until}${pk}`
    }
    headers = [['RateLimit-Policy', quota], ['RateLimit', left]]
  } else if (standard === 'draft-7') {
    const binding = bindingOf(decision)
    headers = [
      ['RateLimit-Policy', policyList(decision, policies, inFlight)],
      // A dictionary of three non-negative integers, whose text is their digits (the serializer's own output, tested).
      ['RateLimit', `limit=${sfInteger(binding.limit)}, remaining=${sfInteger(binding.remaining)}, reset=${sfInteger(seconds(untilMoreMs(binding, inFlight)))}`],
    ]
  } else if (standard === 'draft-6') {
    const binding = bindingOf(decision)
    headers = [
      ['RateLimit-Policy', policyList(decision, policies, inFlight)],
      ['RateLimit-Limit', String(binding.limit)],
      ['RateLimit-Remaining', String(binding.remaining)],
      ['RateLimit-Reset', String(seconds(untilMoreMs(binding, inFlight)))],
    ]
  }
  if (options.legacy === true || options.springCloudGateway === true) headers = [...headers]
  if (options.legacy === true) {
    const binding = bindingOf(decision)
    headers.push(
      ['X-RateLimit-Limit', String(binding.limit)],
      ['X-RateLimit-Remaining', String(binding.remaining)],
      ['X-RateLimit-Reset', String(Math.ceil((now + untilMoreMs(binding, inFlight)) / 1000))],
    )
  }
  if (options.springCloudGateway === true) {
    const binding = bindingOf(decision)
    const policy = policies[decision.policies.indexOf(binding)] as ResolvedPolicy
    if (options.legacy !== true) headers.push(['X-RateLimit-Remaining', String(binding.remaining)])
    headers.push(
      ['X-RateLimit-Replenish-Rate', String(unitsPerSecond(policy))],
      ['X-RateLimit-Burst-Capacity', String(binding.limit)],
      ['X-RateLimit-Requested-Tokens', String(cost)],
    )
  }
  return headers
}

/**
 * The wait a policy's reset field (draft-10's `t`, draft-7's `reset`, ...)
 * carries: the time until there is more than the decision left, in which the
 * client can use no more than its remaining units (draft-11's "effective
 * window"; draft-10's "until additional quota"): the decision's moreAfterMs
 * (a bucket's next unit, long before it is full; a window's reset, or with
 * nothing left, when a unit is back), and for a policy that refused, when the
 * call could pass, as Retry-After says. A client that spends what is left and
 * waits this long is not refused, and does not wait a whole refill or window
 * for one unit.
 */
function untilMoreMs(entry: PolicyDecision, inFlight: ReadonlySet<string> = NO_NAMES): number {
  // Fields where a reset is required: a concurrency limit's can only be the hint a refusal gives.
  if (concurrent(entry, inFlight)) return IN_FLIGHT_RETRY_MS
  return entry.allowed ? entry.moreAfterMs : entry.retryAfterMs
}

/**
 * When a refused call could pass, in ms: the decision's retryAfterMs, except that a concurrency
 * limit's log says when its units would expire were none released, while requests in progress give
 * theirs back as they end, at any moment (IN_FLIGHT_RETRY_MS).
 */
export function refusalRetryMs(decision: Decision, inFlight: ReadonlySet<string>): number {
  if (inFlight.size === 0) return decision.retryAfterMs
  let retryMs = 0
  for (const entry of decision.policies) if (!entry.allowed) retryMs = Math.max(retryMs, untilMoreMs(entry, inFlight))
  return retryMs
}

/** The policy whose numbers the single-valued fields carry: the decision's binding one. */
function bindingOf(decision: Decision): PolicyDecision {
  return decision.policies.find((p) => p.policy === decision.policy) ?? (decision.policies[0] as PolicyDecision)
}

/** Spring Cloud Gateway's replenishRate: whole units a policy grants per second (0 when slower than one a second). */
function unitsPerSecond(policy: ResolvedPolicy): number {
  switch (policy.algorithm) {
    case 'token-bucket':
      return Math.floor((policy.refillTokens * 1000) / policy.refillIntervalMs)
    case 'leaky-bucket':
      return Math.floor((policy.leakTokens * 1000) / policy.leakIntervalMs)
    default:
      return Math.floor((policy.limit * 1000) / policy.windowMs)
  }
}

interface PolicyItems {
  limit: number
  concurrent: boolean
  /** draft-10 / draft-8: its `RateLimit` item's start, `"name";r=`, and its `RateLimit-Policy` item `"name";q=100;w=60`. */
  remainingStart: string
  quotaItem: string
  /** draft-7 / draft-6: its unnamed `RateLimit-Policy` item `100;w=60`. */
  unnamedQuotaItem: string
}

const itemCache = new WeakMap<ResolvedPolicy, PolicyItems>()

/** A policy's serialized name and `RateLimit-Policy` items, which never change: built once. */
function itemsOf(policy: ResolvedPolicy, limit: number, concurrent: boolean): PolicyItems {
  let cached = itemCache.get(policy)
  if (cached === undefined || cached.limit !== limit || cached.concurrent !== concurrent) {
    // A concurrency limit's window only bounds how long a lost release is counted: not the quota's.
    const window = new Map<string, number | string>(concurrent ? [['qu', 'concurrent-requests']] : [['w', sfInteger(windowSeconds(policy))]])
    cached = {
      limit,
      concurrent,
      remainingStart: `${serializeString(policy.name)};r=`,
      quotaItem: serializeItem([policy.name, new Map([['q', sfInteger(limit)], ...window])]),
      unnamedQuotaItem: serializeItem([sfInteger(limit), window]),
    }
    itemCache.set(policy, cached)
  }
  return cached
}

/** `Retry-After` in delay-seconds, rounded up (RFC 9110 10.2.3). */
export function retryAfterHeader(decision: Decision): [string, string] {
  return ['Retry-After', String(Math.max(1, seconds(decision.retryAfterMs)))]
}

/** draft-6/7 `RateLimit-Policy`: `100;w=60, 1000;w=3600` (quota items, no names). */
function policyList(decision: Decision, policies: readonly ResolvedPolicy[], inFlight: ReadonlySet<string>): string {
  let list = ''
  for (let i = 0; i < decision.policies.length; i++) {
    const entry = decision.policies[i] as PolicyDecision
    list += `${i === 0 ? '' : ', '}${itemsOf(policies[i] as ResolvedPolicy, entry.limit, concurrent(entry, inFlight)).unnamedQuotaItem}`
  }
  return list
}

/** The first 12 hex digits of SHA-256(key), as bytes: identifies a partition without revealing it. */
function partitionKey(key: string): ArrayBuffer {
  const hex = createHash('sha256').update(key).digest('hex').slice(0, 12)
  const bytes = Buffer.from(hex, 'utf8')
  return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer
}
