/**
 * One behavioural suite, run against every adapter on real servers over real
 * sockets, with the memory store and with Redis.
 */
import assert from 'node:assert/strict'
import { IncomingMessage, METHODS, request as httpRequest, ServerResponse } from 'node:http'
import http2 from 'node:http2'
import { Socket, type AddressInfo } from 'node:net'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { createRateLimitHandler, firstOf, MemoryStore, RedisStore, type Store, type SyncStore } from '../../src/index.ts'
import { withRateLimit as withNodeRateLimit, type RateLimitOptions } from '../../src/http/adapters/node.ts'
import { rateLimit } from '../../src/http/adapters/express.ts'
import { withRateLimit as withFetchRateLimit } from '../../src/http/adapters/fetch.ts'
import { createRateLimitPipeline, type HttpOutcome } from '../../src/http/handler.ts'
import { NODE_METHODS } from '../../src/http/match.ts'
import { startRedis, type RedisServer } from '../support/redis.ts'
import { partitionable } from '../support/partition.ts'
import { express4Server, expressServer, fastify4Server, fastifyServer, fetchServer, koa2Server, koaServer, nodeServer, type StartServer } from './servers.ts'
import { processWarningsDuring } from '../helpers.ts'
import express from 'express'
import Koa from 'koa'
import Fastify from 'fastify'
import { sluiceFastify } from '../../src/http/adapters/fastify.ts'
import { rateLimit as koaRateLimit } from '../../src/http/adapters/koa.ts'

const MINUTE = 60_000
const fixedClock = () => 30_000 // 30 s into the first minute: reset headers say t=30

async function withServer(start: StartServer, options: RateLimitOptions, body: (url: string) => Promise<void>) {
  const server = await start(options)
  try {
    await body(server.url)
  } finally {
    await server.close()
  }
}

const get = (url: string, headers: Record<string, string> = {}) => fetch(url, { headers })

