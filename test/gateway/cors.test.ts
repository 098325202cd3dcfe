/**
 * CORS answered by the gateway (`cors`), end to end: the gateway in a child
 * process in front of a real upstream that speaks CORS itself (badly: its
 * fields would double the gateway's), requests made as a browser makes them.
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { startGateway, type RunningGateway } from '../support/gateway.ts'

const APP = 'https://app.example.com'

describe('gateway: cors', () => {
  let upstream: Server
  let gateway: RunningGateway
  const seen: string[] = []

  before(async () => {
    upstream = createServer((req, res) => {
      seen.push(`${req.method} ${req.url}`)
      res.writeHead(200, { 'access-control-allow-origin': '*', 'access-control-expose-headers': 'X-Upstream', 'x-upstream': 'yes' }).end('ok')
    })
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
    gateway = await startGateway(`
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
logging: { access: false }
cors:
  origins: [${APP}, 'http://localhost:5173']
  methods: [GET, POST]
  headers: [content-type, x-api-key]
  exposeHeaders: [X-Upstream]
  credentials: true
  maxAgeSeconds: 300
limits:
  - name: per-client
    policies: { algorithm: sliding-log, limit: 2, windowMs: 60000, name: per-client }
routes:
  - name: api
    match: { path: /api/** }
    upstream: http://127.0.0.1:${(upstream.address() as AddressInfo).port}
`)
  })

  after(async () => {
    await gateway?.stop()
    upstream?.closeAllConnections()
    upstream?.close()
  })

  const preflight = (origin: string, method: string, headers?: string) => fetch(`${gateway.url}/api/items`, {
    method: 'OPTIONS',
    headers: { origin, 'access-control-request-method': method, ...(headers !== undefined ? { 'access-control-request-headers': headers } : {}) },
  })

  it('answers preflights itself: 204 with what may be sent, or 403 naming what may not; never forwarded, never charged', async () => {
    const ok = await preflight(APP, 'POST', 'Content-Type, X-API-Key')
    assert.equal(ok.status, 204)
    assert.equal(ok.headers.get('access-control-allow-origin'), APP)
    assert.equal(ok.headers.get('access-control-allow-credentials'), 'true')
    assert.equal(ok.headers.get('access-control-allow-methods'), 'GET, POST')
    assert.equal(ok.headers.get('access-control-allow-headers'), 'content-type, x-api-key')
    assert.equal(ok.headers.get('access-control-max-age'), '300')
    assert.equal(ok.headers.get('content-length'), null, 'a 204 has no Content-Length')
    assert.match(ok.headers.get('vary') ?? '', /Origin/)
    const refusals = [
      [await preflight('https://evil.example', 'GET'), /origin "https:\/\/evil.example"/],
      [await preflight(APP, 'DELETE'), /method "DELETE"/],
      [await preflight(APP, 'GET', 'x-secret'), /header "x-secret"/],
    ] as const
    for (const [response, detail] of refusals) {
      assert.equal(response.status, 403)
      assert.equal(response.headers.get('access-control-allow-origin'), null)
      assert.match((await response.json() as { detail: string }).detail, detail)
    }
    assert.deepEqual(seen, [], 'no preflight reached the upstream')
    // Six preflights from one client, and its limit of 2 is still whole.
    const first = await fetch(`${gateway.url}/api/items`, { headers: { origin: APP } })
    assert.equal(first.status, 200)
    assert.match(first.headers.get('ratelimit') ?? '', /r=1/)
  })

  it('lets an allowed page read every answer: one Access-Control-Allow-Origin (the upstream\'s replaced), the rate-limit fields exposed, the 429 too', async () => {
    const allowed = await fetch(`${gateway.url}/api/items`, { headers: { origin: 'http://localhost:5173' } })
    assert.equal(allowed.status, 200)
    assert.equal(allowed.headers.get('access-control-allow-origin'), 'http://localhost:5173', 'the gateway\'s, not the upstream\'s "*" beside it')
    const exposed = (allowed.headers.get('access-control-expose-headers') ?? '').split(', ')
    for (const field of ['RateLimit', 'RateLimit-Policy', 'Retry-After', 'X-Upstream']) assert.ok(exposed.includes(field), `${field} is exposed`)
    assert.equal(allowed.headers.get('x-upstream'), 'yes')
    const refused = await fetch(`${gateway.url}/api/items`, { headers: { origin: APP } })
    assert.equal(refused.status, 429)
    assert.equal(refused.headers.get('access-control-allow-origin'), APP, 'a browser page can read its 429')
    assert.equal(refused.headers.get('access-control-allow-credentials'), 'true')
    assert.ok(refused.headers.get('retry-after'))
    // The gateway's other answers too (no route: 404).
    const missing = await fetch(`${gateway.url}/elsewhere`, { headers: { origin: APP } })
    assert.equal(missing.status, 404)
    assert.equal(missing.headers.get('access-control-allow-origin'), APP)
  })

  it('gives a page on another origin, or a request with no Origin, nothing that lets a browser read it', async () => {
    for (const headers of [{ origin: 'https://evil.example' }, {}]) {
      const response = await fetch(`${gateway.url}/elsewhere`, { headers })
      assert.equal(response.headers.get('access-control-allow-origin'), null)
      assert.match(response.headers.get('vary') ?? '', /Origin/, 'the answer depends on Origin: a cache must not hand it to an allowed page')
    }
  })
})

describe('gateway: cors for any page', () => {
  it('puts "*" on every answer, with or without Origin, so no answer depends on it; preflights get "*" too', async () => {
    const upstream = createServer((_req, res) => { res.end('ok') })
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
    const gateway = await startGateway(`
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
logging: { access: false }
cors: { origins: ['*'] }
routes:
  - name: all
    upstream: http://127.0.0.1:${(upstream.address() as AddressInfo).port}
`)
    try {
      for (const headers of [{ origin: 'https://anywhere.example' }, {}]) {
        const response = await fetch(`${gateway.url}/x`, { headers })
        assert.equal(response.status, 200)
        assert.equal(response.headers.get('access-control-allow-origin'), '*')
        assert.doesNotMatch(response.headers.get('vary') ?? '', /Origin/)
      }
      const preflight = await fetch(`${gateway.url}/x`, { method: 'OPTIONS', headers: { origin: 'https://anywhere.example', 'access-control-request-method': 'PUT', 'access-control-request-headers': 'X-Anything' } })
      assert.equal(preflight.status, 204)
      assert.equal(preflight.headers.get('access-control-allow-origin'), '*')
      assert.equal(preflight.headers.get('access-control-allow-headers'), 'x-anything', 'any header, by default')
    } finally {
      await gateway.stop()
      upstream.closeAllConnections()
      upstream.close()
    }
  })
})

describe('gateway config: cors', () => {
  it('refuses "*" with credentials, origins that are not origins, and methods that are not methods, each with its path', () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-cors-'))
    const check = (cors: string) => {
      const file = join(dir, 'sluice.yaml')
      writeFileSync(file, `cors:\n${cors}\nroutes:\n  - name: all\n    upstream: http://127.0.0.1:9\n`)
      const cli = new URL('../../dist/cli/main.js', import.meta.url).pathname
      try {
        execFileSync(process.execPath, [cli, 'check-config', file], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })
      } catch (error) {
        assert.equal((error as { status: number }).status, 1)
        return (error as { stderr: string }).stderr
      }
      return assert.fail('check-config accepted it')
    }
    try {
      assert.match(check("  origins: ['*']\n  credentials: true"), /cors\.origins: credentials need the origins named/)
      const problems = check("  origins: [https://app.example.com, https://app.example.com/path]\n  methods: ['GET POST']")
      assert.match(problems, /cors\.origins\[1\]: expected an origin such as https:\/\/app\.example\.com \(scheme and host, no path\), or "\*", got "https:\/\/app\.example\.com\/path" \(line 2\)/)
      assert.match(problems, /cors\.methods\[0\]: expected a method, got "GET POST" \(line 3\)/)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
