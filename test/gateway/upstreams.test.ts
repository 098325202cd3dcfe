/**
 * A route's upstreams, end to end: the gateway in a child process in front of
 * two real upstreams that the test turns bad and good (their health endpoint
 * failing, their connections dropped).
 */
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { createServer, request as httpRequest, type Server } from 'node:http'
import { connect, type AddressInfo } from 'node:net'
import { after, before, describe, it } from 'node:test'
import parsePrometheus from 'parse-prometheus-text-format'
import { startGateway, type LogLine, type RunningGateway } from '../support/gateway.ts'

interface Upstream {
  url: string
  server: Server
  /** What `/healthz` answers: a status, or 'hang' for no answer. */
  health: number | 'hang'
  /** Close the connection on every request, answering nothing. */
  drop: boolean
  /** Close a kept-alive connection as its next request arrives, answering nothing (an idle timeout's race). */
  dropReused: boolean
  /** Answer with these bytes (what is not HTTP) instead. */
  garble: string | undefined
}

/** An upstream answering its name. */
async function upstream(name: string): Promise<Upstream> {
  const state: Upstream = { url: '', server: createServer(), health: 200, drop: false, dropReused: false, garble: undefined }
  const served = new WeakSet<object>()
  state.server.on('request', (req, res) => {
    if (req.url === '/healthz') {
      if (state.health !== 'hang') res.writeHead(state.health).end()
      return
    }
    if (state.drop || (state.dropReused && served.has(req.socket))) {
      req.socket.destroy()
      return
    }
    served.add(req.socket)
    if (state.garble !== undefined) {
      req.socket.end(state.garble)
      return
    }
    res.end(name)
  })
  await new Promise<void>((resolve) => state.server.listen(0, '127.0.0.1', resolve))
  state.url = `http://127.0.0.1:${(state.server.address() as AddressInfo).port}`
  return state
}

/** A gateway config with these routes (YAML lines). */
const withRoutes = (routes: string) => `
server: { listen: 127.0.0.1:0 }
admin: { listen: 127.0.0.1:0 }
logging: { access: false }
routes:
${routes}
`

/** Upstreams a and b, and a gateway in front of them; `stop()` ends all three. */
async function setUp(routes: (a: Upstream, b: Upstream) => string): Promise<{ a: Upstream; b: Upstream; gateway: RunningGateway; stop: () => Promise<void> }> {
  const a = await upstream('a')
  const b = await upstream('b')
  const gateway = await startGateway(withRoutes(routes(a, b)))
  const stop = async () => {
    await gateway.stop()
    for (const side of [a, b]) {
      side.server.closeAllConnections()
      side.server.close()
    }
  }
  return { a, b, gateway, stop }
}

describe('gateway: active upstream health checks', () => {
  let a: Upstream
  let b: Upstream
  let gateway: RunningGateway
  let stop: () => Promise<void>

  before(async () => {
    ({ a, b, gateway, stop } = await setUp((a, b) => `
  - name: pool
    upstream: [${a.url}, ${b.url}]
    healthCheck: { path: /healthz, intervalMs: 100, timeoutMs: 300 }`))
  })

  after(() => stop?.())

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
    const status = await (await fetch(`${gateway.adminUrl}/status`)).json() as { routes: Array<{ name: string; upstreams: unknown }> }
    assert.deepEqual(status.routes.find((route) => route.name === 'pool')?.upstreams, [{ url: a.url, healthy: true }, { url: b.url, healthy: false }])

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
    const config = (upstreams: string) => withRoutes(`
  - name: pool
    upstream: [${upstreams}]
    healthCheck: { path: /healthz, intervalMs: 100, timeoutMs: 2000 }`)
    gateway.writeConfig(config(`${a.url}, ${b.url}`))
    const reloaded = await newSince((line) => line.msg === 'config reloaded')
    assert.equal(await answers(4), 'aaaa')
    assert.deepEqual(await healthGauge(), { a: '1', b: '0' })

    gateway.writeConfig(config(a.url))
    await newSince((line) => line.msg === 'config reloaded' && line.version !== reloaded.version)
    assert.deepEqual(await healthGauge(), { a: '1' }, 'no series left for b')
  })
})