function suite(adapter: string, start: StartServer, makeStore: () => Store) {
  const base = (rules: RateLimitOptions['rules'], extra: Partial<RateLimitOptions> = {}): RateLimitOptions => ({
    // storeTimeoutMs: these check HTTP behaviour; on a CPU-starved CI machine a Redis call can
    // pass the default 250 ms, and the fallback's local decision would then answer instead.
    rules, store: makeStore(), clock: fixedClock, prefix: `http-${adapter}-${Math.random().toString(36).slice(2)}`, storeTimeoutMs: 10_000, ...extra,
  })

  it(`${adapter}: the N+1st request gets 429 with Retry-After and an RFC 9457 body; allowed ones carry the headers`, async () => {
    await withServer(start, base([{ name: 'api', match: { path: '/api/**' }, policies: { algorithm: 'fixed-window', limit: 3, windowMs: MINUTE, name: 'per-minute' } }]), async (url) => {
      for (let i = 0; i < 3; i++) {
        const res = await get(`${url}/api/items?page=${i}`)
        assert.equal(res.status, 200)
        assert.match(await res.text(), /^ok \/api\/items/)
        assert.equal(res.headers.get('ratelimit-policy'), '"per-minute";q=3;w=60')
        assert.equal(res.headers.get('ratelimit'), `"per-minute";r=${2 - i};t=30`)
        // The handler reads its request's decision with rateLimitOf(request).
        assert.equal(res.headers.get('x-handler-saw'), `per-minute:${2 - i}`)
      }
      const refused = await get(`${url}/api/items`)
      assert.equal(refused.status, 429)
      assert.equal(refused.headers.get('retry-after'), '30')
      assert.equal(refused.headers.get('ratelimit'), '"per-minute";r=0;t=30')
      assert.match(refused.headers.get('content-type') ?? '', /^application\/problem\+json/)
      const problem = await refused.json() as Record<string, unknown>
      assert.equal(problem.type, 'https://iana.org/assignments/http-problem-types#quota-exceeded')
      assert.equal(problem.status, 429)
      assert.deepEqual(problem['violated-policies'], ['per-minute'])
      assert.equal(problem['retry-after'], 30)
      // `/api/**` covers `/api` itself (POST /orders under /orders/**), not `/apiary`.
      assert.equal((await get(`${url}/api`)).status, 429)
      assert.equal((await get(`${url}/apiary`)).status, 200)
      // Outside the rule's paths nothing is limited, and there is no decision to read.
      const unlimited = await get(`${url}/public`)
      assert.equal(unlimited.status, 200)
      assert.equal(unlimited.headers.get('x-handler-saw'), 'none')
    })
  })

  it(`${adapter}: other spellings of a limited path meet its limit (dot segments, empty segments, trailing slash, percent-encoded letters, absolute form, path parameters, backslashes, fragments${adapter === 'express' || adapter === 'koa' ? ', case' : ''})`, async () => {
    await withServer(start, base([{ name: 'login', match: { path: '/api/login' }, policies: { algorithm: 'fixed-window', limit: 1, windowMs: MINUTE, name: 'login' } }]), async (url) => {
      // fetch() would resolve the dots itself: these go out as written.
      const raw = (path: string) => new Promise<number>((resolve, reject) => {
        const { hostname, port } = new URL(url)
        const req = httpRequest({ host: hostname, port, path }, (res) => { res.resume(); resolve(res.statusCode ?? 0) })
        req.on('error', reject)
        req.end()
      })
      assert.equal(await raw('/api/login'), 200)
      const spellings = ['/api/login/', '//api/login', '/api/./login', '/public/../api/login', '/public/%2e%2E/api/login', '/api/%6Cogin', '/%61pi/log%69n', `http://127.0.0.1/api/login`,
        // Path parameters, which Tomcat, Jetty and Spring cut before routing; backslashes, which IIS routes as slashes.
        '/api/login;jsessionid=0123', '/api;v=2/login', '/api/login;/', '/api\\login', '/public\\..\\api\\login',
        // Where a path ends at its first ; (Fastify's useSemicolonDelimiter, as an upstream behind the gateway).
        '/api/login;v=2/other',
        // A fragment, which no client sends but node lets through: the frameworks route /api/login#x as /api/login.
        '/api/login#x', '/api/login#/../../public', '/api/login?#']
      // Express and @koa/router route without regard to case by default.
      if (adapter === 'express' || adapter === 'koa') spellings.push('/API/Login')
      const statuses = []
      for (const path of spellings) statuses.push(await raw(path))
      // Hono's node server refuses a target with a backslash itself (400): never served either.
      const refusedByRuntime = (path: string) => adapter === 'fetch' && path.includes('\\')
      // Fastify 4 ends a path at its first ; by default (useSemicolonDelimiter, off in Fastify 5): it routes
      // /api;v=2/login as /api, which the limit does not name, and no /api/login handler sees it.
      const routedElsewhere = (path: string) => adapter === 'fastify4' && path === '/api;v=2/login'
      assert.deepEqual(statuses, spellings.map((path) => (refusedByRuntime(path) ? 400 : routedElsewhere(path) ? 200 : 429)), spellings.join(' '))
      assert.equal(await raw('/api/logout'), 200)
      // An encoded slash is a slash where a server decodes it before routing (nginx does): it meets the limit too.
      assert.equal(await raw('/api%2Flogin'), 429)
      // Only once: an encoded percent sign is another path.
      assert.equal(await raw('/api%252Flogin'), 200)
    })
  })

  it(`${adapter}: a rule for GET also meets HEAD, which the frameworks answer with the GET handler`, async () => {
    await withServer(start, base([{ name: 'export', match: { path: '/export', method: 'GET' }, policies: { algorithm: 'fixed-window', limit: 1, windowMs: MINUTE, name: 'export' } }]), async (url) => {
      assert.equal((await fetch(`${url}/export`, { method: 'HEAD' })).status, 200)
      assert.equal((await get(`${url}/export`)).status, 429)
      assert.equal((await fetch(`${url}/export`, { method: 'HEAD' })).status, 429)
      assert.equal((await fetch(`${url}/export`, { method: 'POST' })).status, 200)
    })
  })

  it(`${adapter}: a rule on a host meets every spelling of that host (case, port, the trailing dot of a fully qualified name)`, async () => {
    await withServer(start, base([{ name: 'api-host', match: { host: 'api.example.com' }, policies: { algorithm: 'fixed-window', limit: 1, windowMs: MINUTE, name: 'api-host' } }]), async (url) => {
      const withHost = (host: string) => new Promise<number>((resolve, reject) => {
        const { hostname, port } = new URL(url)
        const req = httpRequest({ host: hostname, port, path: '/', headers: { host } }, (res) => { res.resume(); resolve(res.statusCode ?? 0) })
        req.on('error', reject)
        req.end()
      })
      assert.equal(await withHost('api.example.com'), 200)
      const spellings = ['API.Example.COM', 'api.example.com:8443', 'api.example.com.', 'api.example.com.:80']
      const statuses = []
      for (const host of spellings) statuses.push(await withHost(host))
      assert.deepEqual(statuses, spellings.map(() => 429), spellings.join(' '))
      assert.equal(await withHost('www.example.com'), 200)
    })
  })

  it(`${adapter}: skipped paths are never limited; per-route and global limits combine in one store call`, async () => {
    const inner = makeStore()
    let storeCalls = 0
    const counted: Store = { consume: (call) => { storeCalls++; return inner.consume(call) }, reset: (p, k, ps) => inner.reset(p, k, ps) }
    const options = base([
      { name: 'global', policies: { algorithm: 'fixed-window', limit: 5, windowMs: MINUTE, name: 'global' } },
      { name: 'login', match: { path: '/login', method: 'POST' }, policies: { algorithm: 'sliding-log', limit: 2, windowMs: MINUTE, name: 'login' } },
    ], { skip: ['/health', '/metrics/**'], store: counted })
    await withServer(start, options, async (url) => {
      for (let i = 0; i < 10; i++) {
        const health = await get(`${url}/health`)
        assert.equal(health.status, 200)
        assert.equal(health.headers.get('ratelimit'), null)
      }
      assert.equal(storeCalls, 0)
      const post = () => fetch(`${url}/login`, { method: 'POST' })
      assert.equal((await post()).status, 200)
      assert.equal(storeCalls, 1, 'both rules share the client IP: one store call')
      const second = await post()
      assert.equal(second.status, 200)
      assert.equal(second.headers.get('ratelimit-policy'), '"global";q=5;w=60, "login";q=2;w=60')
      assert.equal(second.headers.get('ratelimit'), '"global";r=3;t=30, "login";r=0;t=60')
      const third = await post()
      assert.equal(third.status, 429)
      assert.deepEqual((await third.json() as { 'violated-policies': string[] })['violated-policies'], ['login'])
      // All-or-nothing: the refused POST charged "global" nothing, so 3 of its 5 are left for GETs.
      for (let i = 0; i < 3; i++) assert.equal((await get(`${url}/x`)).status, 200)
      assert.equal((await get(`${url}/x`)).status, 429)
    })
  })

  it(`${adapter}: per-user and per-IP limits, different keys, are one all-or-nothing store call: a refusal by either charges neither`, async () => {
    const inner = makeStore()
    let storeCalls = 0
    // A wrapper that counts calls, and says (as the stores under it do) that one call spans keys. Being a store
    // outside the process to the limiter, its refusals would be remembered (blockCache, off below): this test reads
    // what the store decides, where a remembered refusal is answered with the numbers it had then.
    const counted: Store = { consume: (call) => { storeCalls++; return inner.consume(call) }, reset: (p, k, ps) => inner.reset(p, k, ps), spansKeys: true }
    const decided: string[] = []
    const options = base([
      { name: 'per-ip', policies: { algorithm: 'fixed-window', limit: 4, windowMs: MINUTE, name: 'per-ip' } },
      { name: 'orders', match: { path: '/orders', method: 'POST' }, key: (request) => request.header('x-user'), policies: { algorithm: 'sliding-log', limit: 2, windowMs: MINUTE, name: 'orders' } },
    ], { store: counted, blockCache: false, onDecision: (event) => decided.push(`${event.rule}:${event.key}:${event.decision.allowed ? 'Y' : 'n'}`) })
    await withServer(start, options, async (url) => {
      const order = (user: string) => fetch(`${url}/orders`, { method: 'POST', headers: { 'x-user': user } })
      assert.deepEqual([(await order('ann')).status, (await order('ann')).status], [200, 200])
      assert.equal(storeCalls, 2, 'one store call per request for both keys')
      const refused = await order('ann')
      assert.equal(refused.status, 429)
      assert.deepEqual((await refused.json() as { 'violated-policies': string[] })['violated-policies'], ['orders'])
      // The IP's 4 lost nothing to ann's refused order: 2 are left, the first for bob's order.
      assert.equal(refused.headers.get('ratelimit'), '"per-ip";r=2;t=30, "orders";r=0;t=60')
      assert.equal((await order('bob')).status, 200)
      assert.equal((await get(`${url}/x`)).status, 200)
      // The IP's quota refuses bob's second order: his own log keeps its second unit.
      const overIp = await order('bob')
      assert.equal(overIp.status, 429)
      assert.deepEqual((await overIp.json() as { 'violated-policies': string[] })['violated-policies'], ['per-ip'])
      assert.equal(overIp.headers.get('ratelimit'), '"per-ip";r=0;t=30, "orders";r=1;t=60')
      // Refused by both: both named, and Retry-After is when both would let it through (the log's 60 s, not the window's 30).
      const both = await order('ann')
      assert.equal(both.status, 429)
      assert.deepEqual((await both.json() as { 'violated-policies': string[] })['violated-policies'], ['per-ip', 'orders'])
      assert.equal(both.headers.get('retry-after'), '60')
      assert.equal(storeCalls, 7)
      assert.deepEqual(decided, [
        'per-ip:ip:127.0.0.1:Y', 'orders:ann:Y', 'per-ip:ip:127.0.0.1:Y', 'orders:ann:Y', 'per-ip:ip:127.0.0.1:Y', 'orders:ann:n',
        'per-ip:ip:127.0.0.1:Y', 'orders:bob:Y', 'per-ip:ip:127.0.0.1:Y', 'per-ip:ip:127.0.0.1:n', 'orders:bob:Y',
        'per-ip:ip:127.0.0.1:n', 'orders:ann:n',
      ])
    })
  })

  it(`${adapter}: X-Forwarded-For from an untrusted peer cannot change the key; through a trusted proxy it is the key, and only the header that proxy sets`, async () => {
    const policies = { algorithm: 'fixed-window' as const, limit: 1, windowMs: MINUTE, name: 'one' }
    const warnings: string[] = []
    await withServer(start, base([{ policies }], { onWarning: (m) => warnings.push(m) }), async (url) => {
      assert.equal((await get(url, { 'x-forwarded-for': '203.0.113.1' })).status, 200)
      assert.equal((await get(url, { 'x-forwarded-for': '203.0.113.2' })).status, 429, 'a new spoofed address is the same client')
      assert.equal(warnings.length, 1, 'warned once that forwarding headers are ignored')
    })
    await withServer(start, base([{ policies }], { clientIp: { trustProxy: ['127.0.0.1', '::1'] } }), async (url) => {
      assert.equal((await get(url, { 'x-forwarded-for': '203.0.113.1' })).status, 200)
      assert.equal((await get(url, { 'x-forwarded-for': '203.0.113.2' })).status, 200, 'another client behind the proxy')
      assert.equal((await get(url, { 'x-forwarded-for': '6.6.6.6, 203.0.113.1' })).status, 429, 'the right-most untrusted address is the client')
      assert.equal((await get(url, { 'x-forwarded-for': '2001:db8:aa:1::1' })).status, 200)
      assert.equal((await get(url, { 'x-forwarded-for': '2001:db8:aa:2::9' })).status, 429, 'one IPv6 /56 is one client')
      // A proxy that appends X-Forwarded-For passes a client's own Forwarded header on untouched: it must not count.
      assert.equal((await get(url, { 'x-forwarded-for': '203.0.113.7', forwarded: 'for=198.51.100.1' })).status, 200)
      assert.equal((await get(url, { 'x-forwarded-for': '203.0.113.7', forwarded: 'for=198.51.100.2' })).status, 429, 'a made-up Forwarded is the same client')
    })
    await withServer(start, base([{ policies }], { clientIp: { trustProxy: ['127.0.0.1', '::1'], header: 'forwarded' } }), async (url) => {
      assert.equal((await get(url, { forwarded: 'for=198.51.100.1', 'x-forwarded-for': '203.0.113.1' })).status, 200)
      assert.equal((await get(url, { forwarded: 'for="[2001:db8:cc::1]:4711"', 'x-forwarded-for': '203.0.113.1' })).status, 200, 'behind a proxy that sets Forwarded, that header is the one read')
      assert.equal((await get(url, { forwarded: 'for=198.51.100.1', 'x-forwarded-for': '203.0.113.2' })).status, 429)
    })
  })

  it(`${adapter}: no identity is refused with 403 when configured; shadow rules never refuse`, async () => {
    await withServer(start, base([{ policies: { algorithm: 'fixed-window', limit: 5, windowMs: MINUTE } }], { key: (request) => request.header('x-api-key'), emptyKey: 'forbid' }), async (url) => {
      const anonymous = await get(url)
      assert.equal(anonymous.status, 403)
      assert.match(anonymous.headers.get('content-type') ?? '', /problem\+json/)
      assert.equal((await get(url, { 'x-api-key': 'abc' })).status, 200)
    })
    const seen: boolean[] = []
    await withServer(start, base([{ policies: { algorithm: 'fixed-window', limit: 1, windowMs: MINUTE } }], { shadow: true, onDecision: (e) => seen.push(e.decision.allowed) }), async (url) => {
      for (let i = 0; i < 3; i++) assert.equal((await get(url)).status, 200)
      assert.deepEqual(seen, [true, false, false], 'decided and reported, never enforced')
    })
  })

  it(`${adapter}: tiers get their own limits; an expensive route costs more`, async () => {
    const options = base([
      {
        name: 'tiered',
        match: { path: '/api/**' },
        // A real app takes the tier from a verified JWT claim; a header stands in for it here.
        tiers: {
          of: (request) => request.header('x-tier'),
          default: 'FREE',
          policies: {
            FREE: { algorithm: 'fixed-window', limit: 1, windowMs: MINUTE, name: 'free' },
            PRO: { algorithm: 'fixed-window', limit: 3, windowMs: MINUTE, name: 'pro' },
          },
        },
        cost: (request) => (request.path === '/api/export' ? 3 : 1),
      },
    ], { key: (request) => request.header('x-api-key') })
    await withServer(start, options, async (url) => {
      const call = (key: string, tier?: string, path = '/api/items') => get(`${url}${path}`, { 'x-api-key': key, ...(tier ? { 'x-tier': tier } : {}) })
      assert.equal((await call('free-user')).status, 200)
      assert.equal((await call('free-user')).status, 429)
      assert.equal((await call('free-user-2', 'GOLD')).status, 200, 'an unknown tier gets the default')
      assert.equal((await call('free-user-2', 'GOLD')).status, 429)
      const pro = await call('pro-user', 'PRO')
      assert.equal(pro.headers.get('ratelimit'), '"pro";r=2;t=30')
      assert.equal((await call('pro-user', 'PRO', '/api/export')).status, 429, 'cost 3 does not fit in the 2 left')
      assert.equal((await call('pro-user-2', 'PRO', '/api/export')).status, 200, 'cost 3 fits a fresh PRO key')
      assert.equal((await call('pro-user-2', 'PRO')).status, 429)
      // Cost 3 never fits FREE's limit of 1: no wait would admit it, so not a 429 (a client would retry forever).
      const unaffordable = await call('free-user-3', undefined, '/api/export')
      assert.equal(unaffordable.status, 413)
      assert.equal(unaffordable.headers.get('retry-after'), null)
      assert.match(unaffordable.headers.get('content-type') ?? '', /^application\/problem\+json/)
      assert.deepEqual(await unaffordable.json(), {
        type: 'about:blank', title: 'Content Too Large', status: 413, 'violated-policies': ['free'], limit: 1, cost: 3,
        detail: 'This request costs 3 units; policy "free" admits at most 1 at once, so no wait would admit it. Send a smaller request.',
      })
      assert.equal((await call('free-user-3')).status, 200, 'the refused request charged nothing')
    })
  })

  it(`${adapter}: policies read from the request (a customer's contract, looked up at once or awaited): each its own limit, a changed limit keeps the count, and a bad answer fails the request naming the rule`, async () => {
    // What the customers' contracts say, changed while the server runs.
    const contracts = new Map<string, number>([['acme', 3], ['globex', 1]])
    const later = <T>(value: T) => new Promise<T>((resolve) => setTimeout(() => resolve(value), 1))
    const contract = (request: { header(name: string): string | undefined }) => {
      const customer = request.header('x-customer') ?? ''
      if (customer === 'unnamed') return { algorithm: 'fixed-window' as const, limit: 5, windowMs: MINUTE }
      if (customer === 'broken') return { algorithm: 'fixed-window' as const, limit: -5, windowMs: MINUTE, name: 'contract' }
      if (customer === 'taken') return { algorithm: 'fixed-window' as const, limit: 5, windowMs: MINUTE, name: 'everything' }
      return { algorithm: 'fixed-window' as const, limit: contracts.get(customer) ?? 2, windowMs: MINUTE, name: 'contract' }
    }
    const warnings: string[] = []
    const options = base([
      { name: 'contract', match: { path: '/api/**' }, policies: (request) => (request.header('x-async') === 'yes' ? later(contract(request)) : contract(request)), cost: (request) => (request.path === '/api/export' ? 4 : 1) },
      { name: 'all', policies: { algorithm: 'fixed-window', limit: 100, windowMs: MINUTE, name: 'everything' } },
    ], { key: (request) => request.header('x-customer'), onWarning: (message) => warnings.push(message) })
    await withServer(start, options, async (url) => {
      const call = (customer: string, extra: Record<string, string> = {}, path = '/api/items') => get(`${url}${path}`, { 'x-customer': customer, ...extra })
      const acme = []
      for (let i = 0; i < 4; i++) acme.push(await call('acme', i % 2 === 1 ? { 'x-async': 'yes' } : {}))
      assert.deepEqual(acme.map((r) => r.status), [200, 200, 200, 429])
      assert.equal(acme[0]?.headers.get('ratelimit-policy'), '"contract";q=3;w=60, "everything";q=100;w=60')
      assert.equal(acme[2]?.headers.get('ratelimit'), '"contract";r=0;t=30, "everything";r=97;t=30')
      assert.deepEqual([(await call('globex')).status, (await call('globex', { 'x-async': 'yes' })).status], [200, 429])
      assert.equal((await call('initech')).headers.get('ratelimit'), '"contract";r=1;t=30, "everything";r=99;t=30', 'no contract: 2')
      // acme's contract grows to 5: the 3 it spent still count, so 2 more.
      contracts.set('acme', 5)
      assert.deepEqual([(await call('acme')).status, (await call('acme')).status, (await call('acme')).status], [200, 200, 429])
      // A cost no wait would admit under a contract is a 413 naming the policy, as for fixed policies; one that fits goes.
      contracts.set('big', 10)
      const beyond = await call('globex', {}, '/api/export')
      assert.equal(beyond.status, 413)
      assert.deepEqual(await beyond.json(), {
        type: 'about:blank', title: 'Content Too Large', status: 413, 'violated-policies': ['contract'], limit: 1, cost: 4,
        detail: 'This request costs 4 units; policy "contract" admits at most 1 at once, so no wait would admit it. Send a smaller request.',
      })
      assert.equal((await call('big', { 'x-async': 'yes' }, '/api/export')).headers.get('ratelimit'), '"contract";r=6;t=30, "everything";r=99;t=30')
      // Bad answers: 500s, the server stays up.
      for (const customer of ['unnamed', 'broken', 'taken']) assert.equal((await call(customer)).status, 500, customer)
      assert.equal((await call('initech')).status, 200)
    })
  })

  it(`${adapter}: a queued rule delays requests instead of refusing them, up to maxWaitMs`, async () => {
    // Real time here: the adapter really waits. A bucket of 1 refilling every 100 ms.
    const options: RateLimitOptions = {
      rules: [{ name: 'queued', action: 'queue', maxWaitMs: 250, policies: { algorithm: 'token-bucket', capacity: 1, refillTokens: 1, refillIntervalMs: 100, name: 'q' } }],
      store: makeStore(),
      prefix: `queue-${adapter}-${Math.random().toString(36).slice(2)}`,
    }
    await withServer(start, options, async (url) => {
      const started = performance.now()
      const statuses = await Promise.all([0, 1, 2, 3].map(() => get(url).then((r) => r.status)))
      const elapsed = performance.now() - started
      // Waits of 0, 100 and 200 ms fit in 250; the fourth would wait 300 and is refused.
      assert.deepEqual([...statuses].sort(), [200, 200, 200, 429])
      assert.ok(elapsed >= 150, `the queued requests were delayed (${elapsed.toFixed(0)} ms)`)
    })
    await assert.rejects(async () => { await start({ rules: [{ action: 'queue', policies: { algorithm: 'sliding-log', limit: 1, windowMs: 1000 } }] }) }, /sliding-log cannot reserve/)
  })

  it(`${adapter}: allow-list, deny-list, skip predicate and onLimited`, async () => {
    const limited: string[] = []
    const options = base([{ policies: { algorithm: 'fixed-window', limit: 1, windowMs: MINUTE, name: 'one' } }], {
      key: (request) => request.header('x-client'),
      allow: (request) => request.header('x-client') === 'internal',
      deny: (request) => request.header('x-client') === 'banned',
      skip: (request) => request.method === 'OPTIONS',
      onLimited: (event) => limited.push(event.key),
    })
    await withServer(start, options, async (url) => {
      for (let i = 0; i < 3; i++) assert.equal((await get(url, { 'x-client': 'internal' })).status, 200)
      const banned = await get(url, { 'x-client': 'banned' })
      assert.equal(banned.status, 403)
      assert.match(banned.headers.get('content-type') ?? '', /problem\+json/)
      for (let i = 0; i < 3; i++) assert.equal((await fetch(url, { method: 'OPTIONS', headers: { 'x-client': 'c' } })).status < 400, true)
      assert.equal((await get(url, { 'x-client': 'c' })).status, 200, 'OPTIONS were skipped, not counted')
      assert.equal((await get(url, { 'x-client': 'c' })).status, 429)
      assert.deepEqual(limited, ['c'])
    })
  })

  it(`${adapter}: callbacks that answer with promises (an identity lookup, a tier from a database, allow and deny lists) decide as synchronous ones do`, async () => {
    const later = <T>(value: T) => new Promise<T>((resolve) => setTimeout(() => resolve(value), 1))
    const options = base([
      { name: 'tiered', match: { path: '/api/**' }, tiers: { of: (request) => later(request.header('x-tier')), default: 'FREE', policies: { FREE: { algorithm: 'fixed-window', limit: 1, windowMs: MINUTE, name: 'free' }, PRO: { algorithm: 'fixed-window', limit: 2, windowMs: MINUTE, name: 'pro' } } } },
      // A second rule after an asynchronous one: it is still applied, in order.
      { name: 'all', policies: { algorithm: 'fixed-window', limit: 4, windowMs: MINUTE, name: 'everything' } },
    ], {
      key: (request) => later(request.header('x-client')),
      allow: (request) => later(request.header('x-client') === 'internal'),
      deny: (request) => later(request.header('x-client') === 'banned'),
      emptyKey: 'forbid',
    })
    await withServer(start, options, async (url) => {
      const call = (client: string | undefined, path = '/api/items', tier?: string) => get(`${url}${path}`, { ...(client ? { 'x-client': client } : {}), ...(tier ? { 'x-tier': tier } : {}) })
      assert.equal((await call('banned')).status, 403)
      assert.equal((await call(undefined)).status, 403, 'no identity, and emptyKey forbids')
      for (let i = 0; i < 3; i++) assert.equal((await call('internal')).status, 200)
      const first = await call('a')
      assert.equal(first.status, 200)
      assert.equal(first.headers.get('ratelimit'), '"free";r=0;t=30, "everything";r=3;t=30')
      assert.equal((await call('a')).status, 429)
      assert.deepEqual([(await call('b', '/api/items', 'PRO')).status, (await call('b', '/api/items', 'PRO')).status, (await call('b', '/api/items', 'PRO')).status], [200, 200, 429])
      assert.deepEqual([(await call('b', '/public')).status, (await call('b', '/public')).status, (await call('b', '/public')).status], [200, 200, 429], 'the second rule counted the two PRO requests it allowed')
    })
  })

  it(`${adapter}: a callback that throws, at once or in its promise, answers 500; the server stays up`, async () => {
    const options = base([{ policies: { algorithm: 'fixed-window', limit: 5, windowMs: MINUTE, name: 'five' } }], {
      key: (request) => {
        const client = request.header('x-client')
        if (client === 'throws') throw new Error('lookup table missing')
        if (client === 'rejects') return Promise.reject(new Error('identity service down'))
        return client
      },
      onWarning: () => {},
    })
    await withServer(start, options, async (url) => {
      assert.equal((await get(url, { 'x-client': 'throws' })).status, 500)
      assert.equal((await get(url, { 'x-client': 'rejects' })).status, 500)
      assert.equal((await get(url, { 'x-client': 'fine' })).status, 200)
    })
  })

  it(`${adapter}: limitedResponse replaces the refusal's body, status and type; the rate-limit fields stay`, async () => {
    const seen: Array<{ key: string; retryAfterSeconds: number; type: unknown }> = []
    const options = base([{ name: 'pages', policies: { algorithm: 'fixed-window', limit: 1, windowMs: MINUTE, name: 'page-views' } }], {
      key: (request) => request.header('x-client'),
      limitedResponse: ({ key, retryAfterSeconds, problem, request }) => {
        seen.push({ key, retryAfterSeconds, type: problem.type })
        if (request.header('accept') === 'text/html') return { status: 503, body: `<p>Slow down; back in ${retryAfterSeconds} s</p>`, contentType: 'text/html; charset=utf-8' }
        if (request.header('x-client') === 'default') return undefined
        if (request.header('x-client') === 'broken') throw new Error('template missing')
        return { body: { error: { code: 'RATE_LIMITED', retryIn: retryAfterSeconds } } }
      },
      onWarning: () => {},
    })
    await withServer(start, options, async (url) => {
      for (const client of ['html', 'json', 'default', 'broken']) assert.equal((await get(url, { 'x-client': client })).status, 200)
      const html = await get(url, { 'x-client': 'html', accept: 'text/html' })
      assert.equal(html.status, 503)
      assert.equal(html.headers.get('content-type'), 'text/html; charset=utf-8')
      assert.equal(await html.text(), '<p>Slow down; back in 30 s</p>')
      assert.equal(html.headers.get('retry-after'), '30')
      assert.equal(html.headers.get('ratelimit'), '"page-views";r=0;t=30')
      const json = await get(url, { 'x-client': 'json' })
      assert.equal(json.status, 429)
      assert.match(json.headers.get('content-type') ?? '', /^application\/json/)
      assert.deepEqual(await json.json(), { error: { code: 'RATE_LIMITED', retryIn: 30 } })
      for (const client of ['default', 'broken']) {
        const fallback = await get(url, { 'x-client': client })
        assert.equal(fallback.status, 429)
        assert.match(fallback.headers.get('content-type') ?? '', /^application\/problem\+json/)
        assert.deepEqual((await fallback.json() as Record<string, unknown>)['violated-policies'], ['page-views'])
      }
      assert.deepEqual(seen.map((event) => event.key), ['html', 'json', 'default', 'broken'])
      assert.deepEqual(seen[0], { key: 'html', retryAfterSeconds: 30, type: 'https://iana.org/assignments/http-problem-types#quota-exceeded' })
    })
  })

  it(`${adapter}: count: 'failed' spends the limit on failed responses only (a login limit successful logins do not spend), exactly under a burst`, async () => {
    const options = base([
      { name: 'login', match: { path: '/login' }, count: 'failed', policies: { algorithm: 'token-bucket', name: 'failed-logins', capacity: 3, refillTokens: 1, refillIntervalMs: 3_600_000 } },
      { name: 'signup', match: { path: '/signup' }, count: 'succeeded', policies: { algorithm: 'leaky-bucket', name: 'signups', capacity: 2, leakTokens: 1, leakIntervalMs: 3_600_000 } },
      { name: 'reset', match: { path: '/reset' }, count: 'failed', policies: { algorithm: 'sliding-log', name: 'failed-resets', limit: 2, windowMs: 3_600_000 } },
    ])
    await withServer(start, options, async (url) => {
      const login = (status: number) => get(`${url}/login`, { 'x-status': String(status) })
      // Successful logins are refunded: any number of them.
      for (let i = 0; i < 6; i++) assert.equal((await login(200)).status, 200)
      // Failures spend it: 3, then refused, and then a correct password is refused too (the lockout holds).
      assert.deepEqual([(await login(401)).status, (await login(401)).status, (await login(401)).status], [401, 401, 401])
      assert.equal((await login(200)).status, 429)
      // A burst is held to what is left, whatever its responses turn out to be.
      const signups = await Promise.all(Array.from({ length: 6 }, () => get(`${url}/signup`, { 'x-status': '500', 'x-delay-ms': '150' })))
      assert.deepEqual(signups.map((res) => res.status).sort(), [429, 429, 429, 429, 500, 500])
      // Failed signups were refunded once answered; successful ones count.
      assert.deepEqual([(await get(`${url}/signup`, { 'x-status': '201' })).status, (await get(`${url}/signup`, { 'x-status': '201' })).status, (await get(`${url}/signup`)).status], [201, 201, 429])
      // The same with a sliding log ("2 failures in any hour"): successes given back, failures counted.
      const reset = (status: number) => get(`${url}/reset`, { 'x-status': String(status) }).then((res) => res.status)
      const resets = []
      for (const status of [200, 200, 200, 401, 200, 401, 200]) resets.push(await reset(status))
      assert.deepEqual(resets, [200, 200, 200, 401, 200, 401, 429])
    })
  })

  it(`${adapter}: count: 'in-flight' limits requests in progress: a burst is held to the limit, units come back as responses end (a streamed one when its body ends), and a refusal says when to ask again`, async () => {
    const options = base([
      { name: 'reports', match: { path: '/reports' }, count: 'in-flight', policies: { algorithm: 'sliding-log', name: 'reports-in-progress', limit: 2, windowMs: 3_600_000 } },
      { name: 'api', policies: { algorithm: 'token-bucket', name: 'api', capacity: 100, refillTokens: 100, refillIntervalMs: 60_000 } },
    ])
    await withServer(start, options, async (url) => {
      const report = (headers: Record<string, string> = {}) => get(`${url}/reports`, headers)
      const burst = await Promise.all(Array.from({ length: 5 }, () => report({ 'x-delay-ms': '300' })))
      assert.deepEqual(burst.map((res) => res.status).sort(), [200, 200, 429, 429, 429])
      const allowed = burst.filter((res) => res.status === 200)
      const item = (res: Response, name: string) => res.headers.get('ratelimit')?.split(', ').find((entry) => entry.startsWith(`"${name}"`))
      assert.deepEqual(allowed.map((res) => item(res, 'reports-in-progress')).sort(), ['"reports-in-progress";r=0', '"reports-in-progress";r=1'])
      // The quota unit says what it counts; it has no window, and no one knows when more comes: no t.
      assert.equal(allowed[0]?.headers.get('ratelimit-policy'), '"reports-in-progress";q=2;qu="concurrent-requests", "api";q=100;w=60')
      const refused = burst.find((res) => res.status === 429) as Response
      assert.equal(refused.headers.get('retry-after'), '1', 'not the hour its log would keep the units were none given back')
      assert.equal(item(refused, 'reports-in-progress'), '"reports-in-progress";r=0')
      const problem = await refused.json() as Record<string, unknown>
      assert.deepEqual(problem['violated-policies'], ['reports-in-progress'])
      assert.equal(problem['retry-after'], 1)
      // Each came back as its response ended: one after another, any number pass.
      for (let i = 0; i < 4; i++) {
        const res = await report()
        assert.equal(res.status, 200)
        assert.equal(item(res, 'reports-in-progress'), '"reports-in-progress";r=1')
      }
      // A streamed response is in progress until its body ends, not when its head is sent.
      const streams = [await report({ 'x-stream-ms': '400' }), await report({ 'x-stream-ms': '400' })]
      assert.deepEqual(streams.map((res) => res.status), [200, 200])
      assert.equal((await report()).status, 429, 'two bodies still streaming')
      assert.deepEqual(await Promise.all(streams.map((res) => res.text())), ['first last', 'first last'])
      assert.equal((await report()).status, 200)
    })
  })

  it(`${adapter}: count: 'in-flight': a client that leaves does not end its request while the handler still works on it; a request another rule refuses gives its unit back`, async () => {
    const options = base([
      { name: 'exports', match: { path: '/export/**' }, count: 'in-flight', policies: { algorithm: 'sliding-log', name: 'exports-in-progress', limit: 1, windowMs: 3_600_000 } },
      { name: 'big-exports', match: { path: '/export/big' }, policies: { algorithm: 'fixed-window', name: 'big-exports-per-hour', limit: 2, windowMs: 3_600_000 } },
    ])
    await withServer(start, options, async (url) => {
      const leaving = new AbortController()
      const left = fetch(`${url}/export/small`, { headers: { 'x-delay-ms': '500' }, signal: leaving.signal }).catch((error: unknown) => error)
      await new Promise((resolve) => setTimeout(resolve, 150))
      leaving.abort()
      await left
      await new Promise((resolve) => setTimeout(resolve, 50))
      assert.equal((await get(`${url}/export/small`)).status, 429, 'its handler is still at work')
      await new Promise((resolve) => setTimeout(resolve, 500))
      // Ended by its handler: its unit is back.
      assert.equal((await get(`${url}/export/small`)).status, 200)
      assert.deepEqual([(await get(`${url}/export/big`)).status, (await get(`${url}/export/big`)).status], [200, 200])
      // The next big one is refused by the hourly rule, after the in-flight rule charged it: that unit comes back at once.
      const refused = await get(`${url}/export/big`)
      assert.equal(refused.status, 429)
      assert.deepEqual((await refused.json() as Record<string, unknown>)['violated-policies'], ['big-exports-per-hour'])
      const small = await get(`${url}/export/small`)
      assert.equal(small.status, 200, 'no unit held by the refused request')
      assert.equal(small.headers.get('ratelimit'), '"exports-in-progress";r=0')
    })
  })

  it(`${adapter}: blockMs locks a client out after too many failed logins: Retry-After and the fields give the block, a correct password is refused too`, async () => {
    const lockout = { algorithm: 'token-bucket', name: 'failed-logins', capacity: 3, refillTokens: 3, refillIntervalMs: 60_000, blockMs: 900_000 } as const
    await withServer(start, base([{ name: 'login', match: { path: '/login' }, count: 'failed', policies: lockout }]), async (url) => {
      const login = (status: number) => get(`${url}/login`, { 'x-status': String(status) })
      assert.deepEqual([(await login(200)).status, (await login(401)).status, (await login(401)).status, (await login(401)).status], [200, 401, 401, 401])
      // Out of failures: refused, and blocked for 15 minutes, where the bucket alone would have let one through in 20 s.
      for (const status of [401, 200]) {
        const refused = await login(status)
        assert.equal(refused.status, 429)
        assert.equal(refused.headers.get('retry-after'), '900')
        assert.equal(refused.headers.get('ratelimit'), '"failed-logins";r=0;t=900')
        assert.deepEqual((await refused.json() as Record<string, unknown>)['violated-policies'], ['failed-logins'])
      }
      // Other paths are not this rule's.
      assert.equal((await get(`${url}/elsewhere`)).status, 200)
    })
  })

  // The fetch adapter hands its Response to the runtime, which owns the connection.
  if (adapter !== 'fetch') {
    it(`${adapter}: a refused request's body is read for 2 s more at most, then the connection closes; a small body keeps it`, async () => {
      await withServer(start, base([{ name: 'upload', policies: { algorithm: 'fixed-window', limit: 1, windowMs: MINUTE, name: 'upload' } }]), async (url) => {
        assert.equal((await fetch(`${url}/upload`, { method: 'POST', body: 'first' })).status, 200)
        const { port } = new URL(url)
        // A body that would go on for minutes (64 KiB every 20 ms), sent for 8 s at most.
        const upload = (head: string, chunk: Buffer) => new Promise<{ answer: string; closedAfterMs: number | undefined }>((resolve) => {
          const socket = new Socket()
          const started = Date.now()
          let answer = ''
          let closedAfterMs: number | undefined
          const sending = setInterval(() => socket.write(chunk), 20)
          const done = () => { clearInterval(sending); clearTimeout(timer); socket.destroy(); resolve({ answer, closedAfterMs }) }
          const timer = setTimeout(done, 8000)
          socket.on('data', (data) => { answer += data.toString('latin1') })
          socket.on('error', () => {})
          socket.on('close', () => { closedAfterMs = Date.now() - started; done() })
          socket.connect(Number(port), '127.0.0.1', () => socket.write(head))
        })
        const block = Buffer.alloc(2 ** 16, 'x')
        const [sized, chunked] = await Promise.all([
          upload(`POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: ${2 ** 30}\r\n\r\n`, block),
          upload('POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n', Buffer.concat([Buffer.from('10000\r\n'), block, Buffer.from('\r\n')])),
        ])
        for (const [kind, outcome] of [['sized', sized], ['chunked', chunked]] as const) {
          // The answer reaches the client while it is still sending: the connection is not reset under it.
          assert.match(outcome.answer, /^HTTP\/1\.1 429 /, kind)
          // Before, the server read on as long as the client sent (the request timeout: minutes).
          assert.ok(outcome.closedAfterMs !== undefined && outcome.closedAfterMs < 6000, `${kind}: the connection ${outcome.closedAfterMs === undefined ? 'was still open after 8 s' : `closed after ${outcome.closedAfterMs} ms`}`)
        }
        // A small body is read through and the connection kept: a second request on it is answered.
        const small = await new Promise<string>((resolve, reject) => {
          const socket = new Socket()
          let answer = ''
          socket.on('data', (data) => {
            answer += data.toString('latin1')
            if ((answer.match(/HTTP\/1\.1 429 /g) ?? []).length === 2) { socket.destroy(); resolve(answer) }
          })
          socket.on('error', reject)
          socket.setTimeout(5000, () => { socket.destroy(); resolve(answer) })
          const body = 'x'.repeat(1024)
          socket.connect(Number(port), '127.0.0.1', () => socket.write(`POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length}\r\n\r\n${body}`.repeat(2)))
        })
        assert.equal((small.match(/HTTP\/1\.1 429 /g) ?? []).length, 2, small)
        assert.doesNotMatch(small, /connection: close/i)
      })
    })
  }

  it(`${adapter}: legacy and draft-6 header shapes`, async () => {
    await withServer(start, base([{ policies: { algorithm: 'token-bucket', capacity: 10, refillTokens: 1, refillIntervalMs: 1000, name: 'tb' } }], { headers: { standard: 'draft-6', legacy: true } }), async (url) => {
      const res = await get(url)
      assert.equal(res.headers.get('ratelimit-policy'), '10;w=10')
      assert.equal(res.headers.get('ratelimit-limit'), '10')
      assert.equal(res.headers.get('ratelimit-remaining'), '9')
      assert.equal(res.headers.get('ratelimit-reset'), '1')
      assert.equal(res.headers.get('x-ratelimit-limit'), '10')
      assert.equal(res.headers.get('x-ratelimit-reset'), '31', 'epoch seconds: 30 s + 1 s')
    })
  })
}

