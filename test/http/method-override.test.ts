/**
 * A limit on a method holds against a POST that the application behind
 * serves as that method: Express's method-override, Hono's methodOverride,
 * ASP.NET Core and Rack read `X-HTTP-Method-Override` (and its variants) on a
 * POST, and Laravel, Symfony and method-override('_method') a `_method`
 * query parameter. Without that, `DELETE /items/1` past its limit would go
 * through as `POST /items/1` with `X-HTTP-Method-Override: DELETE`, or as
 * `POST /items/1?_method=DELETE`.
 */
import assert from 'node:assert/strict'
import { createServer, request as httpRequest, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { describe, it } from 'node:test'
import { serve, type Http2Bindings, type HttpBindings } from '@hono/node-server'
import express from 'express'
import { Hono } from 'hono'
import { methodOverride as honoMethodOverride } from 'hono/method-override'
import methodOverride from 'method-override'
import { rateLimit } from '../../src/http/adapters/express.ts'
import { withRateLimit as withFetchRateLimit } from '../../src/http/adapters/fetch.ts'
import { withRateLimit as withNodeRateLimit, type RateLimitOptions } from '../../src/http/adapters/node.ts'
import { startGateway } from '../support/gateway.ts'

const DELETED = 'deleted'
const options = (): RateLimitOptions => ({
  rules: [{ name: 'deletes', match: { path: '/items/*', method: 'DELETE' }, policies: { algorithm: 'sliding-log', limit: 1, windowMs: 600_000, name: 'deletes' } }],
  onWarning: () => {},
})

interface App { url: string; close: () => Promise<void> }

async function listening(server: Server): Promise<App> {
  if (!server.listening) await new Promise((resolve) => server.once('listening', resolve))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: async () => { server.closeAllConnections(); server.close() } }
}

/** Express with the limit first, then method-override reading X-HTTP-Method-Override and `_method`, as its README sets them up. */
async function expressApp(limit: RateLimitOptions | undefined): Promise<App> {
  const app = express()
  if (limit !== undefined) app.use(rateLimit(limit))
  app.use(methodOverride('X-HTTP-Method-Override'))
  app.use(methodOverride('_method'))
  app.delete('/items/:id', (_req, res) => { res.send(DELETED) })
  app.all('/{*rest}', (_req, res) => { res.send('another handler') })
  return listening(createServer(app).listen(0, '127.0.0.1'))
}

const apps: Record<string, () => Promise<App>> = {
  'express (method-override after the limit)': () => expressApp(options()),
  'fetch (Hono with its methodOverride reading the header)': async () => {
    const app = new Hono()
    app.use(honoMethodOverride({ app, header: 'X-HTTP-Method-Override' }))
    app.delete('/items/:id', (c) => c.text(DELETED))
    app.all('*', (c) => c.text('another handler'))
    const fetch = withFetchRateLimit((request: Request, env: HttpBindings | Http2Bindings) => app.fetch(request, env), options(), (_request, env) => env.incoming.socket.remoteAddress)
    return listening(serve({ fetch, port: 0, hostname: '127.0.0.1' }) as Server)
  },
  'node (a listener honouring X-HTTP-Method)': () => listening(createServer(withNodeRateLimit((req, res) => {
    const override = req.method === 'POST' ? req.headers['x-http-method'] : undefined
    const method = typeof override === 'string' ? override.toUpperCase() : req.method
    res.end(method === 'DELETE' && req.url?.startsWith('/items/') ? DELETED : 'another handler')
  }, options())).listen(0, '127.0.0.1')),
  'gateway (a limit narrowed to DELETE) in front of Express with method-override': () => gatewayBefore(`
  - name: all
    match: { path: /** }
    upstream: UPSTREAM
    limits:
      - name: deletes
        match: { path: /items/*, method: DELETE }
        policies: [{ algorithm: sliding-log, name: deletes, limit: 1, windowMs: 600000 }]
`),
}

