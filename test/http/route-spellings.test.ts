/**
 * A spent limit on /login holds against every spelling of a request target
 * that the framework (or, behind the gateway, the upstream) routes to its
 * /login handler: random targets built from the pieces routers read
 * differently (case, dots, encodings, `;`, `#`, backslashes, doubled
 * slashes), sent raw over a socket, as no HTTP client would send them.
 */
import assert from 'node:assert/strict'
import { createServer, type Server } from 'node:http'
import { connect, type AddressInfo } from 'node:net'
import { posix } from 'node:path'
import { describe, it } from 'node:test'
import { serve, type Http2Bindings, type HttpBindings } from '@hono/node-server'
import express from 'express'
import fc from 'fast-check'
import Fastify from 'fastify'
import { Hono } from 'hono'
import { rateLimit } from '../../src/http/adapters/express.ts'
import { sluiceFastify } from '../../src/http/adapters/fastify.ts'
import { withRateLimit as withFetchRateLimit } from '../../src/http/adapters/fetch.ts'
import { withRateLimit as withNodeRateLimit, type RateLimitOptions } from '../../src/http/adapters/node.ts'
import type { MatchOptions } from '../../src/http/match.ts'
import { fcOptions } from '../helpers.ts'
import { startGateway } from '../support/gateway.ts'

const HANDLER = 'the /login handler'
const limitOn = (match: MatchOptions) => (): RateLimitOptions => ({
  rules: [{ name: 'login', match, policies: { algorithm: 'sliding-log', limit: 1, windowMs: 600_000, name: 'login' } }],
  onWarning: () => {},
})

/** One request with its target (and Host) exactly as written; the whole response as text. */
function raw(port: number, target: string, host = 'app.test'): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(`GET ${target} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`))
    let response = ''
    const timer = setTimeout(() => socket.destroy(new Error(`no answer to ${target} within 5 s`)), 5000)
    socket.setEncoding('latin1').on('data', (part: string) => { response += part })
    socket.on('close', () => { clearTimeout(timer); resolve(response) }).on('error', reject)
  })
}

// Every spelling of /login these make, whatever comes before and after it.
const before = ['', '/', '//', '//evil.test', '/\\evil.test', '///', '/x/..', '/x/%2e%2e', '/.', '\\', '/x%2F..', '/%2F']
const login = ['/login', '/LOGIN', '/Login', '/%6cogin', '/lo%67in', '/%4cOGIN', '\\login']
const after = ['', '/', '#x', '#/../x', '?x', ';', ';a=b', ';a=b/x', ';/../x', '/.', '/x/..', '%2f', '%2F..%2F..%2Flogin', '~', '%20', '?#', '/;x']
const spellings = before.flatMap((head) => login.flatMap((middle) => after.map((tail) => `${head}${middle}${tail}`)))

// And random targets of the pieces routers read differently.
const pieces = ['login', 'LOGIN', '%6cogin', 'lo%67in', 'login%2f', 'l%2Fogin', '.', '..', '%2e', '%2E%2e', '.%2e', '', ';x', ';', 'login;a=b',
  '#x', '#', '?x', '%23', '%3b', '%3f', '\\', '%5c', '%00', 'login.', 'login~', '%20', '+', 'x', 'evil.test', '%2f', '%252e', '*']
const target = fc.array(fc.tuple(fc.constantFrom('/', '/', '', '//', '\\'), fc.constantFrom(...pieces)), { minLength: 1, maxLength: 5 })
  .map((parts) => {
    const path = parts.map(([separator, piece]) => separator + piece).join('')
    return path.startsWith('/') || path.startsWith('\\') ? path : `/${path}`
  })

async function listening(server: Server): Promise<number> {
  if (!server.listening) await new Promise((resolve) => server.once('listening', resolve))
  return (server.address() as AddressInfo).port
}

interface App { port: number; close: () => Promise<void> }

// Fastify 5 reads useSemicolonDelimiter in routerOptions, though its types list it only at the top level.
const semicolonRouting = { caseSensitive: false, useSemicolonDelimiter: true }

