import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { Limiter, MemoryStore, type Policy } from '../../src/index.ts'
import { onVirtualClock, processWarningsDuring } from '../helpers.ts'

const perMinute: Policy = { algorithm: 'sliding-log', limit: 100, windowMs: 60_000, name: 'minute' }
const per10s: Policy = { algorithm: 'fixed-window', limit: 20, windowMs: 10_000, name: 'ten-seconds' }

describe('Limiter', () => {
  it('composite: 100/min AND 20 per 10 s, the binding policy named, each listed', () => {
    const clock = onVirtualClock([perMinute, per10s])
    for (let i = 0; i < 20; i++) assert.equal(clock.at(1000).allowed, true)
    const refused = clock.at(2000)
    assert.equal(refused.allowed, false)
    assert.equal(refused.policy, 'ten-seconds')
    assert.equal(refused.retryAfterMs, 8000)
    assert.deepEqual(refused.policies.map((p) => [p.policy, p.allowed, p.remaining]), [['minute', true, 80], ['ten-seconds', false, 0]])
    // Allowed: the binding policy is the one with the fewest units left.
    const allowed = clock.at(10_000)
    assert.deepEqual([allowed.allowed, allowed.policy, allowed.remaining, allowed.limit], [true, 'ten-seconds', 19, 20])
  })

  it('composite is all-or-nothing: a refusal by one policy charges none', () => {
    const clock = onVirtualClock([perMinute, per10s])
    for (let t = 0; t < 100; t++) clock.at(t * 500) // 20 per 10 s: 100 calls spread over 50 s
    assert.equal(clock.peekAt(50_000).policies[0]?.remaining, 0)
    // 'minute' refuses; 'ten-seconds' (a new window) would allow but must not be charged.
    for (let i = 0; i < 50; i++) assert.equal(clock.at(50_000).allowed, false)
    const view = clock.peekAt(50_000)
    assert.equal(view.policies[1]?.remaining, 20)
    assert.equal(clock.at(50_000).policy, 'minute')
  })

  it('limiters over one store and prefix share a policy\'s state by its name: a limit raised from 3 to 5 after 3 were spent leaves 2', () => {
    let now = 1_000_000
    const store = new MemoryStore()
    const contract = (limit: number) => new Limiter({ store, prefix: 'tenants', clock: () => now, policies: { algorithm: 'sliding-window', limit, windowMs: 60_000, name: 'contract' } })
    const three = contract(3)
    const five = contract(5)
    assert.deepEqual([1, 2, 3, 4].map(() => (now++, three.limitSync('tenant:a').allowed)), [true, true, true, false])
    assert.deepEqual([1, 2, 3].map(() => (now++, five.limitSync('tenant:a').remaining)), [1, 0, 0])
    assert.equal(five.peekSync('tenant:a').allowed, false)
    assert.equal(five.peekSync('tenant:b').remaining, 5, 'another key: its own count')
    // Another prefix is another namespace.
    assert.equal(new Limiter({ store, prefix: 'other', clock: () => now, policies: { algorithm: 'sliding-window', limit: 5, windowMs: 60_000, name: 'contract' } }).peekSync('tenant:a').remaining, 5)
  })

  it('peek changes nothing and reports whether a call of cost 1 would pass', () => {
    const clock = onVirtualClock({ algorithm: 'token-bucket', capacity: 2, refillTokens: 1, refillIntervalMs: 1000 })
    assert.deepEqual([clock.peekAt(0).allowed, clock.peekAt(0).remaining], [true, 2])
    clock.at(0)
    clock.at(0)
    const empty = clock.peekAt(0)
    assert.deepEqual([empty.allowed, empty.remaining, empty.retryAfterMs], [false, 0, 1000])
    for (let i = 0; i < 10; i++) clock.peekAt(1000)
    assert.equal(clock.at(1000).allowed, true, 'peeks consumed nothing')
  })

  it('reset forgets the key in every policy, and only that key', async () => {
    const limiter = new Limiter({ policies: [perMinute, per10s], clock: () => 0 })
    for (let i = 0; i < 20; i++) await limiter.limit('alice')
    await limiter.limit('bob')
    assert.equal((await limiter.limit('alice')).allowed, false)
    await limiter.reset('alice')
    assert.equal((await limiter.limit('alice')).remaining, 19)
    assert.equal((await limiter.peek('bob')).remaining, 19)
  })

  it('a composite reservation waits for its longest policy and stays within maxWaitMs', () => {
    const clock = onVirtualClock([
      { algorithm: 'token-bucket', capacity: 1, refillTokens: 1, refillIntervalMs: 100 },
      { algorithm: 'leaky-bucket', capacity: 1, leakTokens: 1, leakIntervalMs: 300 },
    ])
    clock.at(0)
    const d = clock.at(0, { maxWaitMs: 1000 })
    assert.deepEqual([d.allowed, d.waitMs], [true, 300])
    assert.deepEqual(d.policies.map((p) => p.waitMs), [100, 300])
    const refused = clock.at(0, { maxWaitMs: 500 })
    assert.equal(refused.allowed, false)
    assert.equal(refused.retryAfterMs, 100, 'the leaky bucket needs 600 ms; 100 more than allowed')
  })

  it('a policy that would allow a refused composite call stays allowed, even a fixed window reserved ahead', () => {
    const clock = onVirtualClock([
      { algorithm: 'fixed-window', limit: 2, windowMs: 1000, name: 'window' },
      { algorithm: 'token-bucket', capacity: 3, refillTokens: 1, refillIntervalMs: 10_000, name: 'bucket' },
    ])
    clock.at(0)
    clock.at(0)
    assert.equal(clock.at(100, { maxWaitMs: 2000 }).waitMs, 900, 'the next window is reserved')
    // The window would take this call too (a wait of 800 ms); the bucket needs 9800 ms, 300 more than allowed.
    const refused = clock.at(200, { maxWaitMs: 9500 })
    assert.deepEqual([refused.allowed, refused.policy, refused.retryAfterMs], [false, 'bucket', 300])
    assert.deepEqual(refused.policies.map((p) => [p.policy, p.allowed, p.retryAfterMs]), [['window', true, 0], ['bucket', false, 300]])
  })

  it('blockMs: the refusal blocks the key for blockMs, past the window, without being extended or charging the other policies', () => {
    // Five failed logins per 15 minutes, then an hour's block; beside it a per-day budget.
    const fifteen: Policy = { algorithm: 'fixed-window', limit: 5, windowMs: 900_000, blockMs: 3_600_000, name: 'login' }
    const day: Policy = { algorithm: 'token-bucket', capacity: 100, refillTokens: 1, refillIntervalMs: 86_400_000, name: 'day' }
    const clock = onVirtualClock([fifteen, day])
    for (let i = 0; i < 5; i++) assert.equal(clock.at(1000).allowed, true)
    const refused = clock.at(2000)
    assert.deepEqual([refused.allowed, refused.policy, refused.remaining, refused.retryAfterMs], [false, 'login', 0, 3_600_000])
    assert.deepEqual(refused.policies.map((p) => [p.policy, p.allowed, p.remaining]), [['login', false, 0], ['day', true, 95]])
    // The window turns at 900 s; the block holds until 3,602 s, and the calls it refuses do not move it.
    for (const t of [900_000, 1_800_000, 3_601_999]) {
      const blocked = clock.at(t)
      assert.deepEqual([blocked.allowed, blocked.retryAfterMs, blocked.remaining], [false, 3_602_000 - t, 0], `t=${t}`)
    }
    assert.deepEqual([clock.peekAt(3_000_000).allowed, clock.peekAt(3_000_000).retryAfterMs], [false, 602_000])
    // Nothing was charged while refused: the day's bucket still holds 95.
    const after = clock.at(3_602_000)
    assert.deepEqual([after.allowed, after.policies[0]?.remaining, after.policies[1]?.remaining], [true, 4, 94])
    // reset lifts the block with the rest of the key's state.
    for (let i = 0; i < 4; i++) assert.equal(clock.at(3_602_001).allowed, true)
    assert.equal(clock.at(3_602_002).retryAfterMs, 3_600_000)
    clock.limiter.resetSync('k')
    assert.equal(clock.at(3_602_003).allowed, true)
  })

  it('blockMs on one policy: a refusal by another starts no block', () => {
    const clock = onVirtualClock([{ algorithm: 'fixed-window', limit: 1, windowMs: 1000, name: 'second' }, { algorithm: 'sliding-log', limit: 3, windowMs: 60_000, blockMs: 600_000, name: 'minute' }])
    assert.equal(clock.at(0).allowed, true)
    const bySecond = clock.at(500)
    assert.deepEqual([bySecond.allowed, bySecond.policy, bySecond.retryAfterMs], [false, 'second', 500])
    assert.equal(clock.at(1000).allowed, true)
    assert.equal(clock.at(2000).allowed, true)
    const byMinute = clock.at(3000)
    assert.deepEqual([byMinute.allowed, byMinute.policy, byMinute.retryAfterMs], [false, 'minute', 600_000])
    assert.equal(clock.at(61_000).allowed, false, 'the log has room again, the block holds')
    assert.equal(clock.at(603_000).allowed, true)
  })

  it('keys long enough to blow up memory are hashed; short keys are kept apart exactly', () => {
    const clock = onVirtualClock({ algorithm: 'fixed-window', limit: 1, windowMs: 1000 })
    const long = 'x'.repeat(1_000_000)
    assert.equal(clock.at(0, {}, long).allowed, true)
    assert.equal(clock.at(0, {}, long).allowed, false)
    assert.equal(clock.at(0, {}, `${long}y`).allowed, true)
  })

  it('many concurrent async callers on one key: exactly the limit is admitted', async () => {
    const limiter = new Limiter({ policies: { algorithm: 'fixed-window', limit: 100, windowMs: 60_000 }, clock: () => 0 })
    const decisions = await Promise.all(Array.from({ length: 1000 }, () => limiter.limit('hot')))
    assert.equal(decisions.filter((d) => d.allowed).length, 100)
  })

  it('refund gives units back to bucket policies (never beyond capacity), and names a policy that cannot take them', async () => {
    let now = 0
    const limiter = new Limiter({
      policies: [
        { algorithm: 'token-bucket', capacity: 3, refillTokens: 1, refillIntervalMs: 60_000, name: 'tokens' },
        { algorithm: 'leaky-bucket', capacity: 4, leakTokens: 1, leakIntervalMs: 60_000, name: 'leaky' },
      ],
      clock: () => now,
    })
    assert.deepEqual([1, 2, 3, 4].map(() => limiter.limitSync('k').allowed), [true, true, true, false])
    now = 1000
    const refunded = limiter.refundSync('k', 2)
    assert.deepEqual(refunded.policies.map((p) => [p.policy, p.remaining]), [['tokens', 2], ['leaky', 3]])
    assert.deepEqual([1, 2, 3].map(() => limiter.limitSync('k').allowed), [true, true, false])
    assert.equal((await limiter.refund('k', 3)).remaining, 3, 'the token bucket is full again, not over')
    assert.equal((await limiter.refund('k', 3)).remaining, 3)
    assert.throws(() => limiter.refundSync('k', 0), /units must be a positive integer/)
    assert.throws(() => limiter.refundSync('k', 5), /^ArgumentError: units exceeds the capacity 3 of policy "tokens": more than one call could have been charged/)
    const windows = new Limiter({ policies: [perMinute, per10s] })
    await assert.rejects(windows.refund('k', 1), /refund needs token-bucket, police leaky-bucket or sliding-log policies, .* "ten-seconds" is fixed-window/)
  })

  it('a sliding log takes units back from its oldest entries in the window: the count exact, what stays counted leaving no sooner', () => {
    let now = 0
    const limiter = new Limiter({ policies: { algorithm: 'sliding-log', name: 'fails', limit: 3, windowMs: 1000 }, clock: () => now })
    for (const t of [0, 100, 200]) {
      now = t
      assert.equal(limiter.limitSync('k').allowed, true)
    }
    now = 300
    assert.equal(limiter.limitSync('k').allowed, false)
    // The call of 200 gives its unit back; the log cannot tell which it was, so the oldest (0) goes.
    const refunded = limiter.refundSync('k', 1)
    assert.deepEqual([refunded.remaining, refunded.resetAfterMs], [1, 900])
    assert.equal(limiter.limitSync('k').allowed, true)
    // 100, 200 and 300 are counted now: one more is allowed at 1100, when 100 leaves, not at 1000.
    now = 1099
    assert.equal(limiter.limitSync('k').allowed, false)
    now = 1100
    assert.equal(limiter.limitSync('k').allowed, true)
    // An entry that has left the window is not refunded: only the two in it, and never below zero.
    now = 1250
    assert.equal(limiter.refundSync('k', 3).remaining, 3)
    assert.deepEqual([1, 2, 3, 4].map(() => limiter.limitSync('k').allowed), [true, true, true, false])
  })

  it('a refund of units held longer than a sliding log counts them gives nothing back: the log let them go, and another call\'s would go instead', async () => {
    let now = 0
    const limiter = new Limiter({ policies: { algorithm: 'sliding-log', name: 'jobs-running', limit: 2, windowMs: 1000 }, clock: () => now })
    const a = limiter.limitSync('k')
    now = 500
    const b = limiter.limitSync('k')
    // At 1200, a's unit has left the log (a runs on); c takes it.
    now = 1200
    assert.deepEqual([a.allowed, b.allowed, limiter.limitSync('k').allowed, limiter.limitSync('k').allowed], [true, true, true, false])
    now = 1300
    assert.equal(limiter.refundSync('k', 1, a, 1300).remaining, 0, 'b and c are still running')
    assert.equal((await limiter.refund('k', 1, a, 1300)).remaining, 0)
    assert.equal(limiter.limitSync('k').allowed, false)
    // b ends within the window: its unit comes back.
    assert.equal(limiter.refundSync('k', 1, b, 800).remaining, 1)
    assert.equal(limiter.limitSync('k').allowed, true)
    for (const heldMs of [-1, Number.NaN, Infinity, '5']) {
      assert.throws(() => limiter.refundSync('k', 1, undefined, heldMs as number), /^ArgumentError: heldMs must be a finite number of milliseconds, 0 or more/)
    }
  })

  it('limitSync refuses a store that cannot decide synchronously', () => {
    const asyncOnly = { consume: new MemoryStore().consume, reset: () => Promise.resolve() }
    const limiter = new Limiter({ policies: per10s, store: asyncOnly })
    assert.throws(() => limiter.limitSync('k'), /cannot decide synchronously/)
  })

  it('shares a store between limiters kept apart by prefix', () => {
    const store = new MemoryStore()
    const a = new Limiter({ policies: per10s, store, prefix: 'a', clock: () => 0 })
    const b = new Limiter({ policies: per10s, store, prefix: 'b', clock: () => 0 })
    for (let i = 0; i < 20; i++) a.limitSync('k')
    assert.equal(a.limitSync('k').allowed, false)
    assert.equal(b.limitSync('k').allowed, true)
  })

  it('refuses a clock that returns nonsense', () => {
    const limiter = new Limiter({ policies: per10s, clock: () => Number.NaN })
    assert.throws(() => limiter.limitSync('k'), /clock\(\) must return epoch milliseconds/)
    // Past the year 9999: a clock in microseconds, and one so far out that no limit held (every call was admitted).
    for (const now of [Date.now() * 1000, 1e300]) {
      const far = new Limiter({ policies: per10s, clock: () => now })
      assert.throws(() => far.limitSync('k'), /clock\(\) must return epoch milliseconds: a number from 0 to 253402300799999/)
    }
    assert.equal(new Limiter({ policies: per10s, clock: () => 253402300799999 }).limitSync('k').allowed, true)
  })

  it('refuses an async clock, and its rejection ends no process', async () => {
    const asyncClock = new Limiter({ policies: per10s, clock: (() => Promise.reject(new Error('time server down'))) as never })
    assert.throws(() => asyncClock.limitSync('k'), /clock\(\) must return epoch milliseconds: .* \(got a promise\)$/)
    await assert.rejects(asyncClock.limit('k'), /\(got a promise\)$/)
    // An unhandled rejection would fail this test (node's test runner reports it against the test that made it).
    await new Promise((resolve) => setImmediate(resolve))
  })
})

