/**
 * The gateway end to end: the CLI in a child process, a real config file, in
 * front of a real upstream (the bundled demo upstream) on loopback sockets.
 */
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { once } from 'node:events'
import { mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { createServer, request as httpRequest, type Server } from 'node:http'
import { connect, type AddressInfo, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { Readable } from 'node:stream'
import { gunzipSync } from 'node:zlib'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { exportJWK, generateKeyPair, SignJWT } from 'jose'
import parsePrometheus from 'parse-prometheus-text-format'
import { startDemoUpstream } from '../../src/gateway/demo-upstream.ts'
import { startGateway, type RunningGateway } from '../support/gateway.ts'
import { freePort } from '../support/redis.ts'

interface Sample { labels?: Record<string, string>; value?: string; count?: string }
interface Family { name: string; type: string; metrics: Sample[] }

function config(upstream: string, downPort: number, apiLimit = 3): string {
  return `
server:
  listen: 127.0.0.1:0
  timeouts: { shutdownMs: 5000, upstreamMs: 5000 }
admin:
  listen: 127.0.0.1:0
  watch: [apikey:alpha]
identity:
  apiKey: { header: x-api-key }
  order: [apiKey, ip]
headers: { standard: draft-10 }
logging: { level: info }
routes:
  - name: api
    match: { path: /api/** }
    upstream: ${upstream}
    stripPrefix: /api
    limits:
      - name: per-key
        policies:
          - { algorithm: sliding-log, name: api-hour, limit: ${apiLimit}, windowMs: 3600000 }
  - name: login
    match: { path: /login, method: POST }
    upstream: ${upstream}
    # Moved from Spring Cloud Gateway: its clients read its fields, on this route only.
    headers: { springCloudGateway: true }
    limits:
      - name: brute-force
        replenishRate: 1
        burstCapacity: 2
        requestedTokens: 1
  - name: slow
    match: { path: /slow/** }
    upstream: ${upstream}
    timeoutMs: 600
  - name: down
    match: { path: /down/** }
    upstream: http://127.0.0.1:${downPort}
    stripPrefix: /down
  - name: files
    match: { path: [/bytes/**, /digest, /moved, /headers] }
    upstream: ${upstream}
  - name: pool
    match: { path: /pool/** }
    upstream: [${upstream}/hello/a, http://127.0.0.1:${downPort}, ${upstream}/hello/c]
    stripPrefix: /pool
  - name: counted
    match: { path: /counted/** }
    upstream: ${upstream}
    stripPrefix: /counted
    limits:
      - count: failed
        key: [ip]
        policies: { algorithm: token-bucket, name: failures, capacity: 2, refillTokens: 1, refillIntervalMs: 3600000 }
  - name: reports
    match: { path: /reports/** }
    upstream: ${upstream}
    stripPrefix: /reports
    limits:
      - count: in-flight
        key: [ip]
        policies: { algorithm: sliding-log, name: reports-in-progress, limit: 2, windowMs: 600000 }
`
}

function pick(object: Record<string, unknown>, keys: string[]): Record<string, unknown> {
  return Object.fromEntries(keys.map((key) => [key, object[key]]))
}

async function get(url: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: Headers; body: string }> {
  const response = await fetch(url, { headers })
  return { status: response.status, headers: response.headers, body: await response.text() }
}

/** A request with its target as written: fetch() and URL would resolve dots and drop a fragment themselves. */
function rawRequest(base: string, target: string, options: { method?: string; headers?: Record<string, string> } = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const { hostname, port } = new URL(base)
    const req = httpRequest({ host: hostname, port, method: options.method ?? 'GET', path: target, headers: options.headers }, (res) => {
      let body = ''
      res.setEncoding('utf8').on('data', (chunk: string) => { body += chunk }).on('end', () => resolve({ status: res.statusCode ?? 0, body }))
    })
    req.on('error', reject)
    req.end()
  })
}

async function metrics(gateway: RunningGateway): Promise<Map<string, Family>> {
  const text = await (await fetch(`${gateway.adminUrl}/metrics`)).text()
  return new Map((parsePrometheus(text) as Family[]).map((family) => [family.name, family]))
}

function sample(families: Map<string, Family>, name: string, labels: Record<string, string>): number {
  const family = families.get(name)
  const found = family?.metrics.find((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v))
  return found === undefined ? 0 : Number(found.value ?? found.count)
}