/** The apps, each limited as `options` says; behind the gateway, the gateway's `routes` (YAML, `UPSTREAM` standing for the upstream's URL). */
const appsLimiting = (options: () => RateLimitOptions, routes: string): Record<string, () => Promise<App>> => ({
  express: async () => {
    const app = express()
    app.use(rateLimit(options()))
    app.all('/login', (_req, res) => { res.send(HANDLER) })
    const server = createServer(app).listen(0, '127.0.0.1')
    return { port: await listening(server), close: async () => { server.closeAllConnections(); server.close() } }
  },
  fastify: async () => {
    const app = Fastify()
    await app.register(sluiceFastify, options())
    app.all('/login', async () => HANDLER)
    await app.listen({ port: 0, host: '127.0.0.1' })
    return { port: (app.server.address() as AddressInfo).port, close: () => app.close() }
  },
  'fastify (caseSensitive: false, useSemicolonDelimiter, ignoreTrailingSlash, ignoreDuplicateSlashes)': async () => {
    const app = Fastify({ routerOptions: { ...semicolonRouting, ignoreTrailingSlash: true, ignoreDuplicateSlashes: true } })
    await app.register(sluiceFastify, options())
    app.all('/login', async () => HANDLER)
    await app.listen({ port: 0, host: '127.0.0.1' })
    return { port: (app.server.address() as AddressInfo).port, close: () => app.close() }
  },
  'fetch (Hono on @hono/node-server)': async () => {
    const app = new Hono()
    app.all('/login', (c) => c.text(HANDLER))
    const server = serve({ fetch: withFetchRateLimit((request, env: HttpBindings | Http2Bindings) => app.fetch(request, env), options(), (_request, env) => env.incoming.socket.remoteAddress), port: 0, hostname: '127.0.0.1' }) as Server
    return { port: await listening(server), close: async () => { server.close() } }
  },
  'node (a listener reading its path with new URL)': async () => {
    const server = createServer(withNodeRateLimit((req, res) => {
      let path = ''
      try {
        path = new URL(req.url ?? '/', 'http://localhost').pathname
      } catch { /* not a URL: no route */ }
      res.end(path === '/login' ? HANDLER : 'another handler')
    }, options())).listen(0, '127.0.0.1')
    return { port: await listening(server), close: async () => { server.closeAllConnections(); server.close() } }
  },
  'gateway in front of Express': async () => gatewayBefore(await upstreamWithLogin('express'), routes),
  'gateway in front of Fastify (caseSensitive: false, useSemicolonDelimiter)': async () => gatewayBefore(await upstreamWithLogin('fastify'), routes),
  'gateway in front of a server routing the decoded path (as nginx does)': async () => gatewayBefore(await upstreamWithLogin('decoding'), routes),
  'gateway in front of a server cutting ;parameters (as Tomcat does)': async () => gatewayBefore(await upstreamWithLogin('parameters'), routes),
})

