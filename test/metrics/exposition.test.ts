/**
 * The gateway's /metrics text, written a slice at a time: the same bytes as
 * prom-client's own `registry.metrics()`, with the event loop let go between
 * slices.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import parsePrometheus from 'parse-prometheus-text-format'
import { Counter, Gauge, Histogram, Registry, Summary } from 'prom-client'
import { exposition } from '../../src/metrics/exposition.ts'
import { TwoLabelCounter, TwoLabelCounts } from '../../src/metrics/counter.ts'
import { LabelledHistogram } from '../../src/metrics/histogram.ts'
import { GatewayMetrics } from '../../src/metrics/metrics.ts'
import { turnsOfEventLoopDuring } from '../helpers.ts'

/** Every kind of metric prom-client has, with label values and numbers that need escaping or spelling out. */
function awkwardRegistry(): Registry {
  const registry = new Registry()
  const registers = [registry]
  const requests = new Counter({ name: 'app_requests_total', help: 'Requests \\ by "route"\nsecond line', labelNames: ['route', 'status'], registers })
  requests.inc({ route: 'plain', status: 200 }, 3)
  requests.inc({ route: 'quote " backslash \\ newline \n end', status: '5xx' })
  requests.inc({ route: 'ünïcödé ✓', status: 429 }, 2)
  requests.inc({ route: 'C:\\only\\backslashes', status: 200 })
  requests.inc({ route: 'only\na newline', status: 200 })
  new Counter({ name: 'app_never_counted_total', help: 'No series yet.', labelNames: ['route'], registers })
  new Counter({ name: 'app_unlabelled_total', help: 'One series.', registers }).inc(7)
  const odd = new Gauge({ name: 'app_odd_values', help: 'Numbers written out.', labelNames: ['kind'], registers })
  odd.set({ kind: 'nan' }, Number.NaN)
  odd.set({ kind: 'inf' }, Number.POSITIVE_INFINITY)
  odd.set({ kind: 'minus-inf' }, Number.NEGATIVE_INFINITY)
  odd.set({ kind: 'tiny' }, 1e-12)
  odd.set({ kind: 'fraction' }, 0.1 + 0.2)
  odd.set({ kind: 'negative' }, -42)
  new Gauge({
    name: 'app_collected',
    help: 'Set when read.',
    registers,
    collect() {
      this.set(11)
    },
  })
  const durations = new Histogram({ name: 'app_duration_seconds', help: 'Durations.', labelNames: ['route'], buckets: [0.001, 0.01, 0.1, 1], registers })
  for (const [route, seconds] of [['a', 0.0005], ['a', 0.05], ['b "quoted"', 3], ['b "quoted"', 0.01]] as const) durations.observe({ route }, seconds)
  new Histogram({ name: 'app_unlabelled_seconds', help: 'No labels.', buckets: [1], registers }).observe(0.5)
  const sizes = new Summary({ name: 'app_size_bytes', help: 'Sizes.', labelNames: ['route'], percentiles: [0.5, 0.99], registers })
  for (let i = 1; i <= 100; i++) sizes.observe({ route: i % 2 === 0 ? 'even' : 'odd' }, i)
  return registry
}

