/** A real redis-sentinel process on a free loopback port, monitoring one master. */
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import { freePort, stopProcess } from './redis.ts'

export interface Sentinel {
  port: number
  /** Sends `SENTINEL ...args`; undefined when the sentinel does not answer. */
  ask(...args: string[]): Promise<unknown>
  stop(): Promise<void>
}

/**
 * Starts a sentinel monitoring `name` at 127.0.0.1:masterPort (quorum 1), and
 * resolves once `ready` says what the sentinel reports is enough to begin.
 */
export async function startSentinel(
  name: string,
  masterPort: number,
  ready: (ask: Sentinel['ask']) => Promise<boolean>,
  options: { downAfterMs?: number; failoverTimeoutMs?: number } = {},
): Promise<Sentinel> {
  const port = await freePort()
  const dir = mkdtempSync(join(tmpdir(), 'sluice-sentinel-'))
  const config = join(dir, 'sentinel.conf')
  writeFileSync(config, [
    `port ${port}`,
    'bind 127.0.0.1',
    `dir ${dir}`,
    `sentinel monitor ${name} 127.0.0.1 ${masterPort} 1`,
    `sentinel down-after-milliseconds ${name} ${options.downAfterMs ?? 5000}`,
    `sentinel failover-timeout ${name} ${options.failoverTimeoutMs ?? 10_000}`,
  ].join('\n'))
  const child: ChildProcess = spawn('redis-server', [config, '--sentinel'], { stdio: 'ignore' })
  const ask = async (...args: string[]): Promise<unknown> => {
    const probe = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
    probe.on('error', () => {})
    try {
      await probe.connect()
      return await probe.call('SENTINEL', ...args)
    } catch {
      return undefined
    } finally {
      probe.disconnect()
    }
  }
  const stop = async () => {
    await stopProcess(child)
    rmSync(dir, { recursive: true, force: true })
  }
  const deadline = Date.now() + 15_000
  while (!(await ready(ask))) {
    if (Date.now() > deadline) {
      await stop()
      throw new Error(`sentinel for ${name} was not ready within 15 s`)
    }
    await sleep(100)
  }
  return { port, ask, stop }
}
