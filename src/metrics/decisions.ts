/**
 * Rate-limit decision metrics (prom-client), shared by the gateway (labelled
 * by route) and the HTTP middleware (labelled by rule, through
 * `rateLimitMetrics` in `sluice/metrics`). Labels stay bounded: rules, routes
 * and policies come from the configuration, outcomes and reasons from fixed
 * sets; no key, path or client ever becomes a label.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client'
import type { LimiterObserver } from '../limiter/limiter.ts'
import type { Decision } from '../core/types.ts'
import { TwoLabelCounter } from './counter.ts'
import { DecisionTally, MEANING, NEAR_LIMIT, OUTCOMES, STORE_LATENCY_BUCKETS, type DecisionOutcome } from './tally.ts'

/** The metric names, after the prefix, that DecisionMetrics registers. */
export const DECISION_METRIC_NAMES = ['decisions_total', 'near_limit_total', 'store_latency_seconds', 'store_errors_total', 'store_fallback_active', 'block_cache_hits_total', 'refunds_owed', 'refunds_dropped_total'] as const

/**
 * Decisions by subject (`route` or `rule`), binding policy and outcome; the
 * allowed ones near their limit; the store's latency and errors; whether
 * decisions are being made without the store; block-cache hits.
 */
export class DecisionMetrics<Subject extends string> {
  /** What the limiters report that decisions do not carry: pass it as their `observer`. */
  readonly observer: LimiterObserver
  private readonly tally = new DecisionTally()
  private readonly decisions: TwoLabelCounter<string>
  private readonly decisionsName: string

  constructor(registry: Registry, subject: Subject, prefix = 'sluice_') {
    const registers = [registry]
    this.decisionsName = `${prefix}decisions_total`
    this.decisions = new TwoLabelCounter(
      this.decisionsName,
      MEANING.decisions(subject),
      this.tally.counts,
      [subject, 'policy'],
      OUTCOMES.map((outcome, slot) => ({ slot, label: ['outcome', outcome] })),
      registry,
    )
    new TwoLabelCounter(
      `${prefix}near_limit_total`,
      MEANING.nearLimit,
      this.tally.counts,
      [subject, 'policy'],
      [{ slot: NEAR_LIMIT }],
      registry,
    )
    const storeLatency = new Histogram({
      name: `${prefix}store_latency_seconds`,
      help: MEANING.storeLatency,
      labelNames: ['outcome'],
      buckets: [...STORE_LATENCY_BUCKETS],
      registers,
    })
    const storeErrors = new Counter({ name: `${prefix}store_errors_total`, help: MEANING.storeErrors, labelNames: ['reason'], registers })
    const latest = () => this.tally.lastDegraded
    new Gauge({
      name: `${prefix}store_fallback_active`,
      help: MEANING.fallbackActive,
      registers,
      collect() {
        this.set(latest() ? 1 : 0)
      },
    })
    const blockCacheHits = new Counter({ name: `${prefix}block_cache_hits_total`, help: MEANING.blockCacheHits, registers })
    const owed = () => this.tally.owed
    new Gauge({
      name: `${prefix}refunds_owed`,
      help: MEANING.refundsOwed,
      registers,
      collect() {
        this.set(owed())
      },
    })
    const refundsDropped = new Counter({
      name: `${prefix}refunds_dropped_total`,
      help: MEANING.refundsDropped,
      registers,
    })
    this.observer = {
      storeCall: (durationMs, outcome) => {
        storeLatency.observe({ outcome }, durationMs / 1000)
        if (outcome !== 'ok') storeErrors.inc({ reason: outcome })
      },
      blockCacheHit: () => blockCacheHits.inc(),
      refundOwed: (event) => {
        this.tally.refundOwed(event)
        if (event === 'dropped') refundsDropped.inc()
      },
    }
  }

  /** Refunds owed now by the limiters this observes. */
  get refundsOwed(): number {
    return this.tally.owed
  }

  /** False once the registry has let them go (`registry.clear()`, as test suites do between tests). */
  registeredIn(registry: Registry): boolean {
    return (registry.getSingleMetric(this.decisionsName) as unknown) === this.decisions
  }

  /** Counts one decision of `subject` (a route's or a rule's name); says its outcome. */
  decision(subject: string, decision: Decision, shadow: boolean): DecisionOutcome {
    return this.tally.decision(subject, decision, shadow)
  }
}
