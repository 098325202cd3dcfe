/**
 * Two gateway processes on one Redis: limits are shared exactly; identity from
 * a verified JWT with tiers; `sluice inspect` reads the state they left.
 */
import assert from 'node:assert/strict'
import { createServer as createHttpServer, type Server } from 'node:http'
import { connect, createServer, type AddressInfo } from 'node:net'
import { after, before, describe, it } from 'node:test'
import { SignJWT } from 'jose'
import { startDemoUpstream } from '../../src/gateway/demo-upstream.ts'
import { runCli, startGateway, type RunningGateway } from '../support/gateway.ts'
import { Limiter, RedisStore } from '../../src/index.ts'
import { freePort, startRedis, type RedisServer } from '../support/redis.ts'

const SECRET = 'a-test-secret-of-at-least-32-bytes!!'

function config(redisUrl: string, upstream: string): string {
  return `
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0, watch: [ip:127.0.0.1] }
store:
  type: redis
  url: ${redisUrl}
  onFailure: closed
prefix: gw-test
identity:
  jwt: { algorithms: [HS256], secret: "\${JWT_SECRET}", claim: sub }
  order: [jwt, ip]
tiers:
  from: { jwtClaim: plan }
  default: free
logging: { level: info, access: false }
routes:
  - name: api
    upstream: ${upstream}
    limits:
      - name: slow-at-once
        key: [ip]
        match: { path: /slow/** }
        count: in-flight
        policies: { algorithm: sliding-log, name: slow-at-once, limit: 1, windowMs: 600000 }
      - name: shared
        key: [ip]
        match: { path: /hello/shared }
        policies: { algorithm: sliding-log, name: shared-hour, limit: 40, windowMs: 3600000 }
      - name: plan
        tiers:
          free: { algorithm: fixed-window, name: free-day, limit: 2, windowMs: 86400000 }
          pro: { algorithm: fixed-window, name: pro-day, limit: 5, windowMs: 86400000 }
`
}

const token = (sub: string, plan?: string, secret = SECRET) =>
  new SignJWT(plan === undefined ? {} : { plan }).setProtectedHeader({ alg: 'HS256' }).setSubject(sub).setExpirationTime('10m').sign(new TextEncoder().encode(secret))

