/**
 * The gateway as users run it: `node dist/cli/main.js gateway --config FILE`
 * in a child process, with a real config file, learning its ports from its
 * "listening" log line (configs use port 0).
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'

const CLI = new URL('../../dist/cli/main.js', import.meta.url).pathname

export interface LogLine {
  msg: string
  [field: string]: unknown
}

export interface RunningGateway {
  url: string
  adminUrl: string
  child: ChildProcess
  file: string
  /** Parsed JSON log lines so far (stdout). */
  logs: LogLine[]
  /**
   * Waits until stdout matches `pattern` and returns it; throws with what was written
   * if it does not within `timeoutMs`. The banner follows the "listening" line in a
   * write of its own, so a test that reads stdout() at once can race it.
   */
  waitForStdout(pattern: RegExp, timeoutMs?: number): Promise<string>
  stderr(): string
  /** Rewrites the config file (a reload follows on SIGHUP or the file watch). */
  writeConfig(yaml: string): void
  /** Waits for a log line matching `predicate`, up to `timeoutMs`. */
  waitForLog(predicate: (line: LogLine) => boolean, timeoutMs?: number): Promise<LogLine>
  /** Resident memory of the gateway process now, and its peak so far, in bytes (Linux /proc). */
  memory(): { rss: number; peak: number }
  /** SIGTERM and wait for exit; resolves the exit code. */
  stop(): Promise<number | null>
}

export async function startGateway(yaml: string, options: { env?: NodeJS.ProcessEnv; args?: string[]; command?: [string, string[]] } = {}): Promise<RunningGateway> {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-gateway-'))
  const file = join(dir, 'sluice.yaml')
  writeFileSync(file, yaml)
  const [command, args] = options.command ?? [process.execPath, [CLI, 'gateway', '--config', file, ...(options.args ?? [])]]
  const child = spawn(command, args, {
    cwd: new URL('../..', import.meta.url).pathname,
    env: { ...process.env, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
    // npm start runs the gateway as a grandchild: a process group lets stop() reach it.
    detached: options.command !== undefined,
  })
  const logs: LogLine[] = []
  let stderr = ''
  let partial = ''
  let stdout = ''
  child.stdout?.on('data', (chunk: Buffer) => {
    stdout += chunk.toString('utf8')
    partial += chunk.toString('utf8')
    const lines = partial.split('\n')
    partial = lines.pop() ?? ''
    for (const line of lines) {
      if (!line.startsWith('{')) continue
      try {
        logs.push(JSON.parse(line) as LogLine)
      } catch { /* not a log line */ }
    }
  })
  child.stderr?.on('data', (chunk: Buffer) => { stderr += chunk.toString('utf8') })
  // 'close', not 'exit': stdout may still hold the last log lines when the process exits.
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)))
  const waitForLog = async (predicate: (line: LogLine) => boolean, timeoutMs = 10_000): Promise<LogLine> => {
    let deadline = Date.now() + timeoutMs
    let exitSeen = false
    for (;;) {
      const found = logs.find(predicate)
      if (found !== undefined) return found
      // The process may be gone while its last lines are still in the pipe (or, under npm, while the gateway below it finishes).
      if (child.exitCode !== null || child.signalCode !== null) {
        if (!exitSeen) deadline = Math.min(deadline, Date.now() + 3000)
        exitSeen = true
        if (Date.now() > deadline) throw new Error(`gateway exited (${child.exitCode ?? child.signalCode}): ${stderr}`)
      }
      if (Date.now() > deadline) throw new Error(`no matching log line within ${timeoutMs} ms; stderr: ${stderr}; logs: ${JSON.stringify(logs.slice(-5))}`)
      await sleep(20)
    }
  }
  let listening: LogLine
  try {
    listening = await waitForLog((line) => line.msg === 'sluice gateway listening')
  } catch (error) {
    child.kill('SIGKILL')
    rmSync(dir, { recursive: true, force: true })
    throw error
  }
  return {
    url: listening.url as string,
    adminUrl: listening.admin as string,
    child,
    file,
    logs,
    async waitForStdout(pattern, timeoutMs = 10_000) {
      const deadline = Date.now() + timeoutMs
      while (!pattern.test(stdout)) {
        if (Date.now() > deadline || child.exitCode !== null) throw new Error(`stdout did not match ${pattern} within ${timeoutMs} ms; it was:\n${stdout}`)
        await sleep(20)
      }
      return stdout
    },
    stderr: () => stderr,
    writeConfig: (text) => writeFileSync(file, text),
    waitForLog,
    memory() {
      const status = readFileSync(`/proc/${child.pid}/status`, 'utf8')
      const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1] ?? NaN) * 1024
      return { rss: kb('VmRSS'), peak: kb('VmHWM') }
    },
    async stop() {
      const signal = (name: NodeJS.Signals) => {
        if (child.exitCode !== null) return
        if (options.command !== undefined && child.pid !== undefined) process.kill(-child.pid, name)
        else child.kill(name)
      }
      signal('SIGTERM')
      const timer = setTimeout(() => signal('SIGKILL'), 15_000)
      const code = await exited
      clearTimeout(timer)
      rmSync(dir, { recursive: true, force: true })
      return code
    },
  }
}

/** Runs the CLI to completion (check-config, inspect): exit code and output. */
export function runCli(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk: Buffer) => { stdout += chunk.toString('utf8') })
    child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString('utf8') })
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000)
    // 'close': the output is complete only once the pipes are; 'exit' can come first.
    child.once('close', (code) => {
      clearTimeout(timer)
      resolve({ code, stdout, stderr })
    })
  })
}
