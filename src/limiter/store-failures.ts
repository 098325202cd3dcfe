/**
 * Reporting a store's failing calls without flooding: the HTTP layer's
 * warnings and the gateway's log and /status hear them from here.
 */

/** How often one failure of the store's calls is reported again while it lasts. */
const REPEAT_MS = 10_000

export interface StoreCallFailure {
  reason: 'timeout' | 'store-error'
  /** What the store said (for a timeout, the time waited). */
  error: string
  /** Calls that failed since the last report and were not reported themselves. */
  failedSinceLastLog?: number
}

/** The failure of the latest store call, and when it happened (ISO 8601). */
export interface LatestStoreFailure {
  reason: StoreCallFailure['reason']
  error: string
  at: string
}

/**
 * What the store's failing calls said, for warnings, logs and /status. A Redis can
 * answer the health probe's PING while every decision fails: a read-only
 * replica (READONLY), an ACL without EVALSHA (NOPERM), a full Redis under
 * noeviction (OOM). Metrics count those failures; this says why. Each
 * distinct message is reported when it first appears and then at most every 10 s
 * while it lasts, with how many calls failed in between.
 */
export class StoreCallFailures {
  private latest: LatestStoreFailure | undefined
  private readonly reportedAt = new Map<string, number>()
  private unreported = 0

  constructor(private readonly report: (failure: StoreCallFailure) => void, private readonly now: () => number = Date.now) {}

  /** The failure of the latest store call, undefined once a call succeeds. */
  get current(): LatestStoreFailure | undefined {
    return this.latest
  }

  observe(outcome: 'ok' | 'timeout' | 'store-error', error: Error | undefined): void {
    if (outcome === 'ok') {
      this.latest = undefined
      return
    }
    const message = error?.message ?? outcome
    const now = this.now()
    this.latest = { reason: outcome, error: message, at: new Date(now).toISOString() }
    const reported = this.reportedAt.get(message)
    if (reported !== undefined && now - reported < REPEAT_MS) {
      this.unreported++
      return
    }
    // Bounded: a store that fails with a new message per call (ids in it) keeps only the recent ones.
    if (this.reportedAt.size >= 100) this.reportedAt.clear()
    this.reportedAt.set(message, now)
    this.report({ reason: outcome, error: message, ...(this.unreported > 0 ? { failedSinceLastLog: this.unreported } : {}) })
    this.unreported = 0
  }
}
