/**
 * `sluice/metrics`: the gateway's decision metrics for the HTTP middleware and
 * the engine, in a prom-client registry of the application's.
 */
import promClient, { type Registry } from 'prom-client'
import { ArgumentError } from '../core/errors.ts'
import { checkOptions } from '../core/options.ts'
import type { Decision } from '../core/types.ts'
import type { LimiterObserver } from '../limiter/limiter.ts'
import { DECISION_METRIC_NAMES, DecisionMetrics } from './decisions.ts'

export interface RateLimitMetricsOptions {
  /**
   * The prom-client registry the metrics join. Default: prom-client's global
   * `register` (the application's own when npm installed one prom-client for
   * both; pass yours when in doubt).
   */
  registry?: Registry
  /** Put before every metric name (may be empty). Default `sluice_`. */
  prefix?: string
}

/** What a decision event needs to be counted: the middleware's `onDecision` event, or one an engine user writes. */
export interface CountedDecision {
  /** The rule's name (`a+b` for rules decided together): the `rule` label. */
  rule: string
  decision: Decision
  /** A shadow rule's refusal is counted as `shadow_limited`. */
  shadow: boolean
}

export interface RateLimitMetrics {
  /** Counts a decision: the middleware's `onDecision`. */
  onDecision: (event: CountedDecision) => void
  /** Times store calls and counts their failures and block-cache hits: a limiter's or the middleware's `observer`. */
  observer: LimiterObserver
}

const OPTIONS = new Set(['registry', 'prefix'])
/** The start of a Prometheus metric name, or nothing. */
const METRIC_PREFIX = /^(?:[a-zA-Z_:][a-zA-Z0-9_:]*)?$/

/**
 * One set of metrics per registry and prefix: a second call (another app, a test's) counts into
 * the same series, and one after the registry was cleared makes them again.
 */
const made = new WeakMap<Registry, Map<string, DecisionMetrics<'rule'>>>()

/**
 * Prometheus metrics of rate-limit decisions, for the middleware:
 * `app.use(rateLimit({ rules, ...rateLimitMetrics() }))`, then serve the
 * registry's `metrics()`. The names are the gateway's, labelled by rule:
 * `sluice_decisions_total{rule,policy,outcome}`, `sluice_near_limit_total`,
 * `sluice_store_latency_seconds`, `sluice_store_errors_total`,
 * `sluice_store_fallback_active`, `sluice_block_cache_hits_total`.
 */
export function rateLimitMetrics(options: RateLimitMetricsOptions = {}): RateLimitMetrics {
  checkOptions('options', 'a rateLimitMetrics option', options, OPTIONS)
  const registry = options.registry === undefined ? promClient.register : options.registry
  if (typeof registry !== 'object' || registry === null || typeof registry.registerMetric !== 'function' || typeof registry.getSingleMetric !== 'function') {
    throw new ArgumentError('registry', registry, "must be a prom-client Registry (new Registry(), or prom-client's register)")
  }
  const prefix = options.prefix === undefined ? 'sluice_' : options.prefix
  if (typeof prefix !== 'string' || !METRIC_PREFIX.test(prefix)) {
    throw new ArgumentError('prefix', prefix, 'must start a Prometheus metric name: letters, digits, _ and :, not starting with a digit (or be empty)')
  }
  let byPrefix = made.get(registry)
  if (byPrefix === undefined) made.set(registry, (byPrefix = new Map()))
  let metrics = byPrefix.get(prefix)
  if (metrics === undefined || !metrics.registeredIn(registry)) {
    // Checked before any is made, so a refusal leaves the registry as it was.
    const taken = DECISION_METRIC_NAMES.map((name) => `${prefix}${name}`).find((name) => registry.getSingleMetric(name) !== undefined)
    if (taken !== undefined) {
      throw new ArgumentError('prefix', prefix, `names ${taken}, which the registry already holds and rateLimitMetrics did not make`, 'give another prefix')
    }
    metrics = new DecisionMetrics(registry, 'rule', prefix)
    byPrefix.set(prefix, metrics)
  }
  const counted = metrics
  return {
    onDecision: (event) => counted.decision(event.rule, event.decision, event.shadow),
    observer: counted.observer,
  }
}
