/** `sluice simulate`: replay a traffic shape (or a CSV) through policies and report what each did. */
import { mkdirSync, statSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { parseArgs } from 'node:util'
import { commandLineProblem, SluiceError } from '../core/errors.ts'
import { FileTooLargeError, readFileBounded } from '../core/files.ts'
import { didYouMean, withHint } from '../core/suggest.ts'
import { parseDuration } from '../core/policy.ts'
import type { Policy } from '../core/types.ts'
import { timelineSvg } from './chart.ts'
import { htmlReport, textSummary } from './report.ts'
import { simulate } from './simulate.ts'
import { isNumericUnit, MAX_EVENTS, parseCsv, pattern, PATTERNS, type PatternName, type Traffic } from './traffic.ts'

/** Room for the MAX_EVENTS a simulation replays at about 50 bytes a line; a larger file (or /dev/zero) is the wrong one. */
const MAX_CSV_BYTES = 256 * 1024 * 1024

export const SIMULATE_USAGE = `usage: sluice simulate [--pattern NAME | --csv FILE] [options]

Replays traffic through policies on a simulated clock and reports, per policy,
what it admitted over time, the most it admitted in any window of its own
length (the boundary-burst figure), the share it refused, and for the
sliding-window counter its false allows / denies against the exact log.

traffic (one of):
  --pattern NAME     ${PATTERNS.join(', ')} (default boundary-burst)
  --csv FILE         "timestamp,key[,cost]" lines, sorted; timestamps in ms,
                     epoch seconds (10 digits, as date +%s or nginx $msec),
                     epoch us or ns (16 or 19 digits), or ISO 8601
  --time-unit UNIT   ms, s, us or ns: how --csv's numeric timestamps are
                     read (default: by the first one's size, where only
                     one unit's epoch lies: s from 1e9 to 1e11, us from
                     1e14 to 1e17, ns from 1e17 to 1e20; else ms)

policies:
  --limit N          the limit the five default policies share (default 100)
  --window DURATION  their window: 500ms, 10s, 1m, 1h, 1d (default 1m)
  --policy JSON      a policy of your own (repeatable); replaces the defaults

output:
  --out DIR          write one SVG timeline per policy into DIR
  --html FILE        write a self-contained page with every chart side by side
  --json             print the figures as JSON instead of the table
  -h, --help         print this text
`

type Out = (line: string) => void

/** The five algorithms at the same nominal limit: `limit` units per `windowMs`. */
export function defaultPolicies(limit: number, windowMs: number): Policy[] {
  return [
    { algorithm: 'fixed-window', name: 'fixed-window', limit, windowMs },
    { algorithm: 'sliding-log', name: 'sliding-log', limit, windowMs },
    { algorithm: 'sliding-window', name: 'sliding-window', limit, windowMs },
    { algorithm: 'token-bucket', name: 'token-bucket', capacity: limit, refillTokens: limit, refillIntervalMs: windowMs },
    { algorithm: 'leaky-bucket', name: 'leaky-bucket', capacity: limit, leakTokens: limit, leakIntervalMs: windowMs },
  ]
}

export function simulateCommand(args: readonly string[], out: Out, err: Out): number {
  let values
  try {
    values = parseArgs({
      args: [...args],
      options: {
        pattern: { type: 'string' },
        csv: { type: 'string' },
        'time-unit': { type: 'string' },
        limit: { type: 'string' },
        window: { type: 'string' },
        policy: { type: 'string', multiple: true },
        out: { type: 'string' },
        html: { type: 'string' },
        json: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
      allowPositionals: false,
    }).values
  } catch (error) {
    err(`sluice simulate: ${commandLineProblem(error, SIMULATE_USAGE)}\n\n${SIMULATE_USAGE}`)
    return 2
  }
  if (values.help === true) {
    out(SIMULATE_USAGE)
    return 0
  }
  const usage = (problem: string) => {
    err(`sluice simulate: ${problem}\n\n${SIMULATE_USAGE}`)
    return 2
  }
  if (values.pattern !== undefined && values.csv !== undefined) return usage('--pattern and --csv cannot be used together')
  const timeUnit = values['time-unit']
  if (timeUnit !== undefined && values.csv === undefined) return usage('--time-unit applies to --csv timestamps only')
  if (timeUnit !== undefined && !isNumericUnit(timeUnit)) return usage(`--time-unit must be ms, s, us or ns, got ${timeUnit}`)
  const patternName = values.pattern ?? 'boundary-burst'
  if (!(PATTERNS as readonly string[]).includes(patternName)) {
    return usage(withHint(`unknown pattern "${patternName}" (known: ${PATTERNS.join(', ')})`, didYouMean(patternName, PATTERNS)))
  }
  const limit = values.limit === undefined ? 100 : Number(values.limit)
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > 1_000_000) return usage(`--limit must be an integer from 1 to 1000000, got ${values.limit}`)
  const windowMs = values.window === undefined ? 60_000 : parseDuration(values.window)
  if (windowMs === undefined) return usage(`--window must be a duration such as 500ms, 10s, 1m, 1h or 1d, got ${values.window}`)

  try {
    let policies: Policy[]
    if (values.policy === undefined) {
      policies = defaultPolicies(limit, windowMs)
    } else {
      policies = values.policy.map((text, i) => {
        try {
          return JSON.parse(text) as Policy
        } catch {
          throw new SluiceError('ERR_SLUICE_ARGUMENT', `--policy #${i + 1} is not JSON: ${text.slice(0, 80)}`)
        }
      })
    }
    let traffic: Traffic
    if (values.csv !== undefined) {
      let text: string
      try {
        text = readFileBounded(values.csv, MAX_CSV_BYTES).toString('utf8')
      } catch (error) {
        const sample = error instanceof FileTooLargeError ? ` (a simulation replays at most ${MAX_EVENTS.toLocaleString('en-US')} events: replay a sample)` : ''
        err(`sluice simulate: cannot read ${values.csv}: ${(error as Error).message}${sample}`)
        return 1
      }
      traffic = parseCsv(text, values.csv, timeUnit)
    } else {
      traffic = pattern(patternName as PatternName, { limit, windowMs })
    }
    const simulation = simulate(traffic, policies)
    if (values.json === true) {
      out(JSON.stringify({
        ...simulation,
        results: simulation.results.map(({ decisions: _decisions, ...result }) => result),
      }, null, 2))
    } else {
      out(textSummary(simulation))
    }
    try {
      if (values.out !== undefined) {
        makeDirectory(values.out)
        for (const result of simulation.results) {
          const file = join(values.out, `${traffic.name.replace(/[^\w.-]+/g, '_')}-${result.policy.name.replace(/[^\w.-]+/g, '_')}.svg`)
          writeFileSync(file, `${timelineSvg(simulation, result)}\n`)
          if (values.json !== true) out(`wrote ${file}`)
        }
      }
      if (values.html !== undefined) {
        writeFileSync(values.html, htmlReport(simulation))
        if (values.json !== true) out(`wrote ${values.html}`)
      }
    } catch (error) {
      err(`sluice simulate: cannot write the charts: ${(error as Error).message}`)
      return 1
    }
    return 0
  } catch (error) {
    if (error instanceof SluiceError) {
      err(`sluice simulate: ${error.message}`)
      return 1
    }
    throw error
  }
}

/**
 * `mkdir -p` that ends: node's `{ recursive: true }` spins forever where a
 * parent exists but cannot hold children (under /proc, a dangling symlink),
 * because such a mkdir fails with ENOENT, which it takes for a missing parent.
 */
function makeDirectory(dir: string): void {
  try {
    mkdirSync(dir)
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    if (code === 'EEXIST' && statSync(dir).isDirectory()) return
    const parent = dirname(dir)
    if (code !== 'ENOENT' || parent === dir) throw error
    makeDirectory(parent)
    // The parent is there now: a second ENOENT is final.
    mkdirSync(dir)
  }
}