describe('Limiter observer', () => {
  it('hears how each store call ended, and what the store said when it failed', async () => {
    const heard: Array<[string, string | undefined]> = []
    const observer = { storeCall: (_ms: number, outcome: string, error?: Error) => { heard.push([outcome, error?.message]) } }
    const policies: Policy = { algorithm: 'fixed-window', limit: 5, windowMs: 60_000 }
    let answer: 'fail' | 'hang' | 'ok' = 'fail'
    const memory = new MemoryStore()
    const store = {
      consume: (call: Parameters<MemoryStore['consume']>[0]) => answer === 'fail'
        ? Promise.reject(new Error("READONLY You can't write against a read only replica."))
        : answer === 'hang' ? new Promise<never>(() => {}) : memory.consume(call),
      reset: () => Promise.resolve(),
    }
    const limiter = new Limiter({ store, policies, observer, storeTimeoutMs: 30, circuit: { failures: 1000 } })
    assert.equal((await limiter.limit('k')).reason, 'store-error')
    answer = 'hang'
    assert.equal((await limiter.limit('k')).reason, 'timeout')
    answer = 'ok'
    assert.equal((await limiter.limit('k')).degraded, false)
    assert.deepEqual(heard, [
      ['store-error', "READONLY You can't write against a read only replica."],
      ['timeout', 'no answer within the store timeout (30 ms)'],
      ['ok', undefined],
    ])
  })
})

