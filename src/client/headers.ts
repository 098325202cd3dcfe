/**
 * Reading the limits a server announces, in every dialect real APIs send:
 *
 * - IETF draft-8 and later: `RateLimit-Policy: "minute";q=100;w=60` and
 *   `RateLimit: "minute";r=42;t=18`, one named item per policy, a quota of
 *   requests in progress at once marked `qu="concurrent-requests"`;
 * - draft-7: `RateLimit: limit=100, remaining=42, reset=18` with
 *   `RateLimit-Policy: 100;w=60`;
 * - draft-6 and earlier: `RateLimit-Limit` (`100` or `100, 100;w=60`),
 *   `RateLimit-Remaining`, `RateLimit-Reset` (delta seconds);
 * - `X-RateLimit-Limit / -Remaining / -Reset` (GitHub and most others; Reset
 *   in epoch seconds or delta seconds, told apart by size), `-Reset-After`
 *   (fractional seconds), Spring Cloud Gateway's `-Replenish-Rate` and
 *   `-Burst-Capacity`;
 * - OpenAI's (also Groq's) `X-RateLimit-Limit-Requests / -Remaining-Requests /
 *   -Reset-Requests` and the same for `-Tokens`, resets as Go durations
 *   (`6m0s`, `12ms`); Anthropic's `Anthropic-RateLimit-Requests-Limit /
 *   -Remaining / -Reset` and the same for `Tokens`, `Input-Tokens` and
 *   `Output-Tokens`, resets as RFC 3339 times;
 * - `Retry-After` in delay-seconds or as an HTTP date, OpenAI's
 *   `Retry-After-Ms`, and Stripe's `Stripe-Should-Retry`.
 *
 * Servers get these wrong in many small ways; a field that cannot be read is
 * ignored, never thrown on: the client then knows less, and says so by
 * behaving as if the field were absent.
 */
import { parseDictionary, parseList, Token, type BareItem, type Parameters } from 'structured-headers'

/** What one response says about one of the server's policies. Times are relative to the response. */
export interface AnnouncedQuota {
  /** The policy's name (`default` when the dialect has none). */
  name: string
  /** Units per window (the quota), when announced. */
  limit?: number
  /** Units left, when announced. */
  remaining?: number
  /** Milliseconds until the quota is restored, when announced. */
  resetAfterMs?: number
  /** The policy's window in milliseconds, when announced. */
  windowMs?: number
  /**
   * For a bucket that refills continuously (the LLM APIs): milliseconds per
   * unit, so a request costing several units knows how long they take to come.
   */
  unitMs?: number
  /**
   * The quota counts requests in progress at once, not requests per window
   * (draft-10's `qu="concurrent-requests"`): `limit` may be in progress,
   * `remaining` more may start, and a unit comes back when a response ends.
   */
  concurrent?: boolean
  /** The quota counts content bytes (draft-10's `qu="content-bytes"`), not requests. */
  contentBytes?: boolean
}

export interface Announcement {
  /** One entry per policy the response describes; empty when it describes none. */
  quotas: AnnouncedQuota[]
  /** Milliseconds the server asks the client to wait (`Retry-After`), when present and readable. */
  retryAfterMs?: number
  /** Stripe's explicit retry advice, when present. */
  shouldRetry?: boolean
}

const MAX_POLICIES = 16

/** draft-10's quota unit for requests in progress, and `concurrency`, its name in the working group's first text of the registry. */
const CONCURRENT_UNITS = new Set<BareItem | undefined>(['concurrent-requests', 'concurrency'])

/**
 * The longest wait believed from a `Retry-After`, or from a reset announced
 * without a window: a day, the longest quota period APIs commonly announce.
 * A longer one (a slip, or `2^53` from a broken server) is read as a day, so
 * the partition is asked again then, rather than never in this process's life.
 */
const LONGEST_BELIEVED_WAIT_MS = 86_400_000

/** A case-insensitive header lookup: a fetch `Headers`, or undici's raw header object. */
export type HeaderLookup = (name: string) => string | undefined