describe('Express apps that trust a proxy', () => {
  it("are told, at their first request, that sluice trusts none until its clientIp says so, with the option that says the same as 'trust proxy'", async () => {
    const policies = { algorithm: 'fixed-window' as const, limit: 5, windowMs: MINUTE }
    const warningsOf = async (trust: unknown, clientIp?: RateLimitOptions['clientIp'], key?: () => string) => {
      const warnings: string[] = []
      const app = express()
      app.set('trust proxy', trust)
      app.use(rateLimit({ rules: [{ policies, ...(key !== undefined ? { key } : {}) }], onWarning: (message) => warnings.push(message), ...(clientIp !== undefined ? { clientIp } : {}) }))
      app.get('/', (_req, res) => { res.send('ok') })
      const server = app.listen(0, '127.0.0.1')
      await new Promise((resolve) => server.once('listening', resolve))
      try {
        for (let i = 0; i < 2; i++) assert.equal((await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`)).status, 200)
      } finally {
        await new Promise((resolve) => server.close(resolve))
      }
      return warnings
    }
    assert.deepEqual(await warningsOf(1), ["sluice: this Express app trusts a proxy ('trust proxy' is 1), but sluice reads the client address by its own clientIp option, which trusts none: every client behind the proxy shares the proxy's quota. Give sluice the same: clientIp: { trustProxy: 1 }"])
    assert.match((await warningsOf('loopback, 10.0.0.0/8'))[0] ?? '', /Give sluice the same: clientIp: \{ trustProxy: \["127\.0\.0\.0\/8","::1\/128","10\.0\.0\.0\/8"\] \}$/)
    assert.match((await warningsOf(true))[0] ?? '', /\('trust proxy' is true\).*Give sluice the same: clientIp: \{ trustProxy \} with the proxies' addresses, or their number \(true trusts every address, so any client could name its own\)$/)
    assert.deepEqual(await warningsOf(false), [])
    assert.deepEqual(await warningsOf(1, { trustProxy: 1 }), [])
    // Rules that key by something else never read the address.
    assert.deepEqual(await warningsOf(1, undefined, () => 'tenant:1'), [])
  })

  it('Koa apps (app.proxy, maxIpsCount) and Fastify instances (trustProxy, whose value it keeps to itself) are told the same', async () => {
    const policies = { algorithm: 'fixed-window' as const, limit: 5, windowMs: MINUTE }
    const fastifyWarnings = async (trustProxy?: boolean | string) => {
      const warnings: string[] = []
      const app = Fastify(trustProxy === undefined ? {} : { trustProxy })
      await app.register(sluiceFastify, { rules: [{ policies }], onWarning: (message) => warnings.push(message) })
      app.get('/', async () => 'ok')
      for (let i = 0; i < 2; i++) assert.equal((await app.inject({ method: 'GET', url: '/' })).statusCode, 200)
      await app.close()
      return warnings
    }
    assert.deepEqual(await fastifyWarnings('10.0.0.0/8'), ["sluice: this Fastify instance trusts a proxy (trustProxy is set), but sluice reads the client address by its own clientIp option, which trusts none: every client behind the proxy shares the proxy's quota. Give sluice the same: clientIp: { trustProxy } with the proxies' addresses, or their number, as the trustProxy given to it"])
    assert.deepEqual(await fastifyWarnings(), [])
    const koaWarnings = async (proxy: boolean, maxIpsCount?: number) => {
      const warnings: string[] = []
      const app = new Koa({ proxy, ...(maxIpsCount !== undefined ? { maxIpsCount } : {}) })
      app.use(koaRateLimit({ rules: [{ policies }], onWarning: (message) => warnings.push(message) }))
      app.use((ctx) => { ctx.body = 'ok' })
      const server = app.listen(0, '127.0.0.1')
      await new Promise((resolve) => server.once('listening', resolve))
      try {
        assert.equal((await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`)).status, 200)
      } finally {
        await new Promise((resolve) => server.close(resolve))
      }
      return warnings
    }
    assert.match((await koaWarnings(true, 2))[0] ?? '', /\(app\.proxy true, and app\.maxIpsCount is 2\).* Give sluice the same: clientIp: \{ trustProxy: 2 \}$/)
    assert.match((await koaWarnings(true))[0] ?? '', /\(app\.proxy is true\).*true trusts every address/)
    assert.deepEqual(await koaWarnings(false), [])
  })
})

