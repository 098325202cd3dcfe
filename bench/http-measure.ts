/**
 * What bench/http.ts and bench/keys.ts measure a server with: one process of
 * bench/http-server.ts under autocannon, with the server's own CPU time per
 * request (from /proc, Linux only).
 */
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { createInterface } from 'node:readline'
import autocannon from 'autocannon'

export const CONNECTIONS = 50

export interface Row { framework: string; limiter: string; rps: number; p99: number; errors: number; non2xx: number; cpuUsPerRequest: number | undefined }

const CLOCK_TICKS_PER_SECOND = 100

/** User + system CPU seconds a process has used, or undefined where /proc does not say. */
function cpuSeconds(pid: number | undefined): number | undefined {
  try {
    // Fields after the command name (which may hold spaces): utime is the 12th, stime the 13th.
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? []
    const ticks = Number(fields[11]) + Number(fields[12])
    return Number.isFinite(ticks) ? ticks / CLOCK_TICKS_PER_SECOND : undefined
  } catch {
    return undefined
  }
}

/** One server process of bench/http-server.ts under autocannon: a second's warm-up, then `seconds` measured. */
export async function measure(framework: string, limiter: string, redisUrl: string, seconds: number): Promise<Row> {
  const child = spawn(process.execPath, ['--import', 'tsx', new URL('./http-server.ts', import.meta.url).pathname, framework, limiter, redisUrl], { stdio: ['ignore', 'pipe', 'inherit'] })
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${framework}/${limiter} did not start`)), 20_000)
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).once('line', (line) => { clearTimeout(timer); resolve(Number(line)) })
  })
  try {
    // A short warm-up, then the measured run.
    await autocannon({ url: `http://127.0.0.1:${port}/`, connections: CONNECTIONS, duration: 1 })
    const cpuBefore = cpuSeconds(child.pid)
    const result = await autocannon({ url: `http://127.0.0.1:${port}/`, connections: CONNECTIONS, duration: seconds })
    const cpuAfter = cpuSeconds(child.pid)
    const cpuUsPerRequest = cpuBefore === undefined || cpuAfter === undefined ? undefined : ((cpuAfter - cpuBefore) / result.requests.total) * 1e6
    return { framework, limiter, rps: result.requests.average, p99: result.latency.p99, errors: result.errors, non2xx: result.non2xx, cpuUsPerRequest }
  } finally {
    child.kill('SIGTERM')
  }
}

/** The run with the median requests/s, carrying the median CPU time per request of all runs. */
export function median(runs: Row[]): Row {
  const row = [...runs].sort((a, b) => a.rps - b.rps)[Math.floor(runs.length / 2)] as Row
  const cpu = runs.map((run) => run.cpuUsPerRequest).filter((us) => us !== undefined).sort((a, b) => a - b)
  return { ...row, cpuUsPerRequest: cpu[Math.floor(cpu.length / 2)] }
}

export function medianOf(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)] as number
}

