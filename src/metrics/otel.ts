/**
 * `sluice/otel`: the decision metrics of `sluice/metrics`, recorded through
 * the OpenTelemetry metrics API instead of prom-client, for applications that
 * export with an OpenTelemetry SDK (OTLP, or its own Prometheus exporter).
 * The same counts, kept the same way (DecisionTally): a decision adds to an
 * array, and the counters are observed from it when the SDK collects, so no
 * attribute set is built or hashed per decision.
 */
import { metrics, ValueType, type Attributes, type Meter } from '@opentelemetry/api'
import { ArgumentError } from '../core/errors.ts'
import { checkOptions } from '../core/options.ts'
import type { LimiterObserver } from '../limiter/limiter.ts'
import type { CountedDecision, RateLimitMetrics } from './index.ts'
import { DecisionTally, MEANING, NEAR_LIMIT, OUTCOMES, STORE_LATENCY_BUCKETS } from './tally.ts'

export type { CountedDecision, RateLimitMetrics } from './index.ts'

export interface RateLimitTelemetryOptions {
  /**
   * The meter the instruments are made with. Default: the global meter
   * provider's meter `sluice`, taken at the first decision or store call (the
   * metrics API has no stand-in: a meter taken before the SDK is registered
   * records nothing, ever).
   */
  meter?: Meter
  /** Put before every instrument name (may be empty). Default `sluice.`. */
  prefix?: string
}

const OPTIONS = new Set(['meter', 'prefix'])
/** An instrument name (OpenTelemetry's syntax) once a suffix is added, or nothing. */
const INSTRUMENT_PREFIX = /^(?:[A-Za-z][A-Za-z0-9_./-]{0,200})?$/
const SCOPE = 'sluice'

/** The instruments of one meter and prefix, and the counts they are observed from. */
class Telemetry {
  readonly observer: Required<LimiterObserver>
  private readonly tally = new DecisionTally()

  constructor(meter: Meter, prefix: string) {
    const decisions = meter.createObservableCounter(`${prefix}decisions`, {
      description: MEANING.decisions('rule'),
      unit: '{decision}',
      valueType: ValueType.INT,
    })
    const nearLimit = meter.createObservableCounter(`${prefix}near_limit`, {
      description: MEANING.nearLimit,
      unit: '{decision}',
      valueType: ValueType.INT,
    })
    meter.addBatchObservableCallback((result) => {
      for (const [rule, policy, counts] of this.tally.counts.entries()) {
        OUTCOMES.forEach((outcome, slot) => {
          const count = counts[slot] as number
          if (count !== 0) result.observe(decisions, count, { rule, policy, outcome })
        })
        const near = counts[NEAR_LIMIT] as number
        if (near !== 0) result.observe(nearLimit, near, { rule, policy })
      }
    }, [decisions, nearLimit])
    meter.createObservableGauge(`${prefix}store_fallback_active`, {
      description: MEANING.fallbackActive,
      valueType: ValueType.INT,
    }).addCallback((result) => result.observe(this.tally.lastDegraded ? 1 : 0))
    meter.createObservableGauge(`${prefix}refunds_owed`, {
      description: MEANING.refundsOwed,
      unit: '{refund}',
      valueType: ValueType.INT,
    }).addCallback((result) => result.observe(this.tally.owed))

    const storeLatency = meter.createHistogram(`${prefix}store_latency`, {
      description: MEANING.storeLatency,
      unit: 's',
      advice: { explicitBucketBoundaries: [...STORE_LATENCY_BUCKETS] },
    })
    const storeErrors = meter.createCounter(`${prefix}store_errors`, { description: MEANING.storeErrors, unit: '{call}', valueType: ValueType.INT })
    const blockCacheHits = meter.createCounter(`${prefix}block_cache_hits`, {
      description: MEANING.blockCacheHits,
      unit: '{decision}',
      valueType: ValueType.INT,
    })
    const refundsDropped = meter.createCounter(`${prefix}refunds_dropped`, {
      description: MEANING.refundsDropped,
      unit: '{refund}',
      valueType: ValueType.INT,
    })
    // A call's attributes are one of three: made once, not per call.
    const byOutcome: Record<'ok' | 'timeout' | 'store-error', Attributes> = { ok: { outcome: 'ok' }, timeout: { outcome: 'timeout' }, 'store-error': { outcome: 'store-error' } }
    const byReason: Record<'timeout' | 'store-error', Attributes> = { timeout: { reason: 'timeout' }, 'store-error': { reason: 'store-error' } }
    this.observer = {
      storeCall: (durationMs, outcome) => {
        storeLatency.record(durationMs / 1000, byOutcome[outcome])
        if (outcome !== 'ok') storeErrors.add(1, byReason[outcome])
      },
      blockCacheHit: () => blockCacheHits.add(1),
      refundOwed: (event) => {
        this.tally.refundOwed(event)
        if (event === 'dropped') refundsDropped.add(1)
      },
    }
  }

