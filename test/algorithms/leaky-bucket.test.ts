import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import fc from 'fast-check'
import { fcOptions, onVirtualClock } from '../helpers.ts'

describe('leaky bucket (GCRA)', () => {
  it('police: admits exactly what a token bucket of the same capacity and rate admits, on random traces', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 20 }),
        fc.integer({ min: 1, max: 7 }),
        fc.integer({ min: 1, max: 1000 }),
        fc.array(fc.tuple(fc.integer({ min: 0, max: 300 }), fc.integer({ min: 1, max: 20 }), fc.boolean()), { minLength: 1, maxLength: 80 }),
        (capacity, tokens, intervalMs, steps) => {
          const gcra = onVirtualClock({ algorithm: 'leaky-bucket', capacity, leakTokens: tokens, leakIntervalMs: intervalMs })
          const bucket = onVirtualClock({ algorithm: 'token-bucket', capacity, refillTokens: tokens, refillIntervalMs: intervalMs })
          let t = 1_700_000_000_000
          for (const [gap, rawCost, reserve] of steps) {
            t += gap
            const options = { cost: Math.min(rawCost, capacity), maxWaitMs: reserve ? 500 : 0 }
            const { policy: _a, policies: _pa, ...a } = gcra.at(t, options)
            const { policy: _b, policies: _pb, ...b } = bucket.at(t, options)
            assert.deepEqual(a, b, `at ${t}`)
          }
        },
      ),
      fcOptions(300),
    )
  })

  it('police: rejects the call that would overflow, with the exact wait', () => {
    const clock = onVirtualClock({ algorithm: 'leaky-bucket', capacity: 3, leakTokens: 1, leakIntervalMs: 100 })
    for (let i = 0; i < 3; i++) assert.equal(clock.at(0).allowed, true)
    const refused = clock.at(0)
    assert.deepEqual([refused.allowed, refused.retryAfterMs, refused.resetAfterMs], [false, 100, 300])
    assert.equal(clock.at(99).allowed, false)
    assert.equal(clock.at(100).allowed, true)
  })

  it('shape: spaces admitted calls evenly at the leak rate and refuses past capacity', () => {
    // 5 per second: one every 200 ms; at most 5 units in the queue.
    const clock = onVirtualClock({ algorithm: 'leaky-bucket', capacity: 5, leakTokens: 5, leakIntervalMs: 1000, mode: 'shape' })
    const waits = Array.from({ length: 5 }, () => clock.at(0).waitMs)
    assert.deepEqual(waits, [0, 200, 400, 600, 800])
    const refused = clock.at(0)
    assert.deepEqual([refused.allowed, refused.retryAfterMs], [false, 200])
    const next = clock.at(200)
    assert.deepEqual([next.allowed, next.waitMs], [true, 800], 'released at 1000, right after the one at 800')
    // Released at t + waitMs: 0, 200, 400, 600, 800, 1000 -> evenly spaced.
  })

  it('shape: a call of cost n holds n slots of the schedule', () => {
    const clock = onVirtualClock({ algorithm: 'leaky-bucket', capacity: 10, leakTokens: 1, leakIntervalMs: 10, mode: 'shape' })
    assert.equal(clock.at(0, { cost: 3 }).waitMs, 0)
    assert.equal(clock.at(0).waitMs, 30)
    assert.equal(clock.at(5, { cost: 2 }).waitMs, 35)
  })

  it('shape: a positive maxWaitMs caps the wait further', () => {
    const clock = onVirtualClock({ algorithm: 'leaky-bucket', capacity: 5, leakTokens: 5, leakIntervalMs: 1000, mode: 'shape' })
    clock.at(0)
    clock.at(0)
    const capped = clock.at(0, { maxWaitMs: 300 })
    assert.deepEqual([capped.allowed, capped.retryAfterMs], [false, 100])
  })
})
