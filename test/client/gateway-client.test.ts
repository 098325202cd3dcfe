import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { createClient } from '../../src/client/index.ts'
import { startDemoUpstream } from '../../src/gateway/demo-upstream.ts'
import { startGateway, type RunningGateway } from '../support/gateway.ts'
import { nextWindow, offer } from './servers.ts'

const LIMIT = 50
const OFFERED = 400

describe('the client in front of the sluice gateway', () => {
  let upstream: Awaited<ReturnType<typeof startDemoUpstream>>
  let gateway: RunningGateway
  before(async () => {
    upstream = await startDemoUpstream(0)
    gateway = await startGateway(`
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
headers: { standard: draft-10 }
routes:
  - name: api
    upstream: ${upstream.url}
    limits:
      - policies: { algorithm: fixed-window, name: per-second, limit: ${LIMIT}, windowMs: 1000 }
`)
  })
  after(async () => {
    await gateway.stop()
    upstream.server.closeAllConnections()
    await new Promise<void>((resolve) => upstream.server.close(() => resolve()))
  })

  it('with defaults, at 10x the allowed rate: at most one 429 per window after the first; without it, hundreds', async (t) => {
    await nextWindow()
    const bare = await offer(OFFERED, 2, () => fetch(`${gateway.url}/hello`))
    const client = createClient()
    const refusedAt: number[] = []
    client.on('refused', () => refusedAt.push(Date.now()))
    await nextWindow()
    const started = Math.floor(Date.now() / 1000)
    const guarded = await offer(OFFERED, 2, () => client.fetch(`${gateway.url}/hello`))
    const perWindow = new Map<number, number>()
    for (const at of refusedAt) perWindow.set(Math.floor(at / 1000), (perWindow.get(Math.floor(at / 1000)) ?? 0) + 1)
    const afterFirst = [...perWindow].filter(([window]) => window > started).map(([, count]) => count)
    t.diagnostic(`sluice gateway, ${LIMIT}/s fixed window: without the client ${bare.filter((s) => s === 429).length} x 429 of ${OFFERED}; with it ${refusedAt.length} x 429`)
    assert.ok(bare.filter((status) => status === 429).length >= 100)
    assert.deepEqual(guarded.filter((status) => status !== 200), [], 'every request completes')
    assert.ok(afterFirst.every((count) => count <= 1), `at most one 429 per window after the first: ${afterFirst.join(' ')}`)
  })
})