describe('gateway: an upstream that drops the request', () => {
  let gateway: RunningGateway
  let stop: () => Promise<void>
  let a: Upstream
  let c: Upstream
  let d: Upstream

  before(async () => {
    // c closes each kept-alive connection as its second request arrives, as an upstream whose idle timeout fires then does.
    c = await upstream('c')
    d = await upstream('d')
    ;({ a, gateway, stop } = await setUp((a, b) => `
${['pool', 'post', 'patch', 'put'].map((name) => `
  - name: ${name}
    match: { path: /${name}/** }
    upstream: [${a.url}, ${b.url}]
    stripPrefix: /${name}`).join('')}
  - name: alone
    match: { path: /alone/** }
    upstream: ${a.url}
    stripPrefix: /alone
  - name: reused
    match: { path: /reused/** }
    upstream: ${c.url}
    stripPrefix: /reused
  - name: garbled
    match: { path: /garbled/** }
    upstream: ${d.url}
    stripPrefix: /garbled`))
    a.drop = true
    c.dropReused = true
  })

  after(async () => {
    await stop?.()
    for (const side of [c, d]) {
      side.server.closeAllConnections()
      side.server.close()
    }
  })

  const send = async (method: string, path: string, body?: string) => {
    const response = await fetch(`${gateway.url}${path}`, { method, ...(body !== undefined ? { body } : {}) })
    return `${response.status} ${await response.text()}`.trim()
  }

  /** A counter's series as [label values..., value], sorted. */
  const series = async (name: string, labels: string[]) => {
    const families = parsePrometheus(await (await fetch(`${gateway.adminUrl}/metrics`)).text()) as Array<{ name: string; metrics: Array<{ labels: Record<string, string>; value: string }> }>
    const metrics = families.find((family) => family.name === name)?.metrics ?? []
    return metrics.map((metric) => [...labels.map((label) => metric.labels[label]), metric.value]).sort()
  }

  it('passes over an upstream that dropped a request; sends on one that changes nothing done twice (and has no body); others get 502', async () => {
    // a closes every connection it is sent a request on: the first GET goes on to b, and a is passed over from then on.
    for (const method of ['GET', 'GET', 'HEAD', 'DELETE', 'PUT', 'OPTIONS']) {
      assert.match(await send(method, '/pool/x'), /^200( b)?$/, method)
    }
    // POST, PATCH, or a body that was streamed to a and cannot be sent again: a's failure is the client's 502 (each on a route of its own, all starting with a).
    for (const [method, body] of [['POST', undefined], ['PATCH', undefined], ['PUT', 'data']] as const) {
      const path = `/${method.toLowerCase()}/x`
      const answers = [await send(method, path, body), await send(method, path, body), await send(method, path, body)].map((answer) => answer.slice(0, 3))
      assert.deepEqual(answers, ['502', '200', '200'], `${method}${body !== undefined ? ' with a body' : ''}`)
    }
    const status = await (await fetch(`${gateway.adminUrl}/status`)).json() as { routes: Array<{ name: string; upstreams: Array<{ url: string; passedOverUntil?: string }> }> }
    const passedOver = status.routes.flatMap((route) => route.upstreams.filter((upstream) => upstream.passedOverUntil !== undefined).map((upstream) => `${route.name} ${upstream.url}`))
    assert.deepEqual(passedOver, ['pool', 'post', 'patch', 'put'].map((route) => `${route} ${a.url}`))
    // A reload keeps them passed over: before, each route's next request went to a again.
    const since = gateway.logs.length
    gateway.writeConfig(`${readFileSync(gateway.file, 'utf8')}\n# saved again\n`)
    await gateway.waitForLog((line) => gateway.logs.indexOf(line) >= since && line.msg === 'config reloaded')
    const afterReload = await (await fetch(`${gateway.adminUrl}/status`)).json() as typeof status
    assert.deepEqual(afterReload.routes.flatMap((route) => route.upstreams.filter((upstream) => upstream.passedOverUntil !== undefined).map((upstream) => `${route.name} ${upstream.url}`)), passedOver)
    // With no other upstream to go to, it is a 502 (after a second try on a new connection) that says what happened, and the upstream is not shown passed over.
    const alone = await fetch(`${gateway.url}/alone/x`)
    assert.equal(alone.status, 502)
    assert.equal((await alone.json() as { detail: string }).detail, 'The upstream closed the connection without answering.')
    // Counted once per request that failed, by what happened: the request b answered after a's failure is not.
    assert.deepEqual(await series('sluice_upstream_failures_total', ['route', 'failure']), [['alone', 'closed', '1'], ['patch', 'closed', '1'], ['post', 'closed', '1'], ['put', 'closed', '1']])
    // That one shows as a retry, by the upstream that failed, as does alone's second try.
    assert.deepEqual(await series('sluice_upstream_retries_total', ['route', 'upstream', 'failure']), [['alone', a.url, 'closed', '1'], ['pool', a.url, 'closed', '1']])
  })

  it('sends a request again on a new connection when the only upstream dropped the kept-alive one it went out on', async () => {
    // Without the second try, every request after the first met a connection the upstream was closing: a 502.
    const answers: string[] = []
    for (let i = 0; i < 4; i++) answers.push(await send(i % 2 === 0 ? 'GET' : 'DELETE', '/reused/x'))
    assert.deepEqual(answers, ['200 c', '200 c', '200 c', '200 c'])
    // Each retry is counted, against c (how many requests found a kept connection depends on when undici reuses one).
    const retries = (await series('sluice_upstream_retries_total', ['route', 'upstream', 'failure'])).filter(([route]) => route === 'reused')
    assert.deepEqual(retries.map((labels) => labels.slice(0, 3)), [['reused', c.url, 'closed']])
    assert.ok(Number(retries[0]?.[3]) >= 1 && Number(retries[0]?.[3]) <= 3, `retries ${retries[0]?.[3]}`)
    assert.deepEqual((await series('sluice_upstream_failures_total', ['route'])).filter(([route]) => route === 'reused'), [])
  })
  it('answers 502 saying so when the upstream answers with what is not HTTP', async () => {
    const garbles = [
      'HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\nhello',
      'HTTP/1.1 099 Low\r\nContent-Length: 2\r\n\r\nok',
      'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n',
      `HTTP/1.1 200 OK\r\nX-Big: ${'x'.repeat(20_000)}\r\nContent-Length: 2\r\n\r\nok`,
      // A valid head, then nothing valid before the body's first byte: the head was never sent, so there is still a 502 to give.
      'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n',
      'HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n',
    ]
    for (const garble of garbles) {
      d.garble = garble
      const garbled = await fetch(`${gateway.url}/garbled/x`)
      assert.equal(garbled.status, 502, garble.slice(0, 60))
      assert.equal((await garbled.json() as { detail: string }).detail, 'The upstream answered with a response that is not valid HTTP.', garble.slice(0, 60))
    }
    assert.deepEqual((await series('sluice_upstream_failures_total', ['route', 'failure'])).filter(([route]) => route === 'garbled'), [['garbled', 'invalid', String(garbles.length)]])
  })

  it('passes on a 304 that gives its representation\'s Content-Length, and a 204 that names a length, whole: neither has content', async () => {
    // undici 7 fails both as a body shorter than its Content-Length; the client got an empty reply.
    const get = () => new Promise<{ status: number | undefined; headers: Record<string, string | string[] | undefined>; body: string }>((resolve, reject) => {
      const request = httpRequest(`${gateway.url}/garbled/x`, (response) => {
        let body = ''
        response.setEncoding('utf8')
        response.on('data', (chunk: string) => { body += chunk })
        response.on('end', () => resolve({ status: response.statusCode, headers: response.headers, body }))
      })
      request.on('error', reject)
      request.end()
    })
    const before = await series('sluice_upstream_failures_total', ['route', 'failure'])
    d.garble = 'HTTP/1.1 304 Not Modified\r\nETag: "v7"\r\nContent-Length: 1234\r\n\r\n'
    const notModified = await get()
    assert.deepEqual([notModified.status, notModified.headers.etag, notModified.headers['content-length'], notModified.body], [304, '"v7"', '1234', ''], 'RFC 9110 8.6: a 304 may say how long the 200 would be')
    for (const garble of ['HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n', 'HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello']) {
      d.garble = garble
      const noContent = await get()
      assert.deepEqual([noContent.status, noContent.headers['content-length'], noContent.body], [204, undefined, ''], 'a 204 has no Content-Length: the upstream\'s is not passed on')
    }
    assert.deepEqual(await series('sluice_upstream_failures_total', ['route', 'failure']), before, 'none of them is an upstream failure')
  })
})

describe('gateway: hop-by-hop fields', () => {
  it('drops the fields a Connection header lists, both ways, in any spelling; passes the rest', async () => {
    const seen: Array<Record<string, string | string[] | undefined>> = []
    const server = createServer((req, res) => {
      seen.push(req.headers)
      const listed = req.url === '/listed'
      res.writeHead(200, { connection: listed ? 'keep-alive, X-Upstream-Hop' : 'keep-alive', 'x-upstream-hop': 'internal', 'keep-alive': 'timeout=77', 'x-kept': 'yes' })
      res.end('ok')
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const gateway = await startGateway(withRoutes(`
  - name: all
    upstream: http://127.0.0.1:${(server.address() as AddressInfo).port}`))
    try {
      const send = (path: string, connection: string) => new Promise<{ headers: Record<string, string | string[] | undefined> }>((resolve, reject) => {
        const port = Number(new URL(gateway.url).port)
        const request = httpRequest({ host: '127.0.0.1', port, path, headers: { connection, 'x-client-hop': 'secret', 'x-client-kept': 'yes' } }, (response) => {
          response.resume()
          response.on('end', () => resolve({ headers: response.headers }))
        })
        request.on('error', reject)
        request.end()
      })
      const listed = await send('/listed', 'keep-alive, X-Client-Hop')
      assert.equal(seen[0]?.['x-client-hop'], undefined, 'a field the client listed in Connection never reaches the upstream')
      assert.equal(seen[0]?.['x-client-kept'], 'yes')
      assert.equal(listed.headers['x-upstream-hop'], undefined, 'a field the upstream listed never reaches the client')
      assert.equal(listed.headers['x-kept'], 'yes')
      // Connection: keep-alive alone (the common message) lists no other field: both pass.
      const plain = await send('/plain', 'Keep-Alive')
      assert.equal(seen[1]?.['x-client-hop'], 'secret')
      assert.equal(plain.headers['x-upstream-hop'], 'internal')
      assert.notEqual(plain.headers['keep-alive'], 'timeout=77', "the upstream's Keep-Alive is about its own connection, not the client's")
    } finally {
      await gateway.stop()
      server.closeAllConnections()
      server.close()
    }
  })
})

describe('gateway: in front of an upstream that limits too', () => {
  it('keeps one value per one-value field, the side with fewer units left; list fields carry both sides\' items', async () => {
    // As an app behind the gateway limiting per user would answer (express-rate-limit's fields, or draft-7's, or draft-10's).
    const fields: Record<string, Record<string, string>> = {
      '/legacy': { 'X-RateLimit-Limit': '1000', 'X-RateLimit-Remaining': '2', 'X-RateLimit-Reset': '1800000000', 'RateLimit-Limit': '1000', 'RateLimit-Remaining': '500', 'RateLimit-Reset': '30' },
      '/d7': { RateLimit: 'limit=100, remaining=1, reset=5', 'RateLimit-Policy': '100;w=60' },
      '/d7-loose': { RateLimit: 'limit=100, remaining=99, reset=5', 'RateLimit-Policy': '100;w=60' },
      '/d10': { RateLimit: '"app";r=3;t=10', 'RateLimit-Policy': '"app";q=5;w=60' },
    }
    const server = createServer((req, res) => {
      res.writeHead(200, fields[req.url ?? ''] ?? {})
      res.end('ok')
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const upstreamUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    const policy = (name: string) => `{ algorithm: sliding-log, name: ${name}, limit: 10, windowMs: 60000 }`
    const gateway = await startGateway(withRoutes(`
  - name: legacy
    match: { path: /legacy }
    upstream: ${upstreamUrl}
    headers: { standard: draft-6, legacy: true }
    limits: [{ policies: ${policy('legacy')} }]
  - name: d7
    match: { path: [/d7, /d7-loose] }
    upstream: ${upstreamUrl}
    headers: { standard: draft-7 }
    limits: [{ policies: ${policy('d7')} }]
  - name: d10
    match: { path: /d10 }
    upstream: ${upstreamUrl}
    limits: [{ policies: ${policy('d10')} }]`))
    try {
      /** Each field's values as sent, one entry per field line. */
      const send = (path: string) => new Promise<Map<string, string[]>>((resolve, reject) => {
        const request = httpRequest(`${gateway.url}${path}`, (response) => {
          response.resume()
          const lines = new Map<string, string[]>()
          for (let i = 0; i < response.rawHeaders.length; i += 2) {
            const name = (response.rawHeaders[i] as string).toLowerCase()
            lines.set(name, [...(lines.get(name) ?? []), response.rawHeaders[i + 1] as string])
          }
          response.on('end', () => resolve(lines))
        })
        request.on('error', reject)
        request.end()
      })
      const legacy = await send('/legacy')
      // The upstream's X-RateLimit-* leave 2, the gateway's 9: the upstream's set, whole. Its RateLimit-* leave 500: the gateway's.
      assert.deepEqual(['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset'].map((name) => legacy.get(name)), [['1000'], ['2'], ['1800000000']])
      assert.deepEqual(['ratelimit-limit', 'ratelimit-remaining'].map((name) => legacy.get(name)), [['10'], ['9']])
      assert.match(legacy.get('ratelimit-reset')?.join('|') ?? '', /^\d+$/, "the gateway's own reset, one value")
      const d7 = await send('/d7')
      assert.deepEqual(d7.get('ratelimit'), ['limit=100, remaining=1, reset=5'])
      assert.deepEqual(d7.get('ratelimit-policy'), ['100;w=60', '10;w=60'], 'a list: both policies')
      const d7Loose = await send('/d7-loose')
      assert.match(d7Loose.get('ratelimit')?.join('|') ?? '', /^limit=10, remaining=8, reset=\d+$/)
      const d10 = await send('/d10')
      assert.equal(d10.get('ratelimit')?.[0], '"app";r=3;t=10')
      assert.match(d10.get('ratelimit')?.[1] ?? '', /^"d10";r=9;t=\d+$/)
      assert.equal(d10.get('ratelimit')?.length, 2)
      assert.deepEqual(d10.get('ratelimit-policy'), ['"app";q=5;w=60', '"d10";q=10;w=60'])
    } finally {
      await gateway.stop()
      server.closeAllConnections()
      server.close()
    }
  })
})

describe('gateway: transfer codings', () => {
  it('answers 501 to a body in a transfer coding other than chunked, which would reach the upstream undeclared; chunked passes', async () => {
    const seen: string[] = []
    const server = createServer((req, res) => {
      let body = ''
      req.setEncoding('utf8')
      req.on('data', (chunk: string) => { body += chunk })
      req.on('end', () => {
        seen.push(body)
        res.end('ok')
      })
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const gateway = await startGateway(withRoutes(`
  - name: all
    upstream: http://127.0.0.1:${(server.address() as AddressInfo).port}`))
    const raw = (codings: string) => new Promise<string>((resolve, reject) => {
      const socket = connect(Number(new URL(gateway.url).port), '127.0.0.1', () => {
        socket.write(`POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: ${codings}\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n`)
      })
      let answer = ''
      socket.setEncoding('utf8')
      socket.on('data', (chunk: string) => { answer += chunk })
      socket.on('end', () => resolve(answer))
      socket.on('error', reject)
    })
    try {
      for (const codings of ['gzip, chunked', 'deflate,chunked']) {
        const answer = await raw(codings)
        assert.match(answer, /^HTTP\/1\.1 501 Not Implemented\r\n/, codings)
        assert.match(answer, new RegExp(`Transfer-Encoding \\\\"${codings}\\\\" is not supported`), codings)
      }
      assert.deepEqual(seen, [], 'neither reached the upstream')
      assert.match(await raw('Chunked'), /^HTTP\/1\.1 200 OK\r\n[\s\S]*\r\n\r\nok$/)
      assert.deepEqual(seen, ['hello'])
    } finally {
      await gateway.stop()
      server.closeAllConnections()
      server.close()
    }
  })
})

describe('gateway: an upstream that sends its head before its body', () => {
  it('passes the head on before the body (a stream, a long poll): the client hears the status while the upstream waits', async () => {
    // The upstream sends its body only once the client has the head: were the head held for the body, neither would come.
    let clientHasHead: () => void = () => {}
    const headReached = new Promise<void>((resolve) => { clientHasHead = resolve })
    const events = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.flushHeaders()
      void headReached.then(() => res.end('data: first\n\n'))
    })
    await new Promise<void>((resolve) => events.listen(0, '127.0.0.1', resolve))
    const gateway = await startGateway(withRoutes(`
  - name: events
    upstream: http://127.0.0.1:${(events.address() as AddressInfo).port}`))
    try {
      const response = await Promise.race([
        fetch(`${gateway.url}/stream`),
        new Promise<never>((_resolve, reject) => setTimeout(() => reject(new Error('no head within 5 s: the gateway held it for the body')), 5000)),
      ])
      assert.deepEqual([response.status, response.headers.get('content-type')], [200, 'text/event-stream'])
      clientHasHead()
      assert.equal(await response.text(), 'data: first\n\n')
    } finally {
      clientHasHead()
      await gateway.stop()
      events.closeAllConnections()
      events.close()
    }
  })
})
