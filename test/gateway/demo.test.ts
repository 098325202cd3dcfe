/** The README's first command: `npm start` serves the demo gateway in front of the bundled upstream. */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { startGateway, type RunningGateway } from '../support/gateway.ts'

describe('npm start (the demo)', () => {
  let gateway: RunningGateway
  before(async () => {
    // Ports 0: the demo config reads PORT and ADMIN_PORT, so the test never collides with a running demo.
    gateway = await startGateway('', { command: ['npm', ['start', '--silent']], env: { PORT: '0', ADMIN_PORT: '0' } })
  })
  after(async () => {
    // npm itself dies of the signal; the gateway under it shuts down cleanly.
    await gateway?.stop()
    await gateway.waitForLog((line) => line.msg === 'sluice gateway stopped; every request finished')
  })

  it('limits the api route to 5 requests per 10 s per client, as its banner says', async () => {
    await gateway.waitForStdout(/GET \/api\/hello goes to route "api", whose limits let 5 requests from one client through at once; the 6th gets 429/)
    const statuses = []
    for (let i = 0; i < 7; i++) statuses.push((await fetch(`${gateway.url}/api/hello`)).status)
    assert.deepEqual(statuses, [200, 200, 200, 200, 200, 429, 429])
    // Only listed keys identify: a made-up one is this client's IP, whose quota is spent.
    assert.equal((await fetch(`${gateway.url}/api/hello`, { headers: { 'x-api-key': 'made-up' } })).status, 429)
    const hello = await (await fetch(`${gateway.url}/api/hello`, { headers: { 'x-api-key': 'demo-key' } })).json() as { hello: string }
    assert.equal(hello.hello, 'from the demo upstream')
  })

  it('guards login with a Spring Cloud Gateway limit and serves the rest unlimited by route', async () => {
    const statuses = []
    // Per client IP, whatever key a request carries: a brute-forcer cannot buy attempts with keys.
    for (const key of ['demo-key', 'made-up-1', 'made-up-2', 'demo-key']) statuses.push((await fetch(`${gateway.url}/login`, { method: 'POST', headers: { 'x-api-key': key } })).status)
    assert.deepEqual(statuses, [200, 200, 200, 429])
    assert.equal((await fetch(`${gateway.url}/`)).status, 200)
    const status = await (await fetch(`${gateway.adminUrl}/status`)).json() as { watched: Record<string, unknown> }
    assert.deepEqual(Object.keys(status.watched), ['ip:127.0.0.1', 'apikey:demo-key'])
  })

  it('with a config of its own, the banner tells what that config does: an edited example never prints stale limits', async () => {
    const yaml = `
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
limits:
  - { name: everyone, policies: { algorithm: token-bucket, capacity: 8, refillTokens: 1, refillIntervalMs: 60000 } }
  - { name: watching, shadow: true, policies: { algorithm: fixed-window, limit: 1, windowMs: 60000 } }
routes:
  - name: writes
    match: { path: /v1/hello, method: POST }
    upstream: http://127.0.0.1:\${UPSTREAM_PORT}
  - name: reads
    match: { path: [/v1/*, /**] }
    stripPrefix: /v1
    upstream: http://127.0.0.1:\${UPSTREAM_PORT}
    limits:
      - { name: expensive, cost: 3, policies: { algorithm: sliding-log, limit: 7, windowMs: 3600000 } }
`
    const own = await startGateway(yaml, { args: ['--demo-upstream'] })
    try {
      // POST-only route passed over for a GET; the shadow limit refuses nothing; 8 tokens and 7 units at cost 3: 2.
      await own.waitForStdout(/try it \(GET \/v1\/hello goes to route "reads", whose limits let 2 requests from one client through at once; the 3rd gets 429\):\n {4}for i in \$\(seq 4\); do curl [^\n]*\/v1\/hello; done; echo\n/)
      const statuses = []
      for (let i = 0; i < 4; i++) statuses.push((await fetch(`${own.url}/v1/hello`)).status)
      assert.deepEqual(statuses, [200, 200, 429, 429])
    } finally {
      await own.stop()
    }
  })

  it('the demo upstream gives a usable URL on IPv6 loopback too', async () => {
    const { startDemoUpstream } = await import('../../src/gateway/demo-upstream.ts')
    const upstream = await startDemoUpstream(0, '::1')
    try {
      assert.match(upstream.url, /^http:\/\/\[::1\]:\d+$/)
      assert.equal((await fetch(`${upstream.url}/hello`)).status, 200)
    } finally {
      upstream.server.close()
    }
  })
})