/** Dates and epoch resets are read against the response's own `Date` when it has one, so clock skew cancels out. */
export function readAnnouncement(header: HeaderLookup, now: number): Announcement {
  const date = dateOf(header('date'))
  // A Date names the second the response was made in. A local clock within about a second of it
  // agrees with the server's as far as the header can tell, and reads milliseconds, where the Date,
  // truncated, would add up to a second to a reset given to the millisecond (Anthropic's).
  const serverNow = date === undefined || (now > date - 1000 && now < date + 2000) ? now : date
  const announcement: Announcement = { quotas: [] }
  const retryAfter = number(header('retry-after-ms')) ?? retryAfterMs(header('retry-after'), serverNow)
  if (retryAfter !== undefined) announcement.retryAfterMs = Math.min(retryAfter, LONGEST_BELIEVED_WAIT_MS)
  const advice = header('stripe-should-retry')?.trim().toLowerCase()
  if (advice === 'true' || advice === 'false') announcement.shouldRetry = advice === 'true'
  // A response served from a cache describes the quota as it was then (draft: ignore it).
  const age = Number(header('age') ?? '0')
  if (Number.isFinite(age) && age > 0) return announcement
  announcement.quotas = (namedItems(header) ?? draft7(header) ?? draft6(header) ?? openAi(header) ?? anthropic(header, serverNow) ?? legacy(header, serverNow) ?? [])
    .map(withBelievableReset)
  return announcement
}

/**
 * A reset more than two windows away contradicts the window announced with it:
 * two windows on, every algorithm has restored the quota (a sliding window's
 * count, the slowest, is gone by then). Believed, a server's slip (milliseconds
 * sent as seconds, an epoch sent as a delta) would stop the client sending to
 * it for as long as the slip says, years; read as two windows, the client asks
 * again then. With no window to hold it against, a reset is believed up to
 * LONGEST_BELIEVED_WAIT_MS.
 */
function withBelievableReset(quota: AnnouncedQuota): AnnouncedQuota {
  if (quota.resetAfterMs === undefined) return quota
  const longest = quota.windowMs === undefined ? LONGEST_BELIEVED_WAIT_MS : 2 * quota.windowMs
  return quota.resetAfterMs <= longest ? quota : { ...quota, resetAfterMs: longest }
}

/** `Retry-After`: delay-seconds, or an HTTP date read against the server's clock. */
export function retryAfterMs(value: string | undefined, serverNow: number): number | undefined {
  if (value === undefined) return undefined
  const text = value.trim()
  if (/^\d+$/.test(text)) return Number(text) * 1000
  const at = Date.parse(text)
  if (Number.isNaN(at) || !/[a-z]/i.test(text)) return undefined
  return Math.max(0, at - serverNow)
}

function dateOf(value: string | undefined): number | undefined {
  if (value === undefined) return undefined
  const at = Date.parse(value)
  return Number.isNaN(at) ? undefined : at
}

/** draft-8 and later: `RateLimit` and `RateLimit-Policy` as lists of named items. */
function namedItems(header: HeaderLookup): AnnouncedQuota[] | undefined {
  const current = listOf(header('ratelimit'))?.map(([name, params]) => [nameOf(name), params] as const)
  if (current === undefined || current.length === 0 || !current.every(([name]) => name !== undefined)) return undefined
  const windows = new Map<string, { limit?: number; windowMs?: number; concurrent?: boolean; contentBytes?: boolean }>()
  for (const [item, params] of listOf(header('ratelimit-policy')) ?? []) {
    const name = nameOf(item)
    if (name === undefined) continue
    const limit = count(params.get('q'))
    const window = count(params.get('w'))
    // A quota of requests in progress has no window: a `w` beside it would describe none.
    const concurrent = CONCURRENT_UNITS.has(params.get('qu'))
    windows.set(name, {
      ...(params.get('qu') === 'content-bytes' && { contentBytes: true }),
      ...(limit !== undefined && { limit }),
      ...(concurrent ? { concurrent } : window !== undefined && window > 0 && { windowMs: window * 1000 }),
    })
  }
  // A server that announces more policies than any API has is not believed past the first few.
  return current.slice(0, MAX_POLICIES).map(([name, params]) => {
    const quota: AnnouncedQuota = { name: name as string, ...windows.get(name as string) }
    const remaining = count(params.get('r'))
    const reset = count(params.get('t'))
    if (remaining !== undefined) quota.remaining = remaining
    // No one knows when requests in progress end: a `t` on such a quota is a guess, never waited for.
    if (reset !== undefined && quota.concurrent !== true) quota.resetAfterMs = reset * 1000
    return quota
  })
}

/** draft-7: `RateLimit: limit=100, remaining=42, reset=18`, `RateLimit-Policy: 100;w=60`. */
export function draft7(header: HeaderLookup): AnnouncedQuota[] | undefined {
  const value = header('ratelimit')
  if (value === undefined) return undefined
  let fields: ReturnType<typeof parseDictionary>
  try {
    fields = parseDictionary(value)
  } catch {
    return undefined
  }
  const field = (name: string) => {
    const entry = fields.get(name)
    return entry === undefined || Array.isArray(entry[0]) ? undefined : count(entry[0] as BareItem)
  }
  const quota = quotaOf({ limit: field('limit'), remaining: field('remaining'), resetSeconds: field('reset') })
  if (quota === undefined) return undefined
  return [withWindow(quota, header('ratelimit-policy'))]
}

