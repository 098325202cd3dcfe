/**
 * sluice/metrics with the middleware: real servers of every adapter, a real
 * prom-client registry read back through a Prometheus text parser, and a
 * real redis-server frozen under the store.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import parsePrometheus from 'parse-prometheus-text-format'
import { Counter, Registry } from 'prom-client'
import { Limiter, RedisStore } from '../../src/index.ts'
import { rateLimitMetrics } from '../../src/metrics/index.ts'
import type { RateLimitOptions } from '../../src/http/handler.ts'
import { startRedis, type RedisServer } from '../support/redis.ts'
import { partitionable } from '../support/partition.ts'
import { expressServer, fastifyServer, fetchServer, koaServer, nodeServer, type StartServer } from './servers.ts'

interface Family { name: string; metrics: Array<{ labels?: Record<string, string>; value?: string }> }
type Scrape = { families: Map<string, Family>; text: string }

async function scrape(registry: Registry): Promise<Scrape> {
  const text = await registry.metrics()
  return { families: new Map((parsePrometheus(text) as Family[]).map((family) => [family.name, family])), text }
}

/** The sum of a counter's or gauge's samples with these labels, 0 when there are none. */
function sample({ families }: Scrape, name: string, labels: Record<string, string> = {}): number {
  const found = families.get(name)?.metrics.filter((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v))
  return (found ?? []).reduce((sum, m) => sum + Number(m.value), 0)
}

