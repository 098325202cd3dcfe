/**
 * WebSocket through the gateway: the upgrade request is routed and limited as
 * any request, then joined to a real WebSocket upstream (the `ws` server); an
 * upstream that refuses the upgrade has its answer passed on; other upgrades
 * (h2c) and CONNECT are answered as plain HTTP.
 */
import assert from 'node:assert/strict'
import { once } from 'node:events'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { connect } from 'node:net'
import { after, before, describe, it } from 'node:test'
import { WebSocket, WebSocketServer } from 'ws'
import { startGateway, type RunningGateway } from '../support/gateway.ts'
import { openWebSocket as open } from '../support/websocket.ts'

function config(upstream: string): string {
  return `
server:
  listen: 127.0.0.1:0
  timeouts: { shutdownMs: 3000, upstreamMs: 3000 }
admin:
  listen: 127.0.0.1:0
logging: { level: info }
routes:
  - name: chat
    match: { path: /chat/** }
    upstream: ${upstream}
    stripPrefix: /chat
    limits:
      - policies: { algorithm: sliding-log, name: chat-connects, limit: 3, windowMs: 3600000 }
  - name: live
    match: { path: /live/** }
    upstream: ${upstream}
    stripPrefix: /live
    limits:
      - count: in-flight
        policies: { algorithm: sliding-log, name: live-sockets, limit: 1, windowMs: 3600000 }
  - name: other
    match: { path: /** }
    upstream: ${upstream}
`
}

/** Echoes every message with the path it was reached on; refuses upgrades on /private with 401. */
async function startWebSocketUpstream(): Promise<{ server: Server; url: string; paths: string[]; closed: string[] }> {
  const paths: string[] = []
  const closed: string[] = []
  const server = createServer((req, res) => {
    res.setHeader('content-type', 'application/json')
    res.end(JSON.stringify({ path: req.url, upgrade: req.headers.upgrade ?? null }))
  })
  const sockets = new WebSocketServer({ noServer: true })
  server.on('upgrade', (req, socket, head) => {
    if (req.url === '/private') {
      socket.end('HTTP/1.1 401 Unauthorized\r\nContent-Type: text/plain\r\nContent-Length: 12\r\nConnection: close\r\n\r\nwho are you?')
      return
    }
    paths.push(req.url ?? '')
    sockets.handleUpgrade(req, socket, head, (ws) => {
      ws.on('message', (data, binary) => {
        if (!binary && String(data) === 'close-me') ws.close(4001, 'bye')
        else ws.send(binary ? data : `${req.url ?? ''} ${String(data)}`, { binary })
      })
      ws.on('close', () => closed.push(req.url ?? ''))
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, paths, closed }
}

async function exchange(ws: WebSocket, message: string | Buffer): Promise<string | Buffer> {
  ws.send(message)
  const [data, binary] = (await once(ws, 'message')) as [Buffer, boolean]
  return binary ? data : data.toString('utf8')
}

/** The gateway's gauge of open WebSockets on the chat route. */
async function tunnelsOpen(gateway: RunningGateway): Promise<string | undefined> {
  const text = await (await fetch(`${gateway.adminUrl}/metrics`)).text()
  return /^sluice_tunnels_open\{route="chat"\} (\d+)$/m.exec(text)?.[1]
}

/** One raw request on a fresh connection; resolves what came back before the gateway closed it. */
function raw(url: string, text: string): Promise<string> {
  const { hostname, port } = new URL(url)
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => socket.write(text))
    let received = ''
    socket.setEncoding('utf8')
    socket.on('data', (chunk: string) => { received += chunk })
    socket.on('end', () => resolve(received))
    socket.on('error', reject)
    socket.setTimeout(5000, () => { socket.destroy(); reject(new Error(`no end of the answer within 5 s: ${received}`)) })
  })
}

