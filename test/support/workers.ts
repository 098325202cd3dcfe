import { fork, type ChildProcess } from 'node:child_process'
import { after, before } from 'node:test'
import type { Scenario } from './burst-worker.ts'

export interface Workers {
  /** Sends a scenario to the given workers (all by default); resolves with each one's allowed count. */
  run(scenario: Scenario | ((index: number) => Scenario), only?: number[]): Promise<number[]>
  /** The same, with the calls each worker's limiter made to its store. */
  runCounted(scenario: Scenario | ((index: number) => Scenario), only?: number[]): Promise<Array<{ allowed: number; storeCalls: number }>>
  stop(): Promise<void>
}

/** Forks `count` worker processes (TypeScript through tsx); `env(i)` adds variables per worker. */
export async function startWorkers(count: number, env: (index: number) => Record<string, string> = () => ({})): Promise<Workers> {
  const file = new URL('./burst-worker.ts', import.meta.url).pathname
  const children: ChildProcess[] = await Promise.all(
    Array.from({ length: count }, (_, i) => new Promise<ChildProcess>((resolve, reject) => {
      const child = fork(file, [], { execArgv: ['--import', 'tsx'], env: { ...process.env, ...env(i) }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
      const timer = setTimeout(() => reject(new Error('worker did not start within 20 s')), 20_000)
      child.once('message', () => { clearTimeout(timer); resolve(child) })
      child.once('error', reject)
    })),
  )
  let nextId = 0
  const runCounted: Workers['runCounted'] = (scenario, only = children.map((_, i) => i)) =>
      Promise.all(only.map((index) => new Promise<{ allowed: number; storeCalls: number }>((resolve, reject) => {
        const child = children[index] as ChildProcess
        const id = nextId++
        const timer = setTimeout(() => reject(new Error(`worker ${index} did not answer within 30 s`)), 30_000)
        const onMessage = (reply: { id: number; allowed?: number; storeCalls?: number; error?: string }) => {
          if (reply.id !== id) return
          child.off('message', onMessage)
          clearTimeout(timer)
          if (reply.error !== undefined) reject(new Error(reply.error))
          else resolve({ allowed: reply.allowed as number, storeCalls: reply.storeCalls ?? 0 })
        }
        child.on('message', onMessage)
        child.send({ id, scenario: typeof scenario === 'function' ? scenario(index) : scenario })
      })))
  return {
    runCounted,
    run: async (scenario, only) => (await runCounted(scenario, only)).map((r) => r.allowed),
    async stop() {
      await Promise.all(children.map((child) => new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve()
        child.once('exit', () => resolve())
        child.send('exit')
        setTimeout(() => child.kill('SIGKILL'), 3000).unref()
      })))
    },
  }
}

/**
 * Registers before / after hooks in the current suite: a redis-server and
 * `count` worker processes, stopped at the end. Read them after `before` ran.
 */
export function useRedisAndWorkers(count: number): { readonly redis: import('./redis.ts').RedisServer; readonly workers: Workers } {
  const state: { redis?: import('./redis.ts').RedisServer; workers?: Workers } = {}
  before(async () => {
    const { startRedis } = await import('./redis.ts')
    state.redis = await startRedis()
    state.workers = await startWorkers(count)
  })
  after(async () => {
    await state.workers?.stop()
    await state.redis?.stop()
  })
  return {
    get redis() { return state.redis as import('./redis.ts').RedisServer },
    get workers() { return state.workers as Workers },
  }
}