describe('gateways on a shared Redis (real redis-server)', () => {
  let redis: RedisServer
  let upstream: { server: Server; url: string }
  const gateways: RunningGateway[] = []
  const config_ = () => config(redis.url, upstream.url)

  before(async () => {
    redis = await startRedis()
    upstream = await startDemoUpstream()
    for (let i = 0; i < 2; i++) gateways.push(await startGateway(config_(), { env: { JWT_SECRET: SECRET } }))
  })
  after(async () => {
    await Promise.all(gateways.map((g) => g.stop()))
    upstream?.server.close()
    await redis?.stop()
  })

  it('admit exactly the shared limit, whichever gateway a request reaches', async () => {
    // The "shared" limit keys on the IP; the plan limit on the token: pro tokens of many users keep it out of the way.
    const tokens = await Promise.all(Array.from({ length: 20 }, (_, i) => token(`bulk-${i}`, 'pro')))
    let ok = 0
    let refused = 0
    for (let batch = 0; batch < 6; batch++) {
      const statuses = await Promise.all(Array.from({ length: 10 }, (_, i) =>
        fetch(`${(gateways[(batch + i) % 2] as RunningGateway).url}/hello/shared`, { headers: { authorization: `Bearer ${tokens[(batch * 10 + i) % 20] as string}` } }).then((r) => r.status)))
      ok += statuses.filter((s) => s === 200).length
      refused += statuses.filter((s) => s === 429).length
    }
    assert.deepEqual([ok, refused], [40, 20])
    // Both gateways' /status read the shared state, without charging it.
    for (const gateway of [...gateways, ...gateways]) {
      const { watched } = await (await fetch(`${gateway.adminUrl}/status`)).json() as { watched: Record<string, Record<string, { limit: number; remaining: number }>> }
      assert.deepEqual(watched['ip:127.0.0.1']?.['shared-hour'], { ...watched['ip:127.0.0.1']?.['shared-hour'], limit: 40, remaining: 0 })
      assert.deepEqual(Object.keys(watched['ip:127.0.0.1'] ?? {}), ['slow-at-once', 'shared-hour', 'free-day', 'pro-day'])
    }
  })

  it('keys on a verified JWT claim, picks the tier from another claim, and ignores forged tokens', async () => {
    const [a, b] = gateways as [RunningGateway, RunningGateway]
    const send = async (gateway: RunningGateway, jwt: string) => (await fetch(`${gateway.url}/hello`, { headers: { authorization: `Bearer ${jwt}` } })).status
    const free = await token('alice')
    assert.deepEqual([await send(a, free), await send(b, free), await send(a, free)], [200, 200, 429])
    const pro = await token('bob', 'pro')
    const proStatuses = []
    for (let i = 0; i < 6; i++) proStatuses.push(await send(i % 2 === 0 ? a : b, pro))
    assert.deepEqual(proStatuses, [200, 200, 200, 200, 200, 429])
    // A token signed with another secret is no identity: the request falls back to the IP key (free tier).
    const forged = await token('bob', 'pro', 'some-other-secret-of-32-bytes-or-more')
    const forgedStatuses = [await send(a, forged), await send(a, forged), await send(a, forged)]
    assert.deepEqual(forgedStatuses, [200, 200, 429])
  })

  it('sluice inspect shows a key\'s state per policy, raw or through the config', async () => {
    const raw = await runCli(['inspect', '--redis', redis.url, '--prefix', 'gw-test', 'user:alice'])
    assert.equal(raw.code, 0, raw.stderr)
    assert.match(raw.stdout, /free-day: fixed-window state \d+:\d+ \(expires in \d+ ms\)/)
    // Its own read-only connection draws no warning meant for connections that decide (autoResendUnfulfilledCommands).
    assert.equal(raw.stderr, '')
    const dir = gateways[0]?.file as string
    const viaConfig = await runCli(['inspect', '--redis', redis.url, '--config', dir, 'user:bob'], { JWT_SECRET: SECRET })
    assert.equal(viaConfig.code, 0, viaConfig.stderr)
    assert.match(viaConfig.stdout, /api\.plan \[tier pro\] {2}pro-day: 0\/5 left/)
    // Untouched: full now, though its day has hours to run.
    assert.match(viaConfig.stdout, /api\.plan \[tier free\] {2}free-day: 2\/2 left, full\n/)
    assert.match(viaConfig.stdout, /api\.plan \[tier pro\] {2}pro-day: 0\/5 left, full in \d+ ms/)
    // The limits keyed by IP never count under user:bob: not shown, as a quota he never used.
    assert.doesNotMatch(viaConfig.stdout, /shared-hour|slow-at-once/)
    assert.equal(viaConfig.stderr, '')
    // An address as the client's socket shows it (IPv4-mapped on a dual-stack listener) is read where its quota is kept.
    const mapped = await runCli(['inspect', '--redis', redis.url, '--config', dir, 'ip:::ffff:127.0.0.1'], { JWT_SECRET: SECRET })
    assert.equal(mapped.code, 0, mapped.stderr)
    assert.match(mapped.stdout, /^ip:::ffff:127\.0\.0\.1 is kept as ip:127\.0\.0\.1\n/)
    assert.match(mapped.stdout, /api\.shared {2}shared-hour: 0\/40 left/)
    const v6 = await runCli(['inspect', '--redis', redis.url, '--prefix', 'gw-test', 'ip:2001:db8:1:2::7'])
    assert.match(v6.stdout, /^ip:2001:db8:1:2::7 is kept as ip:2001:db8:1::\/56\nip:2001:db8:1::\/56: no state under prefix gw-test/)
    const unreachable = await runCli(['inspect', '--redis', 'redis://127.0.0.1:1', 'user:bob'])
    assert.equal(unreachable.code, 3)
    assert.match(unreachable.stderr, /cannot reach redis:\/\/127\.0\.0\.1:1: connect ECONNREFUSED/)
    // A port of another server (an HTTP one) is named for what it is, not by the parser's "Unknown RESP type".
    const web = createHttpServer((_request, response) => response.end('hello'))
    await new Promise<void>((resolve) => web.listen(0, '127.0.0.1', resolve))
    try {
      const notRedis = await runCli(['inspect', '--redis', `redis://127.0.0.1:${(web.address() as AddressInfo).port}`, 'user:bob'])
      assert.equal(notRedis.code, 3)
      assert.match(notRedis.stderr, /cannot reach redis:\/\/127\.0\.0\.1:\d+: not a Redis server: its reply starts with "H", as an HTTP server's does/)
    } finally {
      web.closeAllConnections()
      await new Promise((resolve) => web.close(resolve))
    }
    // The password of a URL that cannot connect stays off the terminal and the CI log.
    const wrongPassword = await runCli(['inspect', '--redis', `redis://admin:hunter2@127.0.0.1:${redis.port}`, 'user:bob'])
    assert.equal(wrongPassword.code, 3)
    assert.match(wrongPassword.stderr, /cannot sign in to redis:\/\/\*\*\*@127\.0\.0\.1:\d+: WRONGPASS/)
    assert.doesNotMatch(wrongPassword.stderr, /hunter2/)
    assert.equal((await runCli(['inspect', 'user:bob'])).code, 2)
    // A URL of the wrong scheme is refused the same way, its password masked too.
    const wrongScheme = await runCli(['inspect', '--redis', 'https://admin:hunter2@127.0.0.1:6379', 'user:bob'])
    assert.equal(wrongScheme.code, 2)
    assert.match(wrongScheme.stderr, /--redis must be a redis:\/\/ or rediss:\/\/ URL \(got "https:\/\/\*\*\*@127\.0\.0\.1:6379"\)/)
    assert.doesNotMatch(wrongScheme.stderr, /hunter2/)
    // What ioredis would take as SELECT NaN, or fail to decode, is refused before connecting: exit 2, no stack trace.
    const namedDatabase = await runCli(['inspect', '--redis', `${redis.url}/limits`, 'user:bob'])
    assert.deepEqual([namedDatabase.code, namedDatabase.stderr.trim()], [2, `sluice inspect: --redis must name a database by its number (redis://host:6379/0), not "limits" (got "${redis.url}/limits")`])
    // A database the server does not have: the connection would go on, on database 0, and show its state.
    const missingDatabase = await runCli(['inspect', '--redis', `${redis.url}/16`, '--prefix', 'gw-test', 'user:alice'])
    assert.deepEqual([missingDatabase.code, missingDatabase.stdout], [3, ''])
    assert.match(missingDatabase.stderr, /^sluice inspect: redis:\/\/127\.0\.0\.1:\d+\/16: Redis refused to select the database the url names: ERR DB index is out of range/)
    const undecodable = await runCli(['inspect', '--redis', `redis://:50%off@127.0.0.1:${redis.port}`, 'user:bob'])
    assert.equal(undecodable.code, 2)
    assert.match(undecodable.stderr, /--redis has a user name or password that is not valid percent-encoding/)
    assert.doesNotMatch(undecodable.stderr, /50%off/)
    // A user whose ACL refuses the read: Redis's words and exit 3, not a stack trace.
    await redis.client().acl('SETUSER', 'no-scan', 'on', '>no-scan-password', '~*', '+@all', '-scan')
    const refusedRead = await runCli(['inspect', '--redis', `redis://no-scan:no-scan-password@127.0.0.1:${redis.port}`, 'user:bob'])
    assert.deepEqual([refusedRead.code, refusedRead.stderr.trim()], [3, `sluice inspect: reading user:bob from redis://***@127.0.0.1:${redis.port} failed: NOPERM this user has no permissions to run the 'scan' command`])
    // A user who may read keys and run no script: through the config, each quota is read by one. Before, the
    // limiter's fallback answered instead, and a spent quota read as full ("40/40 left"), exit 0.
    await redis.client().acl('SETUSER', 'reader', 'on', '>reader-password', '~*', '+@read', '+@connection', '+info')
    const unscripted = await runCli(['inspect', '--redis', `redis://reader:reader-password@127.0.0.1:${redis.port}`, '--config', dir, 'ip:127.0.0.1'], { JWT_SECRET: SECRET })
    assert.equal(unscripted.code, 3, unscripted.stdout)
    assert.match(unscripted.stderr, new RegExp(`^sluice inspect: reading ip:127\\.0\\.0\\.1 from redis://\\*\\*\\*@127\\.0\\.0\\.1:${redis.port} failed \\(store-error\\): NOPERM this user has no permissions to run the 'eval(sha)?' command`))
    assert.doesNotMatch(unscripted.stdout, /left/)
    // A policy's block shows beside its state, with when it ends. (A bucket's state lasts until it is full
    // again, 60 s on; a fixed window's ends with its window, which may be the next second.)
    const limiter = new Limiter({ policies: { algorithm: 'token-bucket', capacity: 1, refillTokens: 1, refillIntervalMs: 60_000, blockMs: 600_000, name: 'login' }, prefix: 'gw-test:http', store: new RedisStore({ client: redis.client() }) })
    assert.deepEqual([(await limiter.limit('user:carol')).allowed, (await limiter.limit('user:carol')).retryAfterMs], [true, 600_000])
    const blocked = await runCli(['inspect', '--redis', redis.url, '--prefix', 'gw-test', 'user:carol'])
    assert.match(blocked.stdout, /login: token-bucket state \d+:\d+:\d+ \(expires in \d+ ms\)\n {2}login\{block\}: blocked until \d{4}-\d\d-\d\dT[\d:.]+Z \(expires in \d+ ms\)/)
  })

  it('logs, in its own log, that a Redis evicting keys when full can reset limits', async () => {
    const admin = redis.client()
    await admin.config('SET', 'maxmemory', '256mb')
    await admin.config('SET', 'maxmemory-policy', 'volatile-lru')
    const evicting = await startGateway(config_(), { env: { JWT_SECRET: SECRET } })
    try {
      assert.equal((await fetch(`${evicting.url}/hello`, { headers: { authorization: `Bearer ${await token('erin')}` } })).status, 200)
      const warning = await evicting.waitForLog((line) => typeof line.msg === 'string' && line.msg.includes('evicts keys'))
      assert.equal(warning.level, 40)
      assert.match(warning.msg, /maxmemory-policy volatile-lru/)
    } finally {
      await evicting.stop()
      await admin.config('SET', 'maxmemory', '0')
      await admin.config('SET', 'maxmemory-policy', 'noeviction')
    }
  })

  it('says why decisions fail on a Redis that answers PING but refuses every script (a read-only replica), and when they succeed again', async () => {
    const admin = redis.client()
    const readOnly = await startGateway(config_(), { env: { JWT_SECRET: SECRET } })
    const storeStatus = async () => (await (await fetch(`${readOnly.adminUrl}/status`)).json() as { store: { up: boolean; failing?: { reason: string; error: string }; refundsOwed: number } }).store
    const hello = async () => (await fetch(`${readOnly.url}/hello`, { headers: { authorization: `Bearer ${await token('frank')}` } })).status
    try {
      // A slow request holds the one slot of its in-flight limit; it ends after Redis stops taking writes.
      const slow = fetch(`${readOnly.url}/slow/600`, { headers: { authorization: `Bearer ${await token('frank', 'pro')}` } })
      await new Promise((resolve) => setTimeout(resolve, 200))
      assert.equal((await storeStatus()).refundsOwed, 0)
      // A replica of a master that is not there: reads and PING work, writes are refused.
      await admin.call('REPLICAOF', '127.0.0.1', '1')
      assert.equal((await slow).status, 200)
      for (let i = 0; i < 3; i++) assert.equal(await hello(), 503)
      const logged = await readOnly.waitForLog((line) => line.msg === 'store call failed; the failure policy decides')
      assert.equal(logged.level, 40)
      assert.equal(logged.reason, 'store-error')
      assert.match(logged.error as string, /^READONLY /)
      // Once per distinct failure while it lasts, not once per request.
      assert.equal(readOnly.logs.filter((line) => line.msg === 'store call failed; the failure policy decides').length, 1)
      const failing = await storeStatus()
      assert.equal(failing.up, true)
      assert.match(failing.failing?.error ?? '', /^READONLY /)
      // The slot it held is owed back, and given once Redis takes writes again.
      assert.equal(failing.refundsOwed, 1)
      await admin.call('REPLICAOF', 'NO', 'ONE')
      // The circuit lets a trial call through within a second; then decisions are Redis's again.
      const deadline = Date.now() + 5000
      let status = 503
      while (status !== 200 && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 100))
        status = await hello()
      }
      assert.equal(status, 200)
      assert.equal((await storeStatus()).failing, undefined)
      for (let i = 0; i < 50 && (await storeStatus()).refundsOwed > 0; i++) await new Promise((resolve) => setTimeout(resolve, 100))
      assert.equal((await storeStatus()).refundsOwed, 0)
    } finally {
      await admin.call('REPLICAOF', 'NO', 'ONE')
      await readOnly.stop()
    }
  })

  it('decides its first request on Redis, even when Redis is slow to connect at start (not by the failure policy)', async () => {
    // A relay that holds each connection 600 ms before reaching Redis: longer than a decision may wait.
    const relay = createServer((client) => {
      client.pause()
      const timer = setTimeout(() => {
        const server = connect(redis.port, '127.0.0.1', () => { client.pipe(server).pipe(client); client.resume() })
        server.on('error', () => client.destroy())
        client.on('close', () => server.destroy())
      }, 600)
      client.on('error', () => clearTimeout(timer))
    })
    await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve))
    const slow = await startGateway(config(`redis://127.0.0.1:${(relay.address() as AddressInfo).port}`, upstream.url), { env: { JWT_SECRET: SECRET } })
    try {
      const first = await fetch(`${slow.url}/hello`, { headers: { authorization: `Bearer ${await token('dave')}` } })
      assert.equal(first.status, 200)
    } finally {
      await slow.stop()
      relay.close()
    }
  })

  it('with onFailure: closed and no Redis at start, /readyz and /status say so from the first question', async () => {
    const gateway = await startGateway(config(`redis://127.0.0.1:${await freePort()}`, upstream.url), { env: { JWT_SECRET: SECRET } })
    try {
      assert.equal((await fetch(`${gateway.adminUrl}/readyz`)).status, 503)
      const status = await (await fetch(`${gateway.adminUrl}/status`)).json() as { store: { up: boolean; error?: string } }
      assert.equal(status.store.up, false)
      // Why, not only ioredis's "Stream isn't writeable": nobody listens there.
      assert.match(status.store.error ?? '', /ECONNREFUSED/)
      assert.ok(gateway.logs.some((l) => l.msg === 'store unreachable' && /ECONNREFUSED/.test(String(l.error))))
    } finally {
      await gateway.stop()
    }
  })

  it('with onFailure: fallback, a reload while the store is out keeps the local counts: no client gets a fresh share', async () => {
    const yaml = (timeoutMs: number) => `
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
store: { type: redis, url: "redis://127.0.0.1:${deadPort}", onFailure: fallback }
logging: { level: info, access: false }
routes:
  - name: api
    upstream: ${upstream.url}
    timeoutMs: ${timeoutMs}
    limits:
      - policies: { algorithm: fixed-window, name: hourly, limit: 3, windowMs: 3600000 }
`
    const deadPort = await freePort()
    const gateway = await startGateway(yaml(5000))
    try {
      const statuses = async (count: number) => {
        const seen = []
        for (let i = 0; i < count; i++) seen.push((await fetch(`${gateway.url}/hello`)).status)
        return seen
      }
      assert.deepEqual(await statuses(2), [200, 200])
      gateway.writeConfig(yaml(6000))
      gateway.child.kill('SIGHUP')
      await gateway.waitForLog((line) => line.msg === 'config reloaded')
      // Before, the new config's limiters counted in a fallback of their own, from nothing: 200, 200.
      assert.deepEqual(await statuses(2), [200, 429])
    } finally {
      await gateway.stop()
    }
  })

  it('a reload that switches stores: /readyz, /status and sluice_store_up speak of the new store as soon as it is in use', async () => {
    const deadPort = await freePort()
    const yaml = (store: string) => `
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0, watch: [ip:127.0.0.1] }
store: ${store}
logging: { level: info, access: false }
routes:
  - name: api
    upstream: ${upstream.url}
    limits:
      - policies: { algorithm: fixed-window, name: hourly, limit: 3, windowMs: 3600000 }
`
    const gateway = await startGateway(yaml(`{ type: redis, url: "redis://127.0.0.1:${deadPort}", onFailure: closed }`))
    let watched: object | undefined
    const health = async () => {
      const status = await (await fetch(`${gateway.adminUrl}/status`)).json() as { store: { type: string; up: boolean; error?: string }; watched: Record<string, Record<string, object>> }
      watched = status.watched['ip:127.0.0.1']?.hourly
      const metrics = await (await fetch(`${gateway.adminUrl}/metrics`)).text()
      return { ready: (await fetch(`${gateway.adminUrl}/readyz`)).status, type: status.store.type, up: status.store.up, error: status.store.error, gauge: /^sluice_store_up (\d)$/m.exec(metrics)?.[1] }
    }
    const reload = async (store: string) => {
      const reloads = gateway.logs.filter((line) => line.msg === 'config reloaded').length
      gateway.writeConfig(yaml(store))
      gateway.child.kill('SIGHUP')
      await gateway.waitForLog((line) => line.msg === 'config reloaded' && gateway.logs.filter((l) => l.msg === 'config reloaded').length > reloads)
    }
    try {
      assert.deepEqual(await health(), { ready: 503, type: `redis 127.0.0.1:${deadPort}`, up: false, error: (await health()).error, gauge: '0' })
      // A quota the store cannot be asked for is not known; before, a fallback's empty count said it was full.
      assert.deepEqual(watched, { limit: 3, remaining: null, resetAfterMs: null, unread: 'store-error' })
      // Before, the memory store (it has no PING) inherited the dead Redis's word for good: up false, the gauge at 0.
      await reload('{ type: memory }')
      assert.deepEqual(await health(), { ready: 200, type: 'memory', up: true, error: undefined, gauge: '1' })
      assert.equal((await fetch(`${gateway.url}/hello`)).status, 200)
      await health()
      assert.deepEqual(watched, { ...watched, limit: 3, remaining: 2 })
      await reload(`{ type: redis, url: "redis://127.0.0.1:${deadPort}", onFailure: closed }`)
      const down = await health()
      assert.deepEqual([down.ready, down.up, down.gauge], [503, false, '0'])
      assert.match(down.error ?? '', /ECONNREFUSED/)
    } finally {
      await gateway.stop()
    }
  })

  it('with onFailure: closed, a dead store refuses requests and /readyz says so', async () => {
    const gateway = gateways[0] as RunningGateway
    const carol = await token('carol')
    redis.signal('SIGSTOP')
    try {
      const refused = await fetch(`${gateway.url}/hello`, { headers: { authorization: `Bearer ${carol}` } })
      // Not a 429: the client sent nothing too much; the limit could not be checked.
      assert.equal(refused.status, 503)
      assert.equal(refused.headers.get('retry-after'), '1')
      assert.equal(refused.headers.get('ratelimit'), null)
      assert.match((await refused.json() as { detail: string }).detail, /could not be checked \(store timeout\) and fails closed/)
      const deadline = Date.now() + 5000
      let ready = 200
      while (ready === 200 && Date.now() < deadline) {
        ready = (await fetch(`${gateway.adminUrl}/readyz`)).status
        if (ready === 200) await new Promise((resolve) => setTimeout(resolve, 100))
      }
      assert.equal(ready, 503)
      const metrics = (await (await fetch(`${gateway.adminUrl}/metrics`)).text()).split('\n').filter((line) => /^sluice_(store_up|decisions_total|store_errors_total)/.test(line))
      assert.ok(metrics.includes('sluice_store_up 0'), metrics.join('\n'))
      assert.ok(metrics.some((line) => /^sluice_decisions_total\{route="api",policy="[^"]+",outcome="degraded"\} [1-9]/.test(line)), metrics.join('\n'))
      assert.ok(metrics.some((line) => /^sluice_store_errors_total\{reason="timeout"\} [1-9]/.test(line)), metrics.join('\n'))
    } finally {
      redis.signal('SIGCONT')
    }
  })
})