describe('HTTP configuration', () => {
  it('refuses at start-up what cannot work, naming it', async () => {
    const policies = { algorithm: 'fixed-window' as const, limit: 5, windowMs: 1000 }
    assert.throws(() => createRateLimitHandler({ rules: [] }), /rules must be a non-empty array/)
    assert.throws(() => createRateLimitHandler({ policies } as never), /rules must be a non-empty array of rules \(got undefined\); policies go in a rule: rules: \[\{ policies \}\]$/)
    // The peers' options, as users migrating write them first: the rule that says the same.
    assert.throws(() => createRateLimitHandler({ windowMs: 900_000, limit: 100 } as never), /\(got undefined\); express-rate-limit's options: here a limit is a rule, as in rules: \[\{ policies: \{ algorithm: 'fixed-window', limit: 100, windowMs: 900000 \} \}\]$/)
    assert.throws(() => createRateLimitHandler({ max: 5, timeWindow: 1000 } as never), /; @fastify\/rate-limit's options: here a limit is a rule, as in rules: \[\{ policies: \{ algorithm: 'fixed-window', limit: 5, windowMs: 1000 \} \}\]$/)
    // The peers' other options, and the slips of a first try, say what sluice calls them.
    assert.throws(() => createRateLimitHandler({ rules: [{ policies }], standardHeaders: 'draft-7' } as never), /standardHeaders is not a rate-limit option .*; the fields sent are the headers option: headers: \{ standard: 'draft-7', legacy: true \}$/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies }], keyGenerator: () => 'k' } as never), /; the key is a function of the request: key: \(request\) => string, or clientIpKey\(\), apiKey\(\), jwtClaim\(\)$/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies }], skipSuccessfulRequests: true } as never), /; which responses count is a rule's count: rules: \[\{ policies, count: 'failed' \}\]$/)
    assert.throws(() => createRateLimitHandler({ rules: { policies } } as never), /rules must be a non-empty array of rules \(got an object\); a list, even of one rule: rules: \[\{ \.\.\. \}\]$/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies, key: 'ip' }] } as never), /key must be a function of the request .*\(got "ip"\); the ip key is made by a resolver: key: clientIpKey\(\)$/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies }], key: 'tenant' } as never), /^ArgumentError: key must be a function \(got "tenant"\); a fixed text would put every request under one key: \(request\) => string$/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies, match: '/api/**' }] } as never), /match must be an object of predicates or a function \(got "\/api\/\*\*"\); a path pattern goes in path: match: \{ path: "\/api\/\*\*" \}$/)
    // An option of another thing (a rule's, a policy's, a match's, clientIp's) says where it goes.
    assert.throws(() => createRateLimitHandler({ rules: [{ policies }], trustProxy: true } as never), /trustProxy is not a rate-limit option .*; a clientIp option: clientIp: \{ trustProxy, ipv6Prefix \}$/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies }], cost: 2 } as never), /cost is not a rate-limit option .*; a rule option: rules: \[\{ policies, cost, action, maxWaitMs \}\]$/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies, path: '/login' }] } as never), /^ArgumentError: path is not a rule option \(rules\[0\]\) .*; a match option: match: \{ path, method, host, exclude \}$/)
    assert.throws(() => createRateLimitHandler({ rules: [{ algorithm: 'fixed-window', limit: 5, windowMs: 1000 }] } as never), /^ArgumentError: algorithm is not a rule option .*; a policy's field: policies: \{ algorithm, limit, windowMs \}$/)
    // The factory handed to the framework as if it were the middleware: Express calls it with a request.
    assert.throws(() => rateLimit(new IncomingMessage(new Socket()) as never), /rules must be a non-empty array of rules \(got undefined\); this is a request: call the factory with the options, as in app\.use\(rateLimit\(\{ rules \}\)\)$/)
    assert.throws(() => withNodeRateLimit(undefined as never, { rules: [{ policies }] }), /listener must be a function \(req, res\) => \.\.\. \(got undefined\); withRateLimit wraps a listener/)
    assert.throws(() => withNodeRateLimit(new IncomingMessage(new Socket()) as never, new ServerResponse(new IncomingMessage(new Socket())) as never), /listener must be a function .*\(got an object\); withRateLimit wraps a listener: createServer\(withRateLimit\(listener, \{ rules \}\)\)$/)
    assert.throws(() => withFetchRateLimit({ rules: [{ policies }] } as never, { rules: [{ policies }] }), /handler must be a function \(request\) => Response \(got an object\); withRateLimit wraps a handler/)
    assert.throws(() => withFetchRateLimit(() => new Response('ok'), { rules: [{ policies }] }, '127.0.0.1' as never), /remoteAddress must be a function .*\(got "127\.0\.0\.1"\)$/)
    // A remoteAddress function giving something else than an address fails the request naming it (not a TypeError from inside).
    const byAddress = (address: unknown) => withFetchRateLimit(() => new Response('ok'), { rules: [{ policies }] }, () => address as string)
    await assert.rejects(byAddress({ address: '127.0.0.1', family: 'IPv4', port: 5000 })(new Request('http://x.test/')), /^ArgumentError: remoteAddress must be the client's address, a string \(or undefined when unknown\) \(got an object\); this is an address object \(Bun's requestIP gives one\): pass its address, server\.requestIP\(request\)\?\.address$/)
    await assert.rejects(byAddress(Promise.resolve('127.0.0.1'))(new Request('http://x.test/')), /\(got a promise\); it must be known when the request is, not later$/)
    await assert.rejects(byAddress(42)(new Request('http://x.test/')), /\(got 42\)$/)
    // null (Bun's requestIP when it cannot tell) is no address, as undefined is.
    assert.equal((await byAddress(null)(new Request('http://x.test/'))).status, 200)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies }], skipPaths: ['/x'] } as never), /skipPaths is not a rate-limit option/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies, match: { paths: '/x' } } as never] }), /paths is not a match option/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies, match: { path: 'api/**' } }] }), /must be path patterns starting with "\/"/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies, match: { method: ['GET', 5] } } as never] }), /rule "rule-0" match\.method must be HTTP methods, such as GET or POST \(got 5\)/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies, match: { method: 'GET POST' } }] }), /match\.method.*must be HTTP methods/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies, cost: 10 }] }), /exceeds the limit 5 .* would refuse every request/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies }, { policies }] }), /both have a policy named/)
    // A policy's mistake says which rule (and tier) it is in.
    assert.throws(() => createRateLimitHandler({ rules: [{ policies }, { name: 'login', policies: { algorithm: 'fixed-window', windowMs: 1000, name: 'login' } as never }] }), /^PolicyError: rule "login": policy "login": limit is required$/)
    assert.throws(() => createRateLimitHandler({ rules: [{ name: 'api', tiers: { of: () => 'pro', default: 'pro', policies: { pro: { algorithm: 'token-bucket', capacity: 0, refillTokens: 1, refillIntervalMs: 1000 } } } }] }), /^PolicyError: rule "api" tier "pro": capacity must be a positive integer \(got 0\)$/)
    // tiers that are not a tiers object, or whose policies are not policies by tier, are named (not a TypeError from inside).
    const pro = { algorithm: 'token-bucket', capacity: 5, refillTokens: 1, refillIntervalMs: 1000 } as const
    assert.throws(() => createRateLimitHandler({ rules: [{ name: 'api', tiers: null as never }] }), /^ArgumentError: rule "api" tiers must be an object like \{ of, policies, default \} \(got null\)$/)
    assert.throws(() => createRateLimitHandler({ rules: [{ name: 'api', tiers: { of: () => 'pro', default: 'pro', policies: { pro }, tier: 'x' } as never }] }), /^ArgumentError: tier is not a tiers option \(rule "api"\) \(known: of, policies, default\)/)
    for (const policies of ['pro', [pro], {}, null]) {
      assert.throws(() => createRateLimitHandler({ rules: [{ name: 'api', tiers: { of: () => 'pro', default: 'pro', policies: policies as never } }] }), /^ArgumentError: rule "api" tiers\.policies must be an object of policies by tier name/, JSON.stringify(policies))
    }
    // A proxy list that trusts every address lets each client write its own key: said at start-up.
    const warnings: string[] = []
    createRateLimitHandler({ rules: [{ policies }], clientIp: { trustProxy: ['0.0.0.0/0'] }, onWarning: (message) => warnings.push(message) })
    assert.match(warnings.join(), /^sluice: clientIp\.trustProxy trusts 0\.0\.0\.0\/0, every IPv4 address, as a proxy: .* any client can take a fresh quota per request/)
    // Two rules of one name would be one rule to onDecision and onLimited.
    const named = (name: string) => ({ ...policies, name })
    assert.throws(() => createRateLimitHandler({ rules: [{ name: 'api', policies: named('a') }, { name: 'api', policies: named('b') }] }), /^ArgumentError: rules\[1\]\.name is also the name of rules\[0\]; give each rule its own name .*\(got "api"\)$/)
    assert.throws(() => createRateLimitHandler({ rules: [{ name: 'rule-1', policies: named('a') }, { policies: named('b') }] }), /^ArgumentError: rules\[1\] has no name, so it is called "rule-1", as rules\[0\] is named/)
    assert.doesNotThrow(() => createRateLimitHandler({ rules: [{ name: 'rule-0', policies: named('a') }, { policies: named('b') }] }))
    // A misspelt header style would silently send other fields, or none.
    assert.throws(() => createRateLimitHandler({ rules: [{ policies }], headers: { standard: 'draft-99' as never } }), /headers\.standard must be 'draft-10', 'draft-8', 'draft-7', 'draft-6' or false \(got "draft-99"\)/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies }], headers: { legacyHeaders: true } as never }), /legacyHeaders is not a headers option/)
    // A partition key only the draft-10 and draft-8 fields carry.
    assert.throws(() => createRateLimitHandler({ rules: [{ policies }], headers: { standard: 'draft-7', partitionKey: true } }), /^ArgumentError: headers\.partitionKey is a parameter of the draft-10 and draft-8 fields; standard draft-7 has no place for it, so no partition key would be sent \(got true\)$/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies }], headers: { standard: false, legacy: true, partitionKey: true } }), /standard false sends none/)
    assert.doesNotThrow(() => createRateLimitHandler({ rules: [{ policies }], headers: { standard: 'draft-8', partitionKey: true } }))
    assert.throws(() => createRateLimitHandler({ rules: [{ policies }], headers: { legacy: 'yes' as never } }), /headers\.legacy must be true or false/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies }], clientIp: { trustProxy: ['not-an-ip'] } }), /trustProxy/)
    // Counting only some responses refunds the others: only buckets take units back exactly.
    assert.throws(() => createRateLimitHandler({ rules: [{ name: 'login', policies, count: 'failed' }] }), /rule "login" count needs token-bucket, police leaky-bucket or sliding-log policies, .* "fixed-window:5\/1s" is fixed-window/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies: { algorithm: 'token-bucket', capacity: 5, refillTokens: 1, refillIntervalMs: 1000 }, count: 'errors' as never }] }), /count must be 'all', 'failed', 'succeeded' or 'in-flight'/)
    // A concurrency limit counts a request until it ends: a bucket or a window would hand units back by time too.
    assert.throws(() => createRateLimitHandler({ rules: [{ name: 'uploads', policies: { algorithm: 'token-bucket', capacity: 5, refillTokens: 1, refillIntervalMs: 1000, name: 'tb' }, count: 'in-flight' }] }), /^ArgumentError: rule "uploads" count needs sliding-log policies \(limit: requests in progress at once; windowMs: the longest one is counted, should its release be lost\); "tb" is token-bucket \(got "in-flight"\)$/)
    // Rules that can never match: every path they name is excluded, by their own exclude or by skip.
    assert.throws(() => createRateLimitHandler({ rules: [{ name: 'health', policies, match: { path: '/health' } }], skip: ['/health', '/metrics'] }), /rule "health" match can never match: every path it names is excluded \(by its exclude or by skip\)/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies, match: { path: '/api/**', exclude: '/api/**' } }] }), /can never match/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies, match: { method: 'POST' } }], skip: ['/**'] }), /can never match/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies, match: { path: '/API/x' } }], skip: ['/api/**'], caseSensitive: false }), /can never match/)
    // Narrower exclusions, and case that differs under case-sensitive matching, leave the rule reachable.
    assert.doesNotThrow(() => createRateLimitHandler({ rules: [{ policies, match: { path: '/api/**', exclude: '/api/public/**' } }], skip: ['/health'] }))
    assert.doesNotThrow(() => createRateLimitHandler({ rules: [{ policies, match: { path: '/API/x' } }], skip: ['/api/**'] }))
    assert.throws(() => createRateLimitHandler({ rules: [{ policies }], skip: 5 as never }), /^ArgumentError: skip must be path patterns starting with "\/" \(one, or a list\) \(got 5\)/)
    // A string from an environment variable is truthy: shadow: 'false' would never refuse.
    assert.throws(() => createRateLimitHandler({ rules: [{ policies }], shadow: 'false' as never }), /^ArgumentError: shadow must be true or false \(got "false"\)/)
    assert.throws(() => createRateLimitHandler({ rules: [{ name: 'api', policies, shadow: 'false' as never }] }), /^ArgumentError: rule "api" shadow must be true or false/)
    // Found only on the first request before: 'rule.key is not a function', 'cost must be a positive integer'.
    assert.throws(() => createRateLimitHandler({ rules: [{ name: 'api', policies, key: 'x-api-key' as never }] }), /^ArgumentError: rule "api" key must be a function of the request .* \(got "x-api-key"\)/)
    assert.throws(() => createRateLimitHandler({ rules: [{ name: 'api', policies, cost: '2' as never }] }), /^ArgumentError: rule "api" cost must be a positive integer, or a function of the request returning one \(got "2"\)/)
    // These were TypeErrors ("Cannot convert a Symbol value to a string"), or a rule named "[object Object]".
    assert.throws(() => createRateLimitHandler({ rules: [{ name: Symbol('api') as never, policies }] }), /^ArgumentError: rules\[0\]\.name must be a non-empty string/)
    assert.throws(() => createRateLimitHandler({ rules: [{ name: {} as never, policies }] }), /^ArgumentError: rules\[0\]\.name must be a non-empty string \(got an object\)/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies }], prefix: Object.create(null) as never }), /^ArgumentError: prefix must be 1 to 59 printable ASCII characters without spaces or braces/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies }], prefix: 'x'.repeat(60) }), /^ArgumentError: prefix must be 1 to 59/)
    // A host pattern with a scheme, a path or a misplaced wildcard never matched (https://api.example.com compared as "https").
    for (const host of ['https://api.example.com', 'api.example.com/v1', '*example.com', 'api.*.com', 'bücher.de', '*']) {
      assert.throws(() => createRateLimitHandler({ rules: [{ name: 'api', policies, match: { host } }] }), /^ArgumentError: rule "api" match\.host must be host names, as the Host header carries them: .*no scheme or path/, host)
    }
    for (const host of ['api.example.com', '*.example.com', 'Example.COM.', '192.0.2.1', '[2001:db8::1]:8443', 'localhost:3000', 'xn--bcher-kva.de']) {
      assert.doesNotThrow(() => createRateLimitHandler({ rules: [{ name: 'api', policies, match: { host } }] }), host)
    }
    // A wait on a rule that refuses was silently dropped: the rule refused at once.
    assert.throws(() => createRateLimitHandler({ rules: [{ name: 'crawl', policies, maxWaitMs: 5000 }] }), /^ArgumentError: rule "crawl" maxWaitMs applies to action 'queue' only: a refused request does not wait \(got 5000\)/)
    assert.doesNotThrow(() => createRateLimitHandler({ rules: [{ name: 'crawl', policies: { algorithm: 'token-bucket', capacity: 5, refillTokens: 1, refillIntervalMs: 1000 }, action: 'queue', maxWaitMs: 5000 }] }))
  })

  it('a shadow rule that queues (or shapes) reports the wait it would impose but never delays the request', async () => {
    const waits: Array<[string, number]> = []
    const decide = createRateLimitPipeline({
      rules: [
        { name: 'queued', shadow: true, action: 'queue', maxWaitMs: 5000, policies: { algorithm: 'token-bucket', capacity: 1, refillTokens: 1, refillIntervalMs: 1000, name: 'queued' } },
        { name: 'shaped', shadow: true, policies: { algorithm: 'leaky-bucket', mode: 'shape', capacity: 5, leakTokens: 1, leakIntervalMs: 100, name: 'shaped' } },
        { name: 'enforced', action: 'queue', maxWaitMs: 5000, policies: { algorithm: 'token-bucket', capacity: 2, refillTokens: 1, refillIntervalMs: 500, name: 'enforced' } },
      ],
      clock: () => 1_000_000,
      onDecision: (event) => waits.push([event.rule, event.decision.waitMs]),
    })
    const request = { method: 'GET', path: '/', host: undefined, header: () => undefined, remoteAddress: '203.0.113.7' }
    const outcomes = []
    for (let i = 0; i < 4; i++) outcomes.push(await decide(request))
    assert.deepEqual(outcomes.map((o) => [o.proceed, o.waitMs]), [[true, 0], [true, 0], [true, 500], [true, 1000]], 'only the enforcing rule delays')
    assert.deepEqual(waits.filter(([rule]) => rule === 'queued').map(([, ms]) => ms), [0, 1000, 2000, 3000], 'the shadow queue decides as it would if enforced')
    assert.deepEqual(waits.filter(([rule]) => rule === 'shaped').map(([, ms]) => ms), [0, 100, 200, 300])
  })

  it('a tier name no tier is named for is decided as the default tier, and said: once per name, for the first ten names', async () => {
    const warnings: string[] = []
    const decide = createRateLimitPipeline({
      rules: [{ name: 'plan', tiers: { of: (request) => request.header('x-plan'), default: 'free', policies: { free: { algorithm: 'fixed-window', limit: 1, windowMs: 60_000, name: 'free' }, pro: { algorithm: 'fixed-window', limit: 5, windowMs: 60_000, name: 'pro' } } } }],
      clock: () => 1_000_000,
      onWarning: (message) => warnings.push(message),
    })
    const request = (plan: string | undefined, address: string) => ({ method: 'GET', path: '/', host: undefined, header: (name: string) => (name === 'x-plan' ? plan : undefined), remoteAddress: address })
    // A lookup that finds no plan may say so with null: the default tier, and nothing to warn of.
    const nullTier = createRateLimitPipeline({ rules: [{ name: 'plan', tiers: { of: () => null, default: 'free', policies: { free: { algorithm: 'fixed-window', limit: 1, windowMs: 60_000, name: 'free' } } } }], onWarning: (message) => warnings.push(message) })
    assert.deepEqual([(await nullTier(request(undefined, '203.0.113.9'))).proceed, (await nullTier(request(undefined, '203.0.113.9'))).proceed], [true, false])
    assert.deepEqual(warnings, [])
    // "Pro" is not "pro": the free tier's limit of 1 decides.
    assert.deepEqual([(await decide(request('Pro', '203.0.113.1'))).proceed, (await decide(request('Pro', '203.0.113.1'))).proceed], [true, false])
    assert.deepEqual(warnings, ['sluice: rule "plan": tiers.of gave "Pro", which names none of its tiers (free, pro), so the default tier "free" decided; tier names are matched exactly'])
    assert.equal((await decide(request(undefined, '203.0.113.2'))).proceed, true)
    assert.equal((await decide(request('pro', '203.0.113.3'))).proceed, true)
    assert.equal(warnings.length, 1, 'no tier, or a known one, is not a slip')
    for (let i = 0; i < 50; i++) await decide(request(`made-up-${i}`, '203.0.113.4'))
    assert.equal(warnings.length, 11)
    assert.equal(warnings.at(-1), 'sluice: rule "plan": more tier names no tier is named for; no more are reported')
  })

  it('warns at start-up of a rule method no request on node carries (a typo such as PSOT), and only of those', () => {
    assert.deepEqual([...NODE_METHODS].sort(), [...METHODS].sort())
    const warnings: string[] = []
    const policies = { algorithm: 'fixed-window' as const, limit: 5, windowMs: 1000 }
    createRateLimitHandler({ rules: [{ name: 'login', policies, match: { method: ['POST', 'PSOT'] } }, { name: 'dav', policies: { ...policies, name: 'dav' }, match: { method: ['mkcol', 'M-SEARCH', 'QUERY', 'get'] } }], onWarning: (message) => warnings.push(message) })
    assert.equal(warnings.length, 1, warnings.join('\n'))
    assert.match(warnings[0] as string, /^sluice: rule "login" match\.method "PSOT" is not a method node's HTTP parser accepts \(it answers 400 to all but ACL, .*UNSUBSCRIBE\): on node:http, Express and Fastify the rule never applies for it/)
  })

  it('a match or skip predicate that returns a promise fails the request, instead of matching (or skipping) every request', async () => {
    const policies = { algorithm: 'fixed-window' as const, limit: 1, windowMs: 60_000 }
    const warnings: string[] = []
    const asyncMatch = createRateLimitPipeline({ rules: [{ name: 'api', policies, match: (async () => { throw new Error('lookup failed') }) as never }], onWarning: (m) => warnings.push(m) })
    const asyncSkip = createRateLimitPipeline({ rules: [{ policies }], skip: (async () => true) as never })
    const request = { method: 'GET', path: '/', host: undefined, header: () => undefined, remoteAddress: '203.0.113.9' }
    assert.throws(() => asyncMatch(request), /^ArgumentError: rule "api" match must return true or false at once, not a promise .*\(got a promise\)/)
    assert.throws(() => asyncSkip(request), /^ArgumentError: skip must return true or false at once, not a promise/)
    // The rejected promise the predicate returned must not take the process down as an unhandled rejection.
    await new Promise((resolve) => setTimeout(resolve, 20))
  })

  it('skip takes one pattern as well as a list', async () => {
    const handler = createRateLimitHandler({ rules: [{ policies: { algorithm: 'fixed-window', limit: 1, windowMs: 60_000 } }], skip: '/health/**' })
    const request = (path: string) => ({ method: 'GET', path, host: 'h', header: () => undefined, remoteAddress: '203.0.113.9' })
    const statuses = []
    for (const path of ['/health', '/health/live', '/health', '/x', '/x']) statuses.push((await handler(request(path))).status)
    assert.deepEqual(statuses, [200, 200, 200, 200, 429])
  })
})

