/** The simulation told two ways: a short table for the terminal, and a self-contained HTML page of charts. */
import { formatDuration } from '../core/policy.ts'
import { escapeXml, timelineSvg } from './chart.ts'
import type { Simulation } from './simulate.ts'

export function textSummary(simulation: Simulation): string {
  const { traffic } = simulation
  const rows = simulation.results.map((result) => [
    result.policy.name,
    result.policy.algorithm + (result.policy.algorithm === 'leaky-bucket' ? ` (${result.policy.mode})` : ''),
    `${result.admitted}/${result.offered}`,
    `${(result.rejectedFraction * 100).toFixed(1)}%`,
    `${result.worstWindow.admitted} in ${formatDuration(result.windowMs)} (${(result.worstWindow.admitted / result.limit).toFixed(2)}x)`,
    result.counterError === undefined ? '' : `${result.counterError.falseAllows} / ${result.counterError.falseDenies}`,
    result.delayedMs > 0 ? `${Math.round(result.delayedMs / Math.max(1, result.admitted))} ms` : '',
  ])
  const header = ['policy', 'algorithm', 'admitted', 'refused', 'worst window', 'counter vs log (false allows / denies)', 'mean delay']
  const used = header.map((_, column) => column < 5 || rows.some((row) => row[column] !== ''))
  const table = [header, ...rows].map((row) => row.filter((_, column) => used[column]))
  const widths = (table[0] as string[]).map((_, column) => Math.max(...table.map((row) => (row[column] as string).length)))
  const lines = table.map((row) => row.map((cell, column) => cell.padEnd(widths[column] as number)).join('  ').trimEnd())
  lines.splice(1, 0, widths.map((width) => '-'.repeat(width)).join('  '))
  return [
    `${traffic.name}: ${traffic.description}`,
    `${traffic.events} events, ${traffic.keys} key(s), ${formatDuration(traffic.durationMs)}`,
    '',
    ...lines,
  ].join('\n')
}

export function htmlReport(simulation: Simulation): string {
  const charts = simulation.results.map((result) => `<figure>${timelineSvg(simulation, result)}</figure>`).join('\n')
  const summary = escapeXml(textSummary(simulation))
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>sluice simulate: ${escapeXml(simulation.traffic.name)}</title>
<style>
  body { font-family: "DejaVu Sans", Verdana, Arial, sans-serif; margin: 24px; color: #222; background: #fff; }
  .charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(640px, 1fr)); gap: 16px; }
  figure { margin: 0; }
  pre { background: #f6f6f6; padding: 12px; overflow-x: auto; }
</style>
</head>
<body>
<h1>sluice simulate: ${escapeXml(simulation.traffic.name)}</h1>
<pre>${summary}</pre>
<div class="charts">
${charts}
</div>
</body>
</html>
`
}
