import assert from 'node:assert/strict'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { after, describe, it } from 'node:test'
import { createClient, QueueFullError, QuotaExhaustedError } from '../../src/client/index.ts'
import { Agent, request } from 'undici'
import { MemoryStore } from '../../src/index.ts'
import { withRateLimit } from '../../src/http/adapters/node.ts'
import { processWarningsDuring } from '../helpers.ts'
import { DIALECTS, nextWindow, offer, refusalsAfterFirstWindow, startLimitedServer, type LimitedServer } from './servers.ts'

const LIMIT = 50
// 10x the allowed rate: 500 requests a second, for 0.8 s.
const OFFERED = 400
const INTERVAL_MS = 2

describe('the client against servers that announce their limits in each dialect', () => {
  const servers: LimitedServer[] = []
  after(() => Promise.all(servers.map((server) => server.close())))

  it('with defaults, at 10x the allowed rate: at most one 429 per reset period after the first, every request completes', async (t) => {
    const results = await Promise.all(DIALECTS.map(async (dialect) => {
      const bare = await startLimitedServer({ dialect, limit: LIMIT })
      const guarded = await startLimitedServer({ dialect, limit: LIMIT })
      servers.push(bare, guarded)
      await nextWindow()
      const withoutClient = await offer(OFFERED, INTERVAL_MS, () => fetch(`${bare.url}/items`))
      const client = createClient()
      await nextWindow()
      const statuses = await offer(OFFERED, INTERVAL_MS, (i) => client.fetch(`${guarded.url}/items/${i}`))
      return { dialect, bare, guarded, withoutClient, statuses }
    }))
    for (const { dialect, bare, guarded, withoutClient, statuses } of results) {
      // The Retry-After dialects announce no quota: the client learns from its first 429.
      const perWindow = refusalsAfterFirstWindow(guarded, dialect.startsWith('retry-after'))
      t.diagnostic(`${dialect}: without the client ${bare.refused} x 429 of ${OFFERED}; with it ${guarded.refused} x 429 (${perWindow.join(' ')} per window after the first), all ${statuses.length} completed with 200`)
      // The load is well over the limit (a slow machine offers less than 10x, so not a fixed count).
      assert.ok(withoutClient.filter((status) => status === 429).length >= LIMIT, `${dialect}: without the client, more than a window's limit is refused`)
      assert.deepEqual(statuses.filter((status) => status !== 200), [], `${dialect}: every request completes`)
      assert.ok(perWindow.every((refusals) => refusals <= 1), `${dialect}: at most one 429 per window after the first: ${perWindow.join(' ')}`)
      assert.equal(guarded.admitted, OFFERED)
    }
  })
})