  decision(event: CountedDecision): void {
    this.tally.decision(event.rule, event.decision, event.shadow)
  }
}

/**
 * One set of instruments per meter and prefix: a second call (another app,
 * a test's) counts into the same ones, as OpenTelemetry would otherwise
 * observe each attribute set twice.
 */
const made = new WeakMap<Meter, Map<string, Telemetry>>()

function telemetryOf(meter: Meter, prefix: string): Telemetry {
  let byPrefix = made.get(meter)
  if (byPrefix === undefined) made.set(meter, (byPrefix = new Map()))
  let telemetry = byPrefix.get(prefix)
  if (telemetry === undefined) byPrefix.set(prefix, (telemetry = new Telemetry(meter, prefix)))
  return telemetry
}

/**
 * OpenTelemetry metrics of rate-limit decisions, for the middleware:
 * `app.use(rateLimit({ rules, ...rateLimitTelemetry() }))`, or a `Limiter`'s
 * `observer` and its decisions given to `onDecision`. Instruments (after the
 * prefix): `decisions` {rule, policy, outcome}, `near_limit` {rule, policy},
 * `store_latency` (s) {outcome}, `store_errors` {reason},
 * `store_fallback_active`, `block_cache_hits`, `refunds_owed`,
 * `refunds_dropped`.
 */
export function rateLimitTelemetry(options: RateLimitTelemetryOptions = {}): RateLimitMetrics {
  checkOptions('options', 'a rateLimitTelemetry option', options, OPTIONS)
  const { meter } = options
  if (meter !== undefined && !isMeter(meter)) {
    throw new ArgumentError('meter', meter, "must be an OpenTelemetry Meter (metrics.getMeter('my-app'), or a MeterProvider's getMeter)")
  }
  const prefix = options.prefix === undefined ? `${SCOPE}.` : options.prefix
  if (typeof prefix !== 'string' || !INSTRUMENT_PREFIX.test(prefix)) {
    throw new ArgumentError('prefix', prefix, 'must start an OpenTelemetry instrument name: a letter, then letters, digits, _ . / and -, at most 200 characters (or be empty)')
  }
  let telemetry = meter === undefined ? undefined : telemetryOf(meter, prefix)
  const current = (): Telemetry => (telemetry ??= telemetryOf(metrics.getMeter(SCOPE), prefix))
  return {
    onDecision: (event) => current().decision(event),
    observer: {
      storeCall: (durationMs, outcome, error) => current().observer.storeCall(durationMs, outcome, error),
      blockCacheHit: () => current().observer.blockCacheHit(),
      refundOwed: (event) => current().observer.refundOwed(event),
    },
  }
}

function isMeter(value: unknown): value is Meter {
  if (typeof value !== 'object' || value === null) return false
  const meter = value as Partial<Record<keyof Meter, unknown>>
  return typeof meter.createCounter === 'function' && typeof meter.createHistogram === 'function' && typeof meter.createObservableCounter === 'function' && typeof meter.addBatchObservableCallback === 'function'
}
