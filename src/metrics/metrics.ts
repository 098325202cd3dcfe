/**
 * The gateway's Prometheus metrics (prom-client), in one registry of their own.
 * Labels stay bounded: routes and policies come from the config, outcomes and
 * reasons from fixed sets; no key, path or client ever becomes a label.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import type { LimiterObserver } from '../limiter/limiter.ts'
import type { Decision } from '../core/types.ts'

export type DecisionOutcome = 'allowed' | 'limited' | 'shadow_limited' | 'degraded'
const OUTCOMES: readonly DecisionOutcome[] = ['allowed', 'limited', 'shadow_limited', 'degraded']
/** In a route and policy's counts, the slot after the outcomes': allowed decisions near the limit. */
const NEAR_LIMIT = OUTCOMES.length

/** A decision is near its limit when less than this share of the binding policy is left. */
const NEAR_LIMIT_SHARE = 0.2

/**
 * Per-request counts, kept as plain numbers under two keys and added to their
 * prom-client counters when those are read (a scrape calls each counter's
 * `collect` first). prom-client validates and hashes a call's labels each
 * time, about 200 ns a call, and a request made three such calls.
 */
class PendingCounts<Second> {
  private readonly counts = new Map<string, Map<Second, number[]>>()

  constructor(private readonly slots: number) {}

  /** The counts of `first` and `second`, one per slot, to add to. */
  of(first: string, second: Second): number[] {
    let inner = this.counts.get(first)
    if (inner === undefined) this.counts.set(first, (inner = new Map()))
    let counts = inner.get(second)
    if (counts === undefined) inner.set(second, (counts = new Array<number>(this.slots).fill(0)))
    return counts
  }

  /** Hands each slot's count since the last time to `add`, and starts it again from 0. */
  drain(slot: number, add: (first: string, second: Second, count: number) => void): void {
    for (const [first, inner] of this.counts) {
      for (const [second, counts] of inner) {
        const count = counts[slot] as number
        if (count === 0) continue
        counts[slot] = 0
        add(first, second, count)
      }
    }
  }
}

export class GatewayMetrics {
  readonly registry = new Registry()
  private readonly decisions: Counter<'route' | 'policy' | 'outcome'>
  private readonly nearLimit: Counter<'route' | 'policy'>
  private readonly storeLatency: Histogram<'outcome'>
  private readonly storeErrors: Counter<'reason'>
  private readonly degradedState: Gauge
  private readonly storeUp: Gauge
  private readonly blockCacheHits: Counter
  private readonly requests: Counter<'route' | 'status'>
  private readonly upstreamFailures: Counter<'route' | 'failure'>
  private readonly upstreamRetries: Counter<'route' | 'upstream' | 'failure'>
  private readonly requestDuration: Histogram<'route'>
  private readonly configReloads: Counter<'result'>
  private readonly configInfo: Gauge<'version'>
  private readonly tunnels: Gauge<'route'>
  private readonly upstreamHealthy: Gauge<'route' | 'upstream'>
  /** Decisions by route and policy: a count per outcome, then the near-limit count. */
  private readonly pendingDecisions = new PendingCounts<string>(OUTCOMES.length + 1)
  /** Requests by route and status. */
  private readonly pendingRequests = new PendingCounts<number>(1)

