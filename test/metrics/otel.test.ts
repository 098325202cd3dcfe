/**
 * sluice/otel with the middleware and the engine: real servers of every
 * adapter, the OpenTelemetry metrics SDK collecting what they recorded, and a
 * real redis-server frozen under the store.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { metrics, type Meter } from '@opentelemetry/api'
import { MeterProvider, MetricReader, type DataPoint, type Histogram } from '@opentelemetry/sdk-metrics'
import { Limiter, RedisStore } from '../../src/index.ts'
import { rateLimitTelemetry } from '../../src/metrics/otel.ts'
import type { RateLimitOptions } from '../../src/http/handler.ts'
import { startRedis, type RedisServer } from '../support/redis.ts'
import { expressServer, fastifyServer, fetchServer, nodeServer, type StartServer } from '../http/servers.ts'

/** A reader that collects when asked, as an exporter's would on its interval. */
class Reader extends MetricReader {
  protected async onForceFlush(): Promise<void> {}
  protected async onShutdown(): Promise<void> {}
}

type Collected = Map<string, Array<DataPoint<unknown>>>

function sdk(): { meter: Meter; collect: () => Promise<Collected> } {
  const reader = new Reader()
  const provider = new MeterProvider({ readers: [reader] })
  return {
    meter: provider.getMeter('test'),
    collect: async () => {
      const { resourceMetrics, errors } = await reader.collect()
      assert.deepEqual(errors, [])
      const byName: Collected = new Map()
      for (const scope of resourceMetrics.scopeMetrics) for (const metric of scope.metrics) byName.set(metric.descriptor.name, metric.dataPoints as Array<DataPoint<unknown>>)
      return byName
    },
  }
}

/** The sum of a counter's or gauge's points with these attributes (0 when there are none). */
function sum(collected: Collected, name: string, attributes: Record<string, string> = {}): number {
  return (collected.get(name) ?? [])
    .filter((point) => Object.entries(attributes).every(([k, v]) => point.attributes[k] === v))
    .reduce((total, point) => total + (point.value as number), 0)
}

/** How many values a histogram recorded with this outcome. */
function recorded(collected: Collected, name: string, outcome: string): number {
  return (collected.get(name) ?? []).filter((point) => point.attributes.outcome === outcome).reduce((total, point) => total + (point.value as Histogram).count, 0)
}

const MINUTE = 60_000
const rules: RateLimitOptions['rules'] = [
  { name: 'watch', match: { path: '/api/**' }, shadow: true, policies: { algorithm: 'sliding-log', limit: 1, windowMs: MINUTE, name: 'watch' } },
  { name: 'api', match: { path: '/api/**' }, policies: { algorithm: 'sliding-log', limit: 3, windowMs: MINUTE, name: 'api' } },
]
const OUTCOMES = ['allowed', 'limited', 'shadow_limited', 'degraded']

