/**
 * sluice: rate limiting for Node.js.
 *
 * @example
 * import { Limiter } from 'sluice'
 * const limiter = new Limiter({ policies: { algorithm: 'token-bucket', capacity: 20, refillTokens: 10, refillIntervalMs: 1000 } })
 * const decision = await limiter.limit('user:42')
 * if (!decision.allowed) console.log(`retry in ${decision.retryAfterMs} ms`)
 */
export { Limiter, normalizeKey, MAX_KEY_LENGTH, type LimiterOptions, type LimitOptions, type KeyOptions, type RefundOptions, type LimiterObserver } from './limiter/limiter.ts'
export { combine } from './limiter/decision.ts'
export { rateLimited, RateLimited, RateLimitAction, type RateLimitedOptions } from './limiter/rate-limited.ts'
export { MemoryStore, type MemoryStoreOptions } from './stores/memory/memory-store.ts'
export type { Store, SyncStore, StoreCall } from './stores/store.ts'
export { RedisStore, redisKey, type RedisStoreOptions, type RedisClient, type IoredisClient, type NodeRedisClient } from './stores/redis/redis-store.ts'
export { resolvePolicy, resolvePolicies, limitOf, formatDuration, RESERVABLE, MAX_WAIT_MS } from './core/policy.ts'
export { SluiceError, PolicyError, ArgumentError, RateLimitedError, QuotaExhaustedError, QueueFullError, StoreNotAppliedError } from './core/errors.ts'
export { monotonicClock, type Clock } from './core/clock.ts'
export type {
  Policy,
  ResolvedPolicy,
  AlgorithmName,
  FixedWindowPolicy,
  SlidingLogPolicy,
  SlidingWindowPolicy,
  TokenBucketPolicy,
  LeakyBucketPolicy,
  Decision,
  PolicyDecision,
} from './core/types.ts'
export { createRateLimitHandler, httpStatePrefix, rateLimitOf, type RateLimitOptions, type RuleOptions, type KeyResolver, type HttpRequest, type HttpOutcome, type DecisionEvent, type LimitedEvent, type LimitedResponse } from './http/handler.ts'
export { rateLimitHeaders, retryAfterHeader, windowSeconds, type HeaderOptions, type StandardHeaders } from './http/headers.ts'
export { clientIpResolver, type ClientIpOptions } from './http/client-ip.ts'
export { firstOf, apiKey, jwtClaim, jwtVerifier, claimOf, clientIpKey, type ApiKeyOptions, type JwtClaimOptions } from './http/identity.ts'
export { compileMatch, type MatchOptions } from './http/match.ts'
export * as algorithms from './algorithms/index.ts'