/** A histogram's count of observations for one outcome (the parser keeps no histogram labels, so read from the text). */
function observations({ text }: Scrape, name: string, outcome: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name}_count{outcome="${outcome}"}`))
  return line === undefined ? 0 : Number(line.split(' ').at(-1))
}

const MINUTE = 60_000
const rules: RateLimitOptions['rules'] = [
  // A shadow rule decides and is counted, but never refuses: what a new limit would do.
  { name: 'watch', match: { path: '/api/**' }, shadow: true, policies: { algorithm: 'sliding-log', limit: 1, windowMs: MINUTE, name: 'watch' } },
  { name: 'api', match: { path: '/api/**' }, policies: { algorithm: 'sliding-log', limit: 3, windowMs: MINUTE, name: 'api' } },
]

describe('sluice/metrics: the middleware counts its decisions in the application\'s registry', () => {
  const adapters: Array<[string, StartServer]> = [['node', nodeServer], ['express', expressServer], ['fastify', fastifyServer], ['koa', koaServer], ['fetch', fetchServer]]
  for (const [adapter, start] of adapters) {
    it(`${adapter}: allowed, limited and shadow-limited decisions by rule and policy, and those near the limit`, async () => {
      const registry = new Registry()
      const server = await start({ rules, ...rateLimitMetrics({ registry }), onWarning: () => {} })
      try {
        const statuses = []
        for (let i = 0; i < 5; i++) statuses.push((await fetch(`${server.url}/api/items`)).status)
        // Never limited, never counted.
        assert.equal((await fetch(`${server.url}/elsewhere`)).status, 200)
        assert.deepEqual(statuses, [200, 200, 200, 429, 429])
        const families = await scrape(registry)
        const decisions = (rule: string, outcome: string) => sample(families, 'sluice_decisions_total', { rule, policy: rule, outcome })
        assert.deepEqual(['allowed', 'limited', 'shadow_limited', 'degraded'].map((outcome) => decisions('api', outcome)), [3, 2, 0, 0])
        assert.deepEqual(['allowed', 'limited', 'shadow_limited', 'degraded'].map((outcome) => decisions('watch', outcome)), [1, 0, 4, 0])
        // Left under 20% of the limit: api's third (0 of 3), watch's first (0 of 1).
        assert.equal(sample(families, 'sluice_near_limit_total', { rule: 'api', policy: 'api' }), 1)
        assert.equal(sample(families, 'sluice_near_limit_total', { rule: 'watch', policy: 'watch' }), 1)
        assert.equal(sample(families, 'sluice_store_fallback_active'), 0)
        // The memory store is in the process: no store call is timed.
        assert.doesNotMatch(families.text, /sluice_store_latency_seconds_count/)
        // Counted once: a second scrape adds nothing.
        assert.equal(sample(await scrape(registry), 'sluice_decisions_total', { rule: 'api', outcome: 'allowed' }), 3)
      } finally {
        await server.close()
      }
    })
  }

  it('two apps given the same registry count into the same series; a second registry keeps its own', async () => {
    const shared = new Registry()
    const other = new Registry()
    const servers = [
      await expressServer({ rules, ...rateLimitMetrics({ registry: shared }), onWarning: () => {} }),
      await fastifyServer({ rules, ...rateLimitMetrics({ registry: shared }), onWarning: () => {} }),
      await nodeServer({ rules, ...rateLimitMetrics({ registry: other }), onWarning: () => {} }),
    ]
    try {
      for (const server of servers) assert.equal((await fetch(`${server.url}/api/x`)).status, 200)
      assert.equal(sample(await scrape(shared), 'sluice_decisions_total', { rule: 'api', outcome: 'allowed' }), 2)
      assert.equal(sample(await scrape(other), 'sluice_decisions_total', { rule: 'api', outcome: 'allowed' }), 1)
    } finally {
      for (const server of servers) await server.close()
    }
  })

  it('labels a rule\'s first 1,000 binding policies by name and the rest as policy="*": a policy named per customer adds no series past them', async () => {
    const registry = new Registry()
    const server = await nodeServer({
      rules: [{ name: 'contract', key: (request) => request.header('x-customer'), policies: (request) => ({ algorithm: 'fixed-window', limit: 10, windowMs: 60_000, name: `contract-${request.header('x-customer')}` }) }],
      ...rateLimitMetrics({ registry }),
      onWarning: () => {},
    })
    try {
      for (let customer = 0; customer < 1005; customer++) {
        assert.equal((await fetch(`${server.url}/api/x`, { headers: { 'x-customer': String(customer) } })).status, 200)
      }
      const metrics = (await scrape(registry)).families.get('sluice_decisions_total')?.metrics ?? []
      const policies = new Set(metrics.map((m) => m.labels?.policy))
      assert.equal(policies.size, 1001)
      assert.ok(policies.has('contract-999') && !policies.has('contract-1000'))
      assert.equal(sample(await scrape(registry), 'sluice_decisions_total', { rule: 'contract', policy: '*', outcome: 'allowed' }), 5)
      assert.equal(sample(await scrape(registry), 'sluice_decisions_total', { rule: 'contract' }), 1005)
    } finally {
      await server.close()
    }
  })

  it('after registry.clear() (as test suites do between tests), a new call makes the metrics again', async () => {
    const registry = new Registry()
    const first = rateLimitMetrics({ registry })
    registry.clear()
    const server = await nodeServer({ rules, ...rateLimitMetrics({ registry }), onWarning: () => {} })
    try {
      assert.equal((await fetch(`${server.url}/api/x`)).status, 200)
      assert.equal(sample(await scrape(registry), 'sluice_decisions_total', { rule: 'api', outcome: 'allowed' }), 1)
      // What the first call handed out counts nowhere now, and does not fail.
      assert.doesNotThrow(() => first.onDecision({ rule: 'api', decision: { allowed: true, limit: 3, remaining: 2, resetAfterMs: 0, retryAfterMs: 0, waitMs: 0, policy: 'api', policies: [], degraded: false }, shadow: false }))
      assert.equal(sample(await scrape(registry), 'sluice_decisions_total', { rule: 'api', outcome: 'allowed' }), 1)
    } finally {
      await server.close()
    }
  })

  it('refuses what would register nothing or clash: a metric of the same name the registry holds, a bad prefix, a registry that is none, an unknown option', () => {
    const registry = new Registry()
    new Counter({ name: 'sluice_decisions_total', help: 'the application\'s own', registers: [registry] })
    assert.throws(() => rateLimitMetrics({ registry }), /prefix names sluice_decisions_total, which the registry already holds.*give another prefix/)
    // Nothing half-made: another prefix goes in the same registry, beside the application's metric.
    assert.deepEqual(Object.keys(rateLimitMetrics({ registry, prefix: 'api_limits_' })).sort(), ['observer', 'onDecision'])
    assert.ok(registry.getSingleMetric('api_limits_decisions_total'))
    assert.throws(() => rateLimitMetrics({ registry: new Registry(), prefix: '9lives' }), /prefix must start a Prometheus metric name/)
    assert.throws(() => rateLimitMetrics({ registry: new Registry(), prefix: null as unknown as string }), /prefix must start a Prometheus metric name/)
    assert.throws(() => rateLimitMetrics({ registry: {} as Registry }), /registry must be a prom-client Registry/)
    assert.throws(() => rateLimitMetrics({ registry: null as unknown as Registry }), /registry must be a prom-client Registry/)
    const unprefixed = new Registry()
    rateLimitMetrics({ registry: unprefixed, prefix: '' })
    assert.ok(unprefixed.getSingleMetric('decisions_total'))
    assert.throws(() => rateLimitMetrics({ registry: new Registry(), regsitry: 1 } as never), /regsitry is not a rateLimitMetrics option/)
  })
})

describe('sluice/metrics with a Redis store that stops answering', () => {
  let redis: RedisServer
  before(async () => { redis = await startRedis() })
  after(async () => { redis.signal('SIGCONT'); await redis.stop() })

  it('times each store call, counts the timeouts, and shows decisions degraded (fail open) while the store is frozen, and 0 again once it answers', async () => {
    const registry = new Registry()
    const metrics = rateLimitMetrics({ registry })
    const server = await expressServer({
      rules: [{ name: 'api', policies: { algorithm: 'fixed-window', limit: 100, windowMs: MINUTE, name: 'api' } }],
      store: new RedisStore({ client: redis.client() }),
      prefix: `metrics-${Date.now()}`,
      storeTimeoutMs: 200,
      onStoreFailure: 'open',
      circuit: { failures: 1, probeIntervalMs: 100 },
      ...metrics,
      onWarning: () => {},
    })
    try {
      for (let i = 0; i < 2; i++) assert.equal((await fetch(`${server.url}/`)).status, 200)
      let families = await scrape(registry)
      assert.equal(observations(families, 'sluice_store_latency_seconds', 'ok'), 2)
      assert.equal(sample(families, 'sluice_store_fallback_active'), 0)

      redis.signal('SIGSTOP')
      for (let i = 0; i < 3; i++) assert.equal((await fetch(`${server.url}/`)).status, 200)
      families = await scrape(registry)
      assert.equal(sample(families, 'sluice_decisions_total', { rule: 'api', outcome: 'degraded' }), 3)
      assert.equal(sample(families, 'sluice_decisions_total', { rule: 'api', outcome: 'allowed' }), 2)
      // The first call waited out its timeout; the open circuit spared the others the wait.
      assert.ok(sample(families, 'sluice_store_errors_total', { reason: 'timeout' }) >= 1)
      assert.ok(observations(families, 'sluice_store_latency_seconds', 'timeout') >= 1)
      assert.equal(sample(families, 'sluice_store_fallback_active'), 1)

      redis.signal('SIGCONT')
      // Bounded: the circuit probes every 100 ms; the store answers again within a few.
      let status = 'degraded'
      for (let i = 0; i < 50 && status === 'degraded'; i++) {
        await fetch(`${server.url}/`)
        status = sample(await scrape(registry), 'sluice_store_fallback_active') === 1 ? 'degraded' : 'recovered'
        if (status === 'degraded') await new Promise((resolve) => setTimeout(resolve, 50))
      }
      assert.equal(status, 'recovered')
    } finally {
      await server.close()
    }
  })

  it('refunds Redis could not take count as owed until given; one that stopped mattering first counts as dropped', async () => {
    const partition = await partitionable(redis.port)
    const store = new RedisStore({ url: `redis://127.0.0.1:${partition.port}` })
    const registry = new Registry()
    const metrics = rateLimitMetrics({ registry })
    const common = { store, blockCache: false, onStoreFailure: 'closed', storeTimeoutMs: 150, circuit: { failures: 1, probeIntervalMs: 100 }, observer: metrics.observer } as const
    const jobs = new Limiter({ ...common, prefix: `owed-jobs-${Date.now()}`, policies: { algorithm: 'sliding-log', name: 'jobs', limit: 1, windowMs: MINUTE } })
    // Full again 200 ms after its last unit went: a refund owed longer than that has no use.
    const burst = new Limiter({ ...common, prefix: `owed-burst-${Date.now()}`, policies: { algorithm: 'token-bucket', name: 'burst', capacity: 1, refillTokens: 1, refillIntervalMs: 200 } })
    try {
      const job = await jobs.limit('t')
      const call = await burst.limit('t')
      assert.deepEqual([job.allowed, call.allowed], [true, true])
      partition.cut()
      // Each circuit opens before its refund, which then never reaches Redis.
      for (const limiter of [jobs, burst]) {
        for (let i = 0; i < 20 && !(await limiter.peek('t')).degraded; i++) await sleep(25)
        await assert.rejects(limiter.refund('t', 1, limiter === jobs ? job : call, 10), /failed \(circuit-open\); given again once the store answers/)
      }
      let families = await scrape(registry)
      assert.equal(sample(families, 'sluice_refunds_owed'), 2)
      assert.equal(sample(families, 'sluice_refunds_dropped_total'), 0)
      await sleep(400)
      await partition.heal()
      for (let i = 0; i < 100 && jobs.refundsOwed + burst.refundsOwed > 0; i++) await sleep(50)
      families = await scrape(registry)
      assert.equal(sample(families, 'sluice_refunds_owed'), 0)
      assert.equal(sample(families, 'sluice_refunds_dropped_total'), 1)
      assert.equal((await jobs.peek('t')).remaining, 1)
    } finally {
      await store.close()
      partition.cut()
    }
  })

  it('an engine user counts a Limiter\'s decisions and store calls the same way', async () => {
    const registry = new Registry()
    const metrics = rateLimitMetrics({ registry })
    const limiter = new Limiter({ store: new RedisStore({ client: redis.client() }), prefix: `engine-${Date.now()}`, policies: { algorithm: 'token-bucket', capacity: 2, refillTokens: 1, refillIntervalMs: MINUTE, name: 'burst' }, observer: metrics.observer, storeTimeoutMs: 5000 })
    for (let i = 0; i < 3; i++) metrics.onDecision({ rule: 'login', decision: await limiter.limit('user:1'), shadow: false })
    const families = await scrape(registry)
    assert.equal(sample(families, 'sluice_decisions_total', { rule: 'login', policy: 'burst', outcome: 'allowed' }), 2)
    assert.equal(sample(families, 'sluice_decisions_total', { rule: 'login', policy: 'burst', outcome: 'limited' }), 1)
    assert.equal(observations(families, 'sluice_store_latency_seconds', 'ok'), 3)
  })
})