describe('metrics exposition', () => {
  it("writes prom-client's text byte for byte, for every kind of metric, awkward labels and values included", async () => {
    const registry = awkwardRegistry()
    const expected = await registry.metrics()
    assert.equal(await exposition(registry), expected)
    assert.equal(await exposition(registry, 1), expected, 'sliced after every series')
    assert.match(expected, /route="quote \\" backslash \\\\ newline \\n end"/)
    assert.match(expected, /app_odd_values\{kind="minus-inf"\} -Inf/)
  })

  it('writes an empty registry as prom-client does', async () => {
    const registry = new Registry()
    assert.equal(await exposition(registry), await registry.metrics())
  })

  it("writes the gateway's registry as prom-client does, apart from the process figures that move between two reads", async () => {
    const metrics = new GatewayMetrics()
    for (let i = 0; i < 50; i++) {
      metrics.request(`route-${i}`, i % 3 === 0 ? 429 : 200, i / 1000)
      metrics.upstreamFailure(`route-${i}`, 'timeout')
    }
    metrics.configLoaded('v1', undefined)
    const still = (text: string) => text.split('\n').filter((line) => !/^sluice_(process|nodejs)_/.test(line)).join('\n')
    const ours = await exposition(metrics.registry)
    assert.equal(still(ours), still(await metrics.registry.metrics()))
    const families = new Map((parsePrometheus(ours) as Array<{ name: string; metrics: unknown[] }>).map((family) => [family.name, family]))
    assert.equal(families.get('sluice_requests_total')?.metrics.length, 50)
  })

  it("keeps a histogram by one label as prom-client's Histogram keeps it: the same text for the same observations", async () => {
    const buckets = [0.001, 0.01, 0.1, 1]
    const theirs = new Registry()
    const ours = new Registry()
    const histogram = new Histogram({ name: 'app_duration_seconds', help: 'Durations \\ by route.', labelNames: ['route'], buckets, registers: [theirs] })
    const labelled = new LabelledHistogram('app_duration_seconds', 'Durations \\ by route.', 'route', buckets, ours)
    const observations: Array<[string, number]> = [
      ['a', 0.0005], ['a', 0.001], ['a', 0.0010001], ['a', 0.05], ['a', 7], ['a', 0.1 + 0.2],
      ['quote " backslash \\ newline \n', 0.01], ['*', 1], ['*', 1e-9], ['ünïcödé', 0],
    ]
    for (const [route, seconds] of observations) {
      histogram.observe({ route }, seconds)
      labelled.observe(route, seconds)
    }
    const expected = await theirs.metrics()
    assert.equal(await ours.metrics(), expected)
    assert.equal(await exposition(ours), expected)
    assert.equal(await exposition(ours, 3), expected, 'sliced every 3 series')
    assert.match(expected, /app_duration_seconds_bucket\{le="0.001",route="a"\} 2\n/)

    labelled.observe('a', Number.NaN)
    assert.equal(await exposition(ours), expected, 'a value that is no number is not counted')
    histogram.reset()
    labelled.reset()
    assert.equal(await exposition(ours), await theirs.metrics())
  })

  it("keeps counters by two labels as prom-client's Counters keep them: the same text for the same counts, a reset of one leaving the other", async () => {
    const theirs = new Registry()
    const decisions = new Counter({ name: 'app_decisions_total', help: 'Decisions \\ by "route".', labelNames: ['route', 'policy', 'outcome'], registers: [theirs] })
    const near = new Counter({ name: 'app_near_total', help: 'Near.', labelNames: ['route', 'policy'], registers: [theirs] })
    const ours = new Registry()
    const counts = new TwoLabelCounts<string>(3)
    const outcomes = ['allowed', 'limited'] as const
    new TwoLabelCounter('app_decisions_total', 'Decisions \\ by "route".', counts, ['route', 'policy'], outcomes.map((outcome, slot) => ({ slot, label: ['outcome', outcome] })), ours)
    const ourNear = new TwoLabelCounter('app_near_total', 'Near.', counts, ['route', 'policy'], [{ slot: 2 }], ours)
    // In the order each series is first counted in both: prom-client writes them in that order.
    const counted: Array<[string, string, number]> = [
      ['a', 'p', 0], ['a', 'p', 1], ['a', 'p', 0], ['a', 'p', 2], ['quote " backslash \\ newline \n', 'ünïcödé ✓', 0], ['*', 'p', 1], ['*', 'p', 2],
    ]
    for (const [route, policy, slot] of counted) {
      if (slot === 2) near.inc({ route, policy })
      else decisions.inc({ route, policy, outcome: outcomes[slot] as string })
      ;(counts.of(route, policy)[slot] as number)++
    }
    const sorted = (text: string) => text.split('\n').sort().join('\n')
    const expected = await theirs.metrics()
    assert.equal(sorted(await ours.metrics()), sorted(expected))
    assert.equal(sorted(await exposition(ours)), sorted(expected))
    assert.equal(sorted(await exposition(ours, 2)), sorted(expected), 'sliced every 2 series')
    assert.match(expected, /app_decisions_total\{route="a",policy="p",outcome="allowed"\} 2\n/)
    near.reset()
    ourNear.reset()
    assert.equal(sorted(await exposition(ours)), sorted(await theirs.metrics()))
    assert.match(await exposition(ours), /outcome="limited"/)
  })

  it("writes each label value's series as they stood together, though requests are let in between its lines", async () => {
    const registry = new Registry()
    const labelled = new LabelledHistogram('app_duration_seconds', 'Durations.', 'route', [0.001, 0.01], registry)
    labelled.observe('a', 0.005)
    const before = await registry.metrics()
    const writing = exposition(registry, 1)
    // The writer has written the first line and let the event loop run: a request ends meanwhile.
    labelled.observe('a', 0.0005)
    assert.equal(await writing, before)
    assert.match(await exposition(registry), /app_duration_seconds_count\{route="a"\} 2/)
  })

  it('lets the event loop run between slices, where prom-client writes a scrape in one go', async () => {
    const registry = new Registry()
    const requests = new Counter({ name: 'app_requests_total', help: 'Requests.', labelNames: ['route'], registers: [registry] })
    for (let i = 0; i < 10_000; i++) requests.inc({ route: `route-${i}` })
    assert.equal((await turnsOfEventLoopDuring(() => registry.metrics())).turns, 0)
    // 10,000 series at 2,000 a slice: four turns between five slices, at least.
    assert.ok((await turnsOfEventLoopDuring(() => exposition(registry))).turns >= 4)
  })
})
