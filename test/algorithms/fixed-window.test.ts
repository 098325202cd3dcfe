import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { onVirtualClock } from '../helpers.ts'

const perMinute = { algorithm: 'fixed-window', limit: 100, windowMs: 60_000 } as const

describe('fixed window', () => {
  it('counts allowed calls per epoch-aligned window and refuses the one over the limit', () => {
    const clock = onVirtualClock(perMinute)
    for (let i = 0; i < 100; i++) {
      const d = clock.at(30_000)
      assert.equal(d.allowed, true)
      assert.equal(d.remaining, 99 - i)
      assert.equal(d.resetAfterMs, 30_000)
    }
    const refused = clock.at(45_000)
    assert.deepEqual(
      { allowed: refused.allowed, remaining: refused.remaining, retryAfterMs: refused.retryAfterMs, resetAfterMs: refused.resetAfterMs },
      { allowed: false, remaining: 0, retryAfterMs: 15_000, resetAfterMs: 15_000 },
    )
    // Refused calls do not count: the next window starts from zero.
    assert.equal(clock.at(60_000).remaining, 99)
  })

  it('has the boundary burst: 100 at t=59.9 s and 100 at t=60.0 s all pass (its known weakness)', () => {
    const clock = onVirtualClock(perMinute)
    let allowed = 0
    for (let i = 0; i < 100; i++) allowed += clock.at(59_900).allowed ? 1 : 0
    assert.equal(clock.at(59_900).allowed, false)
    for (let i = 0; i < 100; i++) allowed += clock.at(60_000).allowed ? 1 : 0
    assert.equal(allowed, 200, '200 calls within 100 ms: two windows, one burst each')
  })

  it('charges per-call cost and refuses a cost that does not fit, charging nothing', () => {
    const clock = onVirtualClock({ algorithm: 'fixed-window', limit: 10, windowMs: 1000 })
    assert.equal(clock.at(100, { cost: 4 }).remaining, 6)
    assert.equal(clock.at(200, { cost: 4 }).remaining, 2)
    const refused = clock.at(300, { cost: 4 })
    assert.equal(refused.allowed, false)
    assert.equal(refused.remaining, 2)
    assert.equal(refused.retryAfterMs, 700)
    assert.equal(clock.at(400, { cost: 2 }).remaining, 0)
  })

  it('reserves the next window with maxWaitMs, charged at once, in order', () => {
    const clock = onVirtualClock({ algorithm: 'fixed-window', limit: 2, windowMs: 1000 })
    clock.at(100)
    clock.at(200)
    const first = clock.at(300, { maxWaitMs: 1000 })
    assert.deepEqual([first.allowed, first.waitMs, first.remaining], [true, 700, 0])
    const second = clock.at(400, { maxWaitMs: 1000 })
    assert.deepEqual([second.allowed, second.waitMs], [true, 600])
    // Window 1 is now full of reservations; window 2 starts 1500 ms away.
    const third = clock.at(500, { maxWaitMs: 1000 })
    assert.deepEqual([third.allowed, third.waitMs, third.retryAfterMs], [false, 0, 500])
    const plain = clock.at(500)
    assert.deepEqual([plain.allowed, plain.retryAfterMs], [false, 1500])
    // The reserved window arrives: its calls were already charged.
    assert.equal(clock.at(1000).allowed, false)
    assert.equal(clock.at(2000).allowed, true)
  })

  it('does not let a later call overtake a reservation through leftover room', () => {
    const clock = onVirtualClock({ algorithm: 'fixed-window', limit: 3, windowMs: 1000 })
    assert.equal(clock.at(100, { cost: 2 }).allowed, true)
    const reserved = clock.at(200, { cost: 2, maxWaitMs: 1000 })
    assert.deepEqual([reserved.allowed, reserved.waitMs], [true, 800])
    // One unit is left in window 0, but the queue has moved on to window 1.
    const late = clock.at(300)
    assert.deepEqual([late.allowed, late.retryAfterMs], [false, 700])
  })
})
