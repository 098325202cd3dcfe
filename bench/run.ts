/**
 * `npm run bench`: every benchmark of the project, one after another, each in
 * its own process with a time budget, behind a progress bar; then
 * bench/results.md, a table per benchmark with sluice beside its peers
 * measured in the same run, and the machine they ran on. Not a test.
 * A quick run or a run of some benchmarks writes bench/results-partial.md
 * instead, so the committed full results (which the README quotes) stay.
 *
 *   npm run bench                  (about 26 minutes on 2 cores)
 *   npm run bench -- --quick       (about 2.5 minutes: shorter rounds, fewer cells)
 *   npm run bench -- --only redis,algorithms
 *
 * Each benchmark's own output goes to bench/results.log.
 */
import { spawn, spawnSync } from 'node:child_process'
import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { cpus, tmpdir, totalmem, release } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import type { BenchTable } from './report.ts'

interface Bench {
  name: string
  script: string
  about: string
  /** Seconds this benchmark may take, full and quick. */
  budget: { full: number; quick: number }
  env: { full: Record<string, string>; quick: Record<string, string> }
  needs: string[]
  gc?: boolean
}

const BENCHES: Bench[] = [
  { name: 'engine', script: 'engine.ts', about: 'in-process decisions per second', budget: { full: 360, quick: 40 }, env: { full: { BENCH_MS: '500' }, quick: { BENCH_MS: '100' } }, needs: [], gc: true },
  { name: 'memory', script: 'memory.ts', about: 'memory store bytes per key', budget: { full: 150, quick: 25 }, env: { full: {}, quick: {} }, needs: [], gc: true },
  { name: 'redis', script: 'redis.ts', about: 'Redis store throughput and latency', budget: { full: 330, quick: 35 }, env: { full: { BENCH_MS: '1000', BENCH_ROUNDS: '3' }, quick: { BENCH_MS: '300', BENCH_ROUNDS: '1' } }, needs: ['redis-server', 'redis-benchmark'] },
  { name: 'algorithms', script: 'algorithms.ts', about: 'the five algorithms and the classic limiters on Redis', budget: { full: 120, quick: 25 }, env: { full: { BENCH_MS: '3000' }, quick: { BENCH_MS: '400' } }, needs: ['redis-server'] },
  { name: 'http', script: 'http.ts', about: 'middleware overhead', budget: { full: 720, quick: 140 }, env: { full: { BENCH_SECONDS: '3', BENCH_ROUNDS: '5' }, quick: { BENCH_SECONDS: '2', BENCH_ROUNDS: '1' } }, needs: ['redis-server'] },
  { name: 'keys', script: 'keys.ts', about: 'two keys per request on Redis', budget: { full: 120, quick: 40 }, env: { full: { BENCH_SECONDS: '3', BENCH_ROUNDS: '3' }, quick: { BENCH_SECONDS: '2', BENCH_ROUNDS: '1' } }, needs: ['redis-server'] },
  { name: 'gateway', script: 'gateway.ts', about: 'the gateway beside nginx', budget: { full: 360, quick: 110 }, env: { full: { BENCH_SECONDS: '8' }, quick: { BENCH_SECONDS: '2' } }, needs: ['nginx', 'wrk'] },
]

const root = new URL('..', import.meta.url).pathname
const { values } = parseArgs({ options: { quick: { type: 'boolean' }, only: { type: 'string' } } })
const mode = values.quick === true ? 'quick' : 'full'
const only = values.only?.split(',').map((name) => name.trim())
const unknown = only?.filter((name) => !BENCHES.some((bench) => bench.name === name)) ?? []
if (unknown.length > 0) {
  console.error(`unknown benchmark(s): ${unknown.join(', ')} (known: ${BENCHES.map((b) => b.name).join(', ')})`)
  process.exit(2)
}
const selected = BENCHES.filter((bench) => only === undefined || only.includes(bench.name))
const resultsFile = mode === 'quick' || only !== undefined ? 'results-partial.md' : 'results.md'
const has = (tool: string) => spawnSync('sh', ['-c', `command -v ${tool}`]).status === 0
/** A tool's first line about itself (wrk prints its version with a usage error). */
const version = (command: string, args: string[]) => {
  const run = spawnSync(command, args, { encoding: 'utf8' })
  const text = `${run.stdout ?? ''}${run.stderr ?? ''}`.trim().split('\n')[0]
  return run.error === undefined && text !== undefined && text !== '' ? text : `${command}: not installed`
}

const logFile = join(root, 'bench', 'results.log')
const work = mkdtempSync(join(tmpdir(), 'sluice-bench-'))
writeFileSync(logFile, `npm run bench (${mode}), ${new Date().toISOString()}\n`)
const totalBudget = selected.reduce((sum, bench) => sum + bench.budget[mode], 0)

interface Outcome { bench: Bench; status: 'ok' | 'failed' | 'timed out' | 'skipped'; seconds: number; tables: BenchTable[]; detail?: string }

/** One line, redrawn in place on a terminal; a line per step otherwise. */
function progress(done: number, bench: Bench, elapsed: number): void {
  const spent = selected.slice(0, done).reduce((sum, b) => sum + b.budget[mode], 0) + Math.min(elapsed, bench.budget[mode])
  const width = 30
  const filled = Math.min(width, Math.round((spent / totalBudget) * width))
  const line = `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done + 1}/${selected.length} ${bench.name.padEnd(10)} ${elapsed.toFixed(0)}s of at most ${bench.budget[mode]}s`
  if (process.stderr.isTTY) process.stderr.write(`\r${line}`)
}

