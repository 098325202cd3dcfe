import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { createSentinel } from 'redis'
import { Limiter, MemoryStore, RedisStore } from '../../src/index.ts'
import { trackConnectionErrors } from '../../src/stores/redis/clients.ts'
import { LIMITER_CLIENT_OPTIONS } from '../../src/stores/redis/redis-store.ts'
import { handWritten, replay, spanningKeys } from '../conformance/traces.ts'
import { runCli } from '../support/gateway.ts'
import { startRedis, type RedisServer } from '../support/redis.ts'
import { startSentinel, type Sentinel } from '../support/sentinel.ts'
import { decideThroughFailover, decidesExactly } from '../support/failover.ts'

describe('RedisStore through Redis Sentinel (ioredis)', () => {
  let master: RedisServer
  let sentinel: Sentinel
  let client: Redis

  before(async () => {
    master = await startRedis()
    sentinel = await startSentinel('sluice-master', master.port, async (ask) => {
      const reply = (await ask('get-master-addr-by-name', 'sluice-master')) as string[] | undefined
      return Number(reply?.[1]) === master.port
    })
    client = new Redis({ sentinels: [{ host: '127.0.0.1', port: sentinel.port }], name: 'sluice-master', maxRetriesPerRequest: 1, autoResendUnfulfilledCommands: false })
    client.on('error', () => {})
  })

  after(async () => {
    client?.disconnect()
    await sentinel?.stop()
    await master?.stop()
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

  it('a master name the sentinels do not monitor is said to be one, not only "All sentinels are unreachable"', async () => {
    // As the gateway opens a store.sentinel: sluice's own client, its connection errors tracked.
    const misnamed = new Redis({ ...LIMITER_CLIENT_OPTIONS, sentinels: [{ host: '127.0.0.1', port: sentinel.port }], name: 'no-such-master' })
    trackConnectionErrors(misnamed)
    const store = new RedisStore({ client: misnamed })
    try {
      let error = ''
      for (let i = 0; i < 50 && !/No such master/.test(error); i++) {
        error = await store.ping().then(() => 'answered', (failure: Error) => failure.message)
        await new Promise((resolve) => setTimeout(resolve, 20))
      }
      assert.match(error, /All sentinels are unreachable\..*ERR No such master with that name \(the sentinels answered, and monitor no master of the name given; SENTINEL MASTERS, asked of one of them, lists the names they do\)/)
    } finally {
      misnamed.disconnect()
    }
    // The sentinel's own port given as the Redis URL: it answers PING, and refuses every script.
    const sentinelPort = new RedisStore({ url: `redis://127.0.0.1:${sentinel.port}` })
    try {
      const observed: string[] = []
      const limiter = new Limiter({ store: sentinelPort, onStoreFailure: 'closed', policies: { algorithm: 'fixed-window', limit: 1, windowMs: 60_000 }, observer: { storeCall: (_ms, _outcome, failure) => observed.push(failure?.message ?? '') } })
      assert.equal((await limiter.limit('k')).reason, 'store-error')
      assert.match(observed[0] ?? '', /this server runs no EVAL(SHA)?\. Either it is a Sentinel \(which runs no scripts: connect through it/)
    } finally {
      await sentinelPort.close()
    }
    // sluice inspect, given the sentinel's port: where to look instead, not a stack trace from SCAN.
    const inspected = await runCli(['inspect', '--redis', `redis://127.0.0.1:${sentinel.port}`, 'user:bob'])
    assert.deepEqual([inspected.code, inspected.stderr.trim()], [3, `sluice inspect: redis://127.0.0.1:${sentinel.port} is a Redis Sentinel, which holds no keys: give the URL of the master it names (SENTINEL GET-MASTER-ADDR-BY-NAME <name>, asked of it, says where that is)`])
  })

  it('node-redis createSentinel: the same decisions, through the master it names', async () => {
    const nodeRedis = createSentinel({ name: 'sluice-master', sentinelRootNodes: [{ host: '127.0.0.1', port: sentinel.port }] })
    nodeRedis.on('error', () => {})
    await nodeRedis.connect()
    try {
      const store = new RedisStore({ client: nodeRedis })
      for (const [n, trace] of [...handWritten, ...spanningKeys].entries()) {
        assert.deepEqual(await replay(trace, store, `nrsen${n}`), await replay(trace, new MemoryStore(), `nrsen${n}`), trace.name)
      }
      const limiter = new Limiter({ store, prefix: 'nr-sentinel', policies: { algorithm: 'fixed-window', limit: 1, windowMs: 60_000 } })
      assert.deepEqual([(await limiter.limit('k')).allowed, (await limiter.limit('k')).allowed], [true, false])
      assert.equal(await master.client().exists('nr-sentinel:{k}:fixed-window:1/1m'), 1, 'the state is on the master')
    } finally {
      await nodeRedis.close()
    }
  })
})

describe('Sentinel failover under load (master killed, replica promoted)', () => {
  let master: RedisServer
  let replica: RedisServer
  let sentinel: Sentinel

  before(async () => {
    master = await startRedis()
    replica = await startRedis(['--replicaof', '127.0.0.1', String(master.port)])
    // Ready when the sentinel has discovered the replica.
    sentinel = await startSentinel('failover-master', master.port, async (ask) => {
      const replicas = (await ask('replicas', 'failover-master')) as unknown[] | undefined
      return Array.isArray(replicas) && replicas.length === 1
    }, { downAfterMs: 500, failoverTimeoutMs: 3000 })
  })

  after(async () => {
    await sentinel?.stop()
    await replica?.stop()
    await master?.stop()
  })

  it('no crash, the failure policy during the gap, exact decisions again on the promoted replica (ioredis and node-redis)', async (t) => {
    const io = new Redis({ sentinels: [{ host: '127.0.0.1', port: sentinel.port }], name: 'failover-master', maxRetriesPerRequest: 1, autoResendUnfulfilledCommands: false, retryStrategy: () => 100, sentinelRetryStrategy: () => 100 })
    io.on('error', () => {})
    const nr = createSentinel({ name: 'failover-master', sentinelRootNodes: [{ host: '127.0.0.1', port: sentinel.port }] })
    nr.on('error', () => {})
    await nr.connect()
    try {
      await decideThroughFailover(t, { io, nr }, { prefix: 'failover', key: (caller) => `user-${caller}`, kill: () => master.signal('SIGKILL'), forMs: 10_000 })
      const promoted = (await sentinel.ask('get-master-addr-by-name', 'failover-master')) as string[]
      assert.equal(Number(promoted[1]), replica.port, 'Sentinel promoted the replica')
      // The state lives on the promoted replica now, and it decides exactly.
      await decidesExactly({ io, nr }, 'after-failover', 'k')
      for (const label of ['io', 'nr']) assert.equal(await replica.client().exists(`after-failover-${label}:{k}:fw`), 1, label)
    } finally {
      io.disconnect()
      await nr.close().catch(() => {})
    }
  })
})
