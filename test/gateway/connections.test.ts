/**
 * server.connections: caps on open connections, per client and in all, on a
 * gateway child process over real sockets from several loopback addresses.
 */
import assert from 'node:assert/strict'
import type { Server } from 'node:http'
import { connect, type Socket } from 'node:net'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import parsePrometheus from 'parse-prometheus-text-format'
import { startDemoUpstream } from '../../src/gateway/demo-upstream.ts'
import { startGateway, type RunningGateway } from '../support/gateway.ts'

interface Family {
  name: string
  metrics: Array<{ value?: string; labels?: Record<string, string> }>
}

const config = (upstream: string, caps: string) => `
server:
  listen: 127.0.0.1:0
  connections: ${caps}
admin: { listen: 127.0.0.1:0 }
identity:
  clientIp: { trustProxy: [127.0.0.2/32] }
routes:
  - name: all
    match: { path: /** }
    upstream: ${upstream}
    limits:
      - policies: { algorithm: fixed-window, limit: 1000, windowMs: 60000 }
`

/** A kept-alive connection from `from` that has had one request answered; or the connection closed before any answer. */
async function openConnection(gatewayUrl: string, from: string): Promise<{ socket: Socket; answered: boolean }> {
  const { port } = new URL(gatewayUrl)
  const socket = connect({ host: '127.0.0.1', port: Number(port), localAddress: from })
  let received = ''
  socket.setEncoding('utf8').on('data', (chunk: string) => { received += chunk })
  socket.on('error', () => {})
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', () => resolve())
    socket.once('error', reject)
    socket.once('close', () => resolve())
  })
  if (!socket.destroyed) socket.write('GET /hello HTTP/1.1\r\nHost: gateway\r\n\r\n')
  for (let waited = 0; waited < 5000 && !socket.destroyed && !/\r\n\r\n/.test(received); waited += 10) await sleep(10)
  return { socket, answered: /^HTTP\/1\.1 200 /.test(received) }
}

/** sluice_connections_refused_total by cap, and sluice_connections_open. */
async function connectionMetrics(gateway: RunningGateway): Promise<{ refused: Record<string, number>; open: number }> {
  const families = parsePrometheus(await (await fetch(`${gateway.adminUrl}/metrics`)).text()) as Family[]
  const family = (name: string) => families.find((found) => found.name === name)?.metrics ?? []
  return {
    refused: Object.fromEntries(family('sluice_connections_refused_total').map((metric) => [metric.labels?.cap, Number(metric.value)])),
    open: Number(family('sluice_connections_open')[0]?.value),
  }
}

describe('gateway: server.connections', () => {
  let upstream: { server: Server; url: string }
  let gateway: RunningGateway
  const open: Socket[] = []
  before(async () => {
    upstream = await startDemoUpstream()
    gateway = await startGateway(config(upstream.url, '{ perClient: 3, max: 6 }'))
  })
  after(async () => {
    for (const socket of open) socket.destroy()
    await gateway?.stop()
    upstream?.server.close()
  })

  it('closes a client\'s connection over perClient unanswered, and over max anyone\'s; a trusted proxy\'s are not counted per client; a closed one frees its place', async () => {
    const from = async (address: string) => {
      const connection = await openConnection(gateway.url, address)
      open.push(connection.socket)
      return connection
    }
    for (let i = 0; i < 3; i++) assert.equal((await from('127.0.0.1')).answered, true, `client connection ${i + 1}`)
    const fourth = await from('127.0.0.1')
    assert.deepEqual([fourth.answered, fourth.socket.destroyed], [false, true])
    // The proxy carries many clients' requests: its connections count towards max only.
    for (let i = 0; i < 3; i++) assert.equal((await from('127.0.0.2')).answered, true, `proxy connection ${i + 1}`)
    const seventh = await from('127.0.0.3')
    assert.deepEqual([seventh.answered, seventh.socket.destroyed], [false, true])
    assert.deepEqual(await connectionMetrics(gateway), { refused: { max: 1, perClient: 1 }, open: 6 })
    const warning = await gateway.waitForLog((line) => line.msg === 'connections closed unanswered: over server.connections')
    assert.deepEqual(warning.caps, { max: 6, perClient: 3 })
    assert.equal(JSON.stringify(warning).includes('127.0.0'), false, 'no client address in the log')
    // One of the client's connections closes: the client may open another.
    const first = open[0] as Socket
    first.destroy()
    await sleep(100)
    assert.equal((await from('127.0.0.1')).answered, true)
  })

  it('a reload changes the caps for the connections that come after, without a restart', async () => {
    for (const socket of open.splice(0)) socket.destroy()
    await sleep(100)
    gateway.writeConfig(config(upstream.url, '{ perClient: 1 }'))
    gateway.child.kill('SIGHUP')
    const reloaded = await gateway.waitForLog((line) => line.msg === 'config reloaded')
    assert.equal(reloaded.needsRestart, undefined)
    const first = await openConnection(gateway.url, '127.0.0.1')
    const second = await openConnection(gateway.url, '127.0.0.1')
    open.push(first.socket, second.socket)
    assert.deepEqual([first.answered, second.answered], [true, false])
    // No max any more: the proxy opens as many as it likes.
    const proxied = await Promise.all(Array.from({ length: 8 }, () => openConnection(gateway.url, '127.0.0.2')))
    open.push(...proxied.map((connection) => connection.socket))
    assert.deepEqual(proxied.map((connection) => connection.answered), Array(8).fill(true))
  })
})
