/**
 * The shapes every layer shares: policies as users write them, policies once
 * validated, and decisions. See shared/DESIGN.md for the semantics.
 */

/** What every policy may add to its algorithm's fields. */
export interface Blocking {
  /**
   * After this policy refuses a call, refuse every call of the key for this
   * long (a ban, e.g. after too many failed logins); the block is not
   * extended by the calls it refuses. Not for shape-mode leaky buckets, nor
   * with reservations, shards or leases.
   */
  blockMs?: number
}

/** Windows aligned to the epoch (`floor(now / windowMs)`); only allowed calls count. */
export interface FixedWindowPolicy extends Blocking {
  algorithm: 'fixed-window'
  name?: string
  /** Units allowed per window. */
  limit: number
  windowMs: number
}

/** Exact rolling window: one log entry per allowed call (the memory store: per millisecond with calls). Memory O(limit) per key. */
export interface SlidingLogPolicy extends Blocking {
  algorithm: 'sliding-log'
  name?: string
  limit: number
  windowMs: number
}

/** Rolling window approximated from two fixed-window counters (O(1) memory). */
export interface SlidingWindowPolicy extends Blocking {
  algorithm: 'sliding-window'
  name?: string
  limit: number
  windowMs: number
}

/** Starts full; refills `refillTokens` per `refillIntervalMs`, never above `capacity`. */
export interface TokenBucketPolicy extends Blocking {
  algorithm: 'token-bucket'
  name?: string
  capacity: number
  refillTokens: number
  refillIntervalMs: number
  /** `greedy` (default) refills continuously; `interval` adds whole batches at each interval. */
  refill?: 'greedy' | 'interval'
}

/** GCRA with one stored timestamp; drains `leakTokens` per `leakIntervalMs`. */
export interface LeakyBucketPolicy extends Blocking {
  algorithm: 'leaky-bucket'
  name?: string
  capacity: number
  leakTokens: number
  leakIntervalMs: number
  /**
   * `police` (default) rejects over-limit calls at once. `shape` admits calls with a
   * `waitMs` that spaces them at the leak rate, rejecting only when more than
   * `capacity` units would be waiting (nginx `limit_req` without `nodelay`).
   */
  mode?: 'police' | 'shape'
}

export type Policy =
  | FixedWindowPolicy
  | SlidingLogPolicy
  | SlidingWindowPolicy
  | TokenBucketPolicy
  | LeakyBucketPolicy

export type AlgorithmName = Policy['algorithm']

/** Every field present but `blockMs`, which is there only for a policy that blocks. */
type Resolved<P extends Policy> = Readonly<Required<Omit<P, 'blockMs'>> & Pick<P, 'blockMs'>>

/** A validated policy: every field present, name unique within its limiter. Frozen. */
export type ResolvedPolicy =
  | Resolved<FixedWindowPolicy>
  | Resolved<SlidingLogPolicy>
  | Resolved<SlidingWindowPolicy>
  | Resolved<TokenBucketPolicy>
  | Resolved<LeakyBucketPolicy>

export type ResolvedPolicyOf<A extends AlgorithmName> = Extract<ResolvedPolicy, { algorithm: A }>

/** The outcome of one call against one policy. */
export interface PolicyDecision {
  /** The policy's name. */
  policy: string
  allowed: boolean
  /** The policy's limit (its capacity for buckets). */
  limit: number
  /** Whole units still available after this call; never negative. */
  remaining: number
  /** Milliseconds until the policy is fully replenished / its window resets. */
  resetAfterMs: number
  /**
   * Milliseconds until there is more than `remaining`, what the reset header
   * fields carry: for a bucket, exactly when a call of cost remaining + 1
   * could pass without waiting (its next unit; 0 when full); for a window with
   * none left, exactly when a call of cost 1 could (a sliding log's oldest
   * entry leaving, a sliding-window counter's decay, a fixed window's reset);
   * for a window with units left, resetAfterMs, by when there certainly is more.
   */
  moreAfterMs: number
  /** 0 when allowed; otherwise milliseconds until this same call could succeed. */
  retryAfterMs: number
  /** Greater than 0 only for an allowed reservation: sleep this long, then proceed. */
  waitMs: number
}

/** The outcome of one call against all of a limiter's policies (all-or-nothing). */
export interface Decision {
  allowed: boolean
  /** The binding policy's limit. */
  limit: number
  /** Whole units still available after this call in the binding policy; never negative. */
  remaining: number
  /** Milliseconds until the binding policy is fully replenished / its window resets. */
  resetAfterMs: number
  /** 0 when allowed; otherwise milliseconds until this same call could succeed. */
  retryAfterMs: number
  /** Greater than 0 only for an allowed reservation: sleep this long, then proceed. */
  waitMs: number
  /** Name of the binding (most restrictive) policy. */
  policy: string
  /** One entry per policy, in the order the policies were given. */
  policies: PolicyDecision[]
  /** True when the store could not decide and the failure policy did instead. */
  degraded: boolean
  /** Why the decision is degraded (e.g. 'timeout', 'store-error'); absent otherwise. */
  reason?: string
}