/** draft-6 and earlier: `RateLimit-Limit` (optionally with quota policies), `-Remaining`, `-Reset`. */
export function draft6(header: HeaderLookup): AnnouncedQuota[] | undefined {
  const limitField = header('ratelimit-limit')
  const quota = quotaOf({
    limit: firstNumber(limitField),
    remaining: firstNumber(header('ratelimit-remaining')),
    resetSeconds: firstNumber(header('ratelimit-reset')),
  })
  if (quota === undefined) return undefined
  // drafts 0-3 put the quota policies in RateLimit-Limit itself: `100, 100;w=60`.
  return [withWindow(withWindow(quota, limitField), header('ratelimit-policy'))]
}

/** `X-RateLimit-*`: GitHub, Twitter, Discord, Spring Cloud Gateway and most others. */
export function legacy(header: HeaderLookup, serverNow: number): AnnouncedQuota[] | undefined {
  const reset = number(header('x-ratelimit-reset-after')) ?? resetOf(number(header('x-ratelimit-reset')), serverNow)
  const burst = number(header('x-ratelimit-burst-capacity'))
  const quota = quotaOf({
    limit: number(header('x-ratelimit-limit')) ?? burst,
    remaining: number(header('x-ratelimit-remaining')),
    resetSeconds: reset,
  })
  if (quota === undefined) return undefined
  // Spring Cloud Gateway: a token bucket of burstCapacity refilled at replenishRate per second.
  const rate = number(header('x-ratelimit-replenish-rate'))
  if (burst !== undefined && rate !== undefined && rate > 0) quota.windowMs = Math.ceil((burst / rate) * 1000)
  return [quota]
}

/**
 * The LLM APIs limit requests and tokens with buckets that refill
 * continuously, and announce as reset the time until a bucket is full again:
 * 12 ms at OpenAI when one request of 5,000 a minute is spent, a minute when
 * all are. The client reads a reset as when more quota comes, which for such a
 * bucket is the full reset shared out over the units spent: the next unit, not
 * the last. The fields name no window: Anthropic documents its limits as per
 * minute; OpenAI's fields carry its per-minute limits and Groq's the same
 * requests field a per-day one, so theirs is left unsaid.
 */
function bucketQuota(name: string, limit: number | undefined, remaining: number | undefined, untilFullMs: number | undefined, windowMs?: number): AnnouncedQuota | undefined {
  if (limit === undefined && remaining === undefined) return undefined
  const quota: AnnouncedQuota = { name }
  if (windowMs !== undefined) quota.windowMs = windowMs
  if (limit !== undefined) quota.limit = limit
  if (remaining !== undefined) quota.remaining = remaining
  const spent = limit !== undefined && remaining !== undefined ? limit - remaining : 0
  if (untilFullMs !== undefined) {
    quota.resetAfterMs = spent > 1 ? Math.ceil(untilFullMs / spent) : Math.ceil(untilFullMs)
    if (spent >= 1 && untilFullMs > 0) quota.unitMs = untilFullMs / spent
  }
  // Nothing spent says nothing of the refill rate, but a documented window does.
  if (quota.unitMs === undefined && windowMs !== undefined && limit !== undefined && limit > 0) quota.unitMs = windowMs / limit
  return quota
}

function quotasOf(families: ReadonlyArray<AnnouncedQuota | undefined>): AnnouncedQuota[] | undefined {
  const quotas = families.filter((quota): quota is AnnouncedQuota => quota !== undefined)
  return quotas.length === 0 ? undefined : quotas
}

/** OpenAI, and the APIs that copy it (Groq): `X-RateLimit-{Limit,Remaining,Reset}-{Requests,Tokens}`. */
export function openAi(header: HeaderLookup): AnnouncedQuota[] | undefined {
  return quotasOf(['requests', 'tokens'].map((name) => bucketQuota(
    name,
    number(header(`x-ratelimit-limit-${name}`)),
    number(header(`x-ratelimit-remaining-${name}`)),
    goDurationMs(header(`x-ratelimit-reset-${name}`)),
  )))
}

/** Anthropic: `Anthropic-RateLimit-{Requests,Tokens,Input-Tokens,Output-Tokens}-{Limit,Remaining,Reset}`, resets as RFC 3339 times. */
export function anthropic(header: HeaderLookup, serverNow: number): AnnouncedQuota[] | undefined {
  return quotasOf(['requests', 'tokens', 'input-tokens', 'output-tokens'].map((name) => {
    const resetAt = rfc3339(header(`anthropic-ratelimit-${name}-reset`))
    return bucketQuota(
      name,
      number(header(`anthropic-ratelimit-${name}-limit`)),
      number(header(`anthropic-ratelimit-${name}-remaining`)),
      resetAt === undefined ? undefined : Math.max(0, resetAt - serverNow),
      60_000,
    )
  }))
}

