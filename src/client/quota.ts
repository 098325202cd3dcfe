/**
 * What a client knows about one partition's server-side quota, learned from
 * responses. Pure: every method takes "now", so traces replay exactly.
 *
 * The first request to a partition goes alone: its answer says what the
 * server allows before the others are sent. The model is the one every
 * dialect shares: per server policy, units remaining until a reset time.
 * A reset says when more quota comes, not how much: a token bucket's server
 * may announce when its next token drips in, and the drafts forbid assuming
 * the whole limit is back. So once the reset of a spent quota passes, one
 * request goes alone again and its answer says what the rest may spend. Requests
 * in flight are charged when sent, and a response's `remaining` is read as
 * "after this request, and possibly before the others still in flight", so the
 * estimate errs toward waiting, never toward a refusal.
 *
 * A quota of requests in progress at once (draft-10's
 * `qu="concurrent-requests"`) has no reset: a unit comes back when a response
 * ends. A request then holds its units from when it is sent until its
 * response's body has arrived (`Settlement.held`, given back by `release`), as
 * the server holds them until it has sent the last byte. What the server counts
 * beyond this partition's own (other callers) is believed for a second, the
 * wait a server refusing such a request asks for.
 */
import type { AnnouncedQuota, Announcement } from './headers.ts'

/**
 * What one request takes from each policy: a number takes that many units from
 * every policy, a record the named policies' counts (1 from each one it does
 * not name), nothing 1 from each.
 */
export type RequestCost = number | Readonly<Record<string, number>> | undefined

export function unitsOf(cost: RequestCost, policy: string): number {
  if (cost === undefined) return 1
  if (typeof cost === 'number') return cost
  return Object.hasOwn(cost, policy) ? cost[policy] as number : 1
}

export type Admission =
  | { kind: 'go' }
  /** The request takes more of a policy than its whole limit: the server would refuse it however long it waited. */
  | { kind: 'never'; policy: string; units: number; limit: number }
  /** Nothing can be sent before `until` (epoch ms). */
  | { kind: 'wait'; until: number; reason: 'retry-after' | 'quota' }
  /** Only a response in flight can tell when to send next. */
  | { kind: 'response'; reason: 'probe' | 'quota' }

/** Units of the server's concurrency quotas a response holds until its body ends, by policy. */
export type Held = ReadonlyArray<readonly [policy: string, units: number]>

export interface Settlement {
  /** When the server wants to hear from this partition again (epoch ms), if it said, for a refused (429/503) response. */
  retryAt: number | undefined
  /** What the response holds of the server's concurrency quotas until its body ends: for `release`. */
  held: Held | undefined
}

interface Tracked {
  limit: number | undefined
  remaining: number | undefined
  /** Epoch ms when more quota comes; undefined once passed and until a response says. */
  resetAt: number | undefined
  windowMs: number | undefined
  /** A bucket refilling continuously: milliseconds per unit (its reset is then when the next unit comes). */
  unitMs: number | undefined
  /** Its reset has passed and no response has said since how much is back. */
  unknownSinceReset: boolean
  /** A quota of requests in progress at once: `limit` is how many, and `remaining`, `resetAt` stay undefined. */
  concurrent: boolean
  /** A quota of content bytes: a request takes its body's size from it (see `priced`). */
  contentBytes: boolean
  /** Of a concurrency quota: units the server counted beyond this partition's own, at the last answer... */
  othersHeld: number
  /** ...believed until this time (epoch ms). */
  othersUntil: number
}

const rateQuota = (announced: AnnouncedQuota, remaining: number | undefined, resetAt: number | undefined): Tracked => ({
  limit: announced.limit, remaining, resetAt, windowMs: announced.windowMs, unitMs: announced.unitMs, unknownSinceReset: false,
  concurrent: false, contentBytes: announced.contentBytes === true, othersHeld: 0, othersUntil: 0,
})

const concurrencyQuota = (announced: AnnouncedQuota): Tracked => ({
  limit: announced.limit, remaining: undefined, resetAt: undefined, windowMs: undefined, unitMs: undefined, unknownSinceReset: false,
  concurrent: true, contentBytes: false, othersHeld: 0, othersUntil: 0,
})

/** Nothing left of it, as far as the partition can tell. */
const spent = (quota: Tracked): boolean => quota.remaining !== undefined && quota.remaining <= 0

/** Fewer units left than a request takes, as far as the partition can tell. */
const short = (quota: Tracked, units: number): boolean => quota.remaining !== undefined && quota.remaining < units && units > 0

/** Resets announced in whole seconds are read as "up to a second later" when nothing is left. */
const SECOND = 1000

/**
 * Policies kept per partition. Servers announce a few; one that names a new
 * policy in every response (an id or a timestamp in the name) would otherwise
 * grow the partition without end, and every request would walk them all. The
 * least recently announced go first.
 */
