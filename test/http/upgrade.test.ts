/**
 * WebSocket upgrades: on a node server, request listeners (withRateLimit,
 * Express) never see them, so `rateLimitUpgrade` limits the server's
 * 'upgrade' event in front of a real `ws` server; Fastify runs its onRequest
 * hooks for @fastify/websocket routes, so the plugin covers them.
 */
import assert from 'node:assert/strict'
import { once } from 'node:events'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { connect } from 'node:net'
import { after, before, describe, it } from 'node:test'
import { WebSocketServer } from 'ws'
import Fastify from 'fastify'
import fastifyWebsocket from '@fastify/websocket'
import { sluiceFastify } from '../../src/http/adapters/fastify.ts'
import { rateLimitUpgrade } from '../../src/http/adapters/node.ts'
import { openWebSocket } from '../support/websocket.ts'

describe('rateLimitUpgrade (node server + ws)', () => {
  let server: Server
  let url: string
  let accepted = 0
  const warnings: string[] = []

  before(async () => {
    const limitUpgrade = rateLimitUpgrade({
      rules: [{ name: 'connects', policies: { algorithm: 'sliding-log', name: 'connects', limit: 2, windowMs: 60_000 } }],
      key: (request) => (request.path === '/broken' ? (() => { throw new Error('key lookup failed') })() : `ip:${request.remoteAddress ?? ''}`),
      onWarning: (message) => warnings.push(message),
    })
    const sockets = new WebSocketServer({ noServer: true })
    server = createServer((_req, res) => res.end('plain'))
    server.on('upgrade', (req, socket, head) => {
      void limitUpgrade(req, socket as import('node:net').Socket).then((proceed) => {
        if (!proceed) return
        accepted++
        sockets.handleUpgrade(req, socket, head, (ws) => ws.on('message', (data) => ws.send(`echo ${String(data)}`)))
      })
    })
    server.listen(0, '127.0.0.1')
    await once(server, 'listening')
    url = `ws://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
  after(() => server.close())

  it('accepts up to the limit (the sockets work), then answers 429 with its fields and problem body, and closes', async () => {
    const first = await openWebSocket(`${url}/chat`)
    const second = await openWebSocket(`${url}/chat`)
    const third = await openWebSocket(`${url}/chat`)
    assert.ok('ws' in first && 'ws' in second)
    first.ws.send('hi')
    assert.equal(String((await once(first.ws, 'message'))[0]), 'echo hi')
    assert.ok('status' in third)
    assert.equal(third.status, 429)
    assert.equal(third.headers.ratelimit, '"connects";r=0;t=60')
    assert.equal(third.headers['retry-after'], '60')
    assert.deepEqual(JSON.parse(third.body)['violated-policies'], ['connects'])
    assert.equal(accepted, 2)
    first.ws.close()
    second.ws.close()
  })

  it('a callback that throws is a 500 and a warning, not a crash or a hung client', async () => {
    const broken = await openWebSocket(`${url}/broken`)
    assert.ok('status' in broken)
    assert.equal(broken.status, 500)
    assert.match(warnings.join('\n'), /key lookup failed/)
  })

  it('a client that resets while its upgrade is decided does not take the server down', async () => {
    const { port } = new URL(url)
    for (let i = 0; i < 20; i++) {
      const socket = connect(Number(port), '127.0.0.1', () => {
        socket.write('GET /chat HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n')
        socket.resetAndDestroy()
      })
      socket.on('error', () => {})
    }
    await new Promise((resolve) => setTimeout(resolve, 100))
    const response = await fetch(url.replace('ws:', 'http:'))
    assert.equal(await response.text(), 'plain')
  })
})

describe('sluiceFastify with @fastify/websocket', () => {
  it('limits WebSocket connections on websocket routes: past the limit the upgrade gets the 429', async () => {
    const app = Fastify({ logger: false })
    await app.register(fastifyWebsocket)
    await app.register(sluiceFastify, { rules: [{ name: 'connects', policies: { algorithm: 'sliding-log', name: 'connects', limit: 2, windowMs: 60_000 } }] })
    app.get('/chat', { websocket: true }, (socket) => { socket.on('message', (data: Buffer) => socket.send(`echo ${String(data)}`)) })
    await app.listen({ port: 0, host: '127.0.0.1' })
    try {
      const url = `ws://127.0.0.1:${(app.server.address() as AddressInfo).port}/chat`
      const first = await openWebSocket(url)
      const second = await openWebSocket(url)
      const refused = await openWebSocket(url)
      assert.ok('ws' in first && 'ws' in second)
      first.ws.send('hi')
      assert.equal(String((await once(first.ws, 'message'))[0]), 'echo hi')
      assert.ok('status' in refused)
      assert.equal(refused.status, 429)
      assert.match(String(refused.headers.ratelimit), /^"connects";r=0;t=\d+$/)
      first.ws.close()
      second.ws.close()
    } finally {
      await app.close()
    }
  })
})