describe('gateway (child process, real upstream)', () => {
  let upstream: { server: Server; url: string }
  let gateway: RunningGateway
  let downPort: number

  before(async () => {
    upstream = await startDemoUpstream()
    downPort = await freePort()
    gateway = await startGateway(config(upstream.url, downPort))
  })
  after(async () => {
    await gateway?.stop()
    upstream?.server.close()
  })

  it('warns that an API key identity without a list of keys lets clients make up quotas', async () => {
    const warning = await gateway.waitForLog((l) => typeof l.msg === 'string' && l.msg.startsWith('identity.apiKey has no keys or keysFile'))
    assert.equal(warning.level, 40)
  })

  it('limits per route and per identity, with standard headers and an RFC 9457 body', async () => {
    const alpha = []
    for (let i = 0; i < 4; i++) alpha.push(await get(`${gateway.url}/api/hello`, { 'x-api-key': 'alpha' }))
    assert.deepEqual(alpha.map((r) => r.status), [200, 200, 200, 429])
    // Proxied, with the prefix stripped and X-Forwarded-* added.
    const hello = JSON.parse(alpha[0]?.body ?? '{}') as Record<string, string>
    assert.equal(hello.path, '/hello')
    assert.equal(hello.forwardedFor, '127.0.0.1')
    assert.equal(hello.forwardedProto, 'http')
    assert.equal(hello.forwardedHost, new URL(gateway.url).host)
    assert.equal(hello.forwardedPrefix, '/api')
    assert.equal(alpha[0]?.headers.get('ratelimit-policy'), '"api-hour";q=3;w=3600')
    assert.equal(alpha[0]?.headers.get('ratelimit'), '"api-hour";r=2;t=3600')
    assert.equal(alpha[0]?.headers.get('x-ratelimit-replenish-rate'), null, 'Spring Cloud Gateway fields only on the route that asks for them')
    const refused = alpha[3]
    assert.equal(refused?.headers.get('content-type'), 'application/problem+json')
    // A small body the gateway writes itself goes with its length, not chunked.
    assert.equal(refused?.headers.get('content-length'), String(Buffer.byteLength(refused?.body ?? '')))
    assert.ok(Number(refused?.headers.get('retry-after')) > 3500)
    const problem = JSON.parse(refused?.body ?? '{}') as Record<string, unknown>
    assert.equal(problem.status, 429)
    assert.deepEqual(problem['violated-policies'], ['api-hour'])
    // Another key, and a client with no key (its IP), each have their own quota.
    assert.equal((await get(`${gateway.url}/api/hello`, { 'x-api-key': 'beta' })).status, 200)
    assert.equal((await get(`${gateway.url}/api/hello`)).status, 200)
    // Another route is not limited by this one.
    assert.equal((await get(`${gateway.url}/bytes/10`, { 'x-api-key': 'alpha' })).status, 200)
    // /status reads the watched key without charging it.
    const status = await (await fetch(`${gateway.adminUrl}/status`)).json() as { watched: Record<string, Record<string, { remaining: number }>>; routes: unknown[] }
    assert.equal(status.watched['apikey:alpha']?.['api-hour']?.remaining, 0)
    assert.equal(status.routes.length, 8)
  })

  it('appends its hop to Forwarded as to X-Forwarded-For: the last element is what the gateway saw, not what a client wrote', async () => {
    const seen = async (headers: Record<string, string> = {}) => JSON.parse((await get(`${gateway.url}/headers`, headers)).body) as Record<string, string>
    const hop = `for=127.0.0.1;proto=http;host="${new URL(gateway.url).host}"`
    assert.equal((await seen()).forwarded, hop)
    // Before, a client's Forwarded went on as it came: an upstream reading its last element took the client's word.
    const spoofed = await seen({ forwarded: 'for=7.7.7.7;proto=https', 'x-forwarded-for': '6.6.6.6' })
    assert.equal(spoofed.forwarded, `for=7.7.7.7;proto=https, ${hop}`)
    assert.equal(spoofed['x-forwarded-for'], '6.6.6.6, 127.0.0.1')
    // X-Real-IP is read by upstreams as the client's address outright: the gateway's, whatever the client wrote.
    assert.equal((await seen({ 'x-real-ip': '6.6.6.6' }))['x-real-ip'], '127.0.0.1')
    // A path in place of the one routed and limited, and a port in place of the Host's, are not passed on;
    // from a client (no trusted proxy here) the protocol and host are the gateway's.
    const overrides = await seen({ 'x-original-url': '/admin', 'x-rewrite-url': '/admin', 'x-forwarded-port': '1', 'x-forwarded-proto': 'https', 'x-forwarded-ssl': 'on', 'x-forwarded-host': 'evil.example', 'x-kept': 'yes' })
    assert.deepEqual(pick(overrides, ['x-original-url', 'x-rewrite-url', 'x-forwarded-port', 'x-forwarded-proto', 'x-forwarded-ssl', 'x-forwarded-host', 'x-kept']), { 'x-original-url': undefined, 'x-rewrite-url': undefined, 'x-forwarded-port': undefined, 'x-forwarded-proto': 'http', 'x-forwarded-ssl': undefined, 'x-forwarded-host': new URL(gateway.url).host, 'x-kept': 'yes' })
  })

  it('tells the upstream the prefix it stripped (X-Forwarded-Prefix), and gives a redirect to the upstream\'s own URL back as the client\'s path', async () => {
    const hello = async (path: string, headers: Record<string, string> = {}) => JSON.parse((await rawRequest(gateway.url, path, { headers: { 'x-api-key': 'prefix', ...headers } })).body) as Record<string, string>
    assert.deepEqual(pick(await hello('/API/hello', { 'x-forwarded-prefix': '/made-up' }), ['path', 'forwardedPrefix']), { path: '/hello', forwardedPrefix: '/API' })
    // A route that strips nothing passes on no client's X-Forwarded-Prefix (a trusted proxy's, yes: gateway-stores.test.ts).
    assert.equal(((await get(`${gateway.url}/headers`, { 'x-forwarded-prefix': '/outer' })).body.includes('x-forwarded-prefix')), false)
    const redirect = async (path: string) => {
      const response = await fetch(`${gateway.url}${path}`, { redirect: 'manual', headers: { 'x-api-key': 'redirects' } })
      await response.arrayBuffer()
      return [response.status, response.headers.get('location')]
    }
    // The upstream builds its redirect from the Host it was sent (its own address): the client gets its way there through the gateway.
    assert.deepEqual(await redirect('/api/moved?to=/hello%3Fx=1'), [302, '/api/hello?x=1'])
    assert.deepEqual(await redirect('/moved?to=/bytes/1'), [302, '/bytes/1'])
  })

  it('routes and limits the normalized path: dot segments, encoded letters and fragments cannot slip past a route\'s limits', async () => {
    const raw = async (path: string) => (await rawRequest(gateway.url, path, { headers: { 'x-api-key': 'dots' } })).status
    // A fragment ends the path, as Express, Fastify and URL read it, and is not sent on.
    const fragment = await rawRequest(gateway.url, '/api/hello#/../../bytes/1', { headers: { 'x-api-key': 'dots' } })
    assert.equal(fragment.status, 200)
    assert.equal((JSON.parse(fragment.body) as { path: string }).path, '/hello')
    // Paths match without case by default, and the route's stripPrefix (/api) is cut from /API/hello as well.
    const upper = await rawRequest(gateway.url, '/API/hello', { headers: { 'x-api-key': 'upper' } })
    assert.equal(upper.status, 200)
    assert.equal((JSON.parse(upper.body) as { path: string }).path, '/hello')
    assert.deepEqual([await raw('/api/hello'), await raw('/api/./hello')], [200, 200])
    assert.deepEqual([await raw('/bytes/../api/hello'), await raw('/bytes/%2e%2e/api//hello'), await raw('/api/x/../hello'), await raw('/%61pi/hell%6F')], [429, 429, 429, 429])
    // The absolute form is the same request: it meets the same spent limit.
    assert.equal(await raw('http://example.com/api/hello'), 429)
  })

  it('takes the absolute form (GET http://host/path, which RFC 9112 says a server must): routed, limited and forwarded by its path, its host replacing Host', async () => {
    const send = (target: string, method = 'GET') => rawRequest(gateway.url, target, { method, headers: { 'x-api-key': 'absolute', host: 'ignored.test' } })
    const first = await send('http://Example.TEST:80/api/hello?page=2')
    assert.equal(first.status, 200)
    assert.deepEqual(pick(JSON.parse(first.body) as Record<string, unknown>, ['path', 'forwardedHost']), { path: '/hello', forwardedHost: 'example.test' })
    // Its dots are resolved like any path's, and it spends the same quota (3 an hour for this key).
    assert.deepEqual([(await send('HTTP://example.test/bytes/../api/hello')).status, (await send('http://example.test/api/./hello')).status, (await send('http://example.test/api/hello')).status], [200, 200, 429])
    assert.equal((await send('http://example.test/nowhere')).status, 404)
    for (const target of ['ftp://example.test/api/hello', 'http://user:pw@example.test/api/hello', 'http:///api/hello']) {
      assert.equal((await send(target)).status, 400, target)
    }
    assert.equal((await send('*', 'OPTIONS')).status, 400)
  })

  it('refuses a request with two Host headers (RFC 9112 3.2), which node would read by the first and a server behind it might not', async () => {
    const ask = async (head: string) => {
      const socket = connect(Number(new URL(gateway.url).port), '127.0.0.1')
      let text = ''
      socket.setEncoding('latin1').on('data', (part: string) => { text += part })
      await once(socket, 'connect')
      socket.write(`GET /api/hello HTTP/1.1\r\n${head}x-api-key: two-hosts\r\nConnection: close\r\n\r\n`)
      await Promise.race([once(socket, 'close'), sleep(2000)])
      socket.destroy()
      return text
    }
    const refused = await ask('Host: a.test\r\nhost: b.test\r\n')
    assert.match(refused, /^HTTP\/1\.1 400 Bad Request\r\n/)
    assert.match(refused, /more than one Host header/)
    assert.match(await ask('Host: a.test\r\n'), /^HTTP\/1\.1 200 OK\r\n/)
  })

  it('refuses a request whose Connection header names the API key header: dropped on the way, a made-up key would buy a fresh quota the upstream never sees', async () => {
    for (const connection of ['X-API-Key', 'keep-alive, x-api-key']) {
      const refused = await rawRequest(gateway.url, '/api/hello', { headers: { 'x-api-key': 'made-up', connection } })
      assert.equal(refused.status, 400, connection)
      assert.match(refused.body, /Connection header names x-api-key, which this gateway reads/)
    }
    // Nothing was charged: the key still has its 3 an hour. Connection naming other fields changes nothing.
    const statuses = []
    for (const connection of ['keep-alive', 'x-trace', 'close']) statuses.push((await rawRequest(gateway.url, '/api/hello', { headers: { 'x-api-key': 'made-up', connection } })).status)
    assert.deepEqual(statuses, [200, 200, 200])
  })

  it('speaks Spring Cloud Gateway: replenishRate / burstCapacity as a token bucket, with its fields on its route', async () => {
    const responses = []
    for (let i = 0; i < 3; i++) {
      responses.push(await fetch(`${gateway.url}/login`, { method: 'POST', headers: { 'x-api-key': 'scg' } }))
    }
    assert.deepEqual(responses.map((r) => r.status), [200, 200, 429])
    const fields = (r: Response) => ['x-ratelimit-remaining', 'x-ratelimit-replenish-rate', 'x-ratelimit-burst-capacity', 'x-ratelimit-requested-tokens', 'ratelimit'].map((name) => r.headers.get(name))
    // The route's style is over the top-level one: the draft-10 fields stay beside Spring Cloud Gateway's.
    assert.deepEqual(fields(responses[0] as Response), ['1', '1', '2', '1', '"login.token-bucket:2@1/1s";r=1;t=1'])
    assert.deepEqual(fields(responses[2] as Response), ['0', '1', '2', '1', '"login.token-bucket:2@1/1s";r=0;t=1'])
    // Paths match without case by default (upstreams such as Express route /LOGIN as /login): another spelling meets the same limit.
    assert.equal((await fetch(`${gateway.url}/Login`, { method: 'POST', headers: { 'x-api-key': 'scg' } })).status, 429)
    // A path parameter (Tomcat and Spring route /login;jsessionid=1 as /login) meets it too.
    assert.equal((await fetch(`${gateway.url}/login;jsessionid=1`, { method: 'POST', headers: { 'x-api-key': 'scg' } })).status, 429)
    // So does one with a fragment, which node lets through and frameworks route as /login.
    assert.equal((await rawRequest(gateway.url, '/login#again', { method: 'POST', headers: { 'x-api-key': 'scg' } })).status, 429)
    assert.equal((await fetch(`${gateway.url}/login`, { headers: { 'x-api-key': 'scg' } })).status, 404, 'GET /login matches no route')
  })

  it('count: failed spends a limit on the upstream\'s failed answers only', async () => {
    const statuses = async (path: string, times: number) => {
      const seen: number[] = []
      for (let i = 0; i < times; i++) seen.push((await get(`${gateway.url}/counted${path}`)).status)
      return seen
    }
    assert.deepEqual(await statuses('/hello', 5), [200, 200, 200, 200, 200])
    assert.deepEqual(await statuses('/missing', 3), [404, 404, 429])
    assert.deepEqual(await statuses('/hello', 1), [429])
  })

  it('count: in-flight limits requests in progress at the upstream; a client that leaves ends its request there and gives its unit back', async () => {
    const slow = (ms: number, signal?: AbortSignal) => fetch(`${gateway.url}/reports/slow/${ms}`, signal === undefined ? {} : { signal })
    const burst = await Promise.all(Array.from({ length: 4 }, () => slow(300)))
    assert.deepEqual(burst.map((res) => res.status).sort(), [200, 200, 429, 429])
    const refused = burst.find((res) => res.status === 429) as Response
    assert.equal(refused.headers.get('retry-after'), '1')
    assert.equal(refused.headers.get('ratelimit-policy'), '"reports-in-progress";q=2;qu="concurrent-requests"')
    assert.equal(refused.headers.get('ratelimit'), '"reports-in-progress";r=0')
    await Promise.all(burst.map((res) => res.arrayBuffer()))
    // Given back as each ended: one after another, any number.
    for (let i = 0; i < 3; i++) assert.equal((await slow(0)).status, 200)
    // The gateway aborts the upstream request of a client that leaves: that request is over.
    const leaving = new AbortController()
    const left = slow(5_000, leaving.signal).catch((error: unknown) => error)
    await new Promise((resolve) => setTimeout(resolve, 100))
    leaving.abort()
    await left
    await new Promise((resolve) => setTimeout(resolve, 100))
    assert.deepEqual((await Promise.all([slow(200), slow(200)])).map((res) => res.status), [200, 200])
  })

  it('a config of 400 routes: each request meets the first route that matches (100 by wildcard host) and that route\'s limits (of 50 on one route, those its path meets), beside the global ones', async () => {
    const route = (name: string, path: string, strip: boolean) => `
  - name: ${name}
    match: { path: ${path} }
    upstream: ${upstream.url}${strip ? `\n    stripPrefix: ${path.replace('/**', '')}` : ''}
    limits:
      - { key: [ip], policies: { algorithm: fixed-window, name: ${name}, limit: 2, windowMs: 3600000 } }`
    const routes = Array.from({ length: 300 }, (_, i) => route(`svc${i}`, `/svc${i}/**`, true))
    // A wildcard in the first segment: a candidate for every path, taking /v1 and /v2 though a route for /v2 comes later.
    routes.splice(150, 0, route('versioned', '/v*/**', false))
    routes.push(route('v2', '/v2/**', false))
    // A route with a limit per endpoint, each narrowed by its own match.
    const endpoints = Array.from({ length: 50 }, (_, i) => `
      - { name: item${i}, key: [ip], match: { path: /shop/item${i}/** }, policies: { algorithm: fixed-window, name: item${i}, limit: 1, windowMs: 3600000 } }`)
    // Tenants by wildcard host, ahead of every other route: a tenant's subdomains meet its own route, and other hosts none of them.
    const tenants = Array.from({ length: 100 }, (_, i) => `
  - name: tenant${i}
    match: { host: '*.t${i}.test' }
    upstream: ${upstream.url}
    limits:
      - { key: [ip], policies: { algorithm: fixed-window, name: tenant${i}, limit: 1, windowMs: 3600000 } }`)
    routes.unshift(...tenants)
    routes.push(`
  - name: shop
    match: { path: /shop/** }
    upstream: ${upstream.url}
    limits:${endpoints.join('')}`)
    const many = await startGateway(`
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
limits:
  - { key: [ip], policies: { algorithm: token-bucket, name: everyone, capacity: 1000, refillTokens: 1, refillIntervalMs: 3600000 } }
routes:${routes.join('')}
`)
    try {
      const policiesOf = (response: { headers: Headers }) => response.headers.get('ratelimit-policy')?.match(/"[^"]+"/g)?.join(' ')
      const last = [await get(`${many.url}/svc299/hello`), await get(`${many.url}/SVC299/hello`), await get(`${many.url}/svc299/hello`)]
      assert.deepEqual(last.map((r) => r.status), [200, 200, 429], 'the last route, also under another case, with its own limit')
      assert.equal(policiesOf(last[0] as { headers: Headers }), '"everyone" "svc299"')
      assert.equal((JSON.parse(last[0]?.body ?? '{}') as { path: string }).path, '/hello', 'forwarded by its own route, its prefix stripped')
      assert.equal(policiesOf(await get(`${many.url}/svc0/hello`)), '"everyone" "svc0"')
      const versioned = [await get(`${many.url}/v1/x`), await get(`${many.url}/v2/x`), await get(`${many.url}/v3/x`)]
      assert.deepEqual(versioned.map((r) => r.status === 429 ? 429 : policiesOf(r)), ['"everyone" "versioned"', '"everyone" "versioned"', 429])
      assert.equal((await get(`${many.url}/elsewhere`)).status, 404)
      const items = [await get(`${many.url}/shop/item49/a`), await get(`${many.url}/shop/ITEM49/b`), await get(`${many.url}/shop/item0/a`), await get(`${many.url}/shop/other`)]
      assert.deepEqual(items.map((r) => r.status === 429 ? 429 : policiesOf(r)), ['"everyone" "item49"', 429, '"everyone" "item0"', '"everyone"'])
      const hosts = ['a.shop.T99.test', 'x.t99.test.', 'x.t98.test', 't99.test']
      const tenantStatus = []
      for (const host of hosts) tenantStatus.push((await rawRequest(many.url, '/hello', { headers: { host } })).status)
      assert.deepEqual(tenantStatus, [200, 429, 200, 404], 'tenant99\'s own quota for its subdomains, tenant98\'s apart; t99.test itself is no subdomain of it')
    } finally {
      await many.stop()
    }
  })

  it('answers 502 when the upstream is down and 504 when it is too slow', async () => {
    const down = await get(`${gateway.url}/down/anything`)
    assert.equal(down.status, 502)
    assert.equal((JSON.parse(down.body) as { title: string }).title, 'Bad Gateway')
    assert.equal(down.headers.get('content-length'), String(Buffer.byteLength(down.body)))
    const slow = await get(`${gateway.url}/slow/2000`)
    assert.equal(slow.status, 504)
    assert.equal((await get(`${gateway.url}/slow/10`)).status, 200)
    // The access log says why: written as the response closes, it must not miss what the proxy found a moment before.
    const logged = await gateway.waitForLog((l) => l.msg === 'request' && l.route === 'slow' && l.status === 504)
    assert.equal(logged.upstream, 'timeout')
    // With which upstream, and what undici found, so an operator can tell a refused port from a bad certificate.
    const refused = await gateway.waitForLog((l) => l.msg === 'request' && l.route === 'down')
    assert.deepEqual([refused.upstream, refused.upstreamUrl], ['unreachable', `http://127.0.0.1:${downPort}`])
    assert.match(String(refused.upstreamError), /ECONNREFUSED/)
  })

  it('takes a route\'s upstreams in turn; one that refuses connections is passed over, the request sent to the next', async () => {
    const paths = []
    for (let i = 0; i < 4; i++) {
      const response = await get(`${gateway.url}/pool`)
      assert.equal(response.status, 200, response.body)
      paths.push((JSON.parse(response.body) as { path: string }).path)
    }
    assert.deepEqual(paths, ['/hello/a/', '/hello/c/', '/hello/a/', '/hello/c/'])
    const warned = await gateway.waitForLog((l) => l.msg === 'upstream cannot be connected to; passed over for 10 s')
    assert.deepEqual([warned.route, warned.upstream], ['pool', `http://127.0.0.1:${downPort}`])
    // /status says which upstream is passed over, and until when.
    const status = await (await fetch(`${gateway.adminUrl}/status`)).json() as { routes: Array<{ name: string; upstreams: Array<{ url: string; passedOverUntil?: string }> }> }
    const pool = status.routes.find((route) => route.name === 'pool')?.upstreams ?? []
    assert.deepEqual(pool.map((upstream) => [upstream.url.replace(/:\d+/, ':PORT'), upstream.passedOverUntil !== undefined]), [['http://127.0.0.1:PORT/hello/a', false], ['http://127.0.0.1:PORT', true], ['http://127.0.0.1:PORT/hello/c', false]])
    const until = Date.parse(pool[1]?.passedOverUntil ?? '') - Date.now()
    assert.ok(until > 5_000 && until <= 10_000, `passed over for the next ${until} ms`)
    // Marked down for a while: a request with a body (which cannot be replayed) goes to a live upstream too.
    const posted = await fetch(`${gateway.url}/pool/x`, { method: 'POST', body: 'payload' })
    assert.equal(posted.status, 200)
  })

  it('streams 50 MB up and down intact without the gateway buffering them', async () => {
    const size = 50 * 1024 * 1024
    // Warm the pools first so the baseline includes them.
    await get(`${gateway.url}/bytes/1048576`)
    const before = gateway.memory()
    const download = await fetch(`${gateway.url}/bytes/${size}`)
    const downHash = createHash('sha256')
    let downloaded = 0
    for await (const chunk of download.body as unknown as AsyncIterable<Uint8Array>) {
      downHash.update(chunk)
      downloaded += chunk.length
    }
    assert.equal(downloaded, size)
    assert.equal(downHash.digest('hex'), createHash('sha256').update(Buffer.alloc(size, 0x61)).digest('hex'))

    const upHash = createHash('sha256')
    const chunk = Buffer.alloc(64 * 1024)
    let sent = 0
    const body = new Readable({
      read() {
        if (sent >= size) return void this.push(null)
        chunk.fill(sent % 251)
        upHash.update(chunk)
        sent += chunk.length
        this.push(Buffer.from(chunk))
      },
    })
    const answer = await new Promise<string>((resolve, reject) => {
      const req = httpRequest(`${gateway.url}/digest`, { method: 'POST', headers: { 'content-type': 'application/octet-stream', 'content-length': String(size) } }, (res) => {
        let text = ''
        res.setEncoding('utf8')
        res.on('data', (part: string) => { text += part })
        res.on('end', () => resolve(text))
      })
      req.on('error', reject)
      body.pipe(req)
    })
    assert.deepEqual(JSON.parse(answer), { length: size, sha256: upHash.digest('hex') })
    const grown = gateway.memory().peak - before.peak
    assert.ok(grown < 16 * 1024 * 1024, `the gateway's peak memory grew by ${(grown / 1048576).toFixed(1)} MB moving 100 MB`)
  })

  it('takes in the rest of an upload the upstream answered before reading, so a client that sends before it reads gets the answer', async () => {
    // The demo upstream answers /bytes/16 at once without reading the body, and undici then stops
    // sending it. A client that writes its whole request before reading (curl, most HTTP/1.1 clients)
    // must still get every byte out, then the answer, not a stalled upload and a reset.
    const size = 20 * 1024 * 1024
    const { port } = new URL(gateway.url)
    const socket = connect(Number(port), '127.0.0.1')
    let received = ''
    socket.setEncoding('latin1')
    socket.on('data', (part: string) => { received += part })
    await once(socket, 'connect')
    socket.write(`POST /bytes/16 HTTP/1.1\r\nHost: gateway.test\r\nContent-Length: ${size}\r\n\r\n`)
    const chunk = Buffer.alloc(64 * 1024)
    for (let sent = 0; sent < size; sent += chunk.length) {
      if (!socket.write(chunk)) await Promise.race([once(socket, 'drain'), once(socket, 'close').then(() => { throw new Error(`the gateway closed the connection after ${sent} bytes`) })])
    }
    await new Promise<void>((resolve, reject) => socket.write('', (error) => (error ? reject(error) : resolve())))
    for (let i = 0; i < 100 && !received.endsWith('a'.repeat(16)); i++) await sleep(20)
    socket.destroy()
    assert.match(received, /^HTTP\/1\.1 200 OK\r\n/)
    assert.ok(received.endsWith('\r\n\r\n' + 'a'.repeat(16)), received.slice(-100))
  })

  it('Expect: 100-continue: the body is asked for only once the request is allowed; a refused upload never travels', async () => {
    // Reads what the gateway says on a raw connection until `until` matches or it closes.
    const exchange = async (key: string, send: (socket: Socket, received: () => string) => Promise<void>) => {
      const socket = connect(Number(new URL(gateway.url).port), '127.0.0.1')
      let text = ''
      socket.setEncoding('latin1')
      socket.on('data', (part: string) => { text += part })
      const closed = once(socket, 'close')
      await once(socket, 'connect')
      socket.write(`POST /login HTTP/1.1\r\nHost: gateway.test\r\nx-api-key: ${key}\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n`)
      await send(socket, () => text)
      await Promise.race([closed, sleep(2000)])
      socket.destroy()
      return text
    }
    const until = async (received: () => string, pattern: RegExp) => {
      for (let i = 0; i < 100 && !pattern.test(received()); i++) await sleep(10)
    }
    // Allowed: 100 Continue first, then the body, then the upstream's answer.
    const allowed = await exchange('expect-ok', async (socket, received) => {
      await until(received, /^HTTP\/1\.1 100 Continue\r\n\r\n/)
      assert.match(received(), /^HTTP\/1\.1 100 Continue\r\n\r\n$/, 'nothing but 100 Continue before the body')
      socket.write(Buffer.alloc(1000, 0x62))
      await until(received, /demo upstream: POST \/login/)
      socket.end()
    })
    assert.match(allowed, /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 OK\r\n/)
    // Refused (the bucket holds 2): the 429 comes instead of 100 Continue, and the connection closes.
    for (let i = 0; i < 2; i++) await fetch(`${gateway.url}/login`, { method: 'POST', headers: { 'x-api-key': 'expect-refused' } })
    const refused = await exchange('expect-refused', async () => {})
    assert.match(refused, /^HTTP\/1\.1 429 Too Many Requests\r\n/)
    assert.doesNotMatch(refused, /100 Continue/)
    assert.match(refused, /\r\nConnection: close\r\n/i)
  })

  it('a refused upload without Expect is read for 2 s more at most: the 429, then the connection closes', async () => {
    for (let i = 0; i < 2; i++) await fetch(`${gateway.url}/login`, { method: 'POST', headers: { 'x-api-key': 'upload-refused' } })
    const socket = connect(Number(new URL(gateway.url).port), '127.0.0.1')
    let received = ''
    socket.setEncoding('latin1')
    socket.on('data', (part: string) => { received += part })
    socket.on('error', () => {})
    const closed = once(socket, 'close')
    await once(socket, 'connect')
    const started = Date.now()
    // A body that would go on for minutes (64 KiB every 20 ms), sent for 8 s at most.
    socket.write(`POST /login HTTP/1.1\r\nHost: gateway.test\r\nx-api-key: upload-refused\r\nContent-Length: ${2 ** 30}\r\n\r\n`)
    const sending = setInterval(() => socket.write(Buffer.alloc(2 ** 16)), 20)
    const closedAfterMs = await Promise.race([closed.then(() => Date.now() - started), sleep(8000).then(() => undefined)])
    clearInterval(sending)
    socket.destroy()
    assert.match(received, /^HTTP\/1\.1 429 Too Many Requests\r\n/)
    // Before, the gateway read on (and threw it away) for as long as the client sent.
    assert.ok(closedAfterMs !== undefined && closedAfterMs < 6000, `the connection ${closedAfterMs === undefined ? 'was still open after 8 s' : `closed after ${closedAfterMs} ms`}`)
  })

  it('exports Prometheus metrics whose counters match the requests sent', async () => {
    const start = await metrics(gateway)
    const limited = { route: 'api', policy: 'api-hour', outcome: 'limited' }
    const allowed = { route: 'api', policy: 'api-hour', outcome: 'allowed' }
    const was = { limited: sample(start, 'sluice_decisions_total', limited), allowed: sample(start, 'sluice_decisions_total', allowed), ok: sample(start, 'sluice_requests_total', { route: 'api', status: '200' }) }
    for (let i = 0; i < 5; i++) await get(`${gateway.url}/api/hello`, { 'x-api-key': 'metrics' })
    const now = await metrics(gateway)
    assert.equal(sample(now, 'sluice_decisions_total', allowed) - was.allowed, 3)
    assert.equal(sample(now, 'sluice_decisions_total', limited) - was.limited, 2)
    assert.equal(sample(now, 'sluice_requests_total', { route: 'api', status: '200' }) - was.ok, 3)
    // The last allowed call left 0 of 3: near the limit.
    assert.ok(sample(now, 'sluice_near_limit_total', { route: 'api', policy: 'api-hour' }) >= 1)
    assert.ok(sample(now, 'sluice_upstream_failures_total', { route: 'down', failure: 'unreachable' }) >= 1)
    assert.equal(now.get('sluice_store_up')?.type, 'GAUGE')
    assert.equal(now.get('sluice_store_latency_seconds')?.type, 'HISTOGRAM')
    for (const name of ['sluice_store_errors_total', 'sluice_block_cache_hits_total', 'sluice_store_fallback_active']) assert.ok(now.has(name), name)
    assert.equal((await fetch(`${gateway.adminUrl}/healthz`)).status, 200)
    assert.equal((await fetch(`${gateway.adminUrl}/readyz`)).status, 200)
  })

  it('tiers from API keys: each key gets its tier\'s limit, a request without a listed key the default; saving the keys file moves a key to another tier', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-key-tiers-'))
    const keysFile = join(dir, 'api-keys')
    writeFileSync(keysFile, '# key tier\nk-pro pro\nk-plain\n')
    const gateway = await startGateway(`
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0, watch: [apikey:k-pro, apikey:k-plain, ip:127.0.0.1] }
identity: { apiKey: { header: x-api-key, keysFile: ${keysFile} }, order: [apiKey, ip] }
tiers: { from: apiKey, default: free }
routes:
  - name: api
    upstream: ${upstream.url}
    limits:
      - name: plan
        tiers:
          free: { algorithm: sliding-log, name: free, limit: 1, windowMs: 3600000 }
          pro: { algorithm: sliding-log, name: pro, limit: 3, windowMs: 3600000 }
      # One tier for all: a pro key gets it as its default, by design, with no warning.
      - name: daily
        tiers:
          free: { algorithm: sliding-log, name: daily, limit: 100, windowMs: 3600000 }
`)
    try {
      const statuses = async (key: string | undefined, count: number) => {
        const seen = []
        for (let i = 0; i < count; i++) seen.push((await get(`${gateway.url}/hello`, key === undefined ? {} : { 'x-api-key': key })).status)
        return seen
      }
      assert.deepEqual(await statuses('k-pro', 4), [200, 200, 200, 429])
      assert.deepEqual(await statuses('k-plain', 2), [200, 429], 'a key listed without a tier: the default')
      const unlisted = await get(`${gateway.url}/hello`, { 'x-api-key': 'k-made-up' })
      assert.deepEqual([unlisted.status, unlisted.headers.get('ratelimit-policy')], [200, '"free";q=1;w=3600, "daily";q=100;w=3600'], 'no listed key: the IP, on the default tier')
      // /status shows each API key under its own tier only; an IP under every tier (a request it keys may carry any key).
      const watched = async () => {
        const { watched: byKey } = await (await fetch(`${gateway.adminUrl}/status`)).json() as { watched: Record<string, Record<string, { remaining: number }>> }
        return Object.fromEntries(Object.entries(byKey).map(([key, policies]) => [key, Object.fromEntries(Object.entries(policies).map(([name, { remaining }]) => [name, remaining]))]))
      }
      // k-pro's refused request, one call for both limits, spent nothing of daily.
      assert.deepEqual(await watched(), { 'apikey:k-pro': { pro: 0, daily: 97 }, 'apikey:k-plain': { free: 0, daily: 99 }, 'ip:127.0.0.1': { free: 0, pro: 3, daily: 99 } })
      assert.ok(!gateway.logs.some((l) => String(l.msg).includes('names none of its tiers')), 'no warning of a tier the limit lacks')
      writeFileSync(keysFile, 'k-pro pro\nk-plain pro\n')
      await gateway.waitForLog((l) => l.msg === 'config reloaded')
      // Its request on the free tier stays in the log it was counted in; under pro it has 3 of its own.
      assert.deepEqual((await watched())['apikey:k-plain'], { pro: 3, daily: 99 })
      assert.deepEqual(await statuses('k-plain', 4), [200, 200, 200, 429])
    } finally {
      await gateway.stop()
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('logs each request with its key kind, never the key itself', async () => {
    await get(`${gateway.url}/api/hello`, { 'x-api-key': 'secret-key-value' })
    const line = await gateway.waitForLog((l) => l.msg === 'request' && l.keyKind === 'apikey')
    assert.equal(line.route, 'api')
    assert.ok(!gateway.logs.some((l) => JSON.stringify(l).includes('secret-key-value')))
  })
})

describe('gateway reload and shutdown', () => {
  let upstream: { server: Server; url: string }
  let downPort: number
  before(async () => {
    upstream = await startDemoUpstream()
    downPort = await freePort()
  })
  after(() => upstream?.server.close())

  it('SIGHUP applies a new limit without failing a request under concurrent load; a bad file is refused', async () => {
    const gateway = await startGateway(config(upstream.url, downPort, 5), { args: ['--no-watch'] })
    try {
      const statuses: number[] = []
      let running = true
      const load = Array.from({ length: 8 }, async (_, worker) => {
        for (let i = 0; running && i < 2000; i++) {
          try {
            statuses.push((await fetch(`${gateway.url}/api/hello`, { headers: { 'x-api-key': `load-${worker % 2}` } })).status)
          } catch {
            statuses.push(0)
          }
        }
      })
      await sleep(300)
      const before = gateway.logs.length
      gateway.writeConfig(config(upstream.url, downPort, 100_000))
      gateway.child.kill('SIGHUP')
      await gateway.waitForLog((l) => l.msg === 'config reloaded')
      const countAtReload = statuses.length
      await sleep(300)
      running = false
      await Promise.all(load)
      assert.ok(gateway.logs.length > before)
      assert.deepEqual(statuses.filter((s) => s !== 200 && s !== 429), [], 'every request answered 200 or 429')
      const after = statuses.slice(countAtReload + 16)
      assert.ok(after.length > 0 && after.every((s) => s === 200), 'the raised limit applies after the reload')

      // A broken file is refused, named with its line; the running config stays.
      gateway.writeConfig(config(upstream.url, downPort, 100_000).replace('limit: 100000', 'limit: -5'))
      gateway.child.kill('SIGHUP')
      const refused = await gateway.waitForLog((l) => l.msg === 'config refused; the running config stays')
      assert.match(String((refused.problems as string[])[0]), /^routes\[0\]\.limits\[0\]\.policies\[0\]\.limit: must be a positive integer \(got -5\) \(line \d+\)$/)
      assert.equal((await get(`${gateway.url}/api/hello`, { 'x-api-key': 'after-refusal' })).status, 200)
    } finally {
      assert.equal(await gateway.stop(), 0)
    }
  })

  it('says in its log when the JWKS endpoint is down, and a reload while it is keeps verifying tokens with the keys it gave', async () => {
    const signing = await generateKeyPair('ES256')
    const jwk = { ...(await exportJWK(signing.publicKey)), kid: 'k1', alg: 'ES256', use: 'sig' }
    const token = (sub: string) => new SignJWT({ sub }).setProtectedHeader({ alg: 'ES256', kid: 'k1' }).setExpirationTime('1h').sign(signing.privateKey)
    let serving = false
    const endpoint = createServer((_req, res) => {
      if (!serving) return void res.destroy()
      res.setHeader('content-type', 'application/json')
      res.end(JSON.stringify({ keys: [jwk] }))
    })
    await new Promise<void>((resolve) => endpoint.listen(0, '127.0.0.1', resolve))
    const jwksUrl = `http://127.0.0.1:${(endpoint.address() as AddressInfo).port}/jwks.json`
    const yaml = (limit: number) => `
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
identity:
  jwt: { algorithms: [ES256], jwksUrl: "${jwksUrl}" }
  order: [jwt, ip]
logging: { level: info, access: true }
routes:
  - name: api
    upstream: ${upstream.url}
    limits:
      - policies: { algorithm: fixed-window, name: hourly, limit: ${limit}, windowMs: 3600000 }
`
    const keyKindOf = async (gateway: RunningGateway, sub: string) => {
      const seen = gateway.logs.filter((line) => line.msg === 'request').length
      assert.equal((await get(`${gateway.url}/hello`, { authorization: `Bearer ${await token(sub)}` })).status, 200)
      return (await gateway.waitForLog((line) => line.msg === 'request' && gateway.logs.filter((l) => l.msg === 'request').length > seen)).keyKind
    }
    try {
      // Down from the start: every caller is keyed by its IP, and the log says why.
      const early = await startGateway(yaml(100))
      try {
        assert.equal(await keyKindOf(early, 'alice'), 'ip')
        const warning = early.logs.find((line) => line.level === 40 && /JWKS/.test(String(line.msg)))
        assert.match(String(warning?.msg), /^sluice: the JWKS endpoint http:\/\/127\.0\.0\.1:\d+\/jwks\.json failed: .+\. No keys yet, so bearer tokens are no identity/)
      } finally {
        await early.stop()
      }
      serving = true
      const gateway = await startGateway(yaml(100))
      try {
        assert.equal(await keyKindOf(gateway, 'alice'), 'user')
        serving = false
        gateway.writeConfig(yaml(200))
        gateway.child.kill('SIGHUP')
        await gateway.waitForLog((line) => line.msg === 'config reloaded')
        // Before, the new config's verifier started with no keys and fetched them from a dead endpoint: 'ip'.
        assert.equal(await keyKindOf(gateway, 'bob'), 'user')
      } finally {
        await gateway.stop()
      }
    } finally {
      endpoint.closeAllConnections()
      endpoint.close()
    }
  })

  it('holds at most logging.bufferBytes of log while stdout takes none: the lines beyond are dropped and counted, and requests go on', async () => {
    const gateway = await startGateway(`
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
logging: { level: info, access: true, bufferBytes: 65536 }
routes:
  - name: api
    upstream: ${upstream.url}
`)
    try {
      // The log's reader stalls: the pipe fills, and the gateway's writes find no room.
      gateway.child.stdout?.pause()
      const statuses: number[] = []
      // About 150 bytes a line: 3,000 requests log several times what the pipe, this side's buffer and bufferBytes hold.
      await Promise.all(Array.from({ length: 20 }, async () => {
        for (let i = 0; i < 150; i++) {
          const response = await fetch(`${gateway.url}/hello`)
          await response.arrayBuffer()
          statuses.push(response.status)
        }
      }))
      assert.deepEqual([statuses.length, statuses.every((status) => status === 200)], [3000, true])
      const metrics = await (await fetch(`${gateway.adminUrl}/metrics`)).text()
      const dropped = Number(/^sluice_log_lines_dropped_total (\d+)$/m.exec(metrics)?.[1])
      // Before, every line was held, however many, for as long as the reader stalled.
      assert.ok(dropped > 0 && dropped < 3000, `dropped ${dropped}`)
      // The reader back: what was held is written (in tries 100 ms apart), and requests are logged again.
      gateway.child.stdout?.resume()
      const logged = () => gateway.logs.some((line) => line.msg === 'request' && line.method === 'DELETE')
      for (let i = 0; i < 50 && !logged(); i++) {
        await (await fetch(`${gateway.url}/hello`, { method: 'DELETE' })).arrayBuffer()
        await sleep(100)
      }
      assert.equal(logged(), true)
    } finally {
      await gateway.stop()
    }
  })

  it('reloads when the file changes', async () => {
    const gateway = await startGateway(config(upstream.url, downPort, 1))
    try {
      assert.equal((await get(`${gateway.url}/api/hello`, { 'x-api-key': 'w' })).status, 200)
      assert.equal((await get(`${gateway.url}/api/hello`, { 'x-api-key': 'w' })).status, 429)
      gateway.writeConfig(config(upstream.url, downPort, 1000))
      await gateway.waitForLog((l) => l.msg === 'config reloaded')
      assert.equal((await get(`${gateway.url}/api/hello`, { 'x-api-key': 'w' })).status, 200)
    } finally {
      await gateway.stop()
    }
  })

  it('reloads when a Kubernetes volume swaps its ..data link, and when a symlinked file is edited where it points', async () => {
    const gateway = await startGateway(config(upstream.url, downPort, 1))
    try {
      assert.equal((await get(`${gateway.url}/api/hello`, { 'x-api-key': 'k' })).status, 200)
      assert.equal((await get(`${gateway.url}/api/hello`, { 'x-api-key': 'k' })).status, 429)
      // The layout of a ConfigMap volume: sluice.yaml -> ..data/sluice.yaml, ..data -> ..v1.
      const dir = dirname(gateway.file)
      mkdirSync(join(dir, '..v1'))
      renameSync(gateway.file, join(dir, '..v1', 'sluice.yaml'))
      symlinkSync('..v1', join(dir, '..data'))
      symlinkSync(join('..data', 'sluice.yaml'), gateway.file)
      await sleep(300)
      // An update as the kubelet makes it: a new directory, a new link renamed over ..data.
      mkdirSync(join(dir, '..v2'))
      writeFileSync(join(dir, '..v2', 'sluice.yaml'), config(upstream.url, downPort, 1000))
      symlinkSync('..v2', join(dir, '..data_tmp'))
      renameSync(join(dir, '..data_tmp'), join(dir, '..data'))
      await gateway.waitForLog((l) => l.msg === 'config reloaded')
      assert.equal((await get(`${gateway.url}/api/hello`, { 'x-api-key': 'k' })).status, 200)

      // A config file that is a link to a file elsewhere, edited there.
      const elsewhere = mkdtempSync(join(tmpdir(), 'sluice-target-'))
      try {
        writeFileSync(join(elsewhere, 'real.yaml'), config(upstream.url, downPort, 1000))
        rmSync(gateway.file)
        symlinkSync(join(elsewhere, 'real.yaml'), gateway.file)
        await sleep(300)
        const reloads = gateway.logs.filter((l) => l.msg === 'config reloaded').length
        writeFileSync(join(elsewhere, 'real.yaml'), config(upstream.url, downPort, 2))
        await gateway.waitForLog((l) => l.msg === 'config reloaded' && gateway.logs.filter((m) => m.msg === 'config reloaded').length > reloads)
        assert.equal((await get(`${gateway.url}/api/hello`, { 'x-api-key': 'k2' })).status, 200)
        assert.equal((await get(`${gateway.url}/api/hello`, { 'x-api-key': 'k2' })).status, 200)
        assert.equal((await get(`${gateway.url}/api/hello`, { 'x-api-key': 'k2' })).status, 429)
      } finally {
        rmSync(elsewhere, { recursive: true, force: true })
      }
    } finally {
      await gateway.stop()
    }
  })

  it('admin.durationByRoute: false keeps one request-duration histogram for every route, route="*"; a reload switches it', async () => {
    const gateway = await startGateway(config(upstream.url, downPort, 1000), { args: ['--no-watch'] })
    try {
      // Read from the text: the Prometheus parser here drops a histogram's labels.
      const durations = async () => [...(await (await fetch(`${gateway.adminUrl}/metrics`)).text()).matchAll(/^sluice_request_duration_seconds_count\{route="([^"]*)"\} (\d+)$/gm)]
        .map(([, route, count]) => [route, Number(count)])
      assert.equal((await get(`${gateway.url}/api/hello`, { 'x-api-key': 'd' })).status, 200)
      assert.deepEqual(await durations(), [['api', 1]])
      gateway.writeConfig(config(upstream.url, downPort, 1000).replace('watch: [apikey:alpha]', 'watch: [apikey:alpha]\n  durationByRoute: false'))
      gateway.child.kill('SIGHUP')
      await gateway.waitForLog((l) => l.msg === 'config reloaded')
      // The per-route series go with the switch: they would stop moving.
      assert.equal((await get(`${gateway.url}/api/hello`, { 'x-api-key': 'd' })).status, 200)
      assert.equal((await get(`${gateway.url}/api/hello`, { 'x-api-key': 'e' })).status, 200)
      assert.deepEqual(await durations(), [['*', 2]])
    } finally {
      await gateway.stop()
    }
  })

  it('sends /metrics and /status as it writes them: with 400 routes in use every series and route arrives, a scraper that leaves midway harms no later scrape, HEAD has no body', async () => {
    const routes = Array.from({ length: 400 }, (_, i) => `
  - name: svc${i}
    match: { path: /svc${i}/** }
    upstream: ${upstream.url}
    stripPrefix: /svc${i}
    limits:
      - { policies: { algorithm: token-bucket, name: svc${i}, capacity: 100, refillTokens: 100, refillIntervalMs: 3600000 } }`)
    const many = await startGateway(`
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0, watch: [ip:127.0.0.1, ip:192.0.2.1] }
logging: { access: false }
routes:${routes.join('')}
`, { args: ['--no-watch'] })
    try {
      for (let i = 0; i < 400; i += 40) {
        const statuses = await Promise.all(Array.from({ length: 40 }, async (_, j) => (await get(`${many.url}/svc${i + j}/hello`)).status))
        assert.deepEqual(new Set(statuses), new Set([200]))
      }
      // A scraper that reads the start and hangs up.
      const socket = connect(Number(new URL(many.adminUrl).port), '127.0.0.1')
      socket.write('GET /metrics HTTP/1.1\r\nHost: admin\r\n\r\n')
      await once(socket, 'data')
      socket.destroy()

      const response = await fetch(`${many.adminUrl}/metrics`)
      assert.equal(response.status, 200)
      assert.equal(response.headers.get('content-type'), 'text/plain; version=0.0.4; charset=utf-8')
      assert.equal(response.headers.get('transfer-encoding'), 'chunked', 'sent as it is written, not measured first')
      const text = await response.text()
      const counts = [...text.matchAll(/^sluice_request_duration_seconds_count\{route="svc(\d+)"\} (\d+)$/gm)]
      assert.equal(counts.length, 400)
      assert.ok(counts.every(([, , count]) => count === '1'))
      const families = new Map((parsePrometheus(text) as Family[]).map((family) => [family.name, family]))
      assert.equal(families.get('sluice_decisions_total')?.metrics.length, 400)
      assert.equal(sample(families, 'sluice_decisions_total', { route: 'svc399', policy: 'svc399', outcome: 'allowed' }), 1)
      assert.ok(text.endsWith('\n') && !text.endsWith('\n\n'))

      const head = await rawRequest(many.adminUrl, '/metrics', { method: 'HEAD' })
      assert.deepEqual(head, { status: 200, body: '' })

      // As Prometheus asks for it: gzip, about twentyfold smaller; not for a scraper that refuses it.
      const scrape = (acceptEncoding?: string) => new Promise<{ encoding: string | undefined; body: Buffer }>((resolve, reject) => {
        const { port } = new URL(many.adminUrl)
        httpRequest({ host: '127.0.0.1', port, path: '/metrics', headers: acceptEncoding === undefined ? {} : { 'accept-encoding': acceptEncoding } }, (res) => {
          const chunks: Buffer[] = []
          res.on('data', (chunk: Buffer) => chunks.push(chunk)).on('end', () => resolve({ encoding: res.headers['content-encoding'], body: Buffer.concat(chunks) }))
        }).on('error', reject).end()
      })
      const plain = await scrape()
      assert.equal(plain.encoding, undefined)
      const compressed = await scrape('gzip')
      assert.equal(compressed.encoding, 'gzip')
      const unzipped = gunzipSync(compressed.body).toString()
      assert.ok(compressed.body.length * 10 < unzipped.length, `${compressed.body.length} bytes for ${unzipped.length}`)
      const durationLines = (text: string) => text.split('\n').filter((line) => line.startsWith('sluice_request_duration_seconds_count'))
      assert.deepEqual(durationLines(unzipped), durationLines(plain.body.toString()))
      assert.equal(durationLines(unzipped).length, 400)
      assert.equal((await scrape('gzip;q=0, identity')).encoding, undefined)

      // /status the same way: every route, and each watched key's quota under all 400 policies, read without charging.
      const statusResponse = await fetch(`${many.adminUrl}/status`)
      assert.equal(statusResponse.headers.get('content-type'), 'application/json')
      assert.equal(statusResponse.headers.get('transfer-encoding'), 'chunked')
      const statusText = await statusResponse.text()
      const status = JSON.parse(statusText) as { routes: Array<{ name: string; limits: unknown[] }>; watched: Record<string, Record<string, { remaining: number }>> }
      assert.equal(statusText, `${JSON.stringify(status, null, 2)}\n`)
      assert.deepEqual(status.routes.map((route) => route.name), Array.from({ length: 400 }, (_, i) => `svc${i}`))
      assert.equal(Object.keys(status.watched['ip:127.0.0.1'] ?? {}).length, 400)
      assert.deepEqual(Object.values(status.watched['ip:127.0.0.1'] ?? {}).map(({ remaining }) => remaining), Array(400).fill(99))
      assert.deepEqual(Object.values(status.watched['ip:192.0.2.1'] ?? {}).map(({ remaining }) => remaining), Array(400).fill(100))
      const again = await (await fetch(`${many.adminUrl}/status`)).json() as typeof status
      assert.deepEqual(Object.values(again.watched['ip:127.0.0.1'] ?? {}).map(({ remaining }) => remaining), Array(400).fill(99))
      assert.deepEqual(await rawRequest(many.adminUrl, '/status', { method: 'HEAD' }), { status: 200, body: '' })
    } finally {
      await many.stop()
    }
  })

  it('a reload applies logging.level: raised to warn, request lines stop; lowered to info, they come back', async () => {
    const gateway = await startGateway(config(upstream.url, downPort, 1000))
    try {
      assert.equal((await get(`${gateway.url}/api/hello`, { 'x-api-key': 'w' })).status, 200)
      const quiet = config(upstream.url, downPort, 1).replace('logging: { level: info }', 'logging: { level: warn }')
      assert.notEqual(quiet, config(upstream.url, downPort, 1))
      gateway.writeConfig(quiet)
      gateway.child.kill('SIGHUP')
      // At warn the reload says nothing: its limit of 1 shows when it has applied.
      let status = 200
      for (let i = 0; i < 100 && status === 200; i++) {
        status = (await get(`${gateway.url}/api/hello`, { 'x-api-key': 'w' })).status
        if (status === 200) await sleep(50)
      }
      assert.equal(status, 429)
      await sleep(300)
      assert.deepEqual(gateway.logs.filter((l) => l.msg === 'request' && l.status === 429), [])
      // Back to info, with a log buffer of another size: that one takes a restart, and the reload says so.
      gateway.writeConfig(config(upstream.url, downPort, 1).replace('logging: { level: info }', 'logging: { level: info, bufferBytes: 1048576 }'))
      gateway.child.kill('SIGHUP')
      // Only this reload says so: the one to warn was made at warn.
      const reloaded = await gateway.waitForLog((l) => l.msg === 'config reloaded')
      assert.deepEqual(reloaded.needsRestart, ['logging.bufferBytes'])
      assert.equal((await get(`${gateway.url}/api/hello`, { 'x-api-key': 'w' })).status, 429)
      await gateway.waitForLog((l) => l.msg === 'request' && l.status === 429)
    } finally {
      await gateway.stop()
    }
  })

  it('SIGTERM stops accepting and lets requests in flight finish', async () => {
    const gateway = await startGateway(config(upstream.url, downPort))
    const inFlight = get(`${gateway.url}/slow/250`)
    await sleep(80)
    const exit = gateway.stop()
    const answered = await inFlight
    assert.equal(answered.status, 200)
    assert.deepEqual(JSON.parse(answered.body), { waitedMs: 250 })
    assert.equal(await exit, 0)
    assert.ok(gateway.logs.some((l) => l.msg === 'sluice gateway stopped; every request finished'))
    await assert.rejects(fetch(`${gateway.url}/api/hello`), 'no longer accepting')
  })
})