const MAX_TRACKED = 64

export class PartitionQuota {
  private readonly tracked = new Map<string, Tracked>()
  private blockedUntil = 0
  /** After a refusal that announced no quota: one request at a time until this time. */
  private probingUntil = 0
  /** Requests sent and not yet answered. */
  inFlight = 0
  /** Units beyond one per request that requests in flight took (less, for those taking 0): from every policy, and per policy name. */
  private extraInFlight = 0
  private readonly namedExtraInFlight = new Map<string, number>()
  /** Whether any response has come back: until one has, one request at a time finds out what the server says. */
  private answered = false
  /** Units of concurrency quotas held by answered requests whose bodies have not ended, per policy name. */
  private readonly holding = new Map<string, number>()

  constructor(private readonly probeMs: number) {}

  /**
   * `cost` with what it leaves unsaid about the server's content-bytes quotas:
   * each one it does not name takes the request's body size, at least 1 (a
   * quota of bytes may count the response's too, unknown until it comes; 1
   * keeps a spent quota waiting). A number is the caller's count for every policy.
   */
  priced(cost: RequestCost, bodyBytes: number | undefined): RequestCost {
    if (typeof cost === 'number') return cost
    let priced: Record<string, number> | undefined
    for (const [name, quota] of this.tracked) {
      if (!quota.contentBytes || (cost !== undefined && Object.hasOwn(cost, name))) continue
      priced ??= { ...cost }
      priced[name] = Math.max(1, bodyBytes ?? 1)
    }
    return priced ?? cost
  }

  /** Whether a request taking `cost` may be sent at `now`; when it may, it is charged and counted in flight. */
  admit(now: number, cost?: RequestCost): Admission {
    if (now < this.blockedUntil) return { kind: 'wait', until: this.blockedUntil, reason: 'retry-after' }
    if ((!this.answered || now < this.probingUntil) && this.inFlight > 0) return { kind: 'response', reason: 'probe' }
    let until = 0
    let unknownReset = false
    let unknownSinceReset = false
    let oursToEnd = false
    for (const [name, quota] of this.tracked) {
      if (quota.concurrent) {
        const units = unitsOf(cost, name)
        const room = this.roomInProgress(quota, name, units, now)
        if (room === 'never') return { kind: 'never', policy: name, units, limit: quota.limit as number }
        if (room === 'ours') oursToEnd = true
        else if (room === 'others') until = Math.max(until, quota.othersUntil)
        continue
      }
      if (quota.resetAt !== undefined && now >= quota.resetAt) this.passReset(quota, now)
      if (quota.unknownSinceReset) unknownSinceReset = true
      const units = unitsOf(cost, name)
      // A limit of 0 is a quota shut for now, not a size: its reset says when to ask again.
      if (quota.limit !== undefined && quota.limit > 0 && units > quota.limit) return { kind: 'never', policy: name, units, limit: quota.limit }
      if (!short(quota, units)) continue
      if (quota.resetAt === undefined) unknownReset = true
      else if (quota.unitMs === undefined) until = Math.max(until, quota.resetAt)
      // The reset brings the next unit; the rest this request needs come one every unitMs after it.
      else until = Math.max(until, Math.ceil(quota.resetAt + (units - (quota.remaining as number) - 1) * quota.unitMs))
    }
    if (until > 0) return { kind: 'wait', until, reason: 'quota' }
    // Spent, and no reset known, or reset and not yet told how much is back: the next response
    // will say; with none coming, send one to ask. Requests of ours in progress end by themselves.
    if (oursToEnd || ((unknownReset || unknownSinceReset) && this.inFlight > 0)) return { kind: 'response', reason: 'quota' }
    for (const [name, quota] of this.tracked) if (quota.remaining !== undefined) quota.remaining -= unitsOf(cost, name)
    this.inFlight += 1
    this.countExtra(cost, 1)
    return { kind: 'go' }
  }

  /**
   * Whether a request taking `units` of a concurrency quota may start: 'go', 'never' (more than
   * the whole quota), 'ours' (once a request of this partition ends or is answered) or 'others'
   * (once what other callers held is a second old).
   */
  private roomInProgress(quota: Tracked, name: string, units: number, now: number): 'go' | 'never' | 'ours' | 'others' {
    if (quota.limit === undefined || units === 0) return 'go'
    if (quota.limit > 0 && units > quota.limit) return 'never'
    const ours = this.unitsInFlight(name) + (this.holding.get(name) ?? 0)
    if (now < quota.othersUntil) {
      if (ours + units + quota.othersHeld <= quota.limit) return 'go'
      return ours > 0 && ours + units > quota.limit ? 'ours' : 'others'
    }
    // Other callers held some a second ago: one request asks whether they still do, the rest wait for its answer.
    if (ours + units <= quota.limit) return quota.othersHeld > 0 && this.inFlight > 0 ? 'ours' : 'go'
    return ours > 0 ? 'ours' : 'go'
  }

