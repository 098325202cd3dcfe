import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { slidingLog, type SlidingLogState } from '../../src/algorithms/sliding-log.ts'
import { resolvePolicies } from '../../src/core/policy.ts'
import type { ResolvedPolicyOf } from '../../src/core/types.ts'
import { Limiter } from '../../src/index.ts'
import { seededRandom } from '../../src/simulate/traffic.ts'
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

  it('shown uncharged, counts down to its newest entry leaving: a peek, and beside a policy that refused', () => {
    let t = 0
    const limiter = new Limiter({ policies: [{ algorithm: 'sliding-log', limit: 3, windowMs: 1000, name: 'log' }, { algorithm: 'fixed-window', limit: 2, windowMs: 100_000, name: 'day' }], clock: () => t })
    assert.equal(limiter.peekSync('k').policies[0]?.resetAfterMs, 0, 'an empty log is replenished already')
    limiter.limitSync('k')
    t = 137
    limiter.limitSync('k')
    t = 411
    const seen = limiter.peekSync('k').policies[0]
    assert.deepEqual([seen?.remaining, seen?.resetAfterMs], [1, 726], 'the entry at 137 leaves at 1137')
    const refused = limiter.limitSync('k')
    assert.equal(refused.policy, 'day')
    assert.deepEqual([refused.policies[0]?.allowed, refused.policies[0]?.remaining, refused.policies[0]?.resetAfterMs], [true, 1, 726])
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

  it('decides as a plain list of entries, whether or not each step is kept, across compactions and emptied logs', () => {
    // The log array is shared by a key's successive states: a step that is not
    // kept (a composite call refused by another policy) must leave the kept state whole.
    const policy = resolvePolicies({ algorithm: 'sliding-log', limit: 50, windowMs: 200 })[0] as ResolvedPolicyOf<'sliding-log'>
    const random = seededRandom(7)
    let state: SlidingLogState | undefined
    let entries: Array<{ time: number; cost: number }> = []
    let now = 0
    for (let i = 0; i < 20_000; i++) {
      // Mostly dense traffic (the array grows past the compaction threshold), now and then a gap that empties the log.
      now += random() < 0.002 ? 250 : Math.floor(random() * 3)
      const cost = 1 + Math.floor(random() * 3)
      entries = entries.filter((entry) => entry.time > now - policy.windowMs)
      const used = entries.reduce((sum, entry) => sum + entry.cost, 0)
      const { state: next, decision } = slidingLog(state, now, cost, policy, { maxWaitMs: 0 })
      assert.equal(decision.allowed, used + cost <= policy.limit, `step ${i}`)
      assert.equal(decision.remaining, policy.limit - used - (decision.allowed ? cost : 0), `step ${i}`)
      if (!decision.allowed) {
        // Fits once the oldest entries holding the excess have left.
        let freed = 0
        const leaving = entries.find((entry) => (freed += entry.cost) >= used + cost - policy.limit) as { time: number }
        assert.equal(decision.retryAfterMs, leaving.time + policy.windowMs - now, `step ${i}`)
        assert.equal(decision.resetAfterMs, (entries.at(-1) as { time: number }).time + policy.windowMs - now, `step ${i}`)
      }
      if (random() < 0.8) {
        state = next
        if (decision.allowed) entries.push({ time: now, cost })
      }
    }
  })

  it('keeps one entry per millisecond with calls, however many calls it admits in it', () => {
    const policy = resolvePolicies({ algorithm: 'sliding-log', limit: 1_000_000, windowMs: 1000 })[0] as ResolvedPolicyOf<'sliding-log'>
    let state: SlidingLogState | undefined
    for (let ms = 0; ms < 3000; ms++) {
      for (let call = 0; call < 100; call++) state = slidingLog(state, ms, 1, policy, { maxWaitMs: 0 }).state
    }
    const live = state as SlidingLogState
    assert.equal(live.used, 100 * 1000, 'the last 1000 ms are in the window')
    // 999 older milliseconds in the array (two slots each), the newest in the tail, plus compaction's slack.
    assert.ok((live.end - live.head) / 2 === 999 && (live.log?.length ?? 0) <= 2 * 999 * 2, `array of ${live.log?.length} slots`)
    assert.equal(slidingLog(state, 3000, 1, policy, { maxWaitMs: 0 }).decision.remaining, 1_000_000 - 999 * 100 - 1, "millisecond 2000 has left")
  })

  it('rejects maxWaitMs: a log cannot reserve', () => {
    const limiter = new Limiter({ policies: { algorithm: 'sliding-log', limit: 3, windowMs: 1000 } })
    assert.throws(() => limiter.limitSync('k', { maxWaitMs: 100 }), /maxWaitMs .*sliding-log cannot reserve/)
  })
})
