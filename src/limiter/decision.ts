import type { Decision, PolicyDecision } from '../core/types.ts'

/**
 * Folds per-policy decisions into the call's decision. The binding policy is,
 * for a refused call, the refusing policy that frees up last (largest
 * retryAfterMs); for an allowed call, the one with the fewest units left (ties:
 * the slower to reset). An allowed call waits for its longest reservation.
 */
export function combine(decisions: PolicyDecision[]): Decision {
  if (decisions.length === 1) {
    const d = decisions[0] as PolicyDecision
    return {
      allowed: d.allowed,
      limit: d.limit,
      remaining: d.remaining,
      resetAfterMs: d.resetAfterMs,
      retryAfterMs: d.retryAfterMs,
      waitMs: d.waitMs,
      policy: d.policy,
      policies: decisions,
      degraded: false,
    }
  }
  let binding = decisions[0] as PolicyDecision
  let allowed = binding.allowed
  let waitMs = binding.waitMs
  for (let i = 1; i < decisions.length; i++) {
    const d = decisions[i] as PolicyDecision
    if (!d.allowed) {
      if (allowed || d.retryAfterMs > binding.retryAfterMs) binding = d
      allowed = false
    } else if (allowed) {
      if (d.remaining < binding.remaining || (d.remaining === binding.remaining && d.resetAfterMs > binding.resetAfterMs)) {
        binding = d
      }
    }
    if (d.waitMs > waitMs) waitMs = d.waitMs
  }
  return {
    allowed,
    limit: binding.limit,
    remaining: binding.remaining,
    resetAfterMs: binding.resetAfterMs,
    retryAfterMs: allowed ? 0 : binding.retryAfterMs,
    waitMs: allowed ? waitMs : 0,
    policy: binding.policy,
    policies: decisions,
    degraded: false,
  }
}