  private passReset(quota: Tracked, now: number): void {
    if (quota.unitMs !== undefined && quota.remaining !== undefined) {
      // A bucket refilling one unit every unitMs: the reset's unit has come, and one more per unitMs since.
      const came = 1 + Math.floor((now - (quota.resetAt as number)) / quota.unitMs)
      quota.remaining = Math.min(quota.limit ?? Infinity, quota.remaining + came)
      quota.resetAt = quota.remaining >= (quota.limit ?? Infinity) ? undefined : (quota.resetAt as number) + came * quota.unitMs
      return
    }
    quota.resetAt = undefined
    // Requests were held for this reset: they may not all go at once. Units left stay what they
    // were (more may have come, never fewer), until a response says.
    if (spent(quota)) {
      quota.unknownSinceReset = true
      quota.remaining = undefined
    }
  }

  /** Units of `policy` that requests in flight took. */
  private unitsInFlight(policy: string): number {
    return this.inFlight + this.extraInFlight + (this.namedExtraInFlight.get(policy) ?? 0)
  }

  /** Counts a request's units in (1) or out (-1): beyond its one per policy, so a request taking 0 counts -1. */
  private countExtra(cost: RequestCost, sign: 1 | -1): void {
    if (cost === undefined) return
    if (typeof cost === 'number') {
      this.extraInFlight += sign * (cost - 1)
      return
    }
    for (const [name, units] of Object.entries(cost)) {
      const extra = (this.namedExtraInFlight.get(name) ?? 0) + sign * (units - 1)
      if (extra === 0) this.namedExtraInFlight.delete(name)
      else this.namedExtraInFlight.set(name, extra)
    }
  }

  /**
   * Learns from a response to an admitted request: when the server wants to
   * hear from this partition again, and what the response holds until its body
   * ends (to `release` then).
   */
  settle(announcement: Announcement, status: number, now: number, cost?: RequestCost): Settlement {
    this.leave(cost)
    this.answered = true
    const held: Array<readonly [string, number]> = []
    for (const announced of announcement.quotas) {
      if (announced.concurrent === true) {
        this.hold(announced, announcement, now, unitsOf(cost, announced.name), held)
        continue
      }
      const resetAt = announced.resetAfterMs === undefined ? undefined : now + announced.resetAfterMs
      const estimate = announced.remaining === undefined ? undefined : announced.remaining - this.unitsInFlight(announced.name)
      const quota = this.tracked.get(announced.name)
      if (quota === undefined || quota.concurrent) {
        this.track(announced.name, rateQuota(announced, estimate, resetAt), announcement)
      } else {
        // Map order is announcement order: the policy goes to the end, the last to be forgotten.
        this.tracked.delete(announced.name)
        this.tracked.set(announced.name, quota)
        if (quota.resetAt === undefined || now >= quota.resetAt) {
          // Past the reset it held (or it had none): the answer is what there is now.
          quota.remaining = estimate ?? quota.remaining
          quota.resetAt = resetAt ?? quota.resetAt
        } else if (estimate !== undefined && (quota.remaining === undefined || estimate <= quota.remaining)) {
          // Before it, counts only fall: responses overtake each other, and the lowest count is the
          // freshest. Its reset goes with it: for a sliding window or a bucket, when there is more than
          // a count comes sooner the lower the count (and a late answer that says more is not a new window).
          quota.remaining = estimate
          quota.resetAt = resetAt ?? quota.resetAt
        }
        quota.limit = announced.limit ?? quota.limit
        quota.windowMs = announced.windowMs ?? quota.windowMs
        quota.unitMs = announced.unitMs ?? quota.unitMs
        // Not every response describes its policies: one that leaves the unit unsaid does not change it.
        quota.contentBytes ||= announced.contentBytes === true
        quota.unknownSinceReset = false
      }
      const current = this.tracked.get(announced.name) as Tracked
      if (spent(current)) {
        // No reset at all means a window's wait; "t=0" from a server that rounds down still means "not yet".
        if (current.resetAt === undefined) current.resetAt = now + (current.windowMs ?? SECOND)
        else if (announced.resetAfterMs === 0) current.resetAt = Math.max(current.resetAt, now + SECOND)
      }
    }
    // A policy reset and left out of the answer (a server may announce only the nearest one):
    // its whole limit is all there is to go on, or nothing, where it never said one.
    for (const [name, quota] of this.tracked) {
      if (!quota.unknownSinceReset) continue
      if (quota.limit === undefined) this.tracked.delete(name)
      else {
        quota.unknownSinceReset = false
        quota.remaining = quota.limit - this.unitsInFlight(name)
      }
    }
    if (announcement.quotas.length > 0) this.probingUntil = 0
    const settlement: Settlement = { retryAt: undefined, held: held.length === 0 ? undefined : held }
    if (status !== 429 && status !== 503) return settlement

    let retryAt: number | undefined
    if (announcement.retryAfterMs !== undefined) {
      // Retry-After wins over the RateLimit fields (draft-ietf-httpapi-ratelimit-headers): a spent
      // quota whose reset lies further off (a bucket's time to full) is asked about then instead.
      const at = now + announcement.retryAfterMs
      retryAt = at
      for (const quota of this.tracked.values()) {
        if (spent(quota) && quota.resetAt !== undefined && quota.resetAt > at) quota.resetAt = at
      }
    } else {
      for (const quota of this.tracked.values()) {
        if (spent(quota) && quota.resetAt !== undefined) retryAt = Math.max(retryAt ?? 0, quota.resetAt)
      }
    }
    if (retryAt !== undefined && status === 429) this.blockedUntil = Math.max(this.blockedUntil, retryAt)
    if (status === 429 && announcement.quotas.length === 0 && this.tracked.size === 0) this.probingUntil = now + this.probeMs
    settlement.retryAt = retryAt
    return settlement
  }