describe('HTTP pipeline', () => {
  it('decides in the same tick on the memory store with synchronous callbacks, and hands back a promise once a callback returns one', async () => {
    const request = { method: 'GET', path: '/', host: 'localhost', header: () => undefined, remoteAddress: '127.0.0.1' }
    const policies = { algorithm: 'fixed-window' as const, limit: 1, windowMs: MINUTE, name: 'one' }
    const decide = createRateLimitPipeline({ rules: [{ policies }], clock: fixedClock })
    const first = decide(request)
    assert.ok(!(first instanceof Promise), 'the memory store and synchronous callbacks answer at once')
    assert.deepEqual([(first as HttpOutcome).proceed, (decide(request) as HttpOutcome).status], [true, 429])
    const lookedUp = createRateLimitPipeline({ rules: [{ policies }], clock: fixedClock, key: async () => 'user:1' })
    const pending = lookedUp(request)
    assert.ok(pending instanceof Promise)
    assert.deepEqual([(await pending).proceed, (await lookedUp(request)).status], [true, 429])
    const redisLike = createRateLimitPipeline({ rules: [{ policies }], clock: fixedClock, store: { consume: (call) => Promise.resolve(new MemoryStore().consumeSync(call)), reset: () => Promise.resolve() } })
    assert.ok(redisLike(request) instanceof Promise, 'a store that answers later is awaited')
  })

  it("count: 'in-flight' per user AND overall: one call for both keys; a refusal holds nothing anywhere, and each request's end frees both", () => {
    const request = (user: string) => ({ method: 'GET', path: '/reports', host: 'localhost', header: (name: string) => (name === 'x-user' ? user : undefined), remoteAddress: '127.0.0.1' })
    const inFlight = (name: string, limit: number) => ({ algorithm: 'sliding-log' as const, name, limit, windowMs: MINUTE })
    let storeCalls = 0
    const memory = new MemoryStore()
    const store: SyncStore = {
      spansKeys: true,
      consumeSync: (call) => { storeCalls++; return memory.consumeSync(call) },
      consume: (call) => memory.consume(call),
      resetSync: (prefix, key, policies) => memory.resetSync(prefix, key, policies),
      reset: (prefix, key, policies) => memory.reset(prefix, key, policies),
    }
    const decide = createRateLimitPipeline({
      rules: [
        { name: 'per-user', count: 'in-flight', key: (r) => `user:${r.header('x-user') ?? ''}`, policies: inFlight('per-user', 1) },
        { name: 'overall', count: 'in-flight', key: () => 'everyone', policies: inFlight('overall', 2) },
      ],
      clock: fixedClock,
      store,
    })
    const open = (user: string) => decide(request(user)) as HttpOutcome
    const a = open('a')
    assert.equal(a.proceed, true)
    assert.equal(storeCalls, 1, 'both keys in one call')
    // a's second is refused by its own limit: the overall one keeps its unit for b.
    const a2 = open('a')
    assert.equal(a2.status, 429)
    a2.settle?.(429)
    const b = open('b')
    assert.equal(b.proceed, true)
    // Two in progress: c is refused overall, and its own limit is not held.
    const c = open('c')
    assert.deepEqual([c.status, JSON.parse(c.body ?? '{}')['violated-policies']], [429, ['overall']])
    c.settle?.(429)
    // a ends: a's unit and one overall come back; c gets in, then a again is refused overall only.
    a.settle?.(200)
    const c2 = open('c')
    assert.equal(c2.proceed, true)
    const a3 = open('a')
    assert.deepEqual([a3.status, JSON.parse(a3.body ?? '{}')['violated-policies']], [429, ['overall']])
    a3.settle?.(429)
    b.settle?.(200)
    c2.settle?.(200)
    // All ended: nothing is held, and nothing was given back that was not taken (no more than the limits get in).
    const again = ['a', 'b', 'c'].map((user) => open(user))
    assert.deepEqual(again.map((outcome) => outcome.status), [200, 200, 429])
  })

  it("count: 'in-flight': a request held past its log's window gives nothing back when it ends, so it cannot free the unit of one still in progress", () => {
    let now = 0
    const request = { method: 'GET', path: '/events', host: 'localhost', header: () => undefined, remoteAddress: '127.0.0.1' }
    const policies = { algorithm: 'sliding-log' as const, name: 'streams', limit: 1, windowMs: MINUTE }
    const decide = createRateLimitPipeline({ rules: [{ name: 'streams', count: 'in-flight', policies }], clock: () => now })
    const open = () => decide(request) as HttpOutcome
    const first = open()
    assert.equal(first.proceed, true)
    // The first stream outlives the window: the log has let its unit go, so a second one starts.
    now = MINUTE + 1000
    const second = open()
    assert.deepEqual([second.proceed, open().status], [true, 429])
    first.settle?.(200)
    assert.equal(open().status, 429, "the first stream's end gives back nothing: the unit is the second's")
    now += 1000
    second.settle?.(200)
    assert.equal(open().proceed, true)
  })
  it('a cost read from the request that a policy can never admit: 413 when enforced; a shadow rule warns once and leaves the request to the other rules', () => {
    const request = (units: string) => ({ method: 'POST', path: '/upload', host: 'localhost', header: (name: string) => (name === 'x-units' ? units : undefined), remoteAddress: '127.0.0.1' })
    const warnings: string[] = []
    const decide = createRateLimitPipeline({
      rules: [
        { name: 'bytes-watch', shadow: true, cost: (r) => Number(r.header('x-units')), policies: { algorithm: 'token-bucket', name: 'bytes', capacity: 100, refillTokens: 100, refillIntervalMs: MINUTE } },
        { name: 'requests', policies: { algorithm: 'fixed-window', name: 'requests', limit: 2, windowMs: MINUTE } },
      ],
      clock: fixedClock,
      onWarning: (message) => warnings.push(message),
    })
    const big = decide(request('101')) as HttpOutcome
    assert.equal(big.proceed, true)
    assert.deepEqual(big.decision?.policies.map((p) => p.policy), ['requests'], 'the shadow rule is left out; the other still charges')
    assert.equal((decide(request('500')) as HttpOutcome).proceed, true)
    assert.equal((decide(request('1')) as HttpOutcome).status, 429, 'two requests were charged to "requests"')
    assert.deepEqual(warnings, ['sluice: shadow rule "bytes-watch" met a request costing 101 units, more than one of its policies admits at once; enforcing, it would answer 413. It is left out of such requests\' decisions'])
    const enforced = createRateLimitPipeline({ rules: [{ cost: (r) => Number(r.header('x-units')), policies: { algorithm: 'fixed-window', name: 'bytes', limit: 100, windowMs: MINUTE } }], clock: fixedClock })
    assert.equal((enforced(request('101')) as HttpOutcome).status, 413)
    assert.equal((enforced(request('100')) as HttpOutcome).proceed, true, 'exactly the limit fits')
    assert.throws(() => enforced(request('1.5')), /rule "rule-0" cost\(\) must return a positive integer at once \(not a promise\) \(got 1\.5\)/)
    assert.throws(() => enforced(request('')), /got 0/)
    const later = createRateLimitPipeline({ rules: [{ cost: (async () => 2) as never, policies: { algorithm: 'fixed-window', name: 'bytes', limit: 100, windowMs: MINUTE } }], clock: fixedClock })
    assert.throws(() => later(request('1')), /cost\(\) must return a positive integer at once \(not a promise\) \(got a promise\)/)
  })
})

