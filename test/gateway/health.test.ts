/**
 * Active upstream health checks, end to end: the gateway in a child process in
 * front of two real upstreams whose health endpoint the test turns bad and good.
 */
import assert from 'node:assert/strict'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { after, before, describe, it } from 'node:test'
import parsePrometheus from 'parse-prometheus-text-format'
import { startGateway, type LogLine, type RunningGateway } from '../support/gateway.ts'

/** An upstream answering its name; `/healthz` answers `health` (a status, or 'hang' for no answer). */
async function upstream(name: string): Promise<{ url: string; server: Server; health: number | 'hang' }> {
  const state: { url: string; server: Server; health: number | 'hang' } = { url: '', server: createServer(), health: 200 }
  state.server.on('request', (req, res) => {
    if (req.url === '/healthz') {
      if (state.health !== 'hang') res.writeHead(state.health).end()
      return
    }
    res.end(name)
  })
  await new Promise<void>((resolve) => state.server.listen(0, '127.0.0.1', resolve))
  state.url = `http://127.0.0.1:${(state.server.address() as AddressInfo).port}`
  return state
}

describe('gateway: active upstream health checks', () => {
  let a: Awaited<ReturnType<typeof upstream>>
  let b: Awaited<ReturnType<typeof upstream>>
  let gateway: RunningGateway

  before(async () => {
    a = await upstream('a')
    b = await upstream('b')
    gateway = await startGateway(`
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
logging: { access: false }
routes:
  - name: pool
    upstream: [${a.url}, ${b.url}]
    healthCheck: { path: /healthz, intervalMs: 100, timeoutMs: 300 }
`)
  })

  after(async () => {
    await gateway?.stop()
    for (const side of [a, b]) {
      side?.server.closeAllConnections()
      side?.server.close()
    }
  })

  const answers = async (count: number) => {
    const seen: string[] = []
    for (let i = 0; i < count; i++) seen.push(await (await fetch(`${gateway.url}/`)).text())
    return seen.sort().join('')
  }
  const healthGauge = async () => {
    const families = parsePrometheus(await (await fetch(`${gateway.adminUrl}/metrics`)).text()) as Array<{ name: string; metrics: Array<{ labels: Record<string, string>; value: string }> }>
    const gauge = families.find((family) => family.name === 'sluice_upstream_healthy')
    return Object.fromEntries((gauge?.metrics ?? []).map((metric) => [metric.labels.upstream === a.url ? 'a' : 'b', metric.value]))
  }

  it('passes over an upstream that answers its check with an error or not at all, and takes it back once it passes', async () => {
    assert.equal(await answers(4), 'aabb', 'both healthy: in turn')
    assert.deepEqual(await healthGauge(), { a: '1', b: '1' })

    b.health = 503
    const failed = await gateway.waitForLog((line) => line.msg.startsWith('upstream failed its health check'))
    assert.deepEqual([failed.route, failed.upstream, failed.reason], ['pool', b.url, 'status 503'])
    // b still answers requests: only the check tells that it should not get them.
    assert.equal(await answers(4), 'aaaa')
    assert.deepEqual(await healthGauge(), { a: '1', b: '0' })

    b.health = 200
    await gateway.waitForLog((line) => line.msg === 'upstream passes its health check again' && line.upstream === b.url)
    assert.equal(await answers(4), 'aabb')

    a.health = 'hang'
    const hung = await gateway.waitForLog((line) => line.msg.startsWith('upstream failed its health check') && line.upstream === a.url)
    assert.equal(hung.reason, 'no answer within 300 ms')
    assert.equal(await answers(4), 'bbbb')

    // Every upstream failing: requests still go somewhere (in turn), rather than none at all.
    b.health = 500
    await gateway.waitForLog((line) => line.msg.startsWith('upstream failed its health check') && line.upstream === b.url && line.reason === 'status 500')
    assert.equal(await answers(4), 'aabb')
  })

  it('a reload keeps what the checks found, and the gauge drops upstreams no longer configured', async () => {
    a.health = 200
    b.health = 'hang'
    const since = gateway.logs.length
    const newSince = (predicate: (line: LogLine) => boolean) => gateway.waitForLog((line) => gateway.logs.indexOf(line) >= since && predicate(line))
    await newSince((line) => line.msg === 'upstream passes its health check again' && line.upstream === a.url)
    assert.equal(await answers(4), 'aaaa')

    // The new file's checks take 2 s to find b hanging again: until then b stays passed over, as before the reload.
    const config = (upstreams: string) => `
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
logging: { access: false }
routes:
  - name: pool
    upstream: [${upstreams}]
    healthCheck: { path: /healthz, intervalMs: 100, timeoutMs: 2000 }
`
    gateway.writeConfig(config(`${a.url}, ${b.url}`))
    const reloaded = await newSince((line) => line.msg === 'config reloaded')
    assert.equal(await answers(4), 'aaaa')
    assert.deepEqual(await healthGauge(), { a: '1', b: '0' })

    gateway.writeConfig(config(a.url))
    await newSince((line) => line.msg === 'config reloaded' && line.version !== reloaded.version)
    assert.deepEqual(await healthGauge(), { a: '1' }, 'no series left for b')
  })
})