/** A server that refuses each client's first request with `Retry-After`, then serves. */
async function refuseFirst(retryAfter: (now: number) => string, extra: Record<string, string> = {}) {
  const seen = new Set<string>()
  const arrivals: Array<{ at: number; who: string; method: string; status: number }> = []
  const server = createServer((request, response) => {
    const who = `${request.method} ${String(request.headers['x-client'] ?? '')}`
    const first = !seen.has(who)
    seen.add(who)
    const status = first ? 429 : 200
    arrivals.push({ at: Date.now(), who, method: request.method ?? '', status })
    request.resume()
    request.on('end', () => {
      response.writeHead(status, first ? { 'Retry-After': retryAfter(Date.now()), ...extra } : {})
      response.end()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return { url, arrivals, close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }) }
}

describe('the client against the LLM APIs\' buckets (OpenAI, Anthropic)', () => {
  /**
   * Buckets refilled continuously, as those APIs limit requests and tokens,
   * announced as OpenAI or Anthropic does: the reset is the time until a
   * bucket is full again. A request takes one request unit and the tokens its
   * `x-tokens` header names; a refused one takes nothing.
   */
  interface Bucket { capacity: number; unitMs: number; level: number }
  async function startBucketServer(dialect: 'openai' | 'anthropic', requests: { capacity: number; unitMs: number }, tokens = { capacity: 200_000, unitMs: 0.3 }) {
    const buckets: Record<'requests' | 'tokens', Bucket> = { requests: { ...requests, level: requests.capacity }, tokens: { ...tokens, level: tokens.capacity } }
    let last = Date.now()
    const state = { refused: 0, admitted: 0 }
    const server = createServer((request, response) => {
      const now = Date.now()
      const want = { requests: 1, tokens: Number(request.headers['x-tokens'] ?? 0) }
      for (const bucket of Object.values(buckets)) bucket.level = Math.min(bucket.capacity, bucket.level + (now - last) / bucket.unitMs)
      last = now
      const allowed = buckets.requests.level >= want.requests && buckets.tokens.level >= want.tokens
      const headers: Record<string, string> = {}
      for (const [name, bucket] of Object.entries(buckets) as Array<['requests' | 'tokens', Bucket]>) {
        if (allowed) bucket.level -= want[name]
        const untilFullMs = Math.ceil((bucket.capacity - bucket.level) * bucket.unitMs)
        const remaining = String(Math.floor(bucket.level))
        if (dialect === 'openai') {
          Object.assign(headers, { [`x-ratelimit-limit-${name}`]: String(bucket.capacity), [`x-ratelimit-remaining-${name}`]: remaining, [`x-ratelimit-reset-${name}`]: `${untilFullMs}ms` })
        } else {
          Object.assign(headers, {
            [`anthropic-ratelimit-${name}-limit`]: String(bucket.capacity), [`anthropic-ratelimit-${name}-remaining`]: remaining,
            [`anthropic-ratelimit-${name}-reset`]: new Date(now + untilFullMs).toISOString(),
          })
        }
      }
      if (allowed) state.admitted++
      else {
        state.refused++
        headers['retry-after'] = '1'
      }
      response.writeHead(allowed ? 200 : 429, headers)
      response.end(allowed ? 'ok' : 'slow down')
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    return Object.assign(state, {
      url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/messages`,
      close: () => new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
    })
  }

  const statusesOf = (responses: Array<Promise<Response>>) => Promise.all(responses.map((pending) => pending.then(async (response) => {
    await response.arrayBuffer()
    return response.status
  })))

  for (const dialect of ['openai', 'anthropic'] as const) {
    it(`${dialect}: 12 requests at once to a bucket of 3 refilled every 100 ms all complete, none refused: the client spends the burst, then goes as units come back`, async () => {
      const server = await startBucketServer(dialect, { capacity: 3, unitMs: 100 })
      try {
        const client = createClient()
        const statuses = await statusesOf(Array.from({ length: 12 }, () => client.fetch(server.url, { method: 'POST' })))
        assert.deepEqual(statuses, Array(12).fill(200))
        assert.equal(server.refused, 0)
        assert.equal(server.admitted, 12)
      } finally {
        await server.close()
      }
    })

    it(`${dialect}: requests that say their tokens (rateLimit.cost) wait for those tokens to come back: 8 of 400 against 1,000 refilled 4 per ms, none refused; without the cost, refusals`, async () => {
      const tokens = { capacity: 1000, unitMs: 0.25 }
      const send = (url: string, cost?: { tokens: number }) => {
        const client = createClient()
        return statusesOf(Array.from({ length: 8 }, () =>
          client.fetch(url, { method: 'POST', headers: { 'x-tokens': '400' }, ...(cost === undefined ? {} : { rateLimit: { cost } }) })))
      }
      const server = await startBucketServer(dialect, { capacity: 100, unitMs: 10 }, tokens)
      const blind = await startBucketServer(dialect, { capacity: 100, unitMs: 10 }, tokens)
      try {
        const started = Date.now()
        assert.deepEqual(await send(server.url, { tokens: 400 }), Array(8).fill(200))
        const tookMs = Date.now() - started
        assert.equal(server.refused, 0)
        assert.equal(server.admitted, 8)
        // 3,200 tokens from a bucket of 1,000: 2,200 had to drip in, at 4 per ms.
        assert.ok(tookMs >= 500, `took ${tookMs} ms`)
        // Counted as one token each, they are sent while the bucket cannot take them.
        await send(blind.url)
        assert.ok(blind.refused > 0, 'without the cost, the server refuses some')
      } finally {
        await server.close()
        await blind.close()
      }
    })
  }
})

describe('retries', () => {
  it('honours Retry-After in delay-seconds: the retry is never sent before it', async () => {
    const server = await refuseFirst(() => '1')
    try {
      const response = await createClient().fetch(server.url)
      assert.equal(response.status, 200)
      const [refused, retried] = server.arrivals
      assert.ok(refused !== undefined && retried !== undefined)
      assert.ok(retried.at - refused.at >= 1000, `retried ${retried.at - refused.at} ms after the refusal`)
    } finally {
      await server.close()
    }
  })

  it('honours Retry-After as an HTTP date, read against the server Date', async () => {
    // Whole seconds: the date names the start of a second at least 2 s ahead.
    const server = await refuseFirst((now) => new Date((Math.floor(now / 1000) + 2) * 1000).toUTCString())
    try {
      const response = await createClient().fetch(server.url)
      assert.equal(response.status, 200)
      const [refused, retried] = server.arrivals
      assert.ok(refused !== undefined && retried !== undefined)
      assert.ok(retried.at >= (Math.floor(refused.at / 1000) + 2) * 1000, 'not before the date')
    } finally {
      await server.close()
    }
  })

  it('jitter spreads the retries of 50 clients refused together over the following window', async (t) => {
    const server = await refuseFirst(() => '1')
    try {
      const clients = Array.from({ length: 50 }, () => createClient())
      const statuses = await Promise.all(clients.map(async (client, i) => (await client.fetch(server.url, { headers: { 'x-client': String(i) } })).status))
      assert.deepEqual(new Set(statuses), new Set([200]))
      const refusedAt = new Map(server.arrivals.filter((a) => a.status === 429).map((a) => [a.who, a.at]))
      const retries = server.arrivals.filter((a) => a.status === 200).map((a) => a.at - (refusedAt.get(a.who) as number))
      const spread = Math.max(...retries) - Math.min(...retries)
      assert.ok(Math.min(...retries) >= 1000, 'no retry before Retry-After')
      const bins = new Array<number>(10).fill(0)
      for (const offset of retries) bins[Math.min(9, Math.max(0, Math.floor((offset - 1000) / 100)))]! += 1
      t.diagnostic(`50 retries after Retry-After: 1 spread over ${spread} ms; per 100 ms: ${bins.join(' ')}`)
      assert.equal(retries.length, 50)
      assert.ok(spread >= 500, `retries spread over ${spread} ms, not bunched`)
      assert.ok(Math.max(...bins) <= 20, `no 100 ms holds more than 20 of the 50 retries: ${bins.join(' ')}`)
    } finally {
      await server.close()
    }
  })

  it('does not retry a non-idempotent request by default; does with an Idempotency-Key or when told', async () => {
    const server = await refuseFirst(() => '1')
    try {
      const client = createClient()
      const refused: number[] = []
      client.on('gaveUp', (event) => refused.push(event.status))
      const post = await client.fetch(server.url, { method: 'POST', body: '{"charge":1}', headers: { 'x-client': 'a' } })
      assert.equal(post.status, 429)
      assert.deepEqual(refused, [429])
      assert.equal(server.arrivals.filter((a) => a.who === 'POST a').length, 1)

      const keyed = await createClient().fetch(server.url, { method: 'POST', body: 'x', headers: { 'x-client': 'b', 'idempotency-key': 'k1' } })
      assert.equal(keyed.status, 200)
      const told = await createClient({ retry: { nonIdempotent: true } }).fetch(server.url, { method: 'PATCH', body: 'x', headers: { 'x-client': 'c' } })
      assert.equal(told.status, 200)
      assert.equal(server.arrivals.filter((a) => a.who === 'POST b').length, 2)
    } finally {
      await server.close()
    }
  })

  it('Stripe-Should-Retry: false is not retried, and a Retry-After beyond maxWaitMs is given back at once', async () => {
    const stripe = await refuseFirst(() => '1', { 'Stripe-Should-Retry': 'false' })
    const slow = await refuseFirst(() => '3600')
    try {
      assert.equal((await createClient().fetch(stripe.url)).status, 429)
      const client = createClient()
      const reasons: string[] = []
      client.on('gaveUp', (event) => reasons.push(event.reason))
      const started = Date.now()
      assert.equal((await client.fetch(slow.url)).status, 429)
      assert.ok(Date.now() - started < 1000)
      assert.deepEqual(reasons, ['wait-too-long'])
      // The partition is blocked for the hour: the next request fails fast rather than wait.
      await assert.rejects(client.fetch(slow.url), (error: unknown) => error instanceof QuotaExhaustedError && error.retryAfterMs > 3_500_000)
    } finally {
      await Promise.all([stripe.close(), slow.close()])
    }
  })
})

describe('a queue behind a server that keeps refusing', () => {
  /** A server answering every request with 429 and Retry-After: 1, or `refuse` of them. */
  async function refusing(refuse: (n: number) => boolean = () => true) {
    let hits = 0
    const server = createServer((request, response) => {
      const n = ++hits
      request.resume()
      setTimeout(() => {
        if (refuse(n)) response.writeHead(429, { 'Retry-After': '1' })
        response.end()
      }, 50)
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    return {
      url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`,
      hits: () => hits,
      close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }),
    }
  }

  it('holds no request in line for the server longer than its maxWaitMs: those behind a request retried again and again give up', async () => {
    const server = await refusing()
    try {
      const client = createClient({ maxWaitMs: 2500, retry: { retries: 2 } })
      const outcomes = await Promise.all(Array.from({ length: 5 }, () => client.fetch(server.url).then((response) => response.status, (error: unknown) => error)))
      const gaveUp = outcomes.filter((outcome): outcome is QuotaExhaustedError => outcome instanceof QuotaExhaustedError)
      // Each refused request keeps its place through its retries; those behind it, once their time in line
      // and the wait ahead pass 2.5 s, are refused here rather than waiting out every retry before them.
      assert.ok(gaveUp.length >= 2, `${gaveUp.length} of 5 gave up`)
      assert.ok(outcomes.every((outcome) => outcome === 429 || outcome instanceof QuotaExhaustedError))
      for (const error of gaveUp) assert.match(error.message, /\(the server asked to retry later, and it has waited \d+ ms in line for the server already\), longer than maxWaitMs allows$/)
      // Without the bound each of the 5 was sent 3 times.
      assert.ok(server.hits() <= 3 * (5 - gaveUp.length), `${server.hits()} requests reached the server`)
    } finally {
      await server.close()
    }
  })

  it('holds the head of the line to its maxWaitMs too, counting its time in line before it led', async () => {
    // Every answer: a quota of 1 a second, spent, back in 1 s.
    let hits = 0
    const server = createServer((request, response) => {
      hits++
      request.resume()
      response.writeHead(200, { 'RateLimit-Policy': '"m";q=1;w=1', RateLimit: '"m";r=0;t=1' }).end()
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    try {
      const client = createClient({ maxWaitMs: 1500 })
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`
      await client.fetch(url)
      const [first, second] = await Promise.all([client.fetch(url).then((response) => response.status), client.fetch(url).catch((error: unknown) => error)])
      assert.equal(first, 200)
      // The second waited 1 s behind the first for the quota; the next second would make it 2, past its 1.5 s.
      // (Before, as the head it was held to the wait ahead alone, and sent after 2 s.)
      assert.ok(second instanceof QuotaExhaustedError, `the second request: ${String(second)}`)
      assert.match(second.message, /\(its quota is spent, and it has waited \d+ ms in line for the server already\)/)
      assert.equal(hits, 2)
    } finally {
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    }
  })

  it('does not count time in line behind the client\'s own concurrency limit', async () => {
    // One refusal among 12 requests sent one at a time: each waits long in line, for its turn, not for the server.
    const server = await refusing((n) => n === 4)
    try {
      const client = createClient({ maxWaitMs: 1500, concurrency: 1 })
      const statuses = await Promise.all(Array.from({ length: 12 }, () => client.fetch(server.url).then((response) => response.status)))
      assert.deepEqual(statuses, Array.from({ length: 12 }, () => 200))
    } finally {
      await server.close()
    }
  })
})

describe('many partitions', () => {
  it('keeps about 10,000: the least recently used are forgotten, those in use keep what they learned', async () => {
    // Every origin announces an hour's quota of 1, so none of them is idle for an hour.
    const client = createClient({
      maxWaitMs: 0,
      fetch: async () => new Response('ok', { headers: { 'RateLimit-Policy': '"h";q=1;w=3600', RateLimit: '"h";r=0;t=3600' } }),
    })
    const spent = (url: string) => assert.rejects(client.fetch(url), QuotaExhaustedError, url)
    for (const url of ['http://cold.test/', 'http://hot.test/']) await client.fetch(url)
    await spent('http://cold.test/')
    for (let i = 0; i < 12_000; i++) {
      await client.fetch(`http://origin-${i}.test/`)
      if (i % 1000 === 0) {
        await spent('http://hot.test/')
        // Real traffic ends its job now and then: WeakRefs made in one (by Request) live until it ends.
        await new Promise((resolve) => setImmediate(resolve))
      }
    }
    await spent('http://hot.test/')
    // Forgotten: its next request goes out and learns the quota again.
    assert.equal((await client.fetch('http://cold.test/')).status, 200)
    await spent('http://cold.test/')
    assert.ok(client.partitionCount <= 10_000, `${client.partitionCount} partitions kept`)
  })
})

describe('waiting, failing fast, queues and pacing', () => {
  it('maxWaitMs: 0 fails fast with QuotaExhaustedError once the quota is known to be spent', async () => {
    const server = await startLimitedServer({ dialect: 'draft-10', limit: 2, windowSeconds: 60 })
    try {
      const client = createClient({ maxWaitMs: 0 })
      assert.equal((await client.fetch(server.url)).status, 200)
      assert.equal((await client.fetch(server.url)).status, 200)
      await assert.rejects(client.fetch(server.url), (error: unknown) => {
        assert.ok(error instanceof QuotaExhaustedError)
        assert.equal(error.code, 'ERR_SLUICE_QUOTA_EXHAUSTED')
        assert.equal(error.partition, new URL(server.url).origin)
        assert.ok(error.retryAfterMs > 0 && error.retryAfterMs <= 60_000)
        return true
      })
      assert.equal(server.arrivals.length, 2, 'the refused request was never sent')
    } finally {
      await server.close()
    }
  })

  it('first contact: 30 requests at once to a server allowing 5 send one, learn the quota, send 4 more and refuse none at the server', async () => {
    const server = await startLimitedServer({ dialect: 'draft-10', limit: 5, windowSeconds: 60 })
    try {
      const client = createClient({ maxWaitMs: 0 })
      const outcomes = await Promise.allSettled(Array.from({ length: 30 }, () => client.fetch(server.url).then((r) => r.status)))
      assert.equal(outcomes.filter((o) => o.status === 'fulfilled' && o.value === 200).length, 5)
      assert.equal(outcomes.filter((o) => o.status === 'rejected' && o.reason instanceof QuotaExhaustedError).length, 25)
      assert.equal(server.refused, 0)
      assert.equal(server.arrivals.length, 5)
    } finally {
      await server.close()
    }
  })

  it('a token bucket that announces when its next token comes: after each reset one request asks, so the bucket is never overrun', async () => {
    // Capacity 2, one token a second; t is the wait for the next token (draft-10's "until additional quota"), not for a full bucket.
    const capacity = 2
    let tokens = capacity
    let last = Date.now()
    let refused = 0
    const server = createServer((_request, response) => {
      const now = Date.now()
      tokens = Math.min(capacity, tokens + (now - last) / 1000)
      last = now
      const allowed = tokens >= 1
      if (allowed) tokens -= 1
      else refused++
      const nextTokenS = tokens >= 1 ? 0 : Math.ceil(1 - tokens)
      response.setHeader('RateLimit-Policy', `"bucket";q=${capacity};w=${capacity}`)
      response.setHeader('RateLimit', `"bucket";r=${Math.floor(tokens)};t=${nextTokenS}`)
      if (!allowed) response.setHeader('Retry-After', String(nextTokenS))
      response.statusCode = allowed ? 200 : 429
      response.end()
    }).listen(0, '127.0.0.1')
    await new Promise((resolve) => server.once('listening', resolve))
    try {
      const client = createClient()
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`
      const statuses = await Promise.all(Array.from({ length: 5 }, () => client.fetch(url).then((r) => r.status)))
      assert.deepEqual(statuses, [200, 200, 200, 200, 200])
      // Taking a reset for a full bucket sends two when one token has come: one of them refused at every reset.
      assert.equal(refused, 0)
    } finally {
      await new Promise((resolve) => server.close(resolve))
    }
  })

  it('against sluice\'s own token bucket, full again only in 100 s: the client spends it, then goes at the refill rate', async () => {
    let refused = 0
    const bucket = { algorithm: 'token-bucket' as const, name: 'bucket', capacity: 200, refillTokens: 2, refillIntervalMs: 1000 }
    const server = createServer(withRateLimit((_request, response) => { response.end('ok') }, { rules: [{ name: 'api', policies: bucket }], onLimited: () => { refused++ } }))
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    try {
      const client = createClient()
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`
      const start = Date.now()
      // Told "nothing left, full in 100 s", it would wait longer than maxWaitMs (60 s) and give up; told when the next token comes, it waits that.
      const statuses = await Promise.all(Array.from({ length: 203 }, () => client.fetch(url).then((r) => r.status, (error: Error) => error.name)))
      assert.deepEqual(new Set(statuses), new Set([200]))
      assert.equal(refused, 0)
      assert.ok(Date.now() - start >= 1_000, 'the last three waited for tokens')
    } finally {
      await new Promise((resolve) => server.close(resolve))
    }
  })

  it('against sluice\'s own sliding log: told when its oldest entry leaves, the client waits that, not a whole window', async () => {
    let refused = 0
    const log = { algorithm: 'sliding-log' as const, name: 'log', limit: 2, windowMs: 3000 }
    const server = createServer(withRateLimit((_request, response) => { response.end('ok') }, { rules: [{ name: 'api', policies: log }], onLimited: () => { refused++ } }))
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    try {
      // A window's wait (3 s) is more than it may wait; the oldest entry leaves 1 s sooner.
      const client = createClient({ maxWaitMs: 2500 })
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`
      assert.equal((await client.fetch(url)).status, 200)
      await new Promise((resolve) => setTimeout(resolve, 1000))
      const second = await client.fetch(url)
      assert.match(second.headers.get('ratelimit') ?? '', /^"log";r=0;t=[12]$/)
      assert.equal((await client.fetch(url)).status, 200)
      assert.equal(refused, 0)
    } finally {
      await new Promise((resolve) => server.close(resolve))
    }
  })

  it('spent as it counts, the client waits for the answers in flight before giving up on a far reset', async () => {
    // A sliding window's server: more than 2 or 1 only in 100 s, but more than 0 in 2 s.
    let served = 0
    let spentAt = 0
    let refused = 0
    const server = createServer((_request, response) => {
      const allowed = served < 3 || Date.now() - spentAt >= 2000
      if (allowed) served++
      else refused++
      if (served === 3 && spentAt === 0) spentAt = Date.now()
      const left = Math.max(0, 3 - served)
      response.setHeader('RateLimit', `"window";r=${left};t=${left > 0 ? 100 : 2}`)
      response.statusCode = allowed ? 200 : 429
      response.end()
    }).listen(0, '127.0.0.1')
    await new Promise((resolve) => server.once('listening', resolve))
    try {
      const client = createClient({ maxWaitMs: 10_000 })
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`
      const outcomes = await Promise.all(Array.from({ length: 4 }, () => client.fetch(url).then((r) => r.status, (error: Error) => error.name)))
      assert.deepEqual(outcomes, [200, 200, 200, 200])
      assert.equal(refused, 0)
    } finally {
      await new Promise((resolve) => server.close(resolve))
    }
  })

  it('spent as it counts, it waits for answers in flight no longer than maxWaitMs: a slow answer does not hold a request it will refuse', async () => {
    // Two a window of 30 s; the second request is held by the server until the test lets it go.
    let release: () => void = () => {}
    const held = new Promise<void>((resolve) => { release = resolve })
    let served = 0
    const server = createServer((_request, response) => {
      served++
      const left = 2 - served
      const answer = () => response.writeHead(200, { 'RateLimit-Policy': '"q";q=2;w=30', RateLimit: `"q";r=${left};t=30` }).end()
      if (served === 2) void held.then(answer)
      else answer()
    }).listen(0, '127.0.0.1')
    await new Promise((resolve) => server.once('listening', resolve))
    try {
      const client = createClient({ maxWaitMs: 300 })
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`
      assert.equal((await client.fetch(url)).status, 200)
      const slow = client.fetch(url)
      const origin = new URL(url).origin
      for (let waited = 0; served < 2 && waited < 2000; waited += 10) await new Promise((resolve) => setTimeout(resolve, 10))
      // Spent as counted (one left, one in flight), a reset 30 s off: refused, once it has waited
      // maxWaitMs for the held answer, while that answer is still held.
      const third = client.fetch(url).then(() => 'sent', (error: Error) => error)
      const outcome = await Promise.race([third, new Promise((resolve) => setTimeout(() => resolve('still waiting'), 5000))])
      assert.ok(outcome instanceof QuotaExhaustedError, `the third request: ${String(outcome)}`)
      assert.equal(client.waiting(origin), 0)
      assert.equal(served, 2)
      release()
      assert.equal((await slow).status, 200)
    } finally {
      release()
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    }
  })

  it('abort during a wait rejects at once with the signal\'s reason and leaves no timer', async () => {
    const server = await startLimitedServer({ dialect: 'draft-10', limit: 1, windowSeconds: 60 })
    try {
      const client = createClient()
      assert.equal((await client.fetch(server.url)).status, 200)
      const timersBefore = process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length
      const controller = new AbortController()
      const waiting = client.fetch(server.url, { signal: controller.signal })
      const origin = new URL(server.url).origin
      for (let waited = 0; client.waiting(origin) === 0 && waited < 2000; waited += 10) await new Promise((resolve) => setTimeout(resolve, 10))
      assert.equal(client.waiting(origin), 1)
      const abortedAt = performance.now()
      controller.abort(new Error('user gave up'))
      await assert.rejects(waiting, /user gave up/)
      // The wait it cut short was a minute; a bound far below that, far above a busy CI machine's pauses.
      assert.ok(performance.now() - abortedAt < 2000, 'rejected promptly')
      assert.equal(client.waiting(origin), 0)
      await new Promise((resolve) => setImmediate(resolve))
      const timersAfter = process.getActiveResourcesInfo().filter((kind) => kind === 'Timeout').length
      assert.ok(timersAfter <= timersBefore, `timers: ${timersBefore} before, ${timersAfter} after`)
      assert.equal(server.arrivals.length, 1)
    } finally {
      await server.close()
    }
  })

  it('abort during a retry\'s back-off and during pacing rejects too', async () => {
    const server = await refuseFirst(() => '30')
    try {
      const controller = new AbortController()
      const retrying = createClient().fetch(server.url, { signal: controller.signal })
      await new Promise((resolve) => setTimeout(resolve, 100))
      controller.abort()
      await assert.rejects(retrying, { name: 'AbortError' })

      const paced = createClient({ retry: false, pace: { algorithm: 'token-bucket', capacity: 1, refillTokens: 1, refillIntervalMs: 60_000 } })
      assert.equal((await paced.fetch(server.url, { headers: { 'x-client': 'p' } })).status, 429)
      const second = new AbortController()
      const waiting = paced.fetch(server.url, { signal: second.signal, headers: { 'x-client': 'p' } })
      await new Promise((resolve) => setTimeout(resolve, 50))
      second.abort()
      await assert.rejects(waiting, { name: 'AbortError' })
    } finally {
      await server.close()
    }
  })

  it('pacing: any sluice policy spaces the requests of a server that announces nothing', async () => {
    const server = await startLimitedServer({ dialect: 'retry-after-seconds', limit: 1000 })
    const sentAt: number[] = []
    try {
      const client = createClient({
        pace: { algorithm: 'sliding-log', limit: 5, windowMs: 500 },
        fetch: (request) => { sentAt.push(Date.now()); return fetch(request) },
      })
      const statuses = await Promise.all(Array.from({ length: 10 }, () => client.fetch(server.url).then((r) => r.status)))
      assert.deepEqual(new Set(statuses), new Set([200]))
      sentAt.sort((a, b) => a - b)
      assert.ok((sentAt[5] as number) - (sentAt[0] as number) >= 490, `the 6th request went ${(sentAt[5] as number) - (sentAt[0] as number)} ms after the 1st`)
    } finally {
      await server.close()
    }
  })

  it('pacing with rateLimit.cost: each policy is charged the units the request names for it (1 for the others)', async () => {
    const server = await startLimitedServer({ dialect: 'retry-after-seconds', limit: 1000 })
    const sentAt: number[] = []
    try {
      const client = createClient({
        pace: [{ name: 'requests', algorithm: 'sliding-log', limit: 100, windowMs: 500 }, { name: 'tokens', algorithm: 'sliding-log', limit: 1000, windowMs: 500 }],
        fetch: (request) => { sentAt.push(Date.now()); return fetch(request) },
      })
      const statuses = await Promise.all(Array.from({ length: 4 }, () => client.fetch(server.url, { rateLimit: { cost: { tokens: 400 } } }).then((r) => r.status)))
      assert.deepEqual(statuses, [200, 200, 200, 200])
      sentAt.sort((a, b) => a - b)
      // 1,000 tokens per 500 ms: two requests of 400 fit, the third waits for the first two to leave the window.
      assert.ok((sentAt[1] as number) - (sentAt[0] as number) < 400, `the 2nd went ${(sentAt[1] as number) - (sentAt[0] as number)} ms after the 1st`)
      assert.ok((sentAt[2] as number) - (sentAt[0] as number) >= 490, `the 3rd went ${(sentAt[2] as number) - (sentAt[0] as number)} ms after the 1st`)
      // More than a pace policy holds can never be sent.
      await assert.rejects(client.fetch(server.url, { rateLimit: { cost: { tokens: 1001 } } }), /^ArgumentError: cost exceeds the limit 1000 of policy "tokens", so it could never be allowed \(got 1001\)$/)
    } finally {
      await server.close()
    }
  })

  it('the cost option reads what each request takes from the request itself (an LLM SDK given client.fetch passes no rateLimit), through fetch and the undici interceptor', async () => {
    const server = await startLimitedServer({ dialect: 'draft-10', limit: 1000, windowSeconds: 1, unitsFromHeader: true })
    const seen: string[] = []
    try {
      // As an SDK would call it: the units are in the body, which the cost option reads from its copy.
      const client = createClient({
        cost: async (request) => {
          const body = await request.text()
          seen.push(`${request.method} ${body}`)
          return body === '' ? undefined : { window: JSON.parse(body).units as number }
        },
      })
      const post = (units: number) => client.fetch(server.url, { method: 'POST', headers: { 'x-units': String(units), 'idempotency-key': `k${units}${Math.random()}` }, body: JSON.stringify({ units }) }).then((response) => response.status)
      assert.equal(await post(400), 200)
      assert.deepEqual(await Promise.all([post(400), post(400), post(400)]), [200, 200, 200])
      assert.equal(server.refused, 0, 'each waited for its units')
      assert.ok(new Set(server.arrivals.map((arrival) => Math.floor(arrival.at / 1000))).size >= 2)
      // A request's own rateLimit.cost wins, and the option is not asked.
      assert.equal((await client.fetch(server.url, { method: 'POST', body: '{"units":999}', rateLimit: { cost: 1 } })).status, 200)
      assert.equal(seen.length, 4)
      // The same through undici, the body given as a string.
      const agent = new Agent().compose(client.interceptor())
      const { statusCode, body } = await request(server.url, { method: 'POST', dispatcher: agent, body: '{"units":2}', headers: { 'x-units': '2' } })
      await body.text()
      assert.equal(statusCode, 200)
      assert.equal(seen.at(-1), 'POST {"units":2}')
      // A method fetch cannot stand for (TRACE) is sent at the default cost, not failed.
      const asked = seen.length
      const traced = await request(server.url, { method: 'TRACE', dispatcher: agent })
      await traced.body.text()
      assert.equal(traced.statusCode, 200)
      assert.equal(seen.length, asked)
      await agent.close()
      // A cost the option cannot give rejects the request, unsent.
      const broken = createClient({ cost: () => ({ window: -1 }) })
      await assert.rejects(broken.fetch(server.url), /^ArgumentError: cost\.window must return a whole number of units, 0 or more \(got -1\)$/)
      assert.throws(() => createClient({ cost: 5 as never }), /cost must be a function/)
      // A cost option that never answers holds the request only until its signal aborts.
      const stuck = createClient({ cost: () => new Promise<number>(() => {}) })
      await assert.rejects(stuck.fetch(server.url, { signal: AbortSignal.timeout(100) }), { name: 'TimeoutError' })
    } finally {
      await server.close()
    }
  })

  it('a shared store with rateLimit.cost: two clients spend one quota of units together, each request charged what it takes', async () => {
    const send = async (url: string, withCost: boolean) => {
      const store = new MemoryStore()
      // Without the cost, refusals are the point: not retried, so the run stays short.
      const clients = [createClient({ store, retry: withCost ? {} : false }), createClient({ store, retry: withCost ? {} : false })]
      // Each client's first answer teaches it the quota; then 3 more requests of 300 units each.
      await Promise.all(clients.map((client) => client.fetch(url, { headers: { 'x-units': '300' }, ...(withCost ? { rateLimit: { cost: 300 } } : {}) })))
      return Promise.all(clients.flatMap((client) => Array.from({ length: 3 }, () =>
        client.fetch(url, { headers: { 'x-units': '300' }, ...(withCost ? { rateLimit: { cost: 300 } } : {}) }).then((response) => response.status))))
    }
    const server = await startLimitedServer({ dialect: 'draft-10', limit: 1000, windowSeconds: 1, unitsFromHeader: true })
    const blind = await startLimitedServer({ dialect: 'draft-10', limit: 1000, windowSeconds: 1, unitsFromHeader: true })
    try {
      assert.deepEqual(await send(server.url, true), Array(6).fill(200))
      assert.equal(server.refused, 0)
      // 2,400 units against 1,000 a second: they had to be spread over at least three windows.
      assert.ok(new Set(server.arrivals.map((arrival) => Math.floor(arrival.at / 1000))).size >= 3)
      await send(blind.url, false)
      assert.ok(blind.refused > 0, 'charged one unit a request, the fleet sends what the server refuses')
    } finally {
      await server.close()
      await blind.close()
    }
  })

  it('concurrency, priority and a bounded queue', async () => {
    let inFlight = 0
    let peak = 0
    const order: string[] = []
    const server = createServer((request, response) => {
      inFlight++
      peak = Math.max(peak, inFlight)
      request.resume()
      setTimeout(() => { inFlight--; response.end() }, 20)
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    try {
      // The order requests are sent in (arrivals could swap on two connections).
      const client = createClient({ concurrency: 2, maxQueue: 4, fetch: (request) => { order.push(new URL(request.url).pathname); return fetch(request) } })
      // The first request to an origin goes alone; after its answer, concurrency is the only bound.
      await client.fetch(`${url}/first`)
      order.length = 0
      const first = [client.fetch(`${url}/a`), client.fetch(`${url}/b`)]
      const queued = [
        client.fetch(`${url}/low`, { rateLimit: { priority: -1 } }),
        client.fetch(`${url}/normal`),
        client.fetch(`${url}/high`, { rateLimit: { priority: 5 } }),
        client.fetch(`${url}/normal2`),
      ]
      await assert.rejects(client.fetch(`${url}/overflow`), QueueFullError)
      await Promise.all([...first, ...queued])
      assert.equal(peak, 2)
      assert.deepEqual(order.slice(2), ['/high', '/normal', '/normal2', '/low'])
    } finally {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  })

  it('emits waited, retried and gaveUp', async () => {
    const server = await refuseFirst(() => '1')
    try {
      const client = createClient({ retry: { retries: 0 } })
      const events: string[] = []
      client.on('refused', (e) => events.push(`refused ${e.status} ${e.retryAfterMs}`))
      client.on('gaveUp', (e) => events.push(`gaveUp ${e.reason} after ${e.attempts}`))
      client.on('waited', (e) => events.push(`waited ${e.reason}`))
      assert.equal((await client.fetch(server.url)).status, 429)
      assert.equal((await client.fetch(server.url)).status, 200)
      assert.deepEqual(events, ['refused 429 1000', 'gaveUp retries-exhausted after 1', 'waited retry-after'])
    } finally {
      await server.close()
    }
  })

  it('a listener that throws or rejects fails no request and holds no unit: it is reported as a process warning', async () => {
    const server = await refuseFirst(() => '0')
    try {
      const client = createClient({ concurrency: 1 })
      client.on('refused', () => { throw new Error('logger bug') })
      client.on('retried', async () => { throw new Error('async logger bug') })
      const warnings = await processWarningsDuring('SLUICE_CLIENT_LISTENER', async () => {
        // The 429 is retried, as without the listeners; the next request gets the unit back (concurrency 1).
        assert.equal((await client.fetch(server.url)).status, 200)
        assert.equal((await client.fetch(server.url)).status, 200)
      })
      assert.deepEqual(warnings, [
        "sluice client: a 'refused' listener threw, and the request went on: logger bug",
        "sluice client: a 'retried' listener rejected, and the request went on: async logger bug",
      ])
    } finally {
      await server.close()
    }
  })

  it('refuses bad options with errors that name them', async () => {
    assert.throws(() => createClient({ maxWaitMs: -1 }), /maxWaitMs must be a number of milliseconds/)
    assert.throws(() => createClient({ concurrency: 0 }), /concurrency must be an integer of at least 1/)
    assert.throws(() => createClient({ retry: { retries: 1.5 } }), /retry.retries/)
    assert.throws(() => createClient({ retry: { statuses: [200] } }), /retry.statuses/)
    assert.throws(() => createClient({ pace: { algorithm: 'token-bucket', capacity: 0, refillTokens: 1, refillIntervalMs: 1 } }), /^PolicyError: pace: capacity must be a positive integer \(got 0\)$/)
    assert.throws(() => createClient({ bogus: 1 } as never), /bogus is not a client option/)
    // A prefix the store's limiters refuse used to stop the fleet's sharing without a word, at the first quota learned.
    const store = new MemoryStore()
    assert.throws(() => createClient({ store, prefix: 'my client' }), /prefix must be 1 to 58 printable ASCII characters without spaces or braces \(got "my client"\)/)
    assert.throws(() => createClient({ store, prefix: 'x'.repeat(59) }), /prefix must be 1 to 58/)
    assert.throws(() => createClient({ store, prefix: '' }), /prefix must be 1 to 58/)
    assert.ok(createClient({ store, prefix: 'x'.repeat(58) }))
    for (const cost of [-1, 1.5, '3', null, [1], { tokens: -1 }, { tokens: Infinity }]) {
      await assert.rejects(createClient().fetch('http://127.0.0.1:1', { rateLimit: { cost: cost as never } }), /^ArgumentError: rateLimit\.cost(\.tokens)? must be a whole number of units, 0 or more/, String(cost))
    }
    return assert.rejects(createClient().fetch('http://127.0.0.1:1', { rateLimit: { priority: Number.NaN } }), /rateLimit.priority/)
  })

  it('a fetch option that resolves to no Response fails that request, naming it, and gives back its place (concurrency 1: the next one goes)', async () => {
    const answers: unknown[] = ['hello', undefined, new Response('ok')]
    const client = createClient({ concurrency: 1, fetch: async () => answers.shift() as Response })
    await assert.rejects(client.fetch('http://api.test/a'), /^ArgumentError: fetch must resolve to a Response \(with status and headers\) \(got "hello"\)$/)
    await assert.rejects(client.fetch('http://api.test/a'), /fetch must resolve to a Response .*\(got undefined\)$/)
    const next = await Promise.race([client.fetch('http://api.test/a'), new Promise<string>((resolve) => setTimeout(resolve, 2000, 'no place given back').unref())])
    assert.equal(typeof next === 'string' ? next : await next.text(), 'ok')
  })
})

describe('hostile servers', () => {
  it('absurd announcements neither crash the client nor make it send what it knows will be refused', async () => {
    const hundred = Array.from({ length: 100 }, (_, i) => `"p ${i} {x}";r=0;t=99999999999`).join(', ')
    let calls = 0
    const server = createServer((_request, response) => {
      calls++
      response.writeHead(200, {
        RateLimit: hundred,
        'RateLimit-Policy': '"p 0 {x}";q=1;w=10',
        'Retry-After': 'Thu, 01 Jan 1970 00:00:00 GMT',
        'X-RateLimit-Reset': '99999999999999999999',
      })
      response.end()
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    try {
      const client = createClient({ store: new MemoryStore() })
      assert.equal((await client.fetch(url)).status, 200)
      await assert.rejects(client.fetch(url), QuotaExhaustedError)
      assert.equal(calls, 1)
    } finally {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  })

  it('a reset years away on a one-second window holds the client two seconds, not years', async () => {
    const sent: number[] = []
    const server = createServer((_request, response) => {
      sent.push(Date.now())
      response.writeHead(200, { 'RateLimit-Policy': '"q";q=5;w=1', RateLimit: sent.length === 1 ? '"q";r=0;t=99999999999' : '"q";r=4;t=1' })
      response.end()
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    try {
      const client = createClient()
      assert.equal((await client.fetch(url)).status, 200)
      assert.equal((await client.fetch(url)).status, 200)
      assert.equal(sent.length, 2)
      assert.ok((sent[1] as number) - (sent[0] as number) >= 1900, `the second request went ${(sent[1] as number) - (sent[0] as number)} ms after the first`)
    } finally {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  })

  it('a wait longer than a timer can hold does not fire early', async () => {
    const { sleep } = await import('../../src/client/sleep.ts')
    const controller = new AbortController()
    let woke = false
    const waiting = sleep(2 ** 31 + 1000, controller.signal).then(() => { woke = true })
    await new Promise((resolve) => setTimeout(resolve, 30))
    assert.equal(woke, false)
    controller.abort()
    await assert.rejects(waiting, { name: 'AbortError' })
  })
})

describe('against a concurrency limit (sluice\'s count: \'in-flight\', announced as qu="concurrent-requests")', () => {
  /** A sluice server allowing `limit` exports in progress per client, each streaming for `streamMs`. */
  async function exportServer(limit: number, streamMs: number, bytes = 4) {
    const state = { refused: 0, inProgress: 0, peak: 0, url: '', close: async () => {} }
    const server = createServer(withRateLimit((_request, response) => {
      state.inProgress++
      state.peak = Math.max(state.peak, state.inProgress)
      response.on('close', () => { state.inProgress-- })
      response.write('x'.repeat(bytes))
      if (streamMs === 0) response.end('.')
      else setTimeout(() => response.end('.'), streamMs)
    }, {
      rules: [{ name: 'exports', count: 'in-flight', policies: { algorithm: 'sliding-log', name: 'exports-in-progress', limit, windowMs: 3_600_000 } }],
      onLimited: () => { state.refused++ },
    }))
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/export`
    state.close = async () => {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
    return state
  }

  // Exports stream for longer than the second a refusal asks the client to wait (Retry-After: 1):
  // a client that took that second for a reset would send while both are still in progress.
  it('a burst of 4 exports streaming 1.2 s against 2 in progress: each waits for one to end, none refused, each body whole', async () => {
    const server = await exportServer(2, 1_200)
    try {
      const client = createClient()
      const reasons = new Set<string>()
      client.on('waited', (event) => reasons.add(event.reason))
      const bodies = await Promise.all(Array.from({ length: 4 }, async () => {
        const response = await client.fetch(server.url, { signal: AbortSignal.timeout(10_000) })
        assert.equal(response.status, 200)
        assert.equal(response.url, server.url, 'the response handed back keeps its url')
        const copy = response.clone()
        assert.equal(copy.url, server.url, 'and so do its clones')
        assert.equal(copy.clone().url, server.url)
        assert.equal(await copy.text(), 'xxxx.')
        return response.text()
      }))
      assert.deepEqual(new Set(bodies), new Set(['xxxx.']))
      assert.equal(server.refused, 0)
      assert.equal(server.peak, 2)
      assert.ok(reasons.has('quota'), `waited for: ${[...reasons].join(', ')}`)
    } finally {
      await server.close()
    }
  })

  it('short bodies never read do not hold the quota (they have arrived), a long one unread does, until cancelled', async () => {
    const short = await exportServer(1, 0)
    const long = await exportServer(1, 0, 1024 * 1024)
    try {
      const client = createClient({ retry: false })
      for (let i = 0; i < 5; i++) {
        const response = await client.fetch(short.url, { signal: AbortSignal.timeout(5_000) })
        assert.equal(response.status, 200, `export ${i}`)
      }
      assert.equal(short.refused, 0)
      // A megabyte unread: the server cannot have sent it all, so the export is still in progress there too.
      const big = await client.fetch(long.url, { signal: AbortSignal.timeout(5_000) })
      await assert.rejects(client.fetch(long.url, { signal: AbortSignal.timeout(300) }), { name: 'TimeoutError' })
      await big.body?.cancel()
      await new Promise((resolve) => setTimeout(resolve, 100))
      const next = await client.fetch(long.url, { signal: AbortSignal.timeout(5_000) })
      assert.equal(next.status, 200)
      assert.equal((await next.arrayBuffer()).byteLength, 1024 * 1024 + 1)
      assert.equal(long.refused, 0)
    } finally {
      await Promise.all([short.close(), long.close()])
    }
  })

  it('through the undici interceptor: the unit comes back when the last byte has arrived', async () => {
    const server = await exportServer(2, 1_200)
    const client = createClient()
    const agent = new Agent().compose(client.interceptor())
    try {
      const bodies = await Promise.all(Array.from({ length: 4 }, async () => {
        const response = await request(server.url, { dispatcher: agent, signal: AbortSignal.timeout(10_000) })
        assert.equal(response.statusCode, 200)
        return response.body.text()
      }))
      assert.deepEqual(new Set(bodies), new Set(['xxxx.']))
      assert.equal(server.refused, 0)
      assert.equal(server.peak, 2)
    } finally {
      await agent.close()
      await server.close()
    }
  })
})

describe('against a quota of content bytes (qu="content-bytes")', () => {
  /** A server allowing `limit` request body bytes an hour, announcing them in draft-10 with qu="content-bytes". */
  async function uploadServer(limit: number) {
    const state = { used: 0, admitted: 0, refused: 0, url: '', close: async () => {} }
    const server = createServer((request, response) => {
      let bytes = 0
      request.on('data', (chunk: Buffer) => { bytes += chunk.length })
      request.on('end', () => {
        const allowed = state.used + bytes <= limit
        if (allowed) state.used += bytes
        if (allowed) state.admitted++
        else state.refused++
        response.setHeader('RateLimit-Policy', `"upload-bytes";q=${limit};qu="content-bytes";w=3600`)
        response.setHeader('RateLimit', `"upload-bytes";r=${limit - state.used};t=3600`)
        if (!allowed) response.setHeader('Retry-After', '3600')
        response.statusCode = allowed ? 200 : 429
        response.end()
      })
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/upload`
    state.close = async () => {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
    return state
  }
  const body = (bytes: number) => 'é'.repeat(bytes / 2) // two bytes each in UTF-8: the quota counts bytes, not characters

  it('client.fetch: each upload takes its body size from the quota, so a burst stops where the bytes run out, not after as many requests; one larger than the whole quota is never sent', async () => {
    const server = await uploadServer(1000)
    try {
      const client = createClient({ maxWaitMs: 0 })
      assert.equal((await client.fetch(server.url, { method: 'POST', body: body(300) })).status, 200)
      // 700 bytes left: two of these three fit. Counted as requests, all three went, and the server refused one.
      const burst = await Promise.allSettled([0, 1, 2].map(() => client.fetch(server.url, { method: 'POST', body: body(300) })))
      assert.deepEqual(burst.map((r) => (r.status === 'fulfilled' ? r.value.status : (r.reason as Error).name)), [200, 200, 'QuotaExhaustedError'])
      await assert.rejects(client.fetch(server.url, { method: 'POST', body: new Uint8Array(2000) }), (error: unknown) => error instanceof QuotaExhaustedError && /takes 2000 of policy "upload-bytes", whose whole quota is 1000/.test(error.message))
      // A GET has no body, yet a spent quota holds it too (a quota of bytes may count a download's).
      const client2 = createClient({ maxWaitMs: 0 })
      assert.equal((await client2.fetch(server.url, { method: 'POST', body: body(100) })).status, 200)
      await assert.rejects(client2.fetch(server.url), QuotaExhaustedError)
      assert.deepEqual([server.admitted, server.refused, server.used], [4, 0, 1000])
    } finally {
      await server.close()
    }
  })

  it('the undici interceptor reads the body size from a string or bytes body', async () => {
    const server = await uploadServer(1000)
    const client = createClient({ maxWaitMs: 0 })
    const agent = new Agent().compose(client.interceptor())
    try {
      assert.equal((await request(server.url, { method: 'POST', body: body(600), dispatcher: agent })).statusCode, 200)
      await assert.rejects(request(server.url, { method: 'POST', body: Buffer.alloc(500), dispatcher: agent }), QuotaExhaustedError)
      assert.equal((await request(server.url, { method: 'POST', body: Buffer.alloc(400), dispatcher: agent })).statusCode, 200)
      assert.deepEqual([server.admitted, server.refused, server.used], [2, 0, 1000])
    } finally {
      await agent.close()
      await server.close()
    }
  })
})
