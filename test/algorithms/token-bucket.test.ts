import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { onVirtualClock } from '../helpers.ts'

describe('token bucket', () => {
  it('starts full, refuses at empty, and says when the next token arrives', () => {
    const clock = onVirtualClock({ algorithm: 'token-bucket', capacity: 10, refillTokens: 1, refillIntervalMs: 1000 })
    for (let i = 0; i < 10; i++) assert.equal(clock.at(0).remaining, 9 - i)
    assert.deepEqual(pick(clock.at(0)), { allowed: false, remaining: 0, retryAfterMs: 1000, resetAfterMs: 10_000 })
    assert.deepEqual(pick(clock.at(500)), { allowed: false, remaining: 0, retryAfterMs: 500, resetAfterMs: 9500 })
    assert.deepEqual(pick(clock.at(1000)), { allowed: true, remaining: 0, retryAfterMs: 0, resetAfterMs: 10_000 })
  })

  it('keeps fractional tokens exactly: 1 token per 3 ms admits exactly one call in three, with no drift', () => {
    const clock = onVirtualClock({ algorithm: 'token-bucket', capacity: 1, refillTokens: 1, refillIntervalMs: 3 })
    let allowed = 0
    for (let t = 0; t < 30_000; t++) allowed += clock.at(t).allowed ? 1 : 0
    assert.equal(allowed, 10_000)
  })

  it('does fractional refill arithmetic: 2 tokens per 3 s', () => {
    const clock = onVirtualClock({ algorithm: 'token-bucket', capacity: 5, refillTokens: 2, refillIntervalMs: 3000 })
    assert.equal(clock.at(0, { cost: 5 }).remaining, 0)
    // After 1 s the bucket holds 2/3 of a token: one more third takes 500 ms.
    assert.equal(clock.at(1000).retryAfterMs, 500)
    assert.equal(clock.at(1499).allowed, false)
    assert.equal(clock.at(1500).allowed, true)
    // 3 tokens (4.5 s of refill) for a cost of 3, counted from 1.5 s.
    assert.equal(clock.at(1500, { cost: 3 }).retryAfterMs, 4500)
  })

  it('never refills above capacity, however long the bucket idles', () => {
    const clock = onVirtualClock({ algorithm: 'token-bucket', capacity: 5, refillTokens: 7, refillIntervalMs: 13 })
    clock.at(0, { cost: 5 })
    const idle = 400 * 24 * 3_600_000 // 400 days
    for (let i = 0; i < 5; i++) assert.equal(clock.at(idle).allowed, true)
    assert.equal(clock.at(idle).allowed, false)
  })

  it('refuses without consuming: a refused large call leaves the tokens for small ones', () => {
    const clock = onVirtualClock({ algorithm: 'token-bucket', capacity: 10, refillTokens: 1, refillIntervalMs: 1000 })
    clock.at(0, { cost: 7 })
    assert.equal(clock.at(0, { cost: 5 }).allowed, false)
    assert.equal(clock.at(0, { cost: 3 }).allowed, true)
  })

  it('refills whole batches at each interval in interval mode', () => {
    const clock = onVirtualClock({ algorithm: 'token-bucket', capacity: 10, refillTokens: 10, refillIntervalMs: 1000, refill: 'interval' })
    for (let i = 0; i < 10; i++) clock.at(100)
    // The interval clock started when the first token left the full bucket, at 100.
    assert.deepEqual(pick(clock.at(999)), { allowed: false, remaining: 0, retryAfterMs: 101, resetAfterMs: 101 })
    assert.equal(clock.at(1099).allowed, false)
    assert.equal(clock.at(1100).remaining, 9)
  })

  it('reserves with maxWaitMs by going into debt that later callers repay first', () => {
    const clock = onVirtualClock({ algorithm: 'token-bucket', capacity: 2, refillTokens: 1, refillIntervalMs: 100 })
    clock.at(0, { cost: 2 })
    assert.deepEqual([clock.at(0, { maxWaitMs: 250 }).waitMs, clock.at(0, { maxWaitMs: 250 }).waitMs], [100, 200])
    const tooLong = clock.at(0, { maxWaitMs: 250 })
    assert.deepEqual([tooLong.allowed, tooLong.retryAfterMs], [false, 50])
    assert.deepEqual([clock.at(50, { maxWaitMs: 250 }).allowed, clock.at(50).retryAfterMs], [true, 350])
  })
})

function pick(d: { allowed: boolean; remaining: number; retryAfterMs: number; resetAfterMs: number }) {
  return { allowed: d.allowed, remaining: d.remaining, retryAfterMs: d.retryAfterMs, resetAfterMs: d.resetAfterMs }
}
