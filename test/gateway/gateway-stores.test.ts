/**
 * The gateway's other deployments: Redis Cluster and Sentinel stores named in
 * the YAML, HTTPS from PEM files, and shadow limits that count but never refuse.
 */
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { createHash, X509Certificate } from 'node:crypto'
import { once } from 'node:events'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import type { IncomingHttpHeaders, OutgoingHttpHeaders, Server } from 'node:http'
import { connect as http2Connect, constants as http2Constants, type ClientHttp2Session } from 'node:http2'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { connect } from 'node:tls'
import { Agent, fetch as undiciFetch } from 'undici'
import { Cluster } from 'ioredis'
import { startDemoUpstream } from '../../src/gateway/demo-upstream.ts'
import { RedisStore } from '../../src/index.ts'
import { trackConnectionErrors } from '../../src/stores/redis/clients.ts'
import { LIMITER_CLIENT_OPTIONS } from '../../src/stores/redis/redis-store.ts'
import { startCluster, type RedisCluster } from '../support/cluster.ts'
import { startGateway } from '../support/gateway.ts'
import { commandCalls, startRedis, type RedisServer } from '../support/redis.ts'
import { startSentinel, type Sentinel } from '../support/sentinel.ts'

const route = (upstream: string, limit = 5) => `
routes:
  - name: api
    upstream: ${upstream}
    limits:
      - policies: { algorithm: sliding-log, name: hourly, limit: ${limit}, windowMs: 3600000 }
`

async function statuses(url: string, count: number): Promise<number[]> {
  const result = []
  for (let i = 0; i < count; i++) result.push((await fetch(url)).status)
  return result
}