async function run(bench: Bench, index: number): Promise<Outcome> {
  const missing = bench.needs.filter((tool) => !has(tool))
  if (missing.length > 0) return { bench, status: 'skipped', seconds: 0, tables: [], detail: `needs ${missing.join(', ')} (apt-get install -y ${missing.join(' ')})` }
  if (!process.stderr.isTTY) process.stderr.write(`${index + 1}/${selected.length} ${bench.name}: ${bench.about} (at most ${bench.budget[mode]} s)\n`)
  const jsonFile = join(work, `${bench.name}.jsonl`)
  const started = Date.now()
  const child = spawn(process.execPath, [...(bench.gc === true ? ['--expose-gc'] : []), '--import', 'tsx', join(root, 'bench', bench.script)], {
    cwd: root,
    env: { ...process.env, ...bench.env[mode], BENCH_JSON: jsonFile, BENCH_QUICK: mode === 'quick' ? '1' : '0' },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  appendFileSync(logFile, `\n=== ${bench.name} ===\n`)
  child.stdout.on('data', (chunk: Buffer) => appendFileSync(logFile, chunk))
  child.stderr.on('data', (chunk: Buffer) => appendFileSync(logFile, chunk))
  const ticker = setInterval(() => progress(index, bench, (Date.now() - started) / 1000), 500)
  let timedOut = false
  // A benchmark gets twice its budget before it is stopped: budgets are estimates, not promises.
  const killer = setTimeout(() => {
    timedOut = true
    child.kill('SIGTERM')
  }, bench.budget[mode] * 2000)
  const code = await new Promise<number | null>((resolve) => child.once('exit', (exitCode) => resolve(exitCode)))
  clearInterval(ticker)
  clearTimeout(killer)
  const seconds = (Date.now() - started) / 1000
  let tables: BenchTable[] = []
  try {
    tables = readFileSync(jsonFile, 'utf8').trim().split('\n').filter(Boolean).map((line) => JSON.parse(line) as BenchTable)
  } catch { /* wrote nothing */ }
  const status = timedOut ? 'timed out' : code === 0 ? 'ok' : 'failed'
  return { bench, status, seconds, tables, ...(status !== 'ok' && { detail: `exit ${code}; see bench/results.log` }) }
}

function markdown(table: BenchTable): string {
  const cell = (value: string | number) => String(value).replace(/\|/g, '\\|')
  return [
    `#### ${table.title}`,
    '',
    `| ${table.columns.map(cell).join(' | ')} |`,
    `|${table.columns.map(() => '---').join('|')}|`,
    ...table.rows.map((row) => `| ${row.map(cell).join(' | ')} |`),
    ...(table.notes === undefined ? [] : ['', ...table.notes.map((note) => `- ${note}`)]),
  ].join('\n')
}

const started = Date.now()
const outcomes: Outcome[] = []
for (const [index, bench] of selected.entries()) {
  const outcome = await run(bench, index)
  outcomes.push(outcome)
  if (process.stderr.isTTY) process.stderr.write('\r\x1b[2K')
  process.stderr.write(`${bench.name}: ${outcome.status} in ${outcome.seconds.toFixed(0)} s${outcome.detail === undefined ? '' : ` (${outcome.detail})`}\n`)
}
rmSync(work, { recursive: true, force: true })

const cpu = cpus()
const machine = [
  `- CPU: ${cpu[0]?.model ?? 'unknown'} x ${cpu.length}`,
  `- memory: ${(totalmem() / 2 ** 30).toFixed(1)} GiB; Linux ${release()}`,
  `- node ${process.version}; ${version('redis-server', ['--version'])}; ${version('nginx', ['-v'])}; ${version('wrk', ['-v'])}`,
]
const sections = outcomes.map(({ bench, status, seconds, tables, detail }) => [
  `### ${bench.name}: ${bench.about}`,
  '',
  `\`npm run bench:${bench.name}\` — ${status}${detail === undefined ? '' : ` (${detail})`}, ${seconds.toFixed(0)} s`,
  '',
  ...tables.map(markdown).flatMap((text) => [text, '']),
].join('\n'))
const report = [
  '# sluice benchmark results',
  '',
  `Written by \`npm run bench${mode === 'quick' || only !== undefined ? ' --' : ''}${mode === 'quick' ? ' --quick' : ''}${only === undefined ? '' : ` --only ${only.join(',')}`}\` on ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC, in ${((Date.now() - started) / 60_000).toFixed(1)} minutes${mode === 'quick' ? ' (quick: short rounds, fewer cells; for a smoke check, not for quoting)' : ''}. ` +
    'Absolute figures drift from machine to machine; the ratios compare sluice with peers measured in the same run, on this machine:',
  '',
  ...machine,
  '',
  ...sections,
].join('\n')
writeFileSync(join(root, 'bench', resultsFile), `${report.trimEnd()}\n`)
process.stderr.write(`wrote bench/${resultsFile} (${outcomes.filter((o) => o.status === 'ok').length}/${outcomes.length} benchmarks ok); their output is in bench/results.log\n`)
process.exit(outcomes.every((o) => o.status === 'ok' || o.status === 'skipped') ? 0 : 1)