  constructor() {
    const registers = [this.registry]
    const pendingDecisions = this.pendingDecisions
    const pendingRequests = this.pendingRequests
    collectDefaultMetrics({ register: this.registry, prefix: 'sluice_' })
    this.decisions = new Counter({
      name: 'sluice_decisions_total',
      help: 'Rate-limit decisions by route, binding policy and outcome (allowed, limited, shadow_limited, degraded).',
      labelNames: ['route', 'policy', 'outcome'],
      registers,
      collect() {
        OUTCOMES.forEach((outcome, slot) => pendingDecisions.drain(slot, (route, policy, count) => this.inc({ route, policy, outcome }, count)))
      },
    })
    this.nearLimit = new Counter({
      name: 'sluice_near_limit_total',
      help: `Allowed decisions that left less than ${NEAR_LIMIT_SHARE * 100}% of the binding policy's limit.`,
      labelNames: ['route', 'policy'],
      registers,
      collect() {
        pendingDecisions.drain(NEAR_LIMIT, (route, policy, count) => this.inc({ route, policy }, count))
      },
    })
    this.storeLatency = new Histogram({
      name: 'sluice_store_latency_seconds',
      help: 'Time of each call to a store outside the process (Redis).',
      labelNames: ['outcome'],
      buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
      registers,
    })
    this.storeErrors = new Counter({ name: 'sluice_store_errors_total', help: 'Store calls that failed or timed out.', labelNames: ['reason'], registers })
    this.degradedState = new Gauge({ name: 'sluice_store_fallback_active', help: '1 while decisions are made by the failure policy (fallback, open or closed) instead of the store.', registers })
    this.storeUp = new Gauge({ name: 'sluice_store_up', help: '1 when the store answered the last health probe.', registers })
    this.blockCacheHits = new Counter({ name: 'sluice_block_cache_hits_total', help: 'Refusals answered from the local cache of blocked keys, without a store call.', registers })
    this.requests = new Counter({
      name: 'sluice_requests_total',
      help: 'Requests answered, by route and status code.',
      labelNames: ['route', 'status'],
      registers,
      collect() {
        pendingRequests.drain(0, (route, status, count) => this.inc({ route, status: String(status) }, count))
      },
    })
    this.upstreamFailures = new Counter({ name: 'sluice_upstream_failures_total', help: 'Requests the upstream could not answer, the client getting a 502 or 504 or a response cut short (unreachable, closed, invalid, timeout, broken).', labelNames: ['route', 'failure'], registers })
    this.upstreamRetries = new Counter({ name: 'sluice_upstream_retries_total', help: 'Requests sent again after an upstream failed them without answering (unreachable, closed), by the upstream that failed: failures the client did not see.', labelNames: ['route', 'upstream', 'failure'], registers })
    this.requestDuration = new Histogram({
      name: 'sluice_request_duration_seconds',
      help: 'Time from request to response end, by route.',
      labelNames: ['route'],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers,
    })
    this.configReloads = new Counter({ name: 'sluice_config_reloads_total', help: 'Config reloads by result (applied, refused).', labelNames: ['result'], registers })
    this.configInfo = new Gauge({ name: 'sluice_config_info', help: 'The running config version (1 for the current one).', labelNames: ['version'], registers })
    this.tunnels = new Gauge({ name: 'sluice_tunnels_open', help: 'WebSocket connections joined to their upstream, open now.', labelNames: ['route'], registers })
    this.upstreamHealthy = new Gauge({ name: 'sluice_upstream_healthy', help: "1 while an upstream passes its route's health check, 0 while it fails it (routes with healthCheck only).", labelNames: ['route', 'upstream'], registers })
    this.storeUp.set(1)
  }

  /** What the limiters report that decisions do not carry. */
  readonly observer: LimiterObserver = {
    storeCall: (durationMs, outcome) => {
      this.storeLatency.observe({ outcome }, durationMs / 1000)
      if (outcome !== 'ok') this.storeErrors.inc({ reason: outcome })
    },
    blockCacheHit: () => this.blockCacheHits.inc(),
  }

  decision(route: string, decision: Decision, shadow: boolean): void {
    const degraded = decision.degraded === true
    const outcome: DecisionOutcome = degraded ? 'degraded' : decision.allowed ? 'allowed' : shadow ? 'shadow_limited' : 'limited'
    const counts = this.pendingDecisions.of(route, decision.policy)
    ;(counts[OUTCOMES.indexOf(outcome)] as number)++
    if (decision.allowed && decision.remaining < decision.limit * NEAR_LIMIT_SHARE) (counts[NEAR_LIMIT] as number)++
    this.degradedState.set(degraded ? 1 : 0)
  }

  request(route: string, status: number, seconds: number): void {
    ;(this.pendingRequests.of(route, status)[0] as number)++
    this.requestDuration.observe({ route }, seconds)
  }

  /** A WebSocket joined to its upstream; `closed` is to be called when it ends. */
  tunnelOpened(route: string): () => void {
    this.tunnels.inc({ route })
    return () => this.tunnels.dec({ route })
  }

  upstreamHealth(route: string, upstream: string, healthy: boolean): void {
    this.upstreamHealthy.set({ route, upstream }, healthy ? 1 : 0)
  }

  /** Drops every upstream's health series (a reload sets those of the routes it keeps again). */
  forgetUpstreamHealth(): void {
    this.upstreamHealthy.reset()
  }

  upstreamFailure(route: string, failure: string): void {
    this.upstreamFailures.inc({ route, failure })
  }

  upstreamRetry(route: string, upstream: string, failure: string): void {
    this.upstreamRetries.inc({ route, upstream, failure })
  }

  storeHealth(up: boolean): void {
    this.storeUp.set(up ? 1 : 0)
  }

  configLoaded(version: string, previous: string | undefined): void {
    if (previous !== undefined) {
      this.configInfo.remove({ version: previous })
      this.configReloads.inc({ result: 'applied' })
    }
    this.configInfo.set({ version }, 1)
  }

  configRefused(): void {
    this.configReloads.inc({ result: 'refused' })
  }
}
