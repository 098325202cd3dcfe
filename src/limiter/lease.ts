/**
 * Leases for hot keys (the local + global hybrid): units taken from the store
 * in one call and spent in this process, so a key hit thousands of times a
 * second costs the store one call per lease. Bounded by a GenerationalMap; a
 * lease dropped that way is simply not returned.
 */
import { GenerationalMap } from '../core/generational-map.ts'
import type { Decision, PolicyDecision } from '../core/types.ts'

interface Lease {
  /** Units still to spend. */
  units: number
  /** Epoch ms after which the lease is returned instead of spent. */
  expiresAt: number
  /** The decision that took the lease, for the numbers of local decisions. */
  taken: Decision
  takenAt: number
}

export class LeaseBook {
  private readonly leases: GenerationalMap<Lease>

  constructor(maxKeys: number) {
    this.leases = new GenerationalMap(maxKeys)
  }

  /** Spends `cost` from the key's lease if it has enough and is still fresh. */
  spend(key: string, cost: number, now: number): Decision | undefined {
    const lease = this.leases.get(key)
    if (lease === undefined || now >= lease.expiresAt || lease.units < cost) return undefined
    lease.units -= cost
    return localDecision(lease, now)
  }

  /** Removes the key's lease and says how many units it still held. */
  take(key: string): number {
    const lease = this.leases.get(key)
    this.leases.delete(key)
    return lease?.units ?? 0
  }

  /** Records a lease of `units` taken with `decision` (which charged them). */
  grant(key: string, units: number, decision: Decision, now: number, maxAgeMs: number): Decision {
    const lease: Lease = { units, expiresAt: now + maxAgeMs, taken: decision, takenAt: now }
    this.leases.set(key, lease)
    return localDecision(lease, now)
  }
}

/**
 * An allowed decision made from a lease. `remaining` counts the store's
 * remaining when the lease was taken plus the lease's unspent units: what is
 * left as far as this process can tell.
 */
function localDecision(lease: Lease, now: number): Decision {
  const elapsed = now - lease.takenAt
  const adjust = <D extends Decision | PolicyDecision>(d: D): D => ({
    ...d,
    allowed: true,
    remaining: Math.min(d.limit, d.remaining + lease.units),
    resetAfterMs: Math.max(0, d.resetAfterMs - elapsed),
    retryAfterMs: 0,
    waitMs: 0,
  })
  const policies = lease.taken.policies.map((d) => ({ ...adjust(d), moreAfterMs: Math.max(0, d.moreAfterMs - elapsed) }))
  return { ...adjust(lease.taken), policies, degraded: false }
}
