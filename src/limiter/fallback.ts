/**
 * The local limits a limiter falls back to while its store is down: each
 * instance takes its share, `limit / instances` (at least 1), and refills at
 * `rate / instances`, under the same policy names so decisions read the same.
 */
import { resolvePolicy } from '../core/policy.ts'
import type { ResolvedPolicy } from '../core/types.ts'

export function scalePolicies(policies: readonly ResolvedPolicy[], instances: number): readonly ResolvedPolicy[] {
  const share = (units: number) => Math.max(1, Math.floor(units / instances))
  return Object.freeze(policies.map((policy): ResolvedPolicy => {
    switch (policy.algorithm) {
      case 'fixed-window':
      case 'sliding-log':
      case 'sliding-window':
        return resolvePolicy({ ...policy, limit: share(policy.limit) })
      case 'token-bucket':
        return resolvePolicy({ ...policy, capacity: share(policy.capacity), refillIntervalMs: policy.refillIntervalMs * instances })
      case 'leaky-bucket':
        return resolvePolicy({ ...policy, capacity: share(policy.capacity), leakIntervalMs: policy.leakIntervalMs * instances })
    }
  }))
}