describe('sluice/otel: the middleware records its decisions through an OpenTelemetry meter', () => {
  const adapters: Array<[string, StartServer]> = [['node', nodeServer], ['express', expressServer], ['fastify', fastifyServer], ['fetch', fetchServer]]
  for (const [adapter, start] of adapters) {
    it(`${adapter}: allowed, limited and shadow-limited decisions by rule and policy, and those near the limit`, async () => {
      const { meter, collect } = sdk()
      const server = await start({ rules, ...rateLimitTelemetry({ meter }), onWarning: () => {} })
      try {
        const statuses = []
        for (let i = 0; i < 5; i++) statuses.push((await fetch(`${server.url}/api/items`)).status)
        assert.equal((await fetch(`${server.url}/elsewhere`)).status, 200)
        assert.deepEqual(statuses, [200, 200, 200, 429, 429])
        const collected = await collect()
        assert.deepEqual(OUTCOMES.map((outcome) => sum(collected, 'sluice.decisions', { rule: 'api', policy: 'api', outcome })), [3, 2, 0, 0])
        assert.deepEqual(OUTCOMES.map((outcome) => sum(collected, 'sluice.decisions', { rule: 'watch', policy: 'watch', outcome })), [1, 0, 4, 0])
        // No point for a count never made, so no attribute set beyond those.
        assert.equal(collected.get('sluice.decisions')?.length, 4)
        assert.equal(sum(collected, 'sluice.near_limit', { rule: 'api', policy: 'api' }), 1)
        assert.equal(sum(collected, 'sluice.near_limit', { rule: 'watch', policy: 'watch' }), 1)
        assert.equal(sum(collected, 'sluice.store_fallback_active'), 0)
        // The memory store is in the process: no store call is timed.
        assert.equal(recorded(collected, 'sluice.store_latency', 'ok'), 0)
        // Cumulative: a second collection reports the same totals, plus what came since.
        assert.equal((await fetch(`${server.url}/api/items`)).status, 429)
        assert.equal(sum(await collect(), 'sluice.decisions', { rule: 'api', outcome: 'limited' }), 3)
      } finally {
        await server.close()
      }
    })
  }

  it('two apps given the same meter record into the same instruments; another meter keeps its own; a prefix names them', async () => {
    const shared = sdk()
    const other = sdk()
    const servers = [
      await expressServer({ rules, ...rateLimitTelemetry({ meter: shared.meter }), onWarning: () => {} }),
      await fastifyServer({ rules, ...rateLimitTelemetry({ meter: shared.meter }), onWarning: () => {} }),
      await nodeServer({ rules, ...rateLimitTelemetry({ meter: other.meter, prefix: 'edge.limits.' }), onWarning: () => {} }),
    ]
    try {
      for (const server of servers) assert.equal((await fetch(`${server.url}/api/x`)).status, 200)
      assert.equal(sum(await shared.collect(), 'sluice.decisions', { rule: 'api', outcome: 'allowed' }), 2)
      const collected = await other.collect()
      assert.equal(sum(collected, 'edge.limits.decisions', { rule: 'api', outcome: 'allowed' }), 1)
      assert.equal(collected.has('sluice.decisions'), false)
    } finally {
      for (const server of servers) await server.close()
    }
  })

  it('without a meter, takes the global provider\'s at the first decision: one registered after the call but before traffic is the one used', async () => {
    const telemetry = rateLimitTelemetry()
    const { meter, collect } = sdk()
    const provider = { getMeter: () => meter }
    assert.equal(metrics.setGlobalMeterProvider(provider), true)
    try {
      telemetry.onDecision({ rule: 'login', decision: { allowed: false, limit: 5, remaining: 0, resetAfterMs: 1000, retryAfterMs: 1000, waitMs: 0, policy: 'login', policies: [], degraded: false }, shadow: false })
      assert.equal(sum(await collect(), 'sluice.decisions', { rule: 'login', policy: 'login', outcome: 'limited' }), 1)
    } finally {
      metrics.disable()
    }
  })

  it('refuses what would record nothing: a meter that is none, a bad prefix, an unknown option', () => {
    const { meter } = sdk()
    assert.throws(() => rateLimitTelemetry({ meter: {} as Meter }), /meter must be an OpenTelemetry Meter/)
    assert.throws(() => rateLimitTelemetry({ meter: null as unknown as Meter }), /meter must be an OpenTelemetry Meter/)
    assert.throws(() => rateLimitTelemetry({ meter, prefix: '9lives.' }), /prefix must start an OpenTelemetry instrument name/)
    assert.throws(() => rateLimitTelemetry({ meter, prefix: 'has space.' }), /prefix must start an OpenTelemetry instrument name/)
    assert.throws(() => rateLimitTelemetry({ meter, prefix: 1 as unknown as string }), /prefix must start an OpenTelemetry instrument name/)
    assert.throws(() => rateLimitTelemetry({ metre: meter } as never), /metre is not a rateLimitTelemetry option/)
    assert.deepEqual(Object.keys(rateLimitTelemetry({ meter, prefix: '' })).sort(), ['observer', 'onDecision'])
  })
})

