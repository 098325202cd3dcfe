import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { algorithms, resolvePolicy } from '../../src/index.ts'
import { onVirtualClock } from '../helpers.ts'

const policy = resolvePolicy({ algorithm: 'sliding-window', limit: 100, windowMs: 60_000 })
if (policy.algorithm !== 'sliding-window') throw new Error('unreachable')

describe('sliding window counter', () => {
  it('weighs the previous window: limit 100, previous 80, 75% elapsed, current 60 -> estimate 80 -> allowed', () => {
    const state = { window: 1, windowMs: 60_000, previous: 80, current: 60 }
    const t = algorithms.slidingWindow(state, 60_000 + 45_000, 1, policy, algorithms.NO_WAIT)
    assert.equal(t.decision.allowed, true)
    assert.equal(t.decision.remaining, 19, '100 - (80 + 1)')
    assert.deepEqual(t.state, { window: 1, windowMs: 60_000, previous: 80, current: 61 })
    // Cost 20 brings the estimate to exactly 100; cost 21 is one too many.
    assert.equal(algorithms.slidingWindow(state, 105_000, 20, policy, algorithms.NO_WAIT).decision.remaining, 0)
    const refused = algorithms.slidingWindow(state, 105_000, 21, policy, algorithms.NO_WAIT).decision
    assert.equal(refused.allowed, false)
    // The previous window's weight falls to 19 at 45.75 s: 19 + 60 + 21 = 100.
    assert.equal(refused.retryAfterMs, 750)
    assert.equal(algorithms.slidingWindow(state, 105_750, 21, policy, algorithms.NO_WAIT).decision.allowed, true)
  })

  it('rolls the current window into the previous one and forgets older ones', () => {
    const clock = onVirtualClock({ algorithm: 'sliding-window', limit: 10, windowMs: 1000 })
    for (let i = 0; i < 10; i++) assert.equal(clock.at(900).allowed, true)
    const atBoundary = clock.at(1000)
    assert.deepEqual([atBoundary.allowed, atBoundary.retryAfterMs], [false, 100])
    assert.equal(clock.at(1099).allowed, false)
    assert.equal(clock.at(1100).allowed, true, '10 x 0.9 + 0 + 1 = 10')
    assert.equal(clock.at(3000).remaining, 9, 'two windows later nothing remains of the burst')
  })

  it('waits into the next window when the current window alone is full', () => {
    const clock = onVirtualClock({ algorithm: 'sliding-window', limit: 4, windowMs: 1000 })
    for (let i = 0; i < 4; i++) clock.at(100)
    const refused = clock.at(200)
    // Next window: previous = 4, so 4 x (1 - e/1000) + 1 <= 4 needs e >= 250.
    assert.equal(refused.retryAfterMs, 800 + 250)
    assert.equal(clock.at(1249).allowed, false)
    assert.equal(clock.at(1250).allowed, true)
  })
})
