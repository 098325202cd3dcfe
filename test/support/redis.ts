/**
 * Real redis-server processes for tests: each on a free loopback port, with
 * persistence off, stopped when the suite ends. Never a mock of Redis.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis, type RedisOptions } from 'ioredis'

export interface RedisServer {
  port: number
  url: string
  /** Sends a signal to the server process (SIGKILL, SIGSTOP, SIGCONT). */
  signal(signal: NodeJS.Signals): void
  /** Starts the server again on the same port (after a kill), with an empty dataset. */
  restart(): Promise<void>
  /** A fresh ioredis client; closed by stop(). */
  client(options?: RedisOptions): Redis
  stop(): Promise<void>
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.unref()
    server.on('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolve(port))
    })
  })
}

/** Starts redis-server on 127.0.0.1 with `extraArgs` (e.g. ['--cluster-enabled', 'yes']). */
export async function startRedis(extraArgs: string[] = []): Promise<RedisServer> {
  for (let attempt = 0; ; attempt++) {
    const port = await freePort()
    const started = await spawnRedis(port, extraArgs)
    if (started.ok) {
      let { child, dir } = started
      const clients: Redis[] = []
      return {
        port,
        url: `redis://127.0.0.1:${port}`,
        client(options) {
          const settings: RedisOptions = { host: '127.0.0.1', port, maxRetriesPerRequest: 1, autoResendUnfulfilledCommands: false, ...options }
          // ioredis's overloads reject an optional `replyMapping` under exactOptionalPropertyTypes.
          const client = new Redis(settings as never)
          client.on('error', () => {})
          clients.push(client)
          return client
        },
        signal(signal) {
          child.kill(signal)
        },
        async restart() {
          await stopProcess(child)
          rmSync(dir, { recursive: true, force: true })
          const again = await spawnRedis(port, extraArgs)
          if (!again.ok) throw new Error(`redis-server did not restart on port ${port}:\n${again.output}`)
          ;({ child, dir } = again)
        },
        async stop() {
          await Promise.all(clients.map((c) => c.quit().catch(() => c.disconnect())))
          child.kill('SIGCONT')
          await stopProcess(child)
          rmSync(dir, { recursive: true, force: true })
        },
      }
    }
    if (attempt >= 3) throw new Error(`redis-server did not start on port ${port}:\n${started.output}`)
  }
}

type Spawned = { ok: true; child: ChildProcess; dir: string } | { ok: false; output: string }

async function spawnRedis(port: number, extraArgs: string[]): Promise<Spawned> {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-redis-'))
  const child = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--protected-mode', 'no', ...extraArgs],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  )
  let output = ''
  child.stdout?.on('data', (chunk: Buffer) => { output += chunk.toString() })
  child.stderr?.on('data', (chunk: Buffer) => { output += chunk.toString() })
  if (await waitUntilServing(port, child)) return { ok: true, child, dir }
  await stopProcess(child)
  rmSync(dir, { recursive: true, force: true })
  return { ok: false, output }
}

/**
 * Ready when the server on `port` answers and is `child`: another suite's Redis
 * that took the port between freePort() and the bind would answer PING too, and
 * two suites sharing one dataset (one of them killing it) decide wrongly at random.
 */
async function waitUntilServing(port: number, child: ChildProcess): Promise<boolean> {
  const deadline = Date.now() + 5000
  while (Date.now() < deadline && child.exitCode === null) {
    const probe = spawnSync('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'INFO', 'server'], { encoding: 'utf8', timeout: 1000 })
    const pid = /^process_id:(\d+)/m.exec(probe.stdout ?? '')?.[1]
    if (pid !== undefined) return Number(pid) === child.pid
    await sleep(50)
  }
  return false
}

export async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise((resolve) => child.once('exit', resolve))
  child.kill('SIGTERM')
  const timer = setTimeout(() => child.kill('SIGKILL'), 3000)
  await exited
  clearTimeout(timer)
}

/** Every key in the database matching a pattern, by SCAN. */
export async function scanKeys(client: Redis, pattern: string): Promise<string[]> {
  const keys: string[] = []
  let cursor = '0'
  do {
    const [next, batch] = await client.scan(cursor, 'MATCH', pattern, 'COUNT', 1000)
    cursor = next
    keys.push(...batch)
  } while (cursor !== '0')
  return keys
}

/** Calls of each command since the last CONFIG RESETSTAT, from INFO commandstats (`fcall`, `evalsha`, `function|load`). */
export async function commandCalls(client: Redis): Promise<Record<string, number>> {
  const calls: Record<string, number> = {}
  for (const [, name, count] of (await client.info('commandstats')).matchAll(/^cmdstat_([\w|]+):calls=(\d+)/gm)) calls[name as string] = Number(count)
  return calls
}

/** The names of the function libraries loaded on a node. */
export async function functionLibraries(client: Redis): Promise<string[]> {
  const list = await client.call('FUNCTION', 'LIST') as unknown[][]
  return list.map((library) => String(library[library.indexOf('library_name') + 1]))
}