describe('HTTP policies read from the request', () => {
  const request = (customer: string) => ({ method: 'GET', path: '/', host: 'h', header: (name: string) => (name === 'x-customer' ? customer : undefined), remoteAddress: '203.0.113.9' })
  const fixed = (limit: number, name?: string) => ({ algorithm: 'fixed-window' as const, limit, windowMs: MINUTE, ...(name !== undefined && { name }) })

  it('a bad answer fails the request naming the rule and what is wrong; the good answers are checked once, as a fixed rule\'s policies are at start-up', async () => {
    let calls = 0
    const answers: Record<string, unknown> = {
      unnamed: fixed(5),
      broken: fixed(-5, 'contract'),
      taken: fixed(5, 'everything'),
      twice: [fixed(5, 'contract'), fixed(6, 'contract')],
      none: undefined,
      text: 'contract',
      cycle: (() => { const a: Record<string, unknown> = fixed(5, 'contract'); a.self = a; return a })(),
      bucket: { algorithm: 'token-bucket', capacity: 5, refillTokens: 1, refillIntervalMs: 1000, name: 'contract' },
    }
    const decide = createRateLimitPipeline({
      rules: [
        { name: 'contract', key: (r) => r.header('x-customer'), policies: (r) => { calls++; const customer = r.header('x-customer') as string; return (customer in answers ? answers[customer] : fixed(2, 'contract')) as never } },
        { name: 'all', policies: fixed(100, 'everything') },
      ],
      clock: fixedClock,
    })
    assert.throws(() => decide(request('unnamed')), /^ArgumentError: rule "contract" policies\(\) must give each policy a name: the name keys its state, which should carry over when the numbers change \(got an object\)/)
    assert.throws(() => decide(request('broken')), /^PolicyError: rule "contract" policies\(\): policy "contract": limit must be a positive integer \(got -5\)/)
    assert.throws(() => decide(request('taken')), /^ArgumentError: rule "contract" policies\(\) gives a policy the name of one of rule "all"; give each policy its own name \(it keys the state and the headers\) \(got "everything"\)$/)
    assert.throws(() => decide(request('twice')), /^PolicyError: rule "contract" policies\(\): policy "contract": name is used by two policies of one limiter/)
    assert.throws(() => decide(request('none')), /^\w+Error: rule "contract" policies\(\): policy must be an object with an "algorithm" field \(got undefined\)$/)
    assert.throws(() => decide(request('text')), /^\w+Error: rule "contract" policies\(\): policy must be an object with an "algorithm" field \(got "contract"\)$/)
    assert.throws(() => decide(request('cycle')), /^PolicyError: rule "contract" policies\(\): policy "contract": self is not a field of a fixed-window policy/)
    // A good answer, under its name whatever the numbers: a token bucket for one customer, a window for others.
    assert.equal((decide(request('bucket')) as HttpOutcome).decision?.policies[0]?.remaining, 4)
    assert.equal((decide(request('a')) as HttpOutcome).decision?.policies[0]?.remaining, 1)
    assert.equal((decide(request('a')) as HttpOutcome).decision?.policies[0]?.remaining, 0)
    assert.equal((decide(request('a')) as HttpOutcome).status, 429)
    assert.equal(calls, 11, 'asked once per request')
  })

  it('count and action rules check what a policies function gives: a rule counting requests in flight needs sliding logs, a queue policies that reserve', () => {
    const inFlight = createRateLimitPipeline({ rules: [{ name: 'jobs', count: 'in-flight', policies: () => fixed(2, 'jobs') }], clock: fixedClock })
    assert.throws(() => inFlight(request('a')), /^ArgumentError: rule "jobs" count needs sliding-log policies .*"jobs" is fixed-window/)
    const queued = createRateLimitPipeline({ rules: [{ name: 'queued', action: 'queue', policies: () => ({ algorithm: 'sliding-log', limit: 2, windowMs: MINUTE, name: 'log' }) }], clock: fixedClock })
    assert.throws(() => queued(request('a')), /^ArgumentError: rule "queued": maxWaitMs cannot be used with policy "log": sliding-log cannot reserve/)
    const running = createRateLimitPipeline({ rules: [{ name: 'jobs', count: 'in-flight', policies: () => ({ algorithm: 'sliding-log', limit: 1, windowMs: MINUTE, name: 'jobs' }) }], clock: fixedClock })
    const first = running(request('a')) as HttpOutcome
    assert.equal(first.headers.find(([name]) => name === 'RateLimit-Policy')?.[1], '"jobs";q=1;qu="concurrent-requests"')
  })
})

describe('HTTP queueing and aborts', () => {
  // The second request waits 300 ms for its token; the client hangs up after 100.
  const queueRule = { action: 'queue' as const, maxWaitMs: 5000, policies: { algorithm: 'token-bucket' as const, capacity: 1, refillTokens: 1, refillIntervalMs: 300 } }

  /** Serves `listener`, sends one request and one that hangs up while queued, and resolves how many the handler saw. */
  async function handledWhenOneHangsUp(listener: (req: IncomingMessage, res: ServerResponse) => unknown, handled: () => number): Promise<number> {
    const { createServer } = await import('node:http')
    const server = createServer(listener)
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const url = `http://127.0.0.1:${(server.address() as { port: number }).port}/`
    try {
      assert.equal((await fetch(url)).status, 200)
      const controller = new AbortController()
      const queued = fetch(url, { signal: controller.signal }).catch((error: Error) => error.name)
      await new Promise((resolve) => setTimeout(resolve, 100))
      controller.abort()
      assert.equal(await queued, 'AbortError')
      await new Promise((resolve) => setTimeout(resolve, 400)) // past the end of its wait
      return handled()
    } finally {
      server.closeAllConnections()
      server.close()
    }
  }

  it('a client that hangs up while queued never reaches the handler', async () => {
    const { withRateLimit } = await import('../../src/http/adapters/node.ts')
    let handled = 0
    const listener = withRateLimit((_req, res) => { handled++; res.end('ok') }, { rules: [queueRule] })
    assert.equal(await handledWhenOneHangsUp(listener, () => handled), 1, 'the aborted request was not handled')
  })

  it('koa: a client that hangs up while queued never reaches the handlers, and Koa reports no error', async () => {
    const { default: Koa } = await import('koa')
    const { rateLimit } = await import('../../src/http/adapters/koa.ts')
    let handled = 0
    const errors: Error[] = []
    const app = new Koa()
    app.on('error', (error: Error) => errors.push(error))
    app.use(rateLimit({ rules: [queueRule] }))
    app.use((ctx) => { handled++; ctx.body = 'ok' })
    assert.equal(await handledWhenOneHangsUp(app.callback(), () => handled), 1, 'the aborted request was not handled')
    assert.deepEqual(errors, [])
  })

  it('koa: the middleware, called as any async middleware, rejects (never throws) when a callback throws at once', async () => {
    const { rateLimit } = await import('../../src/http/adapters/koa.ts')
    const middleware = rateLimit({ rules: [{ policies: { algorithm: 'fixed-window', limit: 1, windowMs: 60_000, name: 'p' } }], key: () => { throw new Error('no session store') } })
    const req = Object.assign(new IncomingMessage(new Socket()), { method: 'GET', url: '/', headers: { host: 'api.test' } })
    const ctx = { req, res: new ServerResponse(req), originalUrl: '/', status: 404, body: undefined, state: {}, set: () => {} }
    let returned: Promise<void> | undefined
    assert.doesNotThrow(() => { returned = middleware(ctx, async () => {}) })
    await assert.rejects(returned as Promise<void>, /no session store/)
  })
})

describe('HTTP key resolvers', () => {
  it('null is no identity, as undefined is (in firstOf too); another kind of value fails the request naming the rule', async () => {
    const request = { method: 'GET', path: '/', host: 'api.test', header: () => undefined, remoteAddress: '198.51.100.7' }
    const rules = [{ name: 'per-user', policies: { algorithm: 'fixed-window' as const, limit: 1, windowMs: 60_000, name: 'p' } }]
    const forbidding = createRateLimitHandler({ rules, key: () => null, emptyKey: 'forbid' })
    assert.equal((await forbidding(request)).status, 403)
    const keys: string[] = []
    const chained = createRateLimitHandler({ rules, key: firstOf(() => null, async () => 'user:42'), onDecision: ({ key }) => keys.push(key) })
    assert.deepEqual([(await chained(request)).status, (await chained(request)).status], [200, 429])
    assert.deepEqual(keys, ['user:42', 'user:42'])
    const numbered = createRateLimitHandler({ rules, key: (() => 42) as never })
    await assert.rejects(async () => numbered(request), /^ArgumentError: rule "per-user" key\(\) must return a string, or undefined \(or null\) for a request with no identity \(got 42\)$/)
  })
})

