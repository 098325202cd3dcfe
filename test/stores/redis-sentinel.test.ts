import assert from 'node:assert/strict'
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import { Limiter, MemoryStore, RedisStore } from '../../src/index.ts'
import { handWritten, replay } from '../conformance/traces.ts'
import { freePort, startRedis, stopProcess, type RedisServer } from '../support/redis.ts'

describe('RedisStore through Redis Sentinel (ioredis)', () => {
  let master: RedisServer
  let sentinel: ChildProcess
  let sentinelPort: number
  let dir: string
  let client: Redis

  before(async () => {
    master = await startRedis()
    sentinelPort = await freePort()
    dir = mkdtempSync(join(tmpdir(), 'sluice-sentinel-'))
    const config = join(dir, 'sentinel.conf')
    writeFileSync(config, [
      `port ${sentinelPort}`,
      'bind 127.0.0.1',
      `dir ${dir}`,
      `sentinel monitor sluice-master 127.0.0.1 ${master.port} 1`,
      'sentinel down-after-milliseconds sluice-master 5000',
    ].join('\n'))
    sentinel = spawn('redis-server', [config, '--sentinel'], { stdio: 'ignore' })
    const deadline = Date.now() + 10_000
    for (;;) {
      const probe = new Redis({ host: '127.0.0.1', port: sentinelPort, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
      probe.on('error', () => {})
      try {
        await probe.connect()
        const reply = (await probe.call('SENTINEL', 'get-master-addr-by-name', 'sluice-master')) as string[] | null
        probe.disconnect()
        if (reply !== null && Number(reply[1]) === master.port) break
      } catch {
        probe.disconnect()
      }
      if (Date.now() > deadline) throw new Error('sentinel did not report the master within 10 s')
      await sleep(100)
    }
    client = new Redis({ sentinels: [{ host: '127.0.0.1', port: sentinelPort }], name: 'sluice-master', maxRetriesPerRequest: 1, autoResendUnfulfilledCommands: false })
    client.on('error', () => {})
  })

  after(async () => {
    client?.disconnect()
    if (sentinel) await stopProcess(sentinel)
    await master?.stop()
    if (dir) rmSync(dir, { recursive: true, force: true })
  })

  it('decides through the master that Sentinel names, exactly as the memory store', async () => {
    const store = new RedisStore({ client })
    for (const [n, trace] of handWritten.entries()) {
      assert.deepEqual(await replay(trace, store, `sen${n}`), await replay(trace, new MemoryStore(), `sen${n}`), trace.name)
    }
    const limiter = new Limiter({ store, prefix: 'sentinel', policies: { algorithm: 'fixed-window', limit: 1, windowMs: 60_000 } })
    assert.equal((await limiter.limit('k')).allowed, true)
    assert.equal(await master.client().exists('sentinel:{k}:fixed-window:1/1m'), 1, 'the state is on the master')
  })
})
