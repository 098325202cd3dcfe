/**
 * The README's pictures: each built-in pattern through the five algorithms at
 * 100 per minute, one SVG per pattern and policy, under docs/simulate/.
 * `npm run figures` writes them; a test fails when the committed ones are stale.
 */
import { timelineSvg } from './chart.ts'
import { defaultPolicies } from './command.ts'
import { textSummary } from './report.ts'
import { simulate } from './simulate.ts'
import { pattern, PATTERNS } from './traffic.ts'

export const FIGURE_SCALE = { limit: 100, windowMs: 60_000 }

/** File name -> contents, for every README figure and the summary tables. */
export function figures(): Map<string, string> {
  const files = new Map<string, string>()
  const tables: string[] = []
  for (const name of PATTERNS) {
    const simulation = simulate(pattern(name, FIGURE_SCALE), defaultPolicies(FIGURE_SCALE.limit, FIGURE_SCALE.windowMs))
    for (const result of simulation.results) files.set(`${name}-${result.policy.name}.svg`, `${timelineSvg(simulation, result)}\n`)
    tables.push(textSummary(simulation))
  }
  files.set('summary.txt', `${tables.join('\n\n')}\n`)
  return files
}