describe('HTTP observers', () => {
  it('an onDecision or onLimited that throws is reported through onWarning and fails no request', async () => {
    const warnings: string[] = []
    const handle = createRateLimitHandler({
      rules: [{ policies: { algorithm: 'fixed-window', limit: 1, windowMs: 60_000, name: 'p' } }],
      onDecision: () => { throw new Error('metrics backend down') },
      onLimited: () => { throw new Error('log sink full') },
      onWarning: (message) => warnings.push(message),
    })
    const request = { method: 'GET', path: '/', host: 'api.test', header: () => undefined, remoteAddress: '198.51.100.7' }
    assert.deepEqual([(await handle(request)).status, (await handle(request)).status], [200, 429])
    assert.deepEqual(warnings, [
      'onDecision threw, and the request went on: metrics backend down',
      'onDecision threw, and the request went on: metrics backend down',
      'onLimited threw, and the request went on: log sink full',
    ])
  })

  it('a limitedResponse body of bytes (a page read from a file) is refused by name, and the default 429 is sent, not the bytes\' JSON', async () => {
    const warnings: string[] = []
    const handle = createRateLimitHandler({
      rules: [{ policies: { algorithm: 'fixed-window', limit: 1, windowMs: 60_000, name: 'p' } }],
      limitedResponse: () => ({ body: Buffer.from('<h1>slow down</h1>'), contentType: 'text/html' }),
      onWarning: (message) => warnings.push(message),
    })
    const request = { method: 'GET', path: '/', host: 'api.test', header: () => undefined, remoteAddress: '198.51.100.7' }
    await handle(request)
    const refused = await handle(request)
    assert.deepEqual([refused.status, JSON.parse(refused.body ?? '{}').title], [429, 'Too Many Requests'])
    assert.deepEqual(warnings, ["limitedResponse failed, and the default 429 was sent: limitedResponse() body must be a string or a JSON value, not bytes (got an object); give the text, as body: page.toString('utf8')"])
  })

  it('async hooks that reject, and an async limitedResponse, are reported and end no process: the request goes on, the default 429 is sent', async () => {
    const warnings: string[] = []
    const handle = createRateLimitHandler({
      rules: [{ policies: { algorithm: 'fixed-window', limit: 1, windowMs: 60_000, name: 'p' } }],
      onDecision: async () => { throw new Error('metrics backend down') },
      onLimited: async () => { throw new Error('log sink full') },
      limitedResponse: (async () => { throw new Error('template missing') }) as never,
      observer: { storeCall: async () => { throw new Error('never called: the memory store is in-process') } },
      onWarning: (message) => warnings.push(message),
    })
    const request = { method: 'GET', path: '/', host: 'api.test', header: () => undefined, remoteAddress: '198.51.100.7' }
    const outcomes = [await handle(request), await handle(request), await handle(request)]
    assert.deepEqual(outcomes.map((outcome) => outcome.status), [200, 429, 429])
    for (const refused of outcomes.slice(1)) assert.equal(JSON.parse(refused.body ?? '{}').title, 'Too Many Requests')
    await new Promise((resolve) => setImmediate(resolve))
    assert.deepEqual(warnings.sort(), [
      'limitedResponse failed, and the default 429 was sent: limitedResponse() must return its response at once, not a promise (an async function): the refusal is sent in the same turn (got a promise)',
      'limitedResponse failed, and the default 429 was sent: limitedResponse() must return its response at once, not a promise (an async function): the refusal is sent in the same turn (got a promise)',
      'limitedResponse rejected: template missing',
      'limitedResponse rejected: template missing',
      'onDecision rejected, and the request went on: metrics backend down',
      'onDecision rejected, and the request went on: metrics backend down',
      'onDecision rejected, and the request went on: metrics backend down',
      'onLimited rejected, and the request went on: log sink full',
      'onLimited rejected, and the request went on: log sink full',
    ])
  })

  it('an onWarning that throws or rejects loses no warning: it and the failure go out as a process warning', async () => {
    const heard = await processWarningsDuring('SLUICE_HTTP', async () => {
      for (const onWarning of [() => { throw new Error('logger closed') }, async () => { throw new Error('logger closed') }]) {
        const handle = createRateLimitHandler({
          rules: [{ policies: { algorithm: 'fixed-window', limit: 1, windowMs: 60_000, name: 'p' } }],
          onDecision: () => { throw new Error('metrics backend down') },
          onWarning,
        })
        assert.equal((await handle({ method: 'GET', path: '/', host: 'api.test', header: () => undefined, remoteAddress: '198.51.100.7' })).status, 200)
      }
    })
    assert.deepEqual(heard, [
      'onDecision threw, and the request went on: metrics backend down (onWarning threw: logger closed)',
      'onDecision threw, and the request went on: metrics backend down (onWarning rejected: logger closed)',
    ])
  })
})

describe('HTTP with a failing store', () => {
  it('fails closed with 503 and Retry-After (the limit was not checked, nobody sent too much); open allows without RateLimit fields; fallback keeps limiting locally', async () => {
    const down: Store = { consume: () => Promise.reject(new Error('connection refused')), reset: () => Promise.resolve() }
    const rules = [{ policies: { algorithm: 'fixed-window' as const, limit: 1, windowMs: MINUTE, name: 'p' } }]
    await withServer(nodeServer, { rules, store: down, onStoreFailure: 'closed', onWarning: () => {} }, async (url) => {
      const response = await get(`${url}/`)
      assert.equal(response.status, 503)
      assert.equal(response.headers.get('retry-after'), '1')
      assert.equal(response.headers.get('ratelimit'), null, 'no made-up quota numbers')
      const body = await response.json() as Record<string, unknown>
      assert.equal(body.status, 503)
      assert.match(String(body.detail), /could not be checked \(store store-error\) and fails closed/)
    })
    await withServer(nodeServer, { rules, store: down, onStoreFailure: 'open', onWarning: () => {} }, async (url) => {
      const allowed = [await get(`${url}/`), await get(`${url}/`)]
      assert.deepEqual(allowed.map((r) => r.status), [200, 200])
      assert.deepEqual(allowed.map((r) => r.headers.get('ratelimit')), [null, null], 'failing open, nothing was counted: no numbers to announce')
    })
    await withServer(nodeServer, { rules, store: down, onStoreFailure: 'fallback', expectedInstances: 1, onWarning: () => {} }, async (url) => {
      assert.deepEqual([(await get(`${url}/`)).status, (await get(`${url}/`)).status], [200, 429], 'the local share refuses as a limit does')
    })
  })

  it('the fallback takes back what it charged: a concurrency limit still counts requests in progress, a login limit only failures, while the store is out', async () => {
    const down: Store = { consume: () => Promise.reject(new Error('connection refused')), reset: () => Promise.resolve() }
    const rules = [
      { name: 'exports', match: { path: '/export' }, count: 'in-flight' as const, policies: { algorithm: 'sliding-log' as const, limit: 1, windowMs: MINUTE, name: 'exports' } },
      { name: 'login', match: { path: '/login' }, count: 'failed' as const, policies: { algorithm: 'token-bucket' as const, capacity: 2, refillTokens: 1, refillIntervalMs: MINUTE, name: 'failed-logins' } },
    ]
    await withServer(nodeServer, { rules, store: down, onStoreFailure: 'fallback', clock: fixedClock, onWarning: () => {} }, async (url) => {
      const statuses: number[] = []
      for (let i = 0; i < 4; i++) statuses.push((await get(`${url}/export`)).status)
      assert.deepEqual(statuses, [200, 200, 200, 200], 'one at a time: each gave its unit back to the fallback')
      const together = await Promise.all([get(`${url}/export`, { 'x-delay-ms': '200' }), get(`${url}/export`, { 'x-delay-ms': '200' })])
      assert.deepEqual(together.map((res) => res.status).sort(), [200, 429])
      const logins: number[] = []
      for (const status of [200, 200, 200, 401, 401, 200]) logins.push((await get(`${url}/login`, { 'x-status': String(status) })).status)
      assert.deepEqual(logins, [200, 200, 200, 401, 401, 429])
    })
  })

  it('falls back to one local count per policy, whichever rules a request meets', async () => {
    const down: Store = { consume: () => Promise.reject(new Error('connection refused')), reset: () => Promise.resolve() }
    const rules = [
      { name: 'api', match: { path: '/api/**' }, policies: { algorithm: 'fixed-window' as const, limit: 3, windowMs: MINUTE, name: 'api' } },
      { name: 'login', match: { path: '/api/login' }, policies: { algorithm: 'fixed-window' as const, limit: 10, windowMs: MINUTE, name: 'login' } },
    ]
    await withServer(nodeServer, { rules, store: down, onStoreFailure: 'fallback', clock: fixedClock, onWarning: () => {} }, async (url) => {
      const statuses: number[] = []
      for (const path of ['/api/x', '/api/x', '/api/login', '/api/login', '/api/x']) statuses.push((await get(`${url}${path}`)).status)
      assert.deepEqual(statuses, [200, 200, 200, 429, 429])
    })
  })
})

describe('HTTP with a store that answers but refuses every decision', () => {
  it('warns once why (the store\'s own error) while the failure lasts, and hands the error to the observer too', async () => {
    const readOnly: Store = { consume: () => Promise.reject(new Error("READONLY You can't write against a read only replica.")), reset: () => Promise.resolve() }
    const warnings: string[] = []
    const heard: Array<string | undefined> = []
    const handle = createRateLimitHandler({
      rules: [{ policies: { algorithm: 'fixed-window', limit: 5, windowMs: MINUTE, name: 'p' } }],
      store: readOnly,
      onStoreFailure: 'closed',
      circuit: { failures: 1000 },
      observer: { storeCall: (_ms, _outcome, error) => { heard.push(error?.message) } },
      onWarning: (message) => warnings.push(message),
    })
    const request = { method: 'GET', path: '/', host: 'api.test', header: () => undefined, remoteAddress: '198.51.100.7' }
    for (let i = 0; i < 3; i++) assert.equal((await handle(request)).status, 503)
    assert.deepEqual(warnings, ["sluice: a store call failed (store-error): READONLY You can't write against a read only replica.; the failure policy (onStoreFailure) decides"])
    assert.deepEqual(heard, Array(3).fill("READONLY You can't write against a read only replica."))
  })

  it('refuses an observer whose callbacks are not functions, at start-up', () => {
    assert.throws(() => createRateLimitHandler({ rules: [{ policies: { algorithm: 'fixed-window', limit: 5, windowMs: MINUTE } }], observer: { storeCall: 5 as never } }), /observer\.storeCall must be a function/)
  })
})

describe('node adapter errors', () => {
  it('a request whose options callback throws gets a 500, and the error is reported rather than swallowed', async () => {
    const { createServer } = await import('node:http')
    const { withRateLimit } = await import('../../src/http/adapters/node.ts')
    const warnings: string[] = []
    const server = createServer(withRateLimit((_req, res) => res.end('ok'), {
      // A cost function with a bug: 0 is not a cost.
      rules: [{ policies: { algorithm: 'fixed-window', limit: 5, windowMs: 60_000 }, cost: () => 0 }],
      onWarning: (message) => warnings.push(message),
    }))
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    try {
      assert.equal((await fetch(`http://127.0.0.1:${(server.address() as { port: number }).port}/`)).status, 500)
      assert.deepEqual(warnings, ['a request could not be decided and was answered 500: rule "rule-0" cost() must return a positive integer at once (not a promise) (got 0)'])
    } finally {
      server.closeAllConnections()
      server.close()
    }
  })
})

describe('node adapter paths', () => {
  it('a listener that reads its path with new URL(req.url, base) cannot be reached round a limit by a target starting with //', async () => {
    const { createServer } = await import('node:http')
    const { withRateLimit } = await import('../../src/http/adapters/node.ts')
    // What node's documentation shows: new URL() reads //evil.test/login as host evil.test, path /login.
    const server = createServer(withRateLimit((req, res) => res.end(new URL(req.url ?? '/', 'http://localhost').pathname), {
      rules: [{ name: 'login', match: { path: '/login' }, policies: { algorithm: 'fixed-window', limit: 1, windowMs: MINUTE, name: 'login' } }],
    }))
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const raw = (path: string) => new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port: (server.address() as AddressInfo).port, path }, (res) => {
        let body = ''
        res.setEncoding('utf8').on('data', (chunk: string) => { body += chunk }).on('end', () => resolve({ status: res.statusCode ?? 0, body }))
      })
      req.on('error', reject)
      req.end()
    })
    try {
      assert.deepEqual(await raw('/login'), { status: 200, body: '/login' })
      for (const path of ['//evil.test/login', '/\\evil.test/login', '///evil.test/./login', '//evil.test/login?x']) assert.equal((await raw(path)).status, 429, path)
      // Limits widen, nothing else: the paths those spell are not limited.
      assert.deepEqual(await raw('//evil.test/other'), { status: 200, body: '/other' })
      assert.deepEqual(await raw('/x/login'), { status: 200, body: '/x/login' })
    } finally {
      server.closeAllConnections()
      server.close()
    }
  })
})

describe('Express mounting', () => {
  it('rules and skip paths see the whole path when the middleware is mounted under a prefix or in a router', async () => {
    const { default: express } = await import('express')
    const { createServer } = await import('node:http')
    const { rateLimit } = await import('../../src/http/adapters/express.ts')
    const once = (name: string) => ({ algorithm: 'fixed-window' as const, limit: 1, windowMs: 60_000, name })
    const app = express()
    const router = express.Router()
    router.use(rateLimit({ rules: [{ name: 'login', match: { path: '/api/login' }, policies: once('login') }] }))
    router.post('/login', (_req, res) => { res.send('ok') })
    app.use('/api', router)
    app.use('/v2', rateLimit({ rules: [{ name: 'v2', match: { path: '/v2/**' }, policies: once('v2') }], skip: ['/v2/health'] }))
    app.get('/v2/*splat', (_req, res) => { res.send('ok') })
    const server = createServer(app)
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`
    const status = async (method: string, path: string) => (await fetch(`${url}${path}`, { method })).status
    try {
      assert.deepEqual([await status('POST', '/api/login'), await status('POST', '/api/login')], [200, 429])
      assert.deepEqual([await status('GET', '/v2/items'), await status('GET', '/v2/items')], [200, 429])
      assert.deepEqual([await status('GET', '/v2/health'), await status('GET', '/v2/health')], [200, 200])
    } finally {
      server.closeAllConnections()
      server.close()
    }
  })
})

describe('Koa mounting', () => {
  it('rules see the whole path under koa-mount, and meet @koa/router routes without regard to case, as the router routes them', async () => {
    const { default: Koa } = await import('koa')
    const { default: mount } = await import('koa-mount')
    const { default: Router } = await import('@koa/router')
    const { createServer } = await import('node:http')
    const { rateLimit } = await import('../../src/http/adapters/koa.ts')
    const once = (name: string) => ({ algorithm: 'fixed-window' as const, limit: 1, windowMs: 60_000, name })
    const api = new Koa()
    api.use(rateLimit({ rules: [{ name: 'login', match: { path: '/api/login', method: 'POST' }, policies: once('login') }] }))
    const router = new Router({ prefix: '/v2' })
    router.get('/items', (ctx) => { ctx.body = 'ok' })
    router.get('/health', (ctx) => { ctx.body = 'ok' })
    api.use((ctx, next) => (ctx.path === '/login' && ctx.method === 'POST' ? void (ctx.body = 'ok') : next()))
    const app = new Koa()
    app.use(mount('/api', api))
    // On the app, not router.use(): @koa/router routes /V2/Items to /v2/items but runs its router-level middleware
    // for the prefix as written only, so a limit there would be walked round by a change of case.
    app.use(rateLimit({ rules: [{ name: 'v2', match: { path: '/v2/**' }, policies: once('v2') }], skip: ['/v2/health'] }))
    app.use(router.routes())
    const server = createServer(app.callback())
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`
    const status = async (method: string, path: string) => (await fetch(`${url}${path}`, { method })).status
    try {
      // koa-mount takes /api as written; below it the rule meets /api/LOGIN as /api/login.
      assert.deepEqual([await status('POST', '/api/login'), await status('POST', '/api/login'), await status('POST', '/api/LOGIN')], [200, 429, 429])
      assert.deepEqual([await status('GET', '/v2/items'), await status('GET', '/V2/Items')], [200, 429])
      assert.deepEqual([await status('GET', '/v2/health'), await status('GET', '/v2/health')], [200, 200])
    } finally {
      server.closeAllConnections()
      server.close()
    }
  })
})