describe('gateway: WebSocket and other upgrades', () => {
  let upstream: Awaited<ReturnType<typeof startWebSocketUpstream>>
  let gateway: RunningGateway

  before(async () => {
    upstream = await startWebSocketUpstream()
    gateway = await startGateway(config(upstream.url))
  })
  after(async () => {
    await gateway?.stop()
    upstream?.server.close()
  })

  it('joins a WebSocket to the upstream through the route (path rewritten), text and binary both ways, with the limit headers on the 101', async () => {
    const wsUrl = gateway.url.replace('http:', 'ws:')
    const opened = await open(`${wsUrl}/chat/room-1`)
    assert.ok('ws' in opened, `upgrade refused: ${JSON.stringify(opened)}`)
    assert.equal(opened.headers.ratelimit, '"chat-connects";r=2;t=3600')
    assert.equal(await exchange(opened.ws, 'hello'), '/room-1 hello')
    assert.equal(await tunnelsOpen(gateway), '1')
    const bytes = Buffer.from(Array.from({ length: 70_000 }, (_, i) => i % 251))
    assert.deepEqual(await exchange(opened.ws, bytes), bytes)
    opened.ws.close()
    await once(opened.ws, 'close')
    assert.deepEqual(upstream.paths, ['/room-1'])
    for (let waited = 0; (await tunnelsOpen(gateway)) !== '0' && waited < 2000; waited += 20) await new Promise((resolve) => setTimeout(resolve, 20))
    assert.equal(await tunnelsOpen(gateway), '0')
    // Logged when the upgrade is done, not when the connection ends.
    const logged = await gateway.waitForLog((line) => line.msg === 'request' && line.route === 'chat')
    assert.equal(logged.status, 101)
  })

  it('limits connections like requests: past the limit the upgrade gets 429 and never reaches the upstream', async () => {
    const wsUrl = gateway.url.replace('http:', 'ws:')
    const before = upstream.paths.length
    const second = await open(`${wsUrl}/chat/room-2`)
    const third = await open(`${wsUrl}/chat/room-3`)
    const refused = await open(`${wsUrl}/chat/room-4`)
    assert.ok('ws' in second && 'ws' in third)
    assert.ok('status' in refused)
    assert.equal(refused.status, 429)
    assert.equal(refused.headers['retry-after'] !== undefined, true)
    assert.equal(JSON.parse(refused.body).status, 429)
    assert.deepEqual(upstream.paths.slice(before), ['/room-2', '/room-3'])
    // The open ones still work, and closing one end closes the other: a client cut off ends the
    // upstream's side, and an upstream's close frame reaches the client, code and reason intact.
    assert.equal(await exchange(second.ws, 'still here'), '/room-2 still here')
    second.ws.terminate()
    const closing = once(third.ws, 'close') as Promise<[number, Buffer]>
    third.ws.send('close-me')
    const [code, reason] = await closing
    assert.deepEqual([code, String(reason)], [4001, 'bye'])
    for (let waited = 0; upstream.closed.length < 3 && waited < 2000; waited += 20) await new Promise((resolve) => setTimeout(resolve, 20))
    assert.deepEqual(upstream.closed.slice(-2).sort(), ['/room-2', '/room-3'])
  })

  it('count: in-flight limits the WebSockets a client has open: one is in progress until its tunnel closes', async () => {
    const wsUrl = gateway.url.replace('http:', 'ws:')
    const first = await open(`${wsUrl}/live/feed`)
    assert.ok('ws' in first)
    assert.equal(first.headers.ratelimit, '"live-sockets";r=0')
    const second = await open(`${wsUrl}/live/feed`)
    assert.ok('status' in second)
    assert.equal(second.status, 429)
    assert.equal(second.headers['retry-after'], '1')
    assert.equal(await exchange(first.ws, 'on'), '/feed on')
    first.ws.close()
    await once(first.ws, 'close')
    let again = await open(`${wsUrl}/live/feed`)
    // The gateway sees the tunnel close a moment after the client does.
    for (let tries = 0; 'status' in again && tries < 50; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 20))
      again = await open(`${wsUrl}/live/feed`)
    }
    assert.ok('ws' in again, 'a socket again once the first is closed')
    again.ws.close()
    await once(again.ws, 'close')
  })

  it('passes on the upstream\'s refusal of an upgrade (status, headers, body)', async () => {
    const refused = await open(`${gateway.url.replace('http:', 'ws:')}/private`)
    assert.ok('status' in refused)
    assert.equal(refused.status, 401)
    assert.equal(refused.body, 'who are you?')
  })

  it('answers other upgrades (h2c) as plain HTTP/1.1, so no connection it cannot see into is opened; CONNECT gets 405', async () => {
    const h2c = await raw(gateway.url, 'GET /plain HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n')
    assert.match(h2c, /^HTTP\/1\.1 200 OK\r\n/)
    assert.deepEqual(JSON.parse(h2c.slice(h2c.indexOf('\r\n\r\n') + 4).replace(/^[0-9a-f]+\r\n/, '').replace(/\r\n0\r\n\r\n$/, '')), { path: '/plain', upgrade: null })
    const withBody = await raw(gateway.url, 'POST /plain HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\nContent-Length: 5\r\n\r\nhello')
    assert.match(withBody, /^HTTP\/1\.1 400 Bad Request\r\n/)
    const tunnel = await raw(gateway.url, 'CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n')
    assert.match(tunnel, /^HTTP\/1\.1 405 Method Not Allowed\r\n/)
    assert.match(tunnel, /application\/problem\+json/)
  })

  it('shuts down with WebSockets open: they are closed once the requests in flight are done', async () => {
    const own = await startGateway(config(upstream.url))
    const opened = await open(`${own.url.replace('http:', 'ws:')}/chat/room-9`)
    assert.ok('ws' in opened)
    const closed = once(opened.ws, 'close')
    const started = Date.now()
    assert.equal(await own.stop(), 0)
    await closed
    assert.ok(Date.now() - started < 2500, 'the open WebSocket did not hold the shutdown to its deadline')
  })
})
