/** Real servers on loopback for the HTTP suite: one per adapter. */
import { createServer, type Server } from 'node:http'
import { createRequire } from 'node:module'
import { Readable } from 'node:stream'
import { setTimeout as sleep } from 'node:timers/promises'
import type { AddressInfo } from 'node:net'
import { rateLimitOf } from '../../src/http/handler.ts'
import { withRateLimit as withNode, type RateLimitOptions } from '../../src/http/adapters/node.ts'
import { withRateLimit as withFetch } from '../../src/http/adapters/fetch.ts'
import { rateLimit as expressRateLimit } from '../../src/http/adapters/express.ts'
import { sluiceFastify } from '../../src/http/adapters/fastify.ts'
import { rateLimit as koaRateLimit } from '../../src/http/adapters/koa.ts'
import express from 'express'
import Fastify from 'fastify'
import Koa from 'koa'
import { Hono } from 'hono'
import type { ContentfulStatusCode } from 'hono/utils/http-status'
import { createAdaptorServer, type Http2Bindings, type HttpBindings } from '@hono/node-server'

// The frameworks' previous majors, still the most installed, as package aliases (express4, fastify4, koa2): the same
// apps run on them. Their API, as these apps use it, is the current one's.
const require = createRequire(import.meta.url)
const express4 = require('express4') as typeof express
const fastify4 = require('fastify4') as typeof Fastify
const Koa2 = require('koa2') as typeof Koa

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

/**
 * A streamed response a test asks for (`x-stream-ms`): its head and first chunk at once, its last
 * chunk after that many ms (a server-sent events stream, a large download).
 */
function streamAsked(header: string | string[] | undefined): number | undefined {
  return typeof header === 'string' ? Number(header) : undefined
}

async function* chunksOver(ms: number) {
  yield Buffer.from('first ')
  await sleep(ms)
  yield Buffer.from('last')
}

/** node:http with the node adapter. */
export const nodeServer: StartServer = (options) =>
  listen(createServer(withNode((req, res) => {
    const streamMs = streamAsked(req.headers['x-stream-ms'])
    if (streamMs !== undefined) {
      res.setHeader('Content-Type', 'text/plain')
      Readable.from(chunksOver(streamMs)).pipe(res)
      return
    }
    void delayAsked(req.headers['x-delay-ms']).then(() => {
      res.statusCode = statusAsked(req.headers['x-status'])
      res.setHeader('Content-Type', 'text/plain').setHeader('x-handler-saw', seen(req)).end(`ok ${req.url}`)
    })
  }, options)))

/**
 * A Hono app served by @hono/node-server, its fetch handler wrapped by the
 * fetch adapter, which learns the client's address from the node request the
 * server hands Hono (`env.incoming`).
 */
export const fetchServer: StartServer = (options) => {
  const app = new Hono<{ Bindings: HttpBindings }>()
  app.all('*', async (c) => {
    const streamMs = streamAsked(c.req.header('x-stream-ms'))
    if (streamMs !== undefined) return c.body(Readable.toWeb(Readable.from(chunksOver(streamMs))) as ReadableStream<Uint8Array>)
    await delayAsked(c.req.header('x-delay-ms'))
    return c.text(`ok ${c.req.path}`, statusAsked(c.req.header('x-status')) as ContentfulStatusCode, { 'x-handler-saw': seen(c.req.raw) })
  })
  const fetch = withFetch((request: Request, env: HttpBindings | Http2Bindings) => app.fetch(request, env), options, (_request, env) => env.incoming.socket.remoteAddress)
  return listen(createAdaptorServer({ fetch }) as Server)
}

/** An Express app with the middleware in front of every route. */
const expressServerOn = (framework: typeof express): StartServer => (options) => {
  const app = framework()
  app.use(expressRateLimit(options))
  app.use(async (req, res) => {
    const streamMs = streamAsked(req.headers['x-stream-ms'])
    if (streamMs !== undefined) return void Readable.from(chunksOver(streamMs)).pipe(res.type('text/plain'))
    await delayAsked(req.headers['x-delay-ms'])
    res.status(statusAsked(req.headers['x-status'])).type('text/plain').set('x-handler-saw', seen(req)).send(`ok ${req.originalUrl}`)
  })
  return listen(createServer(app))
}
export const expressServer = expressServerOn(express)
export const express4Server = expressServerOn(express4)

/** A Fastify app with the plugin registered. */
const fastifyServerOn = (framework: typeof Fastify): StartServer => async (options) => {
  const app = framework({ logger: false })
  await app.register(sluiceFastify, options)
  app.all('/*', async (request, reply) => {
    const streamMs = streamAsked(request.headers['x-stream-ms'])
    if (streamMs !== undefined) return reply.type('text/plain').send(Readable.from(chunksOver(streamMs)))
    await delayAsked(request.headers['x-delay-ms'])
    return reply.code(statusAsked(request.headers['x-status'])).type('text/plain').header('x-handler-saw', seen(request)).send(`ok ${request.url}`)
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as AddressInfo
  return { url: `http://127.0.0.1:${port}`, close: async () => { await app.close() } }
}
export const fastifyServer = fastifyServerOn(Fastify)
export const fastify4Server = fastifyServerOn(fastify4)

/** A Koa app with the middleware in front of its one handler, which reports what ctx.state says of the decision too. */
const koaServerOn = (Framework: typeof Koa): StartServer => (options) => {
  const app = new Framework()
  // The default: errors are logged to stderr and answered 500.
  app.silent = true
  app.use(koaRateLimit(options))
  app.use(async (ctx) => {
    const streamMs = streamAsked(ctx.get('x-stream-ms') || undefined)
    if (streamMs !== undefined) {
      ctx.type = 'text/plain'
      ctx.body = Readable.from(chunksOver(streamMs))
      return
    }
    await delayAsked(ctx.get('x-delay-ms') || undefined)
    const state = ctx.state.rateLimit as { policy: string; remaining: number } | undefined
    if (state !== undefined && seen(ctx.req) !== `${state.policy}:${state.remaining}`) throw new Error('ctx.state.rateLimit is not the decision rateLimitOf gives')
    ctx.status = statusAsked(ctx.get('x-status') || undefined)
    ctx.type = 'text/plain'
    ctx.set('x-handler-saw', seen(ctx.req))
    ctx.body = `ok ${ctx.originalUrl}`
  })
  return listen(createServer(app.callback()))
}
export const koaServer = koaServerOn(Koa)
export const koa2Server = koaServerOn(Koa2)