describe('Fastify router options', () => {
  // Raw requests: fetch() and URL would resolve the dots themselves.
  const raw = (url: string, path: string) => new Promise<number>((resolve, reject) => {
    const { hostname, port } = new URL(url)
    const req = httpRequest({ host: hostname, port, path }, (res) => { res.resume(); resolve(res.statusCode ?? 0) })
    req.on('error', reject)
    req.end()
  })
  const withFastify = async (fastifyOptions: object, sluiceOptions: Partial<RateLimitOptions>, body: (url: string) => Promise<void>) => {
    const { default: Fastify } = await import('fastify')
    const { sluiceFastify } = await import('../../src/http/adapters/fastify.ts')
    const app = Fastify({ logger: false, ...fastifyOptions })
    await app.register(sluiceFastify, { rules: [{ name: 'login', match: { path: '/login' }, policies: { algorithm: 'fixed-window', limit: 1, windowMs: MINUTE, name: 'login' } }], ...sluiceOptions })
    app.get('/login', async () => 'login')
    app.get('/other', async () => 'other')
    await app.listen({ port: 0, host: '127.0.0.1' })
    try {
      await body(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}`)
    } finally {
      await app.close()
    }
  }

  it('paths are matched as the instance routes them: without case under caseSensitive: false, up to a ; under useSemicolonDelimiter', async () => {
    await withFastify({ routerOptions: { caseSensitive: false, useSemicolonDelimiter: true } }, {}, async (url) => {
      assert.equal(await raw(url, '/login'), 200)
      // Fastify serves each of these from the /login handler.
      for (const path of ['/LOGIN', '/Login;x', '/login;/../other', '/login;x/../../other']) assert.equal(await raw(url, path), 429, path)
      assert.equal(await raw(url, '/other'), 200)
    })
    // Fastify 4's way of setting them, still read by Fastify 5.
    await withFastify({ caseSensitive: false }, {}, async (url) => {
      assert.deepEqual([await raw(url, '/login'), await raw(url, '/LOGIN')], [200, 429])
    })
  })

  it('by default, and where the sluice options say so, case counts and ; is part of a segment', async () => {
    await withFastify({}, {}, async (url) => {
      // /LOGIN is no route here; /login;/../other neither (Fastify resolves no dots): both unlimited, neither served.
      assert.deepEqual([await raw(url, '/login'), await raw(url, '/LOGIN'), await raw(url, '/login;/../other'), await raw(url, '/other')], [200, 404, 404, 200])
    })
    await withFastify({ routerOptions: { caseSensitive: false } }, { caseSensitive: true }, async (url) => {
      assert.deepEqual([await raw(url, '/login'), await raw(url, '/LOGIN')], [200, 200])
    })
  })
})

describe('fetch adapter responses', () => {
  it('adds the fields to any response the handler returns, and passes on those that cannot carry them', async () => {
    const { withRateLimit } = await import('../../src/http/adapters/fetch.ts')
    const options = { rules: [{ policies: { algorithm: 'fixed-window' as const, limit: 10, windowMs: 60_000, name: 'p' } }], onWarning: () => {} }
    const through = (make: () => Response) => withRateLimit(make, options, () => '203.0.113.1')(new Request('http://api.test/'))
    const own = new Response('mine')
    assert.equal(await through(() => own), own, 'a mutable response is the same object, with the fields added')
    assert.match(own.headers.get('RateLimit') ?? '', /^"p";r=\d+;t=\d+$/)
    const redirect = await through(() => Response.redirect('http://api.test/elsewhere', 302))
    assert.equal(redirect.status, 302)
    assert.equal(redirect.headers.get('location'), 'http://api.test/elsewhere')
    assert.match(redirect.headers.get('RateLimit') ?? '', /^"p";r=/, 'immutable headers: copied into a new response')
    const failed = await through(() => Response.error())
    assert.equal(failed.type, 'error', 'a network error stays one (a Response of status 0 cannot be rebuilt)')
  })

  it('without the client address every request shares one key, and a warning says so once', async () => {
    const { withRateLimit } = await import('../../src/http/adapters/fetch.ts')
    const warnings: string[] = []
    const options = { rules: [{ policies: { algorithm: 'fixed-window' as const, limit: 1, windowMs: 60_000, name: 'p' } }], onWarning: (message: string) => warnings.push(message) }
    const handler = withRateLimit(() => new Response('ok'), options)
    assert.equal((await handler(new Request('http://api.test/'))).status, 200)
    assert.equal((await handler(new Request('http://api.test/'))).status, 429)
    assert.equal(warnings.length, 1)
    assert.match(warnings[0] ?? '', /without a client address, so it shares the 'anonymous' key .* withRateLimit's third argument/)
  })
})

describe('HTTP/2 (cleartext, node:http2)', () => {
  /** Requests on one HTTP/2 session, one after another: each answer's status, Retry-After and RateLimit field. */
  async function h2Requests(port: number, authorities: Array<string | http2.OutgoingHttpHeaders>): Promise<string[]> {
    const session = http2.connect(`http://127.0.0.1:${port}`)
    try {
      const answers: string[] = []
      for (const authority of authorities) {
        answers.push(await new Promise<string>((resolve, reject) => {
          const stream = session.request({ ':path': '/x', ...(typeof authority === 'string' ? { ':authority': authority } : authority) })
          stream.on('response', (headers) => resolve(`${headers[':status']} ${headers['retry-after'] ?? '-'} ${headers['ratelimit'] ?? '-'}`))
          stream.on('error', reject)
          stream.resume()
        }))
      }
      return answers
    } finally {
      session.close()
    }
  }
  const options = (): RateLimitOptions => ({
    rules: [{ name: 'api-host', match: { host: 'api.example.com' }, policies: { algorithm: 'fixed-window', limit: 1, windowMs: MINUTE, name: 'api-host' } }],
    clock: fixedClock,
  })
  // HTTP/2 names the host in :authority, and a client need not send Host: a rule on a host held for HTTP/1.1 only.
  const expected = ['200 - "api-host";r=0;t=30', '429 30 "api-host";r=0;t=30', '200 - -']

  it('node: withRateLimit on http2.createServer limits by :authority as by Host', async () => {
    const { withRateLimit } = await import('../../src/http/adapters/node.ts')
    const server = http2.createServer(withRateLimit((_req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => { res.end('ok') }, options()))
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    try {
      assert.deepEqual(await h2Requests((server.address() as AddressInfo).port, ['api.example.com', 'API.example.com:443', 'www.example.com']), expected)
    } finally {
      await new Promise((resolve) => server.close(resolve))
    }
  })

  it('node: a Host field naming another host beside :authority does not walk around the limit on the :authority a listener reads', async () => {
    // node lets both through, though RFC 9113 8.3.1 calls that malformed; req.authority (what @hono/node-server reads) is the :authority.
    const { withRateLimit } = await import('../../src/http/adapters/node.ts')
    const server = http2.createServer(withRateLimit((req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => { res.end(req.authority) }, options()))
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    try {
      const answers = await h2Requests((server.address() as AddressInfo).port, ['api.example.com', { ':authority': 'api.example.com', host: 'www.example.com' }, 'www.example.com'])
      assert.deepEqual(answers.map((answer) => answer.split(' ')[0]), ['200', '429', '200'])
    } finally {
      await new Promise((resolve) => server.close(resolve))
    }
  })

  it('fastify with http2: true limits by :authority', async () => {
    const Fastify = (await import('fastify')).default
    const { sluiceFastify } = await import('../../src/http/adapters/fastify.ts')
    const app = Fastify({ http2: true })
    await app.register(sluiceFastify, options())
    app.get('/x', async () => 'ok')
    await app.listen({ port: 0, host: '127.0.0.1' })
    try {
      assert.deepEqual(await h2Requests((app.server.address() as AddressInfo).port, ['api.example.com', 'API.example.com:443', 'www.example.com']), expected)
    } finally {
      await app.close()
    }
  })

  it('koa on http2.createServer(app.callback()) limits by :authority', async () => {
    const { default: Koa } = await import('koa')
    const { rateLimit } = await import('../../src/http/adapters/koa.ts')
    const app = new Koa()
    app.use(rateLimit(options()))
    app.use((ctx) => { ctx.body = 'ok' })
    const server = http2.createServer(app.callback() as unknown as (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void)
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    try {
      assert.deepEqual(await h2Requests((server.address() as AddressInfo).port, ['api.example.com', 'API.example.com:443', 'www.example.com']), expected)
    } finally {
      await new Promise((resolve) => server.close(resolve))
    }
  })
})

describe('HTTP adapters (memory store)', () => {
  suite('node', nodeServer, () => new MemoryStore())
  suite('fetch', fetchServer, () => new MemoryStore())
  suite('express', expressServer, () => new MemoryStore())
  suite('fastify', fastifyServer, () => new MemoryStore())
  suite('koa', koaServer, () => new MemoryStore())
})

describe('HTTP adapters on the frameworks\' previous majors (Express 4, Fastify 4, Koa 2; memory store)', () => {
  suite('express4', express4Server, () => new MemoryStore())
  suite('fastify4', fastify4Server, () => new MemoryStore())
  suite('koa2', koa2Server, () => new MemoryStore())
})

describe('HTTP adapters without a store option (the default memory store)', () => {
  for (const [adapter, start] of [['node', nodeServer], ['fetch', fetchServer], ['express', expressServer], ['fastify', fastifyServer], ['koa', koaServer]] as const) {
    it(`${adapter}: a request one rule matches and a request two rules match spend the same limit`, async () => {
      const options: RateLimitOptions = {
        rules: [
          { name: 'api', match: { path: '/api/**' }, policies: { algorithm: 'fixed-window', limit: 3, windowMs: MINUTE, name: 'api' } },
          { name: 'login', match: { path: '/api/login' }, policies: { algorithm: 'fixed-window', limit: 10, windowMs: MINUTE, name: 'login' } },
        ],
        clock: fixedClock,
      }
      await withServer(start, options, async (url) => {
        const statuses: number[] = []
        for (const path of ['/api/x', '/api/x', '/api/login', '/api/login', '/api/x']) statuses.push((await get(`${url}${path}`)).status)
        // "api" allows 3 in all, whichever rules a request meets besides it.
        assert.deepEqual(statuses, [200, 200, 200, 429, 429])
      })
    })
  }
})

describe('HTTP with a full memory store', () => {
  it('node: a flood of new client addresses through a trusted proxy forgets its own kind, not a tenant\'s day quota or a login block', async () => {
    const options: RateLimitOptions = {
      rules: [
        { name: 'api', match: { path: '/api/**' }, policies: { algorithm: 'fixed-window', limit: 100, windowMs: MINUTE, name: 'api' } },
        { name: 'reports', match: { path: '/reports/**' }, key: (request) => request.header('x-tenant'), policies: { algorithm: 'fixed-window', limit: 5, windowMs: 86_400_000, name: 'day' } },
        { name: 'login', match: { path: '/login' }, key: (request) => request.header('x-user'), count: 'failed', policies: { algorithm: 'sliding-log', limit: 2, windowMs: 900_000, name: 'login', blockMs: 3_600_000 } },
      ],
      store: new MemoryStore({ maxKeys: 200 }),
      clientIp: { trustProxy: ['127.0.0.1', '::1'] },
      clock: fixedClock,
    }
    await withServer(nodeServer, options, async (url) => {
      for (let i = 0; i < 4; i++) assert.equal((await get(`${url}/reports/x`, { 'x-tenant': 'acme' })).status, 200)
      for (let i = 0; i < 2; i++) assert.equal((await get(`${url}/login`, { 'x-user': 'alice', 'x-status': '401' })).status, 401)
      assert.equal((await get(`${url}/login`, { 'x-user': 'alice' })).status, 429, 'alice is blocked')
      // Five times the store's size in new addresses, each an IPv6 /56 of its own.
      for (let i = 0; i < 1000; i++) {
        const response = await get(`${url}/api/x`, { 'x-forwarded-for': `2001:db8:${i.toString(16)}::1` })
        assert.equal(response.status, 200)
      }
      assert.equal((await get(`${url}/login`, { 'x-user': 'alice' })).status, 429, 'the block holds')
      const statuses: number[] = []
      for (let i = 0; i < 3; i++) statuses.push((await get(`${url}/reports/x`, { 'x-tenant': 'acme' })).status)
      assert.deepEqual(statuses, [200, 429, 429], 'acme has one request of its day left, not a fresh quota')
    })
  })
})

describe('HTTP adapters (Redis store)', () => {
  let redis: RedisServer
  before(async () => { redis = await startRedis() })
  after(async () => { await redis.stop() })
  suite('node', nodeServer, () => new RedisStore({ client: redis.client() }))
  suite('fetch', fetchServer, () => new RedisStore({ client: redis.client() }))
  suite('express', expressServer, () => new RedisStore({ client: redis.client() }))
  suite('fastify', fastifyServer, () => new RedisStore({ client: redis.client() }))
  suite('koa', koaServer, () => new RedisStore({ client: redis.client() }))

  it("count: 'in-flight': a request that ends while Redis is cut off gives its unit back once Redis answers again", async () => {
    const partition = await partitionable(redis.port)
    const store = new RedisStore({ url: `redis://127.0.0.1:${partition.port}` })
    const warnings: string[] = []
    const rules = [{ name: 'exports', match: { path: '/export' }, count: 'in-flight' as const, policies: { algorithm: 'sliding-log' as const, name: 'exports', limit: 1, windowMs: 600_000 } }]
    const options = { rules, store, prefix: 'partitioned', onStoreFailure: 'closed' as const, storeTimeoutMs: 150, circuit: { failures: 1, probeIntervalMs: 100 }, onWarning: (message: string) => warnings.push(message) }
    try {
      await withServer(nodeServer, options, async (url) => {
        // The export starts on Redis, and Redis is cut off before it ends.
        const running = get(`${url}/export`, { 'x-delay-ms': '600' })
        await sleep(150)
        assert.equal((await get(`${url}/export`)).status, 429, 'one export at a time')
        partition.cut()
        const ended = await running
        assert.equal(ended.status, 200)
        await partition.heal()
        // Once Redis answers, the owed unit is given back: an export is admitted again (a refusal meanwhile says 1 s).
        const statuses: number[] = []
        const deadline = performance.now() + 5000
        while (statuses.at(-1) !== 200 && performance.now() < deadline) {
          statuses.push((await get(`${url}/export`)).status)
          if (statuses.at(-1) !== 200) await sleep(100)
        }
        assert.equal(statuses.at(-1), 200, `statuses: ${statuses.join(', ')}`)
        assert.ok(statuses.every((status) => status === 503 || status === 429 || status === 200), `statuses: ${statuses.join(', ')}`)
        assert.ok(warnings.some((warning) => /could not be refunded: refund to "ip:127\.0\.0\.1" failed \((store-error: .*|circuit-open)\); given again once the store answers/.test(warning)), warnings.join('\n'))
      })
    } finally {
      await store.close()
      partition.cut()
    }
  })
})