  /** A concurrency quota's answer: the request holds its units, and the rest the server counted are other callers'. */
  private hold(announced: AnnouncedQuota, announcement: Announcement, now: number, units: number, held: Array<readonly [string, number]>): void {
    let quota = this.tracked.get(announced.name)
    if (quota === undefined || !quota.concurrent) {
      quota = concurrencyQuota(announced)
      this.track(announced.name, quota, announcement)
    } else {
      this.tracked.delete(announced.name)
      this.tracked.set(announced.name, quota)
    }
    quota.limit = announced.limit ?? quota.limit
    if (units > 0) {
      this.holding.set(announced.name, (this.holding.get(announced.name) ?? 0) + units)
      held.push([announced.name, units])
    }
    if (announced.remaining === undefined || quota.limit === undefined) return
    // The server's count includes this request and the others of ours it has seen; those it has
    // not seen yet make the others' share look smaller, which the server's refusal corrects.
    const ours = this.unitsInFlight(announced.name) + (this.holding.get(announced.name) ?? 0)
    quota.othersHeld = Math.max(0, quota.limit - announced.remaining - ours)
    quota.othersUntil = now + SECOND
  }

  /** The units a response held come back: its body has ended, failed or been cancelled. */
  release(held: Held | undefined): void {
    for (const [name, units] of held ?? []) {
      const left = (this.holding.get(name) ?? 0) - units
      if (left > 0) this.holding.set(name, left)
      else this.holding.delete(name)
    }
  }

  /** Whether responses hold units of a concurrency quota. */
  get holds(): boolean {
    return this.holding.size > 0
  }

  private track(name: string, quota: Tracked, announcement: Announcement): void {
    this.tracked.delete(name)
    this.tracked.set(name, quota)
    if (this.tracked.size > MAX_TRACKED) this.forgetLeastRecentlyAnnounced(announcement)
  }

  /** Makes room for a newly announced policy, never forgetting one the same response announced. */
  private forgetLeastRecentlyAnnounced(announcement: Announcement): void {
    for (const name of this.tracked.keys()) {
      if (this.tracked.size <= MAX_TRACKED) return
      if (!announcement.quotas.some((announced) => announced.name === name)) this.tracked.delete(name)
    }
  }

  /** A request that was admitted but got no response (network error, abort). */
  abandon(cost?: RequestCost): void {
    this.leave(cost)
  }

  private leave(cost: RequestCost): void {
    this.inFlight = Math.max(0, this.inFlight - 1)
    this.countExtra(cost, -1)
  }

  /** The window of the first announced policy that named one, for spreading retries. */
  windowMs(): number | undefined {
    for (const quota of this.tracked.values()) if (quota.windowMs !== undefined) return quota.windowMs
    return undefined
  }

  /** Policies whose quota and window are both known: what a fleet can share. */
  knownPolicies(): Array<{ name: string; limit: number; windowMs: number; remaining: number | undefined }> {
    const known = []
    for (const [name, quota] of this.tracked) {
      if (quota.limit !== undefined && quota.limit > 0 && quota.windowMs !== undefined) {
        known.push({ name, limit: quota.limit, windowMs: quota.windowMs, remaining: quota.remaining })
      }
    }
    return known
  }

  /** True when this partition holds nothing worth keeping. */
  idle(now: number): boolean {
    return this.inFlight === 0 && this.holding.size === 0 && now >= this.blockedUntil && now >= this.probingUntil &&
      [...this.tracked.values()].every((quota) => quota.resetAt === undefined || now >= quota.resetAt)
  }
}
