import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { readAnnouncement, retryAfterMs, type HeaderLookup } from '../../src/client/index.ts'

const NOW = Date.UTC(2026, 10, 22, 12, 0, 0)

function headers(fields: Record<string, string>): HeaderLookup {
  const map = new Map(Object.entries(fields).map(([name, value]) => [name.toLowerCase(), value]))
  return (name) => map.get(name)
}

const read = (fields: Record<string, string>) => readAnnouncement(headers(fields), NOW)

describe('reading announced limits', () => {
  it('draft-10: named policies joined with their quota and window', () => {
    const announced = read({
      'RateLimit-Policy': '"minute";q=100;w=60, "burst";q=20;w=10;pk=:YWJj:',
      RateLimit: '"minute";r=42;t=18, "burst";r=0;t=3',
    })
    assert.deepEqual(announced.quotas, [
      { name: 'minute', limit: 100, windowMs: 60_000, remaining: 42, resetAfterMs: 18_000 },
      { name: 'burst', limit: 20, windowMs: 10_000, remaining: 0, resetAfterMs: 3_000 },
    ])
  })

  it('draft-10 from servers that write tokens for names, or send RateLimit without a policy', () => {
    assert.deepEqual(read({ RateLimit: 'default;r=5;t=3' }).quotas, [{ name: 'default', remaining: 5, resetAfterMs: 3000 }])
  })

  it('draft-10: a quota of requests in progress (qu="concurrent-requests") has neither window nor reset; one of content bytes is marked so', () => {
    const announced = read({
      'RateLimit-Policy': '"exports";q=2;qu="concurrent-requests";w=60, "hour";q=100;w=3600;qu="requests", "bytes";q=5000;qu="content-bytes";w=60',
      RateLimit: '"exports";r=1;t=5, "hour";r=99;t=3000, "bytes";r=4000;t=30',
    })
    assert.deepEqual(announced.quotas, [
      { name: 'exports', limit: 2, concurrent: true, remaining: 1 },
      { name: 'hour', limit: 100, windowMs: 3_600_000, remaining: 99, resetAfterMs: 3_000_000 },
      { name: 'bytes', limit: 5000, windowMs: 60_000, remaining: 4000, resetAfterMs: 30_000, contentBytes: true },
    ])
    // The unit's name in the working group's first registry text.
    assert.deepEqual(read({ 'RateLimit-Policy': '"jobs";q=3;qu="concurrency"', RateLimit: '"jobs";r=3' }).quotas, [{ name: 'jobs', limit: 3, concurrent: true, remaining: 3 }])
  })

  it('draft-7: a dictionary, with the window from RateLimit-Policy', () => {
    const announced = read({ RateLimit: 'limit=100, remaining=7, reset=30', 'RateLimit-Policy': '100;w=60, 1000;w=3600' })
    assert.deepEqual(announced.quotas, [{ name: 'default', limit: 100, remaining: 7, resetAfterMs: 30_000, windowMs: 60_000 }])
  })

  it('draft-6 and the older drafts that put the policy in RateLimit-Limit', () => {
    assert.deepEqual(read({ 'RateLimit-Limit': '10', 'RateLimit-Remaining': '3', 'RateLimit-Reset': '4', 'RateLimit-Policy': '10;w=5' }).quotas,
      [{ name: 'default', limit: 10, remaining: 3, resetAfterMs: 4000, windowMs: 5000 }])
    assert.deepEqual(read({ 'RateLimit-Limit': '10, 10;w=1, 50;w=60', 'RateLimit-Remaining': '9', 'RateLimit-Reset': '1' }).quotas,
      [{ name: 'default', limit: 10, remaining: 9, resetAfterMs: 1000, windowMs: 1000 }])
  })

  it('GitHub: X-RateLimit-Reset in epoch seconds, read against the response Date', () => {
    // The server's clock is 10 s behind ours: the reset is 60 s after the server's now, not ours.
    const serverNow = NOW - 10_000
    const announced = read({
      'X-RateLimit-Limit': '5000', 'X-RateLimit-Remaining': '4999', 'X-RateLimit-Used': '1', 'X-RateLimit-Resource': 'core',
      'X-RateLimit-Reset': String(serverNow / 1000 + 60), Date: new Date(serverNow).toUTCString(),
    })
    assert.deepEqual(announced.quotas, [{ name: 'default', limit: 5000, remaining: 4999, resetAfterMs: 60_000 }])
  })

  it('X-RateLimit-Reset as delta seconds, epoch milliseconds, and Discord\'s fractional Reset-After', () => {
    assert.equal(read({ 'X-RateLimit-Remaining': '1', 'X-RateLimit-Reset': '30' }).quotas[0]?.resetAfterMs, 30_000)
    assert.equal(read({ 'X-RateLimit-Remaining': '1', 'X-RateLimit-Reset': String(NOW + 2500) }).quotas[0]?.resetAfterMs, 2500)
    assert.equal(read({ 'X-RateLimit-Remaining': '1', 'X-RateLimit-Reset': '99999', 'X-RateLimit-Reset-After': '1.234' }).quotas[0]?.resetAfterMs, 1234)
  })

  it('Spring Cloud Gateway: a token bucket of Burst-Capacity refilled at Replenish-Rate', () => {
    const announced = read({ 'X-RateLimit-Remaining': '3', 'X-RateLimit-Replenish-Rate': '10', 'X-RateLimit-Burst-Capacity': '20', 'X-RateLimit-Requested-Tokens': '1' })
    assert.deepEqual(announced.quotas, [{ name: 'default', limit: 20, remaining: 3, windowMs: 2000 }])
  })

  it('OpenAI: requests and tokens, resets as Go durations until the bucket is full, read as when the next unit comes', () => {
    const announced = read({
      'x-ratelimit-limit-requests': '5000', 'x-ratelimit-remaining-requests': '4999', 'x-ratelimit-reset-requests': '12ms',
      'x-ratelimit-limit-tokens': '160000', 'x-ratelimit-remaining-tokens': '0', 'x-ratelimit-reset-tokens': '1m0s',
    })
    assert.deepEqual(announced.quotas, [
      { name: 'requests', limit: 5000, remaining: 4999, resetAfterMs: 12, unitMs: 12 },
      // A minute until full, 160,000 spent: the next token in under a millisecond, not in a minute.
      { name: 'tokens', limit: 160_000, remaining: 0, resetAfterMs: 1, unitMs: 0.375 },
    ])
    // 20 of 60 spent, full in 20 s: one comes back each second.
    assert.equal(read({ 'x-ratelimit-limit-requests': '60', 'x-ratelimit-remaining-requests': '40', 'x-ratelimit-reset-requests': '20s' }).quotas[0]?.resetAfterMs, 1000)
    // With no window named, a reset is believed up to a day.
    assert.equal(read({ 'x-ratelimit-limit-requests': '1', 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': '1h2m3.5s' }).quotas[0]?.resetAfterMs, 3_723_500)
    assert.equal(read({ 'Retry-After-Ms': '1500', 'Retry-After': '2' }).retryAfterMs, 1500)
  })

  it('Anthropic: requests, tokens, input and output tokens, resets as RFC 3339 times read against the response Date', () => {
    const serverNow = NOW - 10_000
    const at = (ms: number) => new Date(serverNow + ms).toISOString().replace('.000Z', 'Z')
    const announced = read({
      Date: new Date(serverNow).toUTCString(),
      'anthropic-ratelimit-requests-limit': '50', 'anthropic-ratelimit-requests-remaining': '0', 'anthropic-ratelimit-requests-reset': at(60_000),
      'anthropic-ratelimit-input-tokens-limit': '40000', 'anthropic-ratelimit-input-tokens-remaining': '40000', 'anthropic-ratelimit-input-tokens-reset': at(0),
      'anthropic-ratelimit-output-tokens-limit': '8000', 'anthropic-ratelimit-output-tokens-remaining': '6000', 'anthropic-ratelimit-output-tokens-reset': '2026-11-22T12:00:20+00:00',
      'retry-after': '2',
    })
    assert.deepEqual(announced.quotas, [
      { name: 'requests', windowMs: 60_000, limit: 50, remaining: 0, resetAfterMs: 1200, unitMs: 1200 },
      // Nothing spent says nothing of the rate: the documented minute does.
      { name: 'input-tokens', windowMs: 60_000, limit: 40_000, remaining: 40_000, resetAfterMs: 0, unitMs: 1.5 },
      // Full 30 s after the server's now, 2,000 spent.
      { name: 'output-tokens', windowMs: 60_000, limit: 8000, remaining: 6000, resetAfterMs: 15, unitMs: 15 },
    ])
    assert.equal(announced.retryAfterMs, 2000)
    // A reset that is not an RFC 3339 time is no reset.
    assert.deepEqual(read({ 'anthropic-ratelimit-requests-limit': '5', 'anthropic-ratelimit-requests-remaining': '1', 'anthropic-ratelimit-requests-reset': 'Sunday' }).quotas,
      [{ name: 'requests', windowMs: 60_000, limit: 5, remaining: 1, unitMs: 12_000 }])
    // A Date within a second or so of this clock is the same time, to the header's precision: the
    // reset is read to the millisecond against this clock, not a second late against the truncated Date.
    const sameSecond = read({
      // Made at 11:59:59.7, so dated 11:59:59, and read here at 12:00:00.
      Date: new Date(NOW - 1000).toUTCString(),
      'anthropic-ratelimit-requests-limit': '5', 'anthropic-ratelimit-requests-remaining': '4', 'anthropic-ratelimit-requests-reset': new Date(NOW + 250).toISOString(),
    })
    assert.equal(sameSecond.quotas[0]?.resetAfterMs, 250)
  })

  it('prefers the newest dialect when a server sends several', () => {
    const announced = read({ RateLimit: '"a";r=1;t=2', 'X-RateLimit-Remaining': '50', 'X-RateLimit-Limit': '60' })
    assert.deepEqual(announced.quotas, [{ name: 'a', remaining: 1, resetAfterMs: 2000 }])
  })

  it('Retry-After in delay-seconds and as an HTTP date (against the server Date), and Stripe-Should-Retry', () => {
    assert.equal(read({ 'Retry-After': '7' }).retryAfterMs, 7000)
    const date = new Date(NOW - 5000)
    assert.equal(read({ 'Retry-After': new Date(NOW - 5000 + 3000).toUTCString(), Date: date.toUTCString() }).retryAfterMs, 3000)
    assert.equal(retryAfterMs(new Date(NOW - 60_000).toUTCString(), NOW), 0)
    assert.equal(read({ 'Stripe-Should-Retry': 'false' }).shouldRetry, false)
    assert.equal(read({ 'Stripe-Should-Retry': 'true' }).shouldRetry, true)
  })

  it('reads a reset more than two windows away as two windows: a slip of the server cannot stop the client for years', () => {
    assert.deepEqual(read({ 'RateLimit-Policy': '"minute";q=100;w=60, "day";q=1000;w=86400', RateLimit: '"minute";r=0;t=99999999999, "day";r=5;t=86400' }).quotas, [
      { name: 'minute', limit: 100, windowMs: 60_000, remaining: 0, resetAfterMs: 120_000 },
      { name: 'day', limit: 1000, windowMs: 86_400_000, remaining: 5, resetAfterMs: 86_400_000 },
    ])
    // A sliding window's count is gone only at the end of the next window: up to two windows is believed.
    assert.equal(read({ 'RateLimit-Policy': '"api";q=200;w=60', RateLimit: '"api";r=199;t=119' }).quotas[0]?.resetAfterMs, 119_000)
    assert.equal(read({ RateLimit: 'limit=10, remaining=0, reset=60000', 'RateLimit-Policy': '10;w=60' }).quotas[0]?.resetAfterMs, 120_000)
    // With no window announced there is nothing to hold the reset against but a day.
    assert.equal(read({ RateLimit: '"x";r=0;t=86399' }).quotas[0]?.resetAfterMs, 86_399_000)
    assert.equal(read({ RateLimit: '"x";r=0;t=99999' }).quotas[0]?.resetAfterMs, 86_400_000)
    assert.equal(read({ 'RateLimit-Limit': '5', 'RateLimit-Remaining': '0', 'RateLimit-Reset': String(2 ** 53) }).quotas[0]?.resetAfterMs, 86_400_000)
    // A window longer than a day holds its own resets: a monthly quota's reset is believed.
    assert.equal(read({ 'RateLimit-Policy': '"month";q=1000;w=2592000', RateLimit: '"month";r=0;t=1728000' }).quotas[0]?.resetAfterMs, 1_728_000_000)
  })

  it('believes a Retry-After up to a day: a slip cannot silence the client for the rest of its life', () => {
    assert.equal(read({ 'Retry-After': '86400' }).retryAfterMs, 86_400_000)
    assert.equal(read({ 'Retry-After': '99999999999' }).retryAfterMs, 86_400_000)
    assert.equal(read({ 'Retry-After': new Date(NOW + 10 * 86_400_000).toUTCString(), Date: new Date(NOW).toUTCString() }).retryAfterMs, 86_400_000)
  })

  it('ignores what it cannot read, and fields of a response served from a cache', () => {
    for (const fields of [
      { RateLimit: '"a";r=-1;t=2' },
      { RateLimit: 'garbage(((' },
      { 'RateLimit-Remaining': 'many', 'RateLimit-Limit': 'lots' },
      { 'X-RateLimit-Remaining': '-3' },
      { 'X-RateLimit-Remaining': '1e309' },
      { 'x-ratelimit-remaining-requests': '-1', 'x-ratelimit-reset-requests': '-5s' },
      { 'anthropic-ratelimit-tokens-remaining': 'lots', 'anthropic-ratelimit-tokens-limit': '10' },
    ]) {
      const quotas = read(fields).quotas
      assert.ok(quotas.every((quota) => quota.remaining === undefined || quota.remaining >= 0), JSON.stringify(fields))
    }
    assert.deepEqual(read({ RateLimit: 'garbage(((' }).quotas, [])
    assert.equal(read({ 'Retry-After': 'soon' }).retryAfterMs, undefined)
    assert.equal(read({ 'Retry-After': '-5' }).retryAfterMs, undefined)
    assert.equal(read({ 'Retry-After': '1.5' }).retryAfterMs, undefined)
    assert.equal(read({ 'Retry-After-Ms': 'soon' }).retryAfterMs, undefined)
    for (const reset of ['5 s', '5x', 'm', '1.5.5s', '']) {
      assert.equal(read({ 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': reset }).quotas[0]?.resetAfterMs, undefined, reset)
    }
    assert.deepEqual(read({ RateLimit: '"a";r=0;t=20', Age: '30', 'Retry-After': '3' }), { quotas: [], retryAfterMs: 3000 })
    // Digits past what a double holds are no number, not Infinity (which would make a unit of quota take no time).
    const endless = '9'.repeat(400)
    assert.deepEqual(read({ 'X-RateLimit-Limit': endless, 'X-RateLimit-Remaining': '5' }).quotas, [{ name: 'default', remaining: 5 }])
    assert.deepEqual(read({ 'anthropic-ratelimit-requests-limit': endless, 'anthropic-ratelimit-requests-remaining': '5' }).quotas, [{ name: 'requests', windowMs: 60_000, remaining: 5 }])
    assert.equal(read({ 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': endless }).quotas[0]?.resetAfterMs, undefined)
  })
})