/** The gateway with these routes (YAML, `UPSTREAM` standing for its URL) in front of Express with method-override. */
async function gatewayBefore(routes: string): Promise<App> {
  const upstream = await expressApp(undefined)
  const gateway = await startGateway(`
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
routes:
${routes.replaceAll('UPSTREAM', upstream.url)}
`).catch(async (error: unknown) => {
    await upstream.close()
    throw error
  })
  return { url: gateway.url, close: async () => { await gateway.stop(); await upstream.close() } }
}

function send(url: string, method: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const { hostname, port } = new URL(url)
    const req = httpRequest({ host: hostname, port, method, path, headers }, (res) => {
      let body = ''
      res.setEncoding('utf8').on('data', (part: string) => { body += part }).on('end', () => resolve({ status: res.statusCode ?? 0, body }))
    })
    req.on('error', reject)
    req.end()
  })
}

describe('a limit on a method holds against a POST that names it in a method-override header or _method', () => {
  for (const [name, start] of Object.entries(apps)) {
    it(name, async () => {
      const app = await start()
      try {
        assert.deepEqual(await send(app.url, 'DELETE', '/items/1'), { status: 200, body: DELETED })
        assert.equal((await send(app.url, 'DELETE', '/items/2')).status, 429)
        for (const header of ['X-HTTP-Method-Override', 'X-HTTP-Method', 'X-Method-Override']) {
          for (const value of ['DELETE', 'delete', ' Delete ', 'PATCH, DELETE']) {
            const overridden = await send(app.url, 'POST', '/items/3', { [header]: value })
            assert.equal(overridden.status, 429, `POST with ${header}: ${value} reached ${JSON.stringify(overridden.body)}`)
          }
        }
        for (const target of ['/items/3?_method=DELETE', '/items/3?_method=delete', '/items/3?page=2&_method=DELETE', '/items/3?%5Fmethod=DELETE', '/items/3?_m%65thod=DELETE', '/items/3?_method=PUT&_method=DELETE', '/items/3?_method[]=DELETE']) {
          const overridden = await send(app.url, 'POST', target)
          assert.equal(overridden.status, 429, `POST ${target} reached ${JSON.stringify(overridden.body)}`)
        }
        // Other methods are not overridden by these frameworks, and a POST naming no other method is a POST.
        assert.equal((await send(app.url, 'GET', '/items/3', { 'X-HTTP-Method-Override': 'DELETE' })).status, 200)
        assert.equal((await send(app.url, 'POST', '/items/3')).status, 200)
        assert.equal((await send(app.url, 'POST', '/items/3', { 'X-HTTP-Method-Override': 'PUT' })).status, 200)
        assert.equal((await send(app.url, 'GET', '/items/3?_method=DELETE')).status, 200)
        assert.equal((await send(app.url, 'POST', '/items/3?_method=PUT&methodology=DELETE')).status, 200)
      } finally {
        await app.close()
      }
    })
  }

  it('gateway: a POST whose override names a method another route takes gets 400, not that route\'s upstream past its limits', async () => {
    const gateway = await gatewayBefore(`
  - name: deletes
    match: { path: /items/**, method: DELETE }
    upstream: UPSTREAM
    limits:
      - name: deletes
        policies: [{ algorithm: sliding-log, name: deletes, limit: 1, windowMs: 600000 }]
  - name: rest
    match: { path: /** }
    upstream: UPSTREAM
`)
    try {
      assert.equal((await send(gateway.url, 'DELETE', '/items/1')).status, 200)
      assert.equal((await send(gateway.url, 'DELETE', '/items/1')).status, 429)
      const ambiguous = await send(gateway.url, 'POST', '/items/1', { 'X-HTTP-Method-Override': 'DELETE' })
      assert.equal(ambiguous.status, 400)
      assert.match(ambiguous.body, /a POST that names another method in X-HTTP-Method-Override/)
      assert.equal((await send(gateway.url, 'POST', '/items/1?_method=DELETE')).status, 400)
      // A POST whose override picks the same route, and a plain POST, go on as before.
      assert.equal((await send(gateway.url, 'POST', '/other', { 'X-HTTP-Method-Override': 'PUT' })).status, 200)
      assert.equal((await send(gateway.url, 'POST', '/items/1')).status, 200)
    } finally {
      await gateway.close()
    }
  })
})