describe('sluice/otel with a Redis store that stops answering', () => {
  let redis: RedisServer
  before(async () => { redis = await startRedis() })
  after(async () => { redis.signal('SIGCONT'); await redis.stop() })

  it('records each store call\'s time, counts the timeouts, and shows decisions degraded (fail open) while the store is frozen, and 0 again once it answers', async () => {
    const { meter, collect } = sdk()
    const server = await expressServer({
      rules: [{ name: 'api', policies: { algorithm: 'fixed-window', limit: 100, windowMs: MINUTE, name: 'api' } }],
      store: new RedisStore({ client: redis.client() }),
      prefix: `otel-${Date.now()}`,
      storeTimeoutMs: 200,
      onStoreFailure: 'open',
      circuit: { failures: 1, probeIntervalMs: 100 },
      ...rateLimitTelemetry({ meter }),
      onWarning: () => {},
    })
    try {
      for (let i = 0; i < 2; i++) assert.equal((await fetch(`${server.url}/`)).status, 200)
      let collected = await collect()
      assert.equal(recorded(collected, 'sluice.store_latency', 'ok'), 2)
      // The buckets of sluice/metrics' histogram (100 us to 1 s), not the SDK's default ones (0 to 10,000).
      assert.deepEqual((collected.get('sluice.store_latency')?.[0]?.value as Histogram).buckets.boundaries, [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1])
      assert.equal(sum(collected, 'sluice.store_fallback_active'), 0)

      redis.signal('SIGSTOP')
      for (let i = 0; i < 3; i++) assert.equal((await fetch(`${server.url}/`)).status, 200)
      collected = await collect()
      assert.equal(sum(collected, 'sluice.decisions', { rule: 'api', outcome: 'degraded' }), 3)
      assert.equal(sum(collected, 'sluice.decisions', { rule: 'api', outcome: 'allowed' }), 2)
      // The first call waited out its timeout; the open circuit spared the others the wait.
      const timeouts = sum(collected, 'sluice.store_errors', { reason: 'timeout' })
      assert.ok(timeouts >= 1)
      assert.equal(recorded(collected, 'sluice.store_latency', 'timeout'), timeouts)
      assert.equal(sum(collected, 'sluice.store_fallback_active'), 1)

      redis.signal('SIGCONT')
      let fallback = 1
      for (let i = 0; i < 50 && fallback === 1; i++) {
        await fetch(`${server.url}/`)
        fallback = sum(await collect(), 'sluice.store_fallback_active')
        if (fallback === 1) await new Promise((resolve) => setTimeout(resolve, 50))
      }
      assert.equal(fallback, 0)
    } finally {
      await server.close()
    }
  })

  it('an engine user records a Limiter\'s decisions and store calls the same way', async () => {
    const { meter, collect } = sdk()
    const telemetry = rateLimitTelemetry({ meter })
    const limiter = new Limiter({ store: new RedisStore({ client: redis.client() }), prefix: `otel-engine-${Date.now()}`, policies: { algorithm: 'token-bucket', capacity: 2, refillTokens: 1, refillIntervalMs: MINUTE, name: 'burst' }, observer: telemetry.observer, storeTimeoutMs: 5000 })
    // The third is refused by Redis; the fourth from the cache of blocked keys, without a store call.
    for (let i = 0; i < 4; i++) telemetry.onDecision({ rule: 'login', decision: await limiter.limit('user:1'), shadow: false })
    const collected = await collect()
    assert.equal(sum(collected, 'sluice.decisions', { rule: 'login', policy: 'burst', outcome: 'allowed' }), 2)
    assert.equal(sum(collected, 'sluice.decisions', { rule: 'login', policy: 'burst', outcome: 'limited' }), 2)
    assert.equal(recorded(collected, 'sluice.store_latency', 'ok'), 3)
    assert.equal(sum(collected, 'sluice.block_cache_hits'), 1)
    // What a limiter reports of refunds it owes (tested with real faults for sluice/metrics, which keeps the same tally).
    telemetry.observer.refundOwed?.('owed')
    telemetry.observer.refundOwed?.('owed')
    telemetry.observer.refundOwed?.('dropped')
    const refunds = await collect()
    assert.deepEqual([sum(refunds, 'sluice.refunds_owed'), sum(refunds, 'sluice.refunds_dropped')], [1, 1])
  })
})
