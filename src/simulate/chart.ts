/**
 * One SVG timeline per policy: offered load (grey) against admitted load
 * (colour) per bucket, the limit's rate as a dashed line, labelled axes.
 * Plain SVG 1.1, no scripts or external fonts, so it renders the same in a
 * browser, on GitHub, and in a rasteriser.
 */
import { formatDuration } from '../core/policy.ts'
import type { PolicyResult, Simulation } from './simulate.ts'

const WIDTH = 640
const HEIGHT = 280
const MARGIN = { top: 62, right: 16, bottom: 44, left: 56 }
const PLOT_W = WIDTH - MARGIN.left - MARGIN.right
const PLOT_H = HEIGHT - MARGIN.top - MARGIN.bottom

export const COLORS: Readonly<Record<string, string>> = {
  'fixed-window': '#d62728',
  'sliding-log': '#2ca02c',
  'sliding-window': '#9467bd',
  'token-bucket': '#1f77b4',
  'leaky-bucket': '#ff7f0e',
}

export function escapeXml(text: string): string {
  return text.replace(/[<>&"']/g, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', '"': '&quot;', "'": '&apos;' })[c] as string)
}

/** Round tick steps (1, 2, 5 x 10^n) giving about `count` ticks up to `max`. */
export function ticks(max: number, count: number): number[] {
  if (max <= 0) return [0]
  const raw = max / count
  const magnitude = 10 ** Math.floor(Math.log10(raw))
  const step = ([1, 2, 5, 10].find((m) => m * magnitude >= raw) ?? 10) * magnitude
  const values: number[] = []
  for (let value = 0; value <= max + step * 1e-9; value += step) values.push(Number(value.toPrecision(12)))
  return values
}

/** Seconds, or minutes for long runs, for the time axis. */
function timeUnit(durationMs: number): { divisor: number; label: string } {
  return durationMs >= 10 * 60_000 ? { divisor: 60_000, label: 'min' } : { divisor: 1000, label: 's' }
}

function stepPath(values: readonly number[], x: (i: number) => number, y: (v: number) => number): string {
  let path = `M${x(0).toFixed(1)},${y(0).toFixed(1)}`
  values.forEach((value, i) => {
    path += `V${y(value).toFixed(1)}H${x(i + 1).toFixed(1)}`
  })
  return `${path}V${y(0).toFixed(1)}`
}

export function timelineSvg(simulation: Simulation, result: PolicyResult): string {
  const { bucketMs } = simulation
  const { offered, admitted } = result.timeline
  const buckets = offered.length
  const rateLine = (result.limit * bucketMs) / result.windowMs
  const yMax = Math.max(1, ...offered, ...admitted, rateLine) * 1.08
  const spanMs = buckets * bucketMs
  const x = (i: number) => MARGIN.left + (i / buckets) * PLOT_W
  const y = (v: number) => MARGIN.top + PLOT_H - (v / yMax) * PLOT_H
  const unit = timeUnit(spanMs)
  const color = COLORS[result.policy.algorithm] ?? '#1f77b4'
  const ratio = result.worstWindow.admitted / result.limit
  const algorithm = `${result.policy.algorithm}${result.policy.algorithm === 'leaky-bucket' ? `, ${result.policy.mode}` : ''}`
  const title = result.policy.name === result.policy.algorithm ? algorithm : `${result.policy.name} (${algorithm})`
  const subtitle = `worst ${formatDuration(result.windowMs)} window: ${result.worstWindow.admitted} (${ratio.toFixed(2)}x the limit of ${result.limit}); refused ${(result.rejectedFraction * 100).toFixed(1)}%`
  const counterLine = result.counterError === undefined ? undefined
    : `against the exact log: ${result.counterError.falseAllows} false allows, ${result.counterError.falseDenies} false denies in ${result.counterError.decisions} decisions`
  const windows = spanMs / result.windowMs

  const parts: string[] = []
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" viewBox="0 0 ${WIDTH} ${HEIGHT}" font-family="DejaVu Sans, Verdana, Arial, sans-serif" role="img" aria-label="${escapeXml(`${title}: offered and admitted load over time`)}">`)
  parts.push(`<rect width="${WIDTH}" height="${HEIGHT}" fill="#ffffff"/>`)
  parts.push(`<text x="${MARGIN.left}" y="18" font-size="14" font-weight="bold" fill="#222">${escapeXml(title)}</text>`)
  parts.push(`<text x="${MARGIN.left}" y="34" font-size="11" fill="#444">${escapeXml(subtitle)}</text>`)
  if (counterLine !== undefined) parts.push(`<text x="${MARGIN.left}" y="49" font-size="11" fill="#444">${escapeXml(counterLine)}</text>`)
  // Window boundaries, where a fixed window resets (all windows start at time 0).
  if (windows <= 40) {
    for (let i = 1; i < windows; i++) {
      const px = (MARGIN.left + ((i * result.windowMs) / spanMs) * PLOT_W).toFixed(1)
      parts.push(`<line x1="${px}" x2="${px}" y1="${MARGIN.top}" y2="${MARGIN.top + PLOT_H}" stroke="#f0f0f0"/>`)
    }
  }
  // Grid and y ticks.
  for (const value of ticks(yMax / 1.08, 5)) {
    const py = y(value).toFixed(1)
    parts.push(`<line x1="${MARGIN.left}" x2="${MARGIN.left + PLOT_W}" y1="${py}" y2="${py}" stroke="#e5e5e5"/>`)
    parts.push(`<text x="${MARGIN.left - 6}" y="${py}" font-size="10" fill="#444" text-anchor="end" dominant-baseline="middle">${value}</text>`)
  }
  // x ticks.
  for (const value of ticks(spanMs / unit.divisor, 8)) {
    const px = (MARGIN.left + ((value * unit.divisor) / spanMs) * PLOT_W).toFixed(1)
    parts.push(`<line x1="${px}" x2="${px}" y1="${MARGIN.top + PLOT_H}" y2="${MARGIN.top + PLOT_H + 4}" stroke="#444"/>`)
    parts.push(`<text x="${px}" y="${MARGIN.top + PLOT_H + 16}" font-size="10" fill="#444" text-anchor="middle">${value}</text>`)
  }
  parts.push(`<path d="${stepPath(offered, x, y)}" fill="#cccccc" fill-opacity="0.7" stroke="#999999" stroke-width="0.5"><title>offered</title></path>`)
  parts.push(`<path d="${stepPath(admitted, x, y)}" fill="${color}" fill-opacity="0.35" stroke="${color}" stroke-width="1.5"><title>admitted</title></path>`)
  const ry = y(rateLine).toFixed(1)
  parts.push(`<line x1="${MARGIN.left}" x2="${MARGIN.left + PLOT_W}" y1="${ry}" y2="${ry}" stroke="#222" stroke-dasharray="5 4" stroke-width="1"><title>the limit's rate</title></line>`)
  // Axes and their labels.
  parts.push(`<line x1="${MARGIN.left}" x2="${MARGIN.left}" y1="${MARGIN.top}" y2="${MARGIN.top + PLOT_H}" stroke="#444"/>`)
  parts.push(`<line x1="${MARGIN.left}" x2="${MARGIN.left + PLOT_W}" y1="${MARGIN.top + PLOT_H}" y2="${MARGIN.top + PLOT_H}" stroke="#444"/>`)
  parts.push(`<text x="${MARGIN.left + PLOT_W / 2}" y="${HEIGHT - 8}" font-size="11" fill="#222" text-anchor="middle">time (${unit.label})</text>`)
  parts.push(`<text transform="translate(14 ${MARGIN.top + PLOT_H / 2}) rotate(-90)" font-size="11" fill="#222" text-anchor="middle">units per ${escapeXml(formatDuration(bucketMs))}</text>`)
  // Legend.
  const lx = WIDTH - MARGIN.right - 250
  const ly = 8
  parts.push(`<rect x="${lx}" y="${ly}" width="10" height="10" fill="#cccccc"/><text x="${lx + 14}" y="${ly + 9}" font-size="10" fill="#222">offered</text>`)
  parts.push(`<rect x="${lx + 62}" y="${ly}" width="10" height="10" fill="${color}" fill-opacity="0.6"/><text x="${lx + 76}" y="${ly + 9}" font-size="10" fill="#222">admitted</text>`)
  parts.push(`<line x1="${lx + 132}" x2="${lx + 148}" y1="${ly + 5}" y2="${ly + 5}" stroke="#222" stroke-dasharray="4 3"/><text x="${lx + 152}" y="${ly + 9}" font-size="10" fill="#222">one key's limit</text>`)
  parts.push('</svg>')
  return parts.join('\n')
}
