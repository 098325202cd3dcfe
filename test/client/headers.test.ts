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
    ]) {
      const quotas = read(fields).quotas
      assert.ok(quotas.every((quota) => quota.remaining === undefined || quota.remaining >= 0), JSON.stringify(fields))
    }
    assert.deepEqual(read({ RateLimit: 'garbage(((' }).quotas, [])
    assert.equal(read({ 'Retry-After': 'soon' }).retryAfterMs, undefined)
    assert.equal(read({ 'Retry-After': '-5' }).retryAfterMs, undefined)
    assert.equal(read({ 'Retry-After': '1.5' }).retryAfterMs, undefined)
    assert.deepEqual(read({ RateLimit: '"a";r=0;t=20', Age: '30', 'Retry-After': '3' }), { quotas: [], retryAfterMs: 3000 })
  })
})
