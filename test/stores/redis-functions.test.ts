import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { createClient } from 'redis'
import type { Redis } from 'ioredis'
import { Limiter, RedisStore } from '../../src/index.ts'
import { assertSameAsMemory, handWritten, randomTraces, spanningKeys, type Trace } from '../conformance/traces.ts'
import { commandCalls, functionLibraries, startRedis, type RedisServer } from '../support/redis.ts'

const traces: Trace[] = [...handWritten, ...randomTraces(40, 21), ...randomTraces(20, 23, true), ...spanningKeys, ...randomTraces(20, 25, true, true)]

async function eventually(what: string, check: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 100; i++) {
    if (await check()) return
    await sleep(20)
  }
  assert.fail(`not within 2 s: ${what}`)
}

describe('RedisStore with functions: true (FCALL, Redis 7+)', () => {
  let redis: RedisServer
  let admin: Redis
  before(async () => {
    redis = await startRedis()
    admin = redis.client()
  })
  after(async () => { await redis.stop() })

  it('decides every conformance trace exactly as the memory store, by FCALL once the library is loaded (ioredis and node-redis)', async () => {
    const nodeRedis = createClient({ url: redis.url })
    await nodeRedis.connect()
    try {
      for (const [label, client] of [['io', redis.client()], ['nr', nodeRedis]] as const) {
        await admin.call('FUNCTION', 'FLUSH')
        await admin.config('RESETSTAT')
        const warnings: string[] = []
        const store = new RedisStore({ client, functions: true, onWarning: (message) => warnings.push(message) })
        for (const [n, trace] of traces.entries()) await assertSameAsMemory(trace, store, `fn-${label}-${n}`)
        const calls = await commandCalls(admin)
        const scripts = (calls.evalsha ?? 0) + (calls.eval ?? 0)
        // The first call finds no library, runs as a script and has it loaded; the rest are function calls.
        assert.equal(calls['function|load'], 1, `${label}: ${JSON.stringify(calls)}`)
        assert.ok((calls.fcall ?? 0) > 20 * scripts, `${label}: ${JSON.stringify(calls)}`)
        assert.equal((await functionLibraries(admin)).filter((name) => name.startsWith('sluice_limit_')).length, 1)
        assert.deepEqual(warnings, [])
      }
    } finally {
      await nodeRedis.close()
    }
  })

  it('a node that loses the library (FUNCTION FLUSH before every call) changes no decision, and has it loaded again', async () => {
    const store = new RedisStore({ client: redis.client(), functions: true })
    await assertSameAsMemory(handWritten[8] as Trace, store, 'fn-flush', async () => { await admin.call('FUNCTION', 'FLUSH') })
    await eventually('the library is loaded again', async () => (await functionLibraries(admin)).some((name) => name.startsWith('sluice_limit_')))
  })

  it('a batch of 300 concurrent calls by FCALL is decided exactly as one by one', async () => {
    await admin.call('FUNCTION', 'FLUSH')
    const store = new RedisStore({ client: redis.client(), functions: true })
    const policies = [{ algorithm: 'sliding-log', limit: 40, windowMs: 1000 }, { algorithm: 'token-bucket', capacity: 30, refillTokens: 1, refillIntervalMs: 10 }] as const
    const limiter = new Limiter({ store, prefix: 'fn-batch', policies: [...policies], clock: () => 42_000 })
    const memory = new Limiter({ policies: [...policies], clock: () => 42_000 })
    // Loads the library first, so the 300 calls below run as functions.
    await limiter.peek('warm')
    await eventually('the library is loaded', async () => (await functionLibraries(admin)).length > 0)
    const calls = Array.from({ length: 300 }, (_, i) => ({ key: `k${i % 3}`, cost: 1 + (i % 2) }))
    const decisions = await Promise.all(calls.map(({ key, cost }) => limiter.limit(key, { cost })))
    assert.deepEqual(decisions.map((d) => [d.allowed, d.remaining]), calls.map(({ key, cost }) => { const d = memory.limitSync(key, { cost }); return [d.allowed, d.remaining] }))
  })
})

describe('RedisStore with functions: true where Redis cannot have them', () => {
  let renamed: RedisServer
  let redis: RedisServer
  before(async () => {
    // As a Redis before 7.0 answers: no FCALL command at all.
    renamed = await startRedis(['--rename-command', 'FCALL', ''])
    redis = await startRedis()
  })
  after(async () => {
    await renamed.stop()
    await redis.stop()
  })

  it('a Redis without FCALL: every call runs as a script, the same decisions, one warning', async () => {
    const warnings: string[] = []
    const store = new RedisStore({ client: renamed.client(), functions: true, onWarning: (message) => warnings.push(message) })
    for (const [n, trace] of handWritten.entries()) await assertSameAsMemory(trace, store, `nofn-${n}`)
    assert.equal(warnings.length, 1, warnings.join('\n'))
    assert.match(warnings[0] as string, /^sluice: functions were asked for, but this Redis cannot run them \(ERR unknown command 'FCALL'.*\); each decision runs as a script \(EVALSHA\) instead\.$/)
    const calls = await commandCalls(renamed.client())
    assert.equal(calls['function|load'], undefined)
  })

  it('an ACL user who may call functions but not load them: scripts after the refused load, one warning; one who may not call them: the same', async () => {
    const admin = redis.client()
    await admin.call('ACL', 'SETUSER', 'noload', 'on', '>secret-1', '~*', '&*', '+@all', '-function')
    await admin.call('ACL', 'SETUSER', 'nofcall', 'on', '>secret-2', '~*', '&*', '+@all', '-fcall')
    for (const [user, password, why] of [['noload', 'secret-1', /NOPERM.*'function\|load'/], ['nofcall', 'secret-2', /NOPERM.*'fcall'/]] as const) {
      const warnings: string[] = []
      const store = new RedisStore({ client: redis.client({ username: user, password }), functions: true, onWarning: (message) => warnings.push(message) })
      await assertSameAsMemory(handWritten[8] as Trace, store, `acl-${user}`)
      await eventually(`${user}: a warning`, async () => warnings.length > 0)
      for (const [n, trace] of handWritten.slice(0, 4).entries()) await assertSameAsMemory(trace, store, `acl-${user}-${n}`)
      assert.equal(warnings.length, 1, warnings.join('\n'))
      assert.match(warnings[0] as string, why)
    }
    assert.deepEqual(await functionLibraries(admin), [])
  })

  it('refuses a functions option that is not a boolean', () => {
    assert.throws(() => new RedisStore({ url: redis.url, functions: 'yes' as never }), /^ArgumentError: functions must be true or false \(got "yes"\)/)
  })
})