describe('gateway deployments', () => {
  let upstream: { server: Server; url: string }
  before(async () => { upstream = await startDemoUpstream() })
  after(() => upstream?.server.close())

  describe('on a Redis Cluster and through Sentinel (real servers)', () => {
    let cluster: RedisCluster
    let master: RedisServer
    let sentinel: Sentinel
    before(async () => {
      cluster = await startCluster()
      master = await startRedis()
      sentinel = await startSentinel('gw-master', master.port, async (ask) => Number(((await ask('get-master-addr-by-name', 'gw-master')) as string[] | undefined)?.[1]) === master.port)
    })
    after(async () => {
      await sentinel?.stop()
      await master?.stop()
      await cluster?.stop()
    })

    it('store.cluster: the limit holds exactly; with functions: true, decided by FCALL on the key\'s master', async () => {
      const gateway = await startGateway(`
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
store: { type: redis, cluster: [${cluster.nodes.map((n) => `"127.0.0.1:${n.port}"`).join(', ')}], functions: true }
${route(upstream.url)}`)
      try {
        assert.deepEqual(await statuses(`${gateway.url}/hello`, 7), [200, 200, 200, 200, 200, 429, 429])
        const status = await (await fetch(`${gateway.adminUrl}/status`)).json() as { store: { type: string; up: boolean } }
        assert.deepEqual(status.store, { type: 'redis-cluster (3 seed nodes)', up: true, refundsOwed: 0 })
        // The first request ran as a script and had the library loaded on every master; the later
        // ones called it (one more may have run as a script while the other masters answered the load).
        const calls = await Promise.all(cluster.nodes.map((node) => commandCalls(node.client())))
        const count = (command: string) => calls.reduce((sum, node) => sum + (node[command] ?? 0), 0)
        assert.equal(count('fcall') + count('evalsha') + count('eval'), 7)
        assert.ok(count('fcall') >= 5, `FCALLs: ${count('fcall')}`)
      } finally {
        await gateway.stop()
      }
    })

    it('a limit per API key and a route limit per IP: one all-or-nothing call on a single Redis (through Sentinel); on a cluster, a call per key, in order', async () => {
      const twoKeys = (store: string, prefix: string) => `
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0, watch: [apikey:k1] }
store: ${store}
prefix: ${prefix}
identity: { apiKey: { header: x-api-key, keys: [k1] }, order: [apiKey, ip] }
limits:
  - name: per-key
    policies: { algorithm: sliding-log, name: per-key, limit: 5, windowMs: 3600000 }
routes:
  - name: api
    upstream: ${upstream.url}
    limits:
      - name: per-ip
        key: [ip]
        policies: { algorithm: sliding-log, name: per-ip, limit: 2, windowMs: 3600000 }
`
      const stores = {
        sentinel: `{ type: redis, sentinel: { sentinels: ["127.0.0.1:${sentinel.port}"], name: gw-master } }`,
        cluster: `{ type: redis, cluster: [${cluster.nodes.map((n) => `"127.0.0.1:${n.port}"`).join(', ')}] }`,
      }
      const left: Record<string, number | undefined> = {}
      for (const [name, store] of Object.entries(stores)) {
        const gateway = await startGateway(twoKeys(store, `two-keys-${name}`))
        try {
          const seen = []
          for (let i = 0; i < 4; i++) seen.push((await fetch(`${gateway.url}/hello`, { headers: { 'x-api-key': 'k1' } })).status)
          assert.deepEqual(seen, [200, 200, 429, 429], name)
          const status = await (await fetch(`${gateway.adminUrl}/status`)).json() as { watched: Record<string, Record<string, { remaining: number }>> }
          left[name] = status.watched['apikey:k1']?.['per-key']?.remaining
        } finally {
          await gateway.stop()
        }
      }
      // The key's limit lost nothing to the refusals on one Redis; on the cluster the key was charged first, then the IP refused.
      assert.deepEqual(left, { sentinel: 3, cluster: 1 })
    })

    it('store.cluster seeded with a node not in cluster mode: the store\'s errors say why, not only "Failed to refresh slots cache."', async () => {
      // The connection the gateway opens for store.cluster, on the standalone master.
      const client = new Cluster([{ host: '127.0.0.1', port: master.port }], { enableOfflineQueue: false, redisOptions: LIMITER_CLIENT_OPTIONS })
      trackConnectionErrors(client)
      const store = new RedisStore({ client })
      try {
        await once(client, 'error')
        await assert.rejects(store.ping(), /\(the connection's last error: Failed to refresh slots cache\. \(the last node's error: ERR This instance has cluster support disabled\)\)$/)
      } finally {
        client.disconnect()
      }
    })

    it('store.sentinel: the limit holds exactly, on the master the sentinel names', async () => {
      const gateway = await startGateway(`
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
store: { type: redis, sentinel: { sentinels: ["127.0.0.1:${sentinel.port}"], name: gw-master } }
prefix: via-sentinel
${route(upstream.url, 3)}`)
      try {
        assert.deepEqual(await statuses(`${gateway.url}/hello`, 5), [200, 200, 200, 429, 429])
        assert.equal(await master.client().exists('via-sentinel:http:{ip:127.0.0.1}:hourly'), 1)
      } finally {
        await gateway.stop()
      }
    })
  })

  it('serves HTTPS from the PEM files in server.tls; a renewed certificate applies when its files change, a mismatched pair is refused', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-tls-'))
    const makePair = (name: string, days = 1) => {
      const made = spawnSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', String(days), '-subj', '/CN=127.0.0.1',
        '-keyout', join(dir, `${name}key.pem`), '-out', join(dir, `${name}cert.pem`)], { encoding: 'utf8' })
      assert.equal(made.status, 0, made.stderr)
      return new X509Certificate(readFileSync(join(dir, `${name}cert.pem`))).fingerprint256
    }
    const notAfter = (name: string) => Date.parse(new X509Certificate(readFileSync(join(dir, `${name}cert.pem`))).validTo) / 1000
    const expiryGauge = async (adminUrl: string) => Number(/^sluice_tls_certificate_expiry_timestamp_seconds (\S+)$/m.exec(await (await fetch(`${adminUrl}/metrics`)).text())?.[1])
    const served = async (url: string) => {
      const socket = connect({ host: '127.0.0.1', port: Number(new URL(url).port), rejectUnauthorized: false })
      await once(socket, 'secureConnect')
      const fingerprint = socket.getPeerCertificate().fingerprint256
      socket.destroy()
      return fingerprint
    }
    try {
      const first = makePair('')
      const gateway = await startGateway(`
server: { listen: 127.0.0.1:0, tls: { cert: ${join(dir, 'cert.pem')}, key: ${join(dir, 'key.pem')} } }
admin: { listen: 127.0.0.1:0 }
${route(upstream.url)}`)
      try {
        assert.match(gateway.url, /^https:\/\//)
        const dispatcher = new Agent({ connect: { rejectUnauthorized: false } })
        const response = await undiciFetch(`${gateway.url}/hello`, { dispatcher })
        assert.equal(response.status, 200)
        assert.equal(((await response.json()) as { forwardedProto: string }).forwardedProto, 'https')
        await dispatcher.close()
        assert.equal(await served(gateway.url), first)
        // When the served certificate ends, for an alert ahead of it; and, a day from its end, said in the log.
        assert.equal(await expiryGauge(gateway.adminUrl), notAfter(''))
        assert.match(String(gateway.logs.find((l) => l.level === 40 && /server\.tls\.cert/.test(String(l.msg)))?.msg), /^server\.tls\.cert expires on \d{4}-\d\d-\d\d, in 1 day\(s\): renew it; saving the files reloads it\.$/)

        // Half a renewal: the new certificate beside the old key. Refused by name; the running pair stays.
        const renewed = makePair('new-', 30)
        writeFileSync(join(dir, 'cert.pem'), readFileSync(join(dir, 'new-cert.pem')))
        const refused = await gateway.waitForLog((l) => l.msg === 'config refused; the running config stays')
        assert.match(String((refused.problems as string[])[0]), /^server\.tls: the cert and key files cannot serve TLS: .*key values mismatch/)
        assert.equal(await served(gateway.url), first)
        // The whole renewal: new connections get the new certificate, with no restart.
        writeFileSync(join(dir, 'key.pem'), readFileSync(join(dir, 'new-key.pem')))
        const reloaded = await gateway.waitForLog((l) => l.msg === 'config reloaded')
        assert.equal(reloaded.needsRestart, undefined)
        assert.equal(await served(gateway.url), renewed)
        assert.equal(await expiryGauge(gateway.adminUrl), notAfter('new-'))
        assert.equal((await undiciFetch(`${gateway.url}/hello`, { dispatcher: new Agent({ connect: { rejectUnauthorized: false } }) })).status, 200)
      } finally {
        await gateway.stop()
      }
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('server.tls.http2: HTTP/2 and HTTP/1.1 on one port, the same limits, headers and bodies; the upstream sees a plain request; a draining gateway finishes HTTP/2 requests in flight', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-h2-'))
    const made = spawnSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1', '-subj', '/CN=127.0.0.1',
      '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem')], { encoding: 'utf8' })
    assert.equal(made.status, 0, made.stderr)
    // A connection of its own for each step: with keepAliveMs 300 the gateway closes one left idle between steps.
    const sessions: ClientHttp2Session[] = []
    let gatewayUrl = ''
    const connectH2 = () => {
      const session = http2Connect(gatewayUrl, { rejectUnauthorized: false })
      session.on('error', () => {})
      sessions.push(session)
      return session
    }
    /** One HTTP/2 request: its status, fields and body. */
    const h2 = (path: string, method = 'GET', body?: Buffer, session = connectH2()) => new Promise<{ status: number; headers: IncomingHttpHeaders; body: string }>((resolve, reject) => {
      const stream = session.request({ ':method': method, ':path': path }, { endStream: body === undefined })
      let text = ''
      let head: IncomingHttpHeaders = {}
      stream.on('response', (headers) => { head = headers })
      stream.setEncoding('utf8')
      stream.on('data', (chunk: string) => { text += chunk })
      stream.on('end', () => resolve({ status: Number(head[':status']), headers: head, body: text }))
      stream.on('error', reject)
      if (body !== undefined) stream.end(body)
    })
    try {
      const yaml = `
server: { listen: 127.0.0.1:0, tls: { cert: ${join(dir, 'cert.pem')}, key: ${join(dir, 'key.pem')}, http2: true }, timeouts: { keepAliveMs: 300, requestMs: 1000, headersMs: 500 } }
admin: { listen: 127.0.0.1:0 }
routes:
  - name: slow
    match: { path: /slow/** }
    upstream: ${upstream.url}
  - name: api
    upstream: ${upstream.url}
    limits:
      - policies: { algorithm: sliding-log, name: hourly, limit: 6, windowMs: 3600000 }
`
      const gateway = await startGateway(yaml)
      try {
        gatewayUrl = gateway.url
        const seen = JSON.parse((await h2('/headers')).body) as Record<string, string>
        // The upstream gets HTTP/1.1 with a Host, never HTTP/2's pseudo-header fields.
        assert.equal(Object.keys(seen).filter((name) => name.startsWith(':')).length, 0)
        assert.equal(seen['x-forwarded-host'], new URL(gateway.url).host)
        assert.equal(seen['x-forwarded-proto'], 'https')
        // A body with neither Content-Length nor chunking, as HTTP/2 sends it, arrives whole.
        const upload = Buffer.alloc(300_000, 7)
        const digest = JSON.parse((await h2('/digest', 'POST', upload)).body) as { length: number; sha256: string }
        assert.equal(digest.length, upload.length)
        assert.equal(digest.sha256, createHash('sha256').update(upload).digest('hex'))
        // The same limit over both protocols: 6 an hour for this client.
        const dispatcher = new Agent({ connect: { rejectUnauthorized: false } })
        const overHttp1 = await undiciFetch(`${gateway.url}/hello`, { dispatcher })
        assert.equal(overHttp1.status, 200)
        assert.match(overHttp1.headers.get('ratelimit') ?? '', /^"hourly";r=3;t=\d+$/)
        // Four at once on one connection.
        const shared = connectH2()
        const answers = await Promise.all([h2('/hello', 'GET', undefined, shared), h2('/hello', 'GET', undefined, shared), h2('/hello', 'GET', undefined, shared), h2('/hello', 'GET', undefined, shared)])
        assert.deepEqual(answers.map((answer) => answer.status).sort(), [200, 200, 200, 429])
        // A connection carries at most 128 requests at once (node's default is 2^32 - 1).
        assert.equal(shared.remoteSettings.maxConcurrentStreams, 128)
        const refused = answers.find((answer) => answer.status === 429)
        assert.equal(refused?.headers['content-type'], 'application/problem+json')
        assert.match(String(refused?.headers['retry-after']), /^\d+$/)
        assert.equal((JSON.parse(refused?.body ?? '{}') as { 'violated-policies': string[] })['violated-policies'][0], 'hourly')
        // CONNECT is a stream like any other over HTTP/2 (it once reached the HTTP/1.1 socket handler and crashed the gateway).
        const statusOf = (headers: OutgoingHttpHeaders) => new Promise<number>((resolve, reject) => {
          const stream = connectH2().request(headers)
          stream.on('response', (answer) => resolve(Number(answer[':status'])))
          stream.on('error', reject)
          stream.resume()
        })
        assert.equal(await statusOf({ ':method': 'CONNECT', ':authority': 'example.com:443' }), 405)
        // RFC 9113 8.3.1: a Host beside an :authority naming another host is malformed.
        assert.equal(await statusOf({ ':path': '/headers', ':authority': new URL(gateway.url).host, host: 'elsewhere.example' }), 400)
        // Switching HTTP/2 off needs a new listener: the reload says so, and the running one keeps serving HTTP/2.
        gateway.writeConfig(yaml.replace('http2: true', 'http2: false').replace('limit: 6', 'limit: 7'))
        const reloaded = await gateway.waitForLog((line) => line.msg === 'config reloaded')
        assert.deepEqual(reloaded.needsRestart, ['server.tls.http2'])
        assert.equal((await h2('/hello')).status, 200)
        // A connection kept silent by a slow upstream for longer than keepAliveMs is not idle: its request is answered.
        assert.equal((await h2('/slow/700')).status, 200)
        // A body trickling in is cut at requestMs, as node cuts an HTTP/1.1 one.
        const trickle = connectH2().request({ ':method': 'POST', ':path': '/slow/5000' }, { endStream: false })
        const drip = setInterval(() => { if (!trickle.destroyed) trickle.write('x') }, 100)
        trickle.resume()
        const started = Date.now()
        await once(trickle, 'close')
        clearInterval(drip)
        assert.equal(trickle.rstCode, http2Constants.NGHTTP2_CANCEL)
        assert.ok(Date.now() - started < 3000, `cut after ${Date.now() - started} ms`)
        // Streams reset as soon as they are opened (a "rapid reset" client) leave no upstream request behind.
        const resetting = connectH2()
        for (let i = 0; i < 300; i++) {
          const stream = resetting.request({ ':path': '/slow/300' })
          stream.on('error', () => {})
          setImmediate(() => stream.close(http2Constants.NGHTTP2_CANCEL))
        }
        await new Promise((resolve) => setTimeout(resolve, 800))
        // Stopping: a request in flight on an HTTP/2 connection is answered, then the gateway exits.
        const slow = h2('/slow/600')
        await new Promise((resolve) => setTimeout(resolve, 150))
        const stopping = Date.now()
        const stopped = gateway.stop()
        const answered = await slow
        assert.equal(answered.status, 200, 'answered, not cut')
        assert.equal((JSON.parse(answered.body) as { waitedMs: number }).waitedMs, 600)
        assert.equal(await stopped, 0)
        // Nothing left hanging: the trickled upload's and the reset streams' upstream requests were given up with them
        // (each once held the stop for seconds).
        assert.ok(Date.now() - stopping < 3000, `stopped in ${Date.now() - stopping} ms`)
        await dispatcher.close()
      } finally {
        await gateway.stop()
      }
    } finally {
      for (const session of sessions) session.destroy()
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('key: [everyone] is one quota all clients share, decided with each client\'s own limit all-or-nothing', async () => {
    const gateway = await startGateway(`
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0, watch: [everyone, ip:203.0.113.3] }
identity: { clientIp: { trustProxy: [127.0.0.1, "::1"] } }
limits:
  - name: per-client
    policies: { algorithm: sliding-log, name: per-client, limit: 2, windowMs: 3600000 }
routes:
  - name: api
    upstream: ${upstream.url}
    limits:
      - name: capacity
        key: [everyone]
        policies: { algorithm: sliding-log, name: capacity, limit: 5, windowMs: 3600000 }
`)
    try {
      const from = async (client: string, count: number) => {
        const answers = []
        for (let i = 0; i < count; i++) answers.push(await fetch(`${gateway.url}/hello`, { headers: { 'x-forwarded-for': client } }))
        return answers
      }
      // A's own limit refuses its third request, which the shared quota does not pay for.
      assert.deepEqual((await from('203.0.113.1', 3)).map((r) => r.status), [200, 200, 429])
      assert.deepEqual((await from('203.0.113.2', 2)).map((r) => r.status), [200, 200])
      const third = await from('203.0.113.3', 2)
      assert.deepEqual(third.map((r) => r.status), [200, 429])
      assert.deepEqual((await third[1]?.json() as { 'violated-policies': string[] })['violated-policies'], ['capacity'])
      assert.equal(third[1]?.headers.get('ratelimit'), '"per-client";r=1;t=3600, "capacity";r=0;t=3600')
      const status = await (await fetch(`${gateway.adminUrl}/status`)).json() as { watched: Record<string, Record<string, { remaining: number }>> }
      // Each watched key under the limits that count under keys of its kind only: a per-client count under `everyone` would be made up.
      assert.deepEqual(Object.keys(status.watched.everyone ?? {}), ['capacity'])
      assert.deepEqual(Object.keys(status.watched['ip:203.0.113.3'] ?? {}), ['per-client'])
      assert.equal(status.watched.everyone?.capacity?.remaining, 0)
      assert.equal(status.watched['ip:203.0.113.3']?.['per-client']?.remaining, 1, 'the refusal by the shared quota took nothing from C')
      // The access log names the kind of key a refusal was made under; an allowed request's, the client's own (not the quota all share).
      const line = await gateway.waitForLog((l) => l.msg === 'request' && l.status === 429 && l.keyKind === 'everyone')
      assert.equal(line.route, 'api')
      const allowed = await gateway.waitForLog((l) => l.msg === 'request' && l.status === 200)
      assert.equal(allowed.keyKind, 'ip')
      assert.equal((await gateway.waitForLog((l) => l.msg === 'request' && l.status === 429)).keyKind, 'ip', "A's refusal by its own limit")
    } finally {
      await gateway.stop()
    }
  })

  it('tells the upstream the client it keys in X-Real-IP, the address behind the trusted proxies, never one a client wrote; passes on what a trusted proxy says of its hop (X-Forwarded-Proto, -Host, -Port)', async () => {
    const viaHops = (trustProxy: string) => startGateway(`
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
identity: { clientIp: { trustProxy: ${trustProxy} } }
routes:
  - { name: api, upstream: ${upstream.url} }
`)
    const listed = await viaHops('[127.0.0.1, 10.0.0.0/8]')
    const counted = await viaHops('2')
    try {
      const realIp = async (url: string, headers: Record<string, string>) => (await (await fetch(`${url}/headers`, { headers })).json() as Record<string, string>)['x-real-ip']
      // The walk from the right through trusted proxies (10.0.0.7), as the key is found; the client's own X-Real-IP is replaced.
      assert.equal(await realIp(listed.url, { 'x-forwarded-for': '6.6.6.6, 203.0.113.9, 10.0.0.7', 'x-real-ip': '6.6.6.6' }), '203.0.113.9')
      // Not grouped into its /56 as the key is: the upstream is told the address.
      assert.equal(await realIp(listed.url, { 'x-forwarded-for': '2001:db8::1' }), '2001:db8::1')
      assert.equal(await realIp(listed.url, { 'x-forwarded-for': '::ffff:198.51.100.4' }), '198.51.100.4')
      // No forwarding header: the peer, the trusted proxy itself.
      assert.equal(await realIp(listed.url, { 'x-real-ip': '6.6.6.6' }), '127.0.0.1')
      // Two proxies, the peer and the one it names last (10.0.0.7): the client is the entry before.
      assert.equal(await realIp(counted.url, { 'x-forwarded-for': '6.6.6.6, 203.0.113.9, 10.0.0.7', 'x-real-ip': '6.6.6.6' }), '203.0.113.9')
      assert.equal(await realIp(counted.url, { 'x-forwarded-for': '6.6.6.6, 198.51.100.1, 203.0.113.9' }), '198.51.100.1')
      // What the client reached the proxy in front by (a load balancer that ended TLS) is the proxy's to say, and passed on.
      const said = { 'x-forwarded-proto': 'https', 'x-forwarded-host': 'api.example.com', 'x-forwarded-port': '443', 'x-forwarded-prefix': '/shop' }
      for (const url of [listed.url, counted.url]) {
        const seen = await (await fetch(`${url}/headers`, { headers: said })).json() as Record<string, string>
        assert.deepEqual([seen['x-forwarded-proto'], seen['x-forwarded-host'], seen['x-forwarded-port'], seen['x-forwarded-prefix']], ['https', 'api.example.com', '443', '/shop'])
      }
      // Where the proxy says nothing, the gateway's own.
      const unsaid = await (await fetch(`${listed.url}/headers`)).json() as Record<string, string>
      assert.deepEqual([unsaid['x-forwarded-proto'], unsaid['x-forwarded-host'], unsaid['x-forwarded-port']], ['http', new URL(listed.url).host, undefined])
    } finally {
      await listed.stop()
      await counted.stop()
    }
  })

  it('shadow limits decide and count but never refuse; a route limit may be shadowed alone', async () => {
    const gateway = await startGateway(`
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
routes:
  - name: api
    upstream: ${upstream.url}
    limits:
      - { name: trial, shadow: true, policies: { algorithm: fixed-window, name: trial, limit: 2, windowMs: 3600000 } }
`)
    try {
      assert.deepEqual(await statuses(`${gateway.url}/hello`, 4), [200, 200, 200, 200])
      const metrics = await (await fetch(`${gateway.adminUrl}/metrics`)).text()
      assert.match(metrics, /^sluice_decisions_total\{route="api",policy="trial",outcome="shadow_limited"\} 2$/m)
      assert.match(metrics, /^sluice_decisions_total\{route="api",policy="trial",outcome="allowed"\} 2$/m)
    } finally {
      await gateway.stop()
    }
  })
})
