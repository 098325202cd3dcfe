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
 */
import type { Announcement } from './headers.ts'

export type Admission =
  | { kind: 'go' }
  /** Nothing can be sent before `until` (epoch ms). */
  | { kind: 'wait'; until: number; reason: 'retry-after' | 'quota' }
  /** Only a response in flight can tell when to send next. */
  | { kind: 'response'; reason: 'probe' | 'quota' }

interface Tracked {
  limit: number | undefined
  remaining: number | undefined
  /** Epoch ms when more quota comes; undefined once passed and until a response says. */
  resetAt: number | undefined
  windowMs: number | undefined
  /** Its reset has passed and no response has said since how much is back. */
  unknownSinceReset: boolean
}

/** Nothing left of it, as far as the partition can tell. */
const spent = (quota: Tracked): boolean => quota.remaining !== undefined && quota.remaining <= 0

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
  /** Whether any response has come back: until one has, one request at a time finds out what the server says. */
  private answered = false

  constructor(private readonly probeMs: number) {}

  /** Whether a request may be sent at `now`; when it may, it is charged and counted in flight. */
  admit(now: number): Admission {
    if (now < this.blockedUntil) return { kind: 'wait', until: this.blockedUntil, reason: 'retry-after' }
    if ((!this.answered || now < this.probingUntil) && this.inFlight > 0) return { kind: 'response', reason: 'probe' }
    let until = 0
    let unknownReset = false
    let unknownSinceReset = false
    for (const quota of this.tracked.values()) {
      if (quota.resetAt !== undefined && now >= quota.resetAt) {
        quota.resetAt = undefined
        // Requests were held for this reset: they may not all go at once. Units left stay what they
        // were (more may have come, never fewer), until a response says.
        if (spent(quota)) {
          quota.unknownSinceReset = true
          quota.remaining = undefined
        }
      }
      if (quota.unknownSinceReset) unknownSinceReset = true
      if (!spent(quota)) continue
      if (quota.resetAt !== undefined) until = Math.max(until, quota.resetAt)
      else unknownReset = true
    }
    if (until > 0) return { kind: 'wait', until, reason: 'quota' }
    // Spent, and no reset known, or reset and not yet told how much is back: the next response
    // will say; with none coming, send one to ask.
    if ((unknownReset || unknownSinceReset) && this.inFlight > 0) return { kind: 'response', reason: 'quota' }
    for (const quota of this.tracked.values()) if (quota.remaining !== undefined) quota.remaining -= 1
    this.inFlight += 1
    return { kind: 'go' }
  }

  /**
   * Learns from a response to an admitted request. Returns when the server
   * wants to hear from this partition again (epoch ms) if it said, for a
   * refused (429/503) response.
   */
  settle(announcement: Announcement, status: number, now: number): number | undefined {
    this.inFlight = Math.max(0, this.inFlight - 1)
    this.answered = true
    for (const announced of announcement.quotas) {
      const resetAt = announced.resetAfterMs === undefined ? undefined : now + announced.resetAfterMs
      const estimate = announced.remaining === undefined ? undefined : announced.remaining - this.inFlight
      const quota = this.tracked.get(announced.name)
      if (quota === undefined) {
        this.tracked.set(announced.name, { limit: announced.limit, remaining: estimate, resetAt, windowMs: announced.windowMs, unknownSinceReset: false })
        if (this.tracked.size > MAX_TRACKED) this.forgetLeastRecentlyAnnounced(announcement)
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
        quota.remaining = quota.limit - this.inFlight
      }
    }
    if (announcement.quotas.length > 0) this.probingUntil = 0
    if (status !== 429 && status !== 503) return undefined

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
    return retryAt
  }

  /** Makes room for a newly announced policy, never forgetting one the same response announced. */
  private forgetLeastRecentlyAnnounced(announcement: Announcement): void {
    for (const name of this.tracked.keys()) {
      if (this.tracked.size <= MAX_TRACKED) return
      if (!announcement.quotas.some((announced) => announced.name === name)) this.tracked.delete(name)
    }
  }

  /** A request that was admitted but got no response (network error, abort). */
  abandon(): void {
    this.inFlight = Math.max(0, this.inFlight - 1)
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
    return this.inFlight === 0 && now >= this.blockedUntil && now >= this.probingUntil &&
      [...this.tracked.values()].every((quota) => quota.resetAt === undefined || now >= quota.resetAt)
  }
}
