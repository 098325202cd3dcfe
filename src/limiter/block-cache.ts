/**
 * Keys known to be refused until a given time, kept in this process so that
 * they are refused again without a round trip to the store (the way peers keep
 * "blocked" keys in memory under attack). Bounded by a GenerationalMap: a
 * dropped key costs at most one round trip to the store.
 *
 * An entry answers only a call of the same cost: a cheaper call may fit sooner,
 * and a costlier one later than the retry time that was given. A refusal stays
 * valid until its retry time because only time frees units: other calls can
 * only take more. The one exception is `reset`, which clears the entry here;
 * a reset made by another process is seen when the entry expires.
 */
import { GenerationalMap } from '../core/generational-map.ts'
import type { Decision } from '../core/types.ts'

interface Blocked {
  until: number
  decision: Decision
  at: number
}

export class BlockCache {
  /** Per key, the refusals in force by cost. */
  private readonly entries: GenerationalMap<Map<number, Blocked>>

  constructor(readonly maxKeys: number) {
    this.entries = new GenerationalMap(maxKeys)
  }

  get size(): number {
    return this.entries.size
  }

  /** The refusal still in force for this key and cost, its times adjusted to `now`. */
  check(key: string, cost: number, now: number): Decision | undefined {
    const byCost = this.entries.get(key)
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
        moreAfterMs: Math.max(0, p.moreAfterMs - elapsed),
      })),
    }
  }

  remember(key: string, cost: number, decision: Decision, now: number): void {
    const byCost = this.entries.get(key) ?? new Map<number, Blocked>()
    byCost.set(cost, { until: now + decision.retryAfterMs, decision, at: now })
    this.entries.set(key, byCost)
  }

  forget(key: string): void {
    this.entries.delete(key)
  }
}