describe('Limiter observer that fails', () => {
  it('one that throws, or returns a promise that rejects, fails no decision and is reported as a process warning', async () => {
    const memory = new MemoryStore()
    const store = { consume: (call: Parameters<MemoryStore['consume']>[0]) => memory.consume(call), reset: () => Promise.resolve() }
    const limiter = new Limiter({
      store,
      policies: { algorithm: 'fixed-window', limit: 1, windowMs: 60_000 },
      observer: {
        storeCall: () => { throw new Error('histogram gone') },
        blockCacheHit: async () => { throw new Error('counter gone') },
      },
    })
    const warnings = await processWarningsDuring('SLUICE_OBSERVER', async () => {
      assert.deepEqual([(await limiter.limit('k')).allowed, (await limiter.limit('k')).allowed, (await limiter.limit('k')).allowed], [true, false, false])
    })
    assert.deepEqual(warnings, [
      'observer.storeCall threw, and the call it observed went on: histogram gone',
      'observer.storeCall threw, and the call it observed went on: histogram gone',
      'observer.blockCacheHit rejected, and the call it observed went on: counter gone',
    ])
  })
})

describe('Limiter on a store of the caller\'s making that answers out of shape', () => {
  it('a wrong answer is that store\'s error: the failure policy decides, and the error says what it answered', async () => {
    const policies: Policy[] = [{ algorithm: 'fixed-window', limit: 5, windowMs: 60_000, name: 'a' }, { algorithm: 'sliding-log', limit: 5, windowMs: 60_000, name: 'b' }]
    const memory = new MemoryStore()
    const answers: unknown[] = [undefined, [], [{}, {}], [{ allowed: true, limit: 5, remaining: 4, resetAfterMs: 1, moreAfterMs: 1, retryAfterMs: 0, waitMs: 0, policy: 'a' }, null]]
    class TableStore {
      consume(call: Parameters<MemoryStore['consume']>[0]) { return answers.length > 0 ? Promise.resolve(answers.shift()) : memory.consume(call) }
      reset() { return Promise.resolve() }
    }
    const heard: string[] = []
    const limiter = new Limiter({ store: new TableStore() as never, policies, onStoreFailure: 'closed', circuit: { failures: 100 }, observer: { storeCall: (_ms, _outcome, error) => { if (error) heard.push(error.message) } } })
    for (let i = 0; i < 4; i++) assert.deepEqual(((d) => [d.allowed, d.degraded, d.reason])(await limiter.limit('k')), [false, true, 'store-error'])
    assert.deepEqual(heard, [
      "TableStore's answer is not a list of decisions (undefined)",
      "TableStore's answer has 0 decisions for a call of 2 policies",
      "TableStore's answer has decision 0 whose allowed is not true or false",
      "TableStore's answer has decision 1 that is not an object",
    ])
    // A well-formed answer decides as the store says.
    assert.deepEqual(((d) => [d.allowed, d.degraded, d.remaining])(await limiter.limit('k')), [true, false, 4])
  })

  it('an in-process one (with consumeSync) that answers out of shape throws a SluiceError naming it, from limitSync and limit alike', async () => {
    const broken = { consumeSync: () => [{ allowed: 'yes' }], resetSync: () => {}, consume: () => Promise.resolve([]), reset: () => Promise.resolve() }
    const limiter = new Limiter({ store: broken as never, policies: { algorithm: 'fixed-window', limit: 5, windowMs: 60_000 } })
    assert.throws(() => limiter.limitSync('k'), /^SluiceError: Object's answer has decision 0 whose allowed is not true or false$/)
    await assert.rejects(limiter.limit('k'), /^SluiceError: Object's answer has decision 0 whose allowed is not true or false$/)
  })
})
