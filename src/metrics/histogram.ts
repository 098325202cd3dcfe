/**
 * A histogram with one label, registered in a prom-client registry like any of
 * its metrics, and written the same, for the gateway's request durations by
 * route. prom-client's own Histogram hands a scrape an object per series (16 a
 * route) and hashes each observation's labels; with thousands of routes in use
 * that held the gateway's thread 20-40 ms on every scrape. This one keeps each
 * label value's counts in an array and writes its lines straight from them, a
 * slice at a time (see exposition.ts).
 */
import type { Registry } from 'prom-client'
import { escapeLabelValue, registerOwnMetric, valueText, type OwnMetric, type OwnSeries } from './exposition.ts'

interface Counts {
  /** The label, as written in a series: `route="api"`. */
  label: string
  /** Observations per bucket, not cumulative; the last slot counts those above every bound. */
  buckets: number[]
  sum: number
  count: number
}

export class LabelledHistogram implements OwnMetric {
  readonly type = 'histogram'
  readonly aggregator = 'sum' as const
  private readonly byValue = new Map<string, Counts>()
  private readonly bounds: readonly number[]
  /** Each bucket's `le="..."`, written once. */
  private readonly boundLabels: readonly string[]

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly labelName: string,
    buckets: readonly number[],
    registry: Registry,
  ) {
    this.bounds = [...buckets].sort((a, b) => a - b)
    this.boundLabels = this.bounds.map((bound) => `le="${valueText(bound)}"`)
    registerOwnMetric(registry, this)
  }

  observe(labelValue: string, value: number): void {
    // A metric must never fail the request it measures: a value that is no number is not counted.
    if (!Number.isFinite(value)) return
    let counts = this.byValue.get(labelValue)
    if (counts === undefined) {
      counts = { label: `${this.labelName}="${escapeLabelValue(labelValue)}"`, buckets: new Array<number>(this.bounds.length + 1).fill(0), sum: 0, count: 0 }
      this.byValue.set(labelValue, counts)
    }
    let bucket = 0
    while (bucket < this.bounds.length && value > (this.bounds[bucket] as number)) bucket++
    ;(counts.buckets[bucket] as number)++
    counts.sum += value
    counts.count++
  }

  reset(): void {
    this.byValue.clear()
  }

  /** Every series' line, as prom-client's registry writes the series `get()` gives it. */
  *seriesLines(): Generator<string> {
    const name = this.name
    for (const counts of this.byValue.values()) {
      // Read whole before its first line: the writer may let requests in between two lines, and a label's series must agree.
      const { label, sum, count } = counts
      const buckets = counts.buckets.slice()
      let cumulative = 0
      for (let bucket = 0; bucket < this.bounds.length; bucket++) {
        cumulative += buckets[bucket] as number
        yield `${name}_bucket{${this.boundLabels[bucket] as string},${label}} ${cumulative}`
      }
      yield `${name}_bucket{le="+Inf",${label}} ${count}`
      yield `${name}_sum{${label}} ${valueText(sum)}`
      yield `${name}_count{${label}} ${count}`
    }
  }

  /** For prom-client's `registry.metrics()` and `getMetricsAsJSON()`. */
  async get(): ReturnType<OwnMetric['get']> {
    const name = this.name
    const values: OwnSeries[] = []
    for (const [labelValue, counts] of this.byValue) {
      const labels = { [this.labelName]: labelValue }
      let cumulative = 0
      this.bounds.forEach((bound, bucket) => {
        cumulative += counts.buckets[bucket] as number
        values.push({ metricName: `${name}_bucket`, labels: { le: bound, ...labels }, value: cumulative })
      })
      values.push(
        { metricName: `${name}_bucket`, labels: { le: '+Inf', ...labels }, value: counts.count },
        { metricName: `${name}_sum`, labels, value: counts.sum },
        { metricName: `${name}_count`, labels, value: counts.count },
      )
    }
    return { name, help: this.help, type: this.type, aggregator: this.aggregator, values }
  }
}
