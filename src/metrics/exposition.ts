/**
 * The Prometheus text of a prom-client registry, as `registry.metrics()` writes
 * it, written a slice at a time. prom-client formats every series of a scrape
 * in one synchronous run: a gateway with thousands of routes in use has tens of
 * thousands of series, and its requests waited 0.2-0.3 s on each scrape. Here
 * the event loop is let go between slices, so requests are served meanwhile.
 */
import type { Metric, Registry } from 'prom-client'
import { letIoIn } from '../core/turn.ts'

/** A series as prom-client's metrics hand them to its registry's formatter. */
interface SeriesValue {
  value: number
  labels?: Record<string, string | number | undefined>
  /** The labels every series of one histogram child shares, written after `labels`. */
  sharedLabels?: Record<string, string | number | undefined>
  metricName?: string
}

interface MetricSnapshot {
  name: string
  help: string
  type: string
  values?: SeriesValue[]
}

/** What a registered prom-client metric offers its registry (not in prom-client's types). */
interface RegisteredMetric {
  name: string
  help: string
  type: string
  getForPromString?: () => Promise<MetricSnapshot> | MetricSnapshot
  get: () => Promise<MetricSnapshot> | MetricSnapshot
  /** A metric of sluice's own (see OwnMetric) writes its series' lines itself, without an object per series. */
  seriesLines?: () => Iterable<string>
}

/** A series as a metric's `get()` hands it to prom-client's registry. */
export interface OwnSeries {
  metricName?: string
  labels: Record<string, string | number>
  value: number
}

/**
 * A metric of sluice's own (LabelledHistogram, TwoLabelCounter), kept in
 * arrays and registered in a prom-client registry beside its metrics: the
 * exposition writes its lines from `seriesLines`; prom-client's own
 * `registry.metrics()` and `getMetricsAsJSON()` read the same series from `get()`.
 */
export interface OwnMetric {
  readonly name: string
  readonly help: string
  readonly type: string
  readonly aggregator: 'sum'
  seriesLines(): Iterable<string>
  get(): Promise<{ name: string; help: string; type: string; aggregator: string; values: OwnSeries[] }>
  reset(): void
}

export function registerOwnMetric(registry: Registry, metric: OwnMetric): void {
  registry.registerMetric(metric as unknown as Metric)
}

/** Series written between two turns of the event loop: about 2 ms of work. */
const SERIES_PER_SLICE = 2_000

/**
 * `registry.metrics()`'s text, byte for byte, for a registry in the Prometheus
 * format without default labels (the gateway's own), in slices of about
 * `seriesPerSlice` series, the event loop let go after each: a listener writes
 * each slice as it comes, rather than holding its thread to send a scrape of
 * megabytes at once. Each metric is read when its turn comes, as prom-client
 * reads them: a counter that moves meanwhile is written as it stands then, as
 * it would be by a scrape a moment later.
 */
export async function* expositionSlices(registry: Registry, seriesPerSlice = SERIES_PER_SLICE): AsyncGenerator<string> {
  let slice = ''
  let inSlice = 0
  let separator = ''
  for (const metric of registry.getMetricsAsArray() as unknown as RegisteredMetric[]) {
    let series: Iterable<string>
    if (metric.seriesLines !== undefined) {
      slice += `${separator}${header(metric.name, metric.help, metric.type)}`
      series = metric.seriesLines()
    } else {
      const snapshot = metric.getForPromString !== undefined ? await metric.getForPromString() : await metric.get()
      slice += `${separator}${header(snapshot.name, snapshot.help, snapshot.type)}`
      series = seriesLines(escapeText(snapshot.name), snapshot.values ?? [])
    }
    separator = '\n\n'
    for (const line of series) {
      slice += `\n${line}`
      if (++inSlice < seriesPerSlice) continue
      yield slice
      slice = ''
      inSlice = 0
      await letIoIn()
    }
  }
  yield `${slice}\n`
}

/** The whole of `expositionSlices`, as one string. */
export async function exposition(registry: Registry, seriesPerSlice = SERIES_PER_SLICE): Promise<string> {
  let text = ''
  for await (const slice of expositionSlices(registry, seriesPerSlice)) text += slice
  return text
}

function header(name: string, help: string, type: string): string {
  const escaped = escapeText(name)
  return `# HELP ${escaped} ${escapeText(help)}\n# TYPE ${escaped} ${type}`
}

function* seriesLines(name: string, values: readonly SeriesValue[]): Generator<string> {
  const sharedWritten = new Map<object, string>()
  for (const series of values) yield seriesLine(name, series, sharedWritten)
}

function seriesLine(name: string, series: SeriesValue, sharedWritten: Map<object, string>): string {
  const shared = series.sharedLabels
  let labels = ''
  if (series.labels !== undefined) {
    for (const label in series.labels) {
      if (shared !== undefined && Object.hasOwn(shared, label)) continue
      labels += `${labels === '' ? '' : ','}${label}="${escapeLabelValue(series.labels[label])}"`
    }
  }
  if (shared !== undefined) {
    let sharedText = sharedWritten.get(shared)
    if (sharedText === undefined) {
      sharedText = ''
      for (const label in shared) sharedText += `${sharedText === '' ? '' : ','}${label}="${escapeLabelValue(shared[label])}"`
      sharedWritten.set(shared, sharedText)
    }
    if (sharedText !== '') labels += `${labels === '' ? '' : ','}${sharedText}`
  }
  return `${series.metricName ?? name}${labels === '' ? '' : `{${labels}}`} ${valueText(series.value)}`
}

function escapeText(text: string): string {
  return text.includes('\\') || text.includes('\n') ? text.replace(/\\/g, '\\\\').replace(/\n/g, '\\n') : text
}

export function escapeLabelValue(value: string | number | undefined): string {
  if (typeof value !== 'string') return String(value)
  return value.includes('\\') || value.includes('\n') || value.includes('"') ? escapeText(value).replace(/"/g, '\\"') : value
}

// prom-client's spelling, 'Nan' included: Prometheus reads the value case-insensitively.
export function valueText(value: number): string {
  if (Number.isNaN(value)) return 'Nan'
  if (value === Infinity) return '+Inf'
  if (value === -Infinity) return '-Inf'
  return `${value}`
}