const GO_DURATION_UNITS: Record<string, number> = { h: 3_600_000, m: 60_000, s: 1000, ms: 1, us: 0.001, 'µs': 0.001, ns: 0.000001 }
/** One amount and its unit; a duration is one or more of them and nothing else. */
const GO_DURATION_PART = '(\\d+(?:\\.\\d+)?)(h|ms|m|s|us|µs|ns)'
const GO_DURATION = new RegExp(`^(?:${GO_DURATION_PART})+$`)
const GO_DURATION_PARTS = new RegExp(GO_DURATION_PART, 'g')

/** A Go duration (`6m0s`, `1h2m3.5s`, `12ms`), or a bare number of seconds, in milliseconds. */
export function goDurationMs(value: string | undefined): number | undefined {
  const text = value?.trim()
  if (text === undefined || text === '') return undefined
  const seconds = number(text)
  if (seconds !== undefined) return seconds * 1000
  if (!GO_DURATION.test(text)) return undefined
  let ms = 0
  for (const [, amount, unit] of text.matchAll(GO_DURATION_PARTS)) ms += Number(amount) * (GO_DURATION_UNITS[unit as string] as number)
  return Number.isFinite(ms) ? ms : undefined
}

/** An RFC 3339 date-time (`2025-08-21T12:40:59Z`), in epoch ms. */
function rfc3339(value: string | undefined): number | undefined {
  const text = value?.trim()
  if (text === undefined || !/^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/.test(text)) return undefined
  const at = Date.parse(text)
  return Number.isNaN(at) ? undefined : at
}

/**
 * `X-RateLimit-Reset` is epoch seconds at GitHub and Twitter, epoch
 * milliseconds at a few, delta seconds elsewhere: told apart by magnitude
 * (no delta is a billion seconds, about 31 years). Returns delta seconds.
 */
function resetOf(value: number | undefined, serverNow: number): number | undefined {
  if (value === undefined) return undefined
  if (value >= 1e12) return Math.max(0, (value - serverNow) / 1000)
  if (value >= 1e9) return Math.max(0, value - serverNow / 1000)
  return value
}

function quotaOf(fields: { limit: number | undefined; remaining: number | undefined; resetSeconds: number | undefined }): AnnouncedQuota | undefined {
  if (fields.remaining === undefined && fields.limit === undefined) return undefined
  const quota: AnnouncedQuota = { name: 'default' }
  if (fields.limit !== undefined) quota.limit = fields.limit
  if (fields.remaining !== undefined) quota.remaining = fields.remaining
  if (fields.resetSeconds !== undefined) quota.resetAfterMs = Math.ceil(fields.resetSeconds * 1000)
  return quota
}

/** The window of the quota policy whose limit matches (or the first one), from a `100;w=60` list. */
function withWindow(quota: AnnouncedQuota, field: string | undefined): AnnouncedQuota {
  const items = listOf(field)?.filter(([value, params]) => typeof value === 'number' && count(params.get('w')) !== undefined)
  if (items === undefined || items.length === 0 || quota.windowMs !== undefined) return quota
  const [value, params] = items.find(([value]) => value === quota.limit) ?? (items[0] as (typeof items)[number])
  const limit = count(value as BareItem)
  if (quota.limit === undefined && limit !== undefined) quota.limit = limit
  const window = count(params.get('w'))
  if (window !== undefined && window > 0) quota.windowMs = window * 1000
  return quota
}

/** A policy name: a String, or a Token from servers that write `default;r=5`. */
function nameOf(item: BareItem): string | undefined {
  if (typeof item === 'string') return item
  return item instanceof Token ? item.toString() : undefined
}

function listOf(value: string | undefined): Array<[BareItem, Parameters]> | undefined {
  if (value === undefined) return undefined
  try {
    return parseList(value).filter((member): member is [BareItem, Parameters] => !Array.isArray(member[0]))
  } catch {
    return undefined
  }
}

/** A non-negative integer parameter (a structured-field Integer, or a Decimal floored). */
function count(value: BareItem | undefined): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? Math.floor(value) : undefined
}

/** A non-negative decimal number, as legacy fields are written (`5000`, `1.25`); too many digits to hold is unreadable. */
function number(value: string | undefined): number | undefined {
  if (value === undefined) return undefined
  const text = value.trim()
  if (!/^\d+(\.\d+)?$/.test(text)) return undefined
  const parsed = Number(text)
  return Number.isFinite(parsed) ? parsed : undefined
}

/** The leading number of `100` or `100, 100;w=60`. */
function firstNumber(value: string | undefined): number | undefined {
  return number(value?.split(',')[0]?.split(';')[0])
}
