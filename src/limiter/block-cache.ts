/**
 * Keys known to be refused until a given time, kept in this process so that
 * they are refused again without a round trip to the store (the way peers keep
 * "blocked" keys in memory under attack). Bounded by two generations: when the
 * newer one is half full the older one is dropped whole, which is O(1) and
 * costs a dropped key at most one round trip to the store.
 *
 * An entry answers only a call of the same cost: a cheaper call may fit sooner,
 * and a costlier one later than the retry time that was given. A refusal stays
 * valid until its retry time because only time frees units: other calls can
 * only take more. The one exception is `reset`, which clears the entry here;
 * a reset made by another process is seen when the entry expires.
 */
import type { Decision } from '../core/types.ts'

interface Blocked {
  until: number
  decision: Decision
  at: number
}

export class BlockCache {
  /** Per key, the refusals in force by cost. */
  private current = new Map<string, Map<number, Blocked>>()
  private previous = new Map<string, Map<number, Blocked>>()

  constructor(readonly maxKeys: number) {}

  get size(): number {
    return this.current.size + this.previous.size
  }

  /** The refusal still in force for this key and cost, its times adjusted to `now`. */
  check(key: string, cost: number, now: number): Decision | undefined {
    const byCost = this.current.get(key) ?? this.previous.get(key)
    const blocked = byCost?.get(cost)
    if (blocked === undefined) return undefined
    if (now >= blocked.until) {
      byCost?.delete(cost)
      return undefined
    }
    const elapsed = now - blocked.at
    const { decision } = blocked
    return {
      ...decision,
      retryAfterMs: blocked.until - now,
      resetAfterMs: Math.max(0, decision.resetAfterMs - elapsed),
      policies: decision.policies.map((p) => ({
        ...p,
        retryAfterMs: p.allowed ? 0 : Math.max(0, p.retryAfterMs - elapsed),
        resetAfterMs: Math.max(0, p.resetAfterMs - elapsed),
      })),
    }
  }

  remember(key: string, cost: number, decision: Decision, now: number): void {
    let byCost = this.current.get(key)
    if (byCost === undefined) {
      byCost = this.previous.get(key) ?? new Map()
      this.previous.delete(key)
      if (this.current.size * 2 >= this.maxKeys) {
        this.previous = this.current
        this.current = new Map()
      }
      this.current.set(key, byCost)
    }
    byCost.set(cost, { until: now + decision.retryAfterMs, decision, at: now })
  }

  forget(key: string): void {
    this.current.delete(key)
    this.previous.delete(key)
  }
}
