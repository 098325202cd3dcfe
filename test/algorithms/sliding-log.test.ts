import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { Limiter } from '../../src/index.ts'
import { onVirtualClock } from '../helpers.ts'

describe('sliding log', () => {
  it('refuses the boundary burst that fixed window lets through', () => {
    const clock = onVirtualClock({ algorithm: 'sliding-log', limit: 100, windowMs: 60_000 })
    for (let i = 0; i < 100; i++) assert.equal(clock.at(59_900).allowed, true)
    const refused = clock.at(60_000)
    assert.equal(refused.allowed, false)
    assert.equal(refused.retryAfterMs, 59_900, 'the burst leaves the window at 119.9 s')
    assert.equal(refused.resetAfterMs, 59_900)
    assert.equal(clock.at(119_899).allowed, false)
    assert.equal(clock.at(119_900).allowed, true)
  })

  it('is exact on a rolling window: an entry counts while its time > now - windowMs', () => {
    const clock = onVirtualClock({ algorithm: 'sliding-log', limit: 3, windowMs: 1000 })
    assert.equal(clock.at(0).remaining, 2)
    assert.equal(clock.at(400).remaining, 1)
    assert.equal(clock.at(800).remaining, 0)
    assert.equal(clock.at(999).retryAfterMs, 1)
    assert.equal(clock.at(1000).remaining, 0, 'the call at 0 has left; this one takes its place')
    assert.equal(clock.at(1399).allowed, false)
    assert.equal(clock.at(1400).allowed, true)
  })

  it('weighs entries by cost when computing when a call fits again', () => {
    const clock = onVirtualClock({ algorithm: 'sliding-log', limit: 5, windowMs: 1000 })
    clock.at(0, { cost: 3 })
    clock.at(10, { cost: 2 })
    const refused = clock.at(20, { cost: 2 })
    assert.deepEqual([refused.allowed, refused.remaining, refused.retryAfterMs], [false, 0, 980])
    const big = clock.at(20, { cost: 5 })
    assert.equal(big.retryAfterMs, 990, 'cost 5 needs both entries gone')
  })

  it('rejects maxWaitMs: a log cannot reserve', () => {
    const limiter = new Limiter({ policies: { algorithm: 'sliding-log', limit: 3, windowMs: 1000 } })
    assert.throws(() => limiter.limitSync('k', { maxWaitMs: 100 }), /maxWaitMs .*sliding-log cannot reserve/)
  })
})
