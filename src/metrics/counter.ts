/**
 * Counters labelled by two values (a route and a policy, a route and a status),
 * registered in a prom-client registry like any of its metrics and written the
 * same. prom-client's Counter validates and hashes a call's labels each time
 * (about 200 ns; a request made three such calls) and hands a scrape an object
 * per series: with thousands of routes in use that held the gateway's thread
 * on every scrape. Here each pair of values has an array of counts, one per
 * slot, that a request adds to, and the series' lines are written straight
 * from them, a slice at a time (see exposition.ts).
 */
import type { Registry } from 'prom-client'
import { escapeLabelValue, registerOwnMetric, valueText, type OwnMetric, type OwnSeries } from './exposition.ts'

/** Counts by two label values, a number per slot; several counters may show different slots of one. */
export class TwoLabelCounts<Second extends string | number> {
  private readonly counts = new Map<string, Map<Second, number[]>>()

  /**
   * `bound`: at most this many second values under one first value, those past
   * it counted together under `bound.overflow`, so that values a program makes
   * (a policy named per customer) cannot grow the series without end.
   */
  constructor(private readonly slots: number, private readonly bound?: { most: number; overflow: Second }) {}

  /** The counts of `first` and `second`, one per slot, to add to. */
  of(first: string, second: Second): number[] {
    let inner = this.counts.get(first)
    if (inner === undefined) this.counts.set(first, (inner = new Map()))
    let counts = inner.get(second)
    if (counts === undefined) {
      const bound = this.bound
      if (bound !== undefined && inner.size >= bound.most && second !== bound.overflow) return this.of(first, bound.overflow)
      inner.set(second, (counts = new Array<number>(this.slots).fill(0)))
    }
    return counts
  }

  *entries(): Generator<[string, Second, number[]]> {
    for (const [first, inner] of this.counts) for (const [second, counts] of inner) yield [first, second, counts]
  }
}

/** A slot a counter shows, and the label (a name and a value) its series carry after the two, if any. */
export interface CounterSlot {
  slot: number
  label?: readonly [name: string, value: string]
}

/**
 * A counter whose series are `slots` of `counts`, labelled by `labelNames` (and
 * each slot's own label). As prom-client writes a counter's series: one for
 * each labels that were counted, none for those never counted.
 */
export class TwoLabelCounter<Second extends string | number> implements OwnMetric {
  readonly type = 'counter'
  readonly aggregator = 'sum' as const
  /** Each slot's own label, as written in a series: `,outcome="allowed"`, or nothing. */
  private readonly slotLabels: readonly string[]

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly counts: TwoLabelCounts<Second>,
    private readonly labelNames: readonly [first: string, second: string],
    private readonly slots: readonly CounterSlot[],
    registry: Registry,
  ) {
    this.slotLabels = slots.map(({ label }) => (label === undefined ? '' : `,${label[0]}="${escapeLabelValue(label[1])}"`))
    registerOwnMetric(registry, this)
  }

  /** Sets this counter's series to 0 (`registry.resetMetrics()`); other counters' slots of the same counts stay. */
  reset(): void {
    for (const [, , counts] of this.counts.entries()) for (const { slot } of this.slots) counts[slot] = 0
  }

  /** Every series' line, as prom-client's registry writes the series `get()` gives it. */
  *seriesLines(): Generator<string> {
    const [firstName, secondName] = this.labelNames
    for (const [first, second, counts] of this.counts.entries()) {
      const labels = `${this.name}{${firstName}="${escapeLabelValue(first)}",${secondName}="${escapeLabelValue(second)}"`
      for (let i = 0; i < this.slots.length; i++) {
        const count = counts[(this.slots[i] as CounterSlot).slot] as number
        if (count !== 0) yield `${labels}${this.slotLabels[i] as string}} ${valueText(count)}`
      }
    }
  }

  /** For prom-client's `registry.metrics()` and `getMetricsAsJSON()`. */
  async get(): ReturnType<OwnMetric['get']> {
    const [firstName, secondName] = this.labelNames
    const values: OwnSeries[] = []
    for (const [first, second, counts] of this.counts.entries()) {
      for (const { slot, label } of this.slots) {
        const count = counts[slot] as number
        if (count !== 0) values.push({ labels: { [firstName]: first, [secondName]: second, ...(label === undefined ? {} : { [label[0]]: label[1] }) }, value: count })
      }
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values }
  }
}