/** The gateway with its default settings and these routes in front of `upstream`. */
async function gatewayBefore(upstream: App, routes: string): Promise<App> {
  const gateway = await startGateway(`
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
routes:
${routes.replaceAll('UPSTREAM', `http://127.0.0.1:${upstream.port}`)}
`).catch(async (error: unknown) => {
    await upstream.close()
    throw error
  })
  return { port: Number(new URL(gateway.url).port), close: async () => { await gateway.stop(); await upstream.close() } }
}

async function upstreamWithLogin(kind: 'express' | 'fastify' | 'decoding' | 'parameters'): Promise<App> {
  if (kind === 'parameters') {
    // Cuts each segment's ;parameters, then resolves dots, as Tomcat and Spring read a path: /static/..;/login is /login.
    const server = createServer((req, res) => {
      const path = posix.normalize(((req.url ?? '/').split('?')[0] as string).replace(/;[^/]*/g, ''))
      res.end(path === '/login' ? HANDLER : 'another handler')
    }).listen(0, '127.0.0.1')
    return { port: await listening(server), close: async () => { server.closeAllConnections(); server.close() } }
  }
  if (kind === 'decoding') {
    // Routes the fully decoded, dot-resolved path, as nginx locations (and Go's r.URL.Path) read it: /x%2F..%2Flogin is /login.
    const server = createServer((req, res) => {
      let path = ''
      try {
        path = posix.normalize(decodeURIComponent((req.url ?? '/').split('?')[0] as string))
      } catch { /* not decodable: no route */ }
      res.end(path === '/login' ? HANDLER : 'another handler')
    }).listen(0, '127.0.0.1')
    return { port: await listening(server), close: async () => { server.closeAllConnections(); server.close() } }
  }
  if (kind === 'express') {
    const app = express()
    app.all('/login', (_req, res) => { res.send(HANDLER) })
    const server = createServer(app).listen(0, '127.0.0.1')
    return { port: await listening(server), close: async () => { server.closeAllConnections(); server.close() } }
  }
  const app = Fastify({ routerOptions: semicolonRouting })
  app.all('/login', async () => HANDLER)
  await app.listen({ port: 0, host: '127.0.0.1' })
  return { port: (app.server.address() as AddressInfo).port, close: () => app.close() }
}

/** Spends /login's limit of 1, then sends each spelling and `runs` random targets: none may reach the /login handler. */
async function holds(start: () => Promise<App>, spellings: readonly string[], target: fc.Arbitrary<string>, runs: number): Promise<void> {
  const app = await start()
  try {
    assert.match(await raw(app.port, '/login'), new RegExp(HANDLER))
    assert.match(await raw(app.port, '/login'), /^HTTP\/1\.1 429 /)
    const reached: string[] = []
    for (const path of spellings) if ((await raw(app.port, path)).includes(HANDLER)) reached.push(path)
    assert.deepEqual(reached, [], `${reached.length} of ${spellings.length} spellings reached the /login handler`)
    await fc.assert(fc.asyncProperty(target, async (path) => {
      assert.doesNotMatch(await raw(app.port, path), new RegExp(HANDLER), `${path} reached the /login handler`)
    }), fcOptions(runs))
  } finally {
    await app.close()
  }
}

// Behind the gateway: /login limited, everything else passed on unlimited.
const loginRoutes = `
  - name: login
    match: { path: /login }
    upstream: UPSTREAM
    limits:
      - name: login
        policies: { algorithm: sliding-log, name: login, limit: 1, windowMs: 600000 }
  - name: rest
    match: { path: /** }
    upstream: UPSTREAM
`

describe('a spent limit holds against every spelling its handler answers to', () => {
  for (const [name, start] of Object.entries(appsLimiting(limitOn({ path: '/login' }), loginRoutes))) {
    it(name, () => holds(start, spellings, target, 200))
  }
})

/**
 * A limit on everything but /static/** holds against paths that read as under
 * /static to one server and as /login to another (`/static/..%2Flogin` is
 * /login to nginx, `/static/..;/login` to Tomcat, `/login;/../static/x` to
 * Fastify's useSemicolonDelimiter): every reading that is not excluded is
 * limited, and behind the gateway, whose routes pick an upstream, a path that
 * reads as two routes' is refused.
 */
describe('a spent limit that excludes some paths holds against paths that read as excluded to one server only', () => {
  const staticFirst = `
  - name: static
    match: { path: /static/** }
    upstream: UPSTREAM
  - name: rest
    match: { path: /** }
    upstream: UPSTREAM
    limits:
      - name: login
        policies: { algorithm: sliding-log, name: login, limit: 1, windowMs: 600000 }
`
  const excludingRoutes = `
  - name: all
    match: { path: /** }
    upstream: UPSTREAM
    limits:
      - name: login
        match: { path: /**, exclude: /static/** }
        policies: { algorithm: sliding-log, name: login, limit: 1, windowMs: 600000 }
`
  const intoStatic = ['/static/..', '/static/x/../..', '/static/%2e%2e', '/static/..%2F', '/static/x%2F..%2F..', '/static/..%5C', '/static/..;', '/static/..;x=1', '/static;x/..', '/static/..\\', '/static/x/..;/..']
  const excludedSpellings = intoStatic.flatMap((head) => login.flatMap((middle) => ['', '/', ';x', '/;/../static/x'].map((tail) => `${head}${middle}${tail}`)))
    .concat(login.map((middle) => `${middle};/../static/x`), login.map((middle) => `${middle};x/../../static/x`))
  const underStatic = target.map((path) => `/static${path}`)
  const excluding = appsLimiting(limitOn({ path: '/**', exclude: '/static/**' }), excludingRoutes)
  for (const [name, start] of Object.entries(excluding)) {
    it(name, () => holds(start, excludedSpellings, underStatic, 100))
  }
  const skipping = (): RateLimitOptions => ({ ...limitOn({ path: '/**' })(), skip: ['/static/**'] })
  for (const [name, start] of Object.entries(appsLimiting(skipping, excludingRoutes)).filter(([name]) => !name.startsWith('gateway'))) {
    it(`${name}, skipping /static/**`, () => holds(start, excludedSpellings, underStatic, 100))
  }
  const upstreams = { fastify: 'Fastify (caseSensitive: false, useSemicolonDelimiter)', decoding: 'a server routing the decoded path', parameters: 'a server cutting ;parameters' } as const
  for (const [upstream, described] of Object.entries(upstreams) as Array<[keyof typeof upstreams, string]>) {
    it(`gateway routing /static/** first, unlimited, in front of ${described}`, async () => {
      await holds(async () => gatewayBefore(await upstreamWithLogin(upstream), staticFirst), excludedSpellings, underStatic, 100)
    })
  }
})

/**
 * A limit on one host, in front of apps that tell hosts apart, each as it
 * reads a request's host: Express and Fastify from the Host field, Hono (whose
 * URL @hono/node-server builds from an absolute-form target, as RFC 9112
 * 3.2.2 says servers must) and a node listener using WHATWG URL from the
 * target's authority when it has one.
 */
const hostOptions = (): RateLimitOptions => ({
  rules: [{ name: 'api-login', match: { host: 'api.test', path: '/login' }, policies: { algorithm: 'sliding-log', limit: 1, windowMs: 600_000, name: 'api-login' } }],
  onWarning: () => {},
})
const apiHandler = (host: string | undefined, path: string): string =>
  host?.toLowerCase().replace(/\.$/, '') === 'api.test' && path === '/login' ? HANDLER : 'another handler'

const hostApps: Record<string, () => Promise<App>> = {
  'express (req.hostname)': async () => {
    const app = express()
    app.use(rateLimit(hostOptions()))
    app.all('/login', (req, res) => { res.send(apiHandler(req.hostname, '/login')) })
    const server = createServer(app).listen(0, '127.0.0.1')
    return { port: await listening(server), close: async () => { server.closeAllConnections(); server.close() } }
  },
  'fastify (request.hostname)': async () => {
    const app = Fastify()
    await app.register(sluiceFastify, hostOptions())
    app.all('/login', async (request) => apiHandler(request.hostname, '/login'))
    await app.listen({ port: 0, host: '127.0.0.1' })
    return { port: (app.server.address() as AddressInfo).port, close: () => app.close() }
  },
  'fetch (Hono on @hono/node-server, the URL\'s hostname)': async () => {
    const app = new Hono()
    app.all('*', (c) => { const url = new URL(c.req.url); return c.text(apiHandler(url.hostname, url.pathname)) })
    const server = serve({ fetch: withFetchRateLimit((request, env: HttpBindings | Http2Bindings) => app.fetch(request, env), hostOptions(), (_request, env) => env.incoming.socket.remoteAddress), port: 0, hostname: '127.0.0.1' }) as Server
    return { port: await listening(server), close: async () => { server.close() } }
  },
  'node (a listener reading its URL with new URL, based on Host)': async () => {
    const server = createServer(withNodeRateLimit((req, res) => {
      let url: URL | undefined
      try {
        url = new URL(req.url ?? '/', `http://${req.headers.host ?? 'localhost'}`)
      } catch { /* not a URL: no route */ }
      res.end(apiHandler(url?.hostname, url?.pathname ?? ''))
    }, hostOptions())).listen(0, '127.0.0.1')
    return { port: await listening(server), close: async () => { server.closeAllConnections(); server.close() } }
  },
}

hostApps['gateway in front of Express trusting it (req.hostname from X-Forwarded-Host)'] = async () => {
  const app = express()
  app.set('trust proxy', 'loopback')
  app.all('/login', (req, res) => { res.send(apiHandler(req.hostname, '/login')) })
  const server = createServer(app).listen(0, '127.0.0.1')
  const upstream = `http://127.0.0.1:${await listening(server)}`
  const gateway = await startGateway(`
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
routes:
  - name: api-login
    match: { host: api.test, path: /login }
    upstream: ${upstream}
    limits:
      - name: api-login
        policies: { algorithm: sliding-log, name: api-login, limit: 1, windowMs: 600000 }
  - name: rest
    match: { path: /** }
    upstream: ${upstream}
`).catch((error: unknown) => {
    server.close()
    throw error
  })
  return { port: Number(new URL(gateway.url).port), close: async () => { await gateway.stop(); server.closeAllConnections(); server.close() } }
}

describe('a spent limit on a host holds however the request names that host', () => {
  const hosts = ['api.test', 'API.Test', 'api.test.', 'api.test:80', 'other.test', 'other.test:80', 'api.test:', 'api.test:x', 'api.test.:80', 'api.test:080', 'api.test:80:80', 'api.test@other.test', 'other.test@api.test', 'api.test/x', 'api.test%2e', 'api.test:80.']
  const targets = ['/login', ...hosts.map((host) => `http://${host}/login`), 'HTTPS://API.TEST/login', '//api.test/login', '\\\\api.test/login', '/\\api.test/login']
  for (const [name, start] of Object.entries(hostApps)) {
    it(name, async () => {
      const app = await start()
      try {
        assert.match(await raw(app.port, '/login', 'api.test'), new RegExp(HANDLER))
        assert.match(await raw(app.port, '/login', 'api.test'), /^HTTP\/1\.1 429 /)
        const reached: string[] = []
        for (const target of targets) {
          for (const host of hosts) if ((await raw(app.port, target, host)).includes(HANDLER)) reached.push(`${target} with Host: ${host}`)
        }
        assert.deepEqual(reached, [], `${reached.length} of ${targets.length * hosts.length} requests reached the api.test /login handler`)
      } finally {
        await app.close()
      }
    })
  }
})
