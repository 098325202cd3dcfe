/** Real servers on loopback for the HTTP suite: one per adapter. */
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { rateLimitOf } from '../../src/http/handler.ts'
import { withRateLimit as withNode, type RateLimitOptions } from '../../src/http/adapters/node.ts'
import { withRateLimit as withFetch } from '../../src/http/adapters/fetch.ts'
import { rateLimit as expressRateLimit } from '../../src/http/adapters/express.ts'
import { sluiceFastify } from '../../src/http/adapters/fastify.ts'
import express from 'express'
import Fastify from 'fastify'

export interface ServerUnderTest {
  url: string
  close(): Promise<void>
}

export type StartServer = (options: RateLimitOptions) => Promise<ServerUnderTest>

async function listen(server: Server): Promise<ServerUnderTest> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }),
  }
}

/** What the handler learns of its request's decision (rateLimitOf), sent back as a header for the tests. */
function seen(request: object): string {
  const decision = rateLimitOf(request)
  return decision === undefined ? 'none' : `${decision.policy}:${decision.remaining}`
}

/** The status a test asks the handler for (`x-status`), 200 by default. */
function statusAsked(header: string | string[] | undefined): number {
  return typeof header === 'string' ? Number(header) : 200
}

/** A pause a test asks the handler for (`x-delay-ms`), to keep requests in flight together. */
function delayAsked(header: string | string[] | undefined): Promise<void> {
  const ms = typeof header === 'string' ? Number(header) : 0
  return new Promise((resolve) => setTimeout(resolve, ms))
}

/** node:http with the node adapter. */
export const nodeServer: StartServer = (options) =>
  listen(createServer(withNode((req, res) => {
    void delayAsked(req.headers['x-delay-ms']).then(() => {
      res.statusCode = statusAsked(req.headers['x-status'])
      res.setHeader('Content-Type', 'text/plain').setHeader('x-handler-saw', seen(req)).end(`ok ${req.url}`)
    })
  }, options)))

/**
 * The fetch adapter behind a minimal node:http -> Request / Response bridge (what
 * Hono's node server does), passing the socket address as the runtime would.
 */
export const fetchServer: StartServer = (options) => {
  const handler = withFetch(
    async (request: Request, _remoteAddress: string | undefined) => {
      await delayAsked(request.headers.get('x-delay-ms') ?? undefined)
      return new Response(`ok ${new URL(request.url).pathname}`, { status: statusAsked(request.headers.get('x-status') ?? undefined), headers: { 'Content-Type': 'text/plain', 'x-handler-saw': seen(request) } })
    },
    options,
    (_request: Request, remoteAddress: string | undefined) => remoteAddress,
  )
  return listen(createServer(async (req, res) => {
    const headers = new Headers()
    for (const [name, value] of Object.entries(req.headers)) if (typeof value === 'string') headers.set(name, value)
    const target = req.url ?? '/'
    const request = new Request(target.startsWith('/') ? `http://${req.headers.host ?? 'localhost'}${target}` : target, { method: req.method ?? 'GET', headers })
    // As fetch runtimes (Deno.serve, Bun.serve, Hono) answer a handler that throws: 500.
    const response = await handler(request, req.socket.remoteAddress).catch(() => new Response(null, { status: 500 }))
    res.statusCode = response.status
    response.headers.forEach((value, name) => res.setHeader(name, value))
    res.end(Buffer.from(await response.arrayBuffer()))
  }))
}

/** An Express app with the middleware in front of every route. */
export const expressServer: StartServer = (options) => {
  const app = express()
  app.use(expressRateLimit(options))
  app.use(async (req, res) => {
    await delayAsked(req.headers['x-delay-ms'])
    res.status(statusAsked(req.headers['x-status'])).type('text/plain').set('x-handler-saw', seen(req)).send(`ok ${req.originalUrl}`)
  })
  return listen(createServer(app))
}

/** A Fastify app with the plugin registered. */
export const fastifyServer: StartServer = async (options) => {
  const app = Fastify({ logger: false })
  await app.register(sluiceFastify, options)
  app.all('/*', async (request, reply) => {
    await delayAsked(request.headers['x-delay-ms'])
    return reply.code(statusAsked(request.headers['x-status'])).type('text/plain').header('x-handler-saw', seen(request)).send(`ok ${request.url}`)
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as AddressInfo
  return { url: `http://127.0.0.1:${port}`, close: async () => { await app.close() } }
}
