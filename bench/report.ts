/**
 * What a benchmark hands to `npm run bench`: tables, appended as JSON lines to
 * the file named by BENCH_JSON (when set), from which bench/run.ts writes
 * bench/results.md. Each benchmark still prints its own text as it goes.
 */
import { appendFileSync } from 'node:fs'

export interface BenchTable {
  /** Which benchmark (engine, redis, http, gateway, algorithms, memory). */
  bench: string
  title: string
  columns: string[]
  rows: Array<Array<string | number>>
  /** What the figures mean, targets and whether they were met. */
  notes?: string[]
}

export function emit(table: BenchTable): void {
  const file = process.env.BENCH_JSON
  if (file !== undefined && file !== '') appendFileSync(file, `${JSON.stringify(table)}\n`)
}

/** "1.23x" */
export const ratio = (ours: number, theirs: number): string => `${(ours / theirs).toFixed(2)}x`

/** True in `npm run bench -- --quick`: each benchmark does the least that still shows its figures. */
export const QUICK = process.env.BENCH_QUICK === '1'
