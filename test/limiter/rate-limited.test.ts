import assert from 'node:assert/strict'
import { describe, it, mock } from 'node:test'
import { ArgumentError, Limiter, MemoryStore, RateLimited, RateLimitedError, rateLimited, RateLimitAction } from '../../src/index.ts'

describe('rateLimited / @RateLimited', () => {
  it('rejects the call over the limit with a typed RateLimitedError carrying retryAfterMs', async () => {
    let now = 0
    const limiter = new Limiter({ policies: { algorithm: 'fixed-window', limit: 2, windowMs: 1000 }, clock: () => now })
    const calls: string[] = []
    const send = rateLimited(async (to: string) => { calls.push(to); return `sent ${to}` }, { limiter, key: (to) => to, keyPrefix: 'email' })
    assert.equal(await send('a'), 'sent a')
    await send('a')
    now = 400
    await assert.rejects(send('a'), (error: unknown) => {
      assert.ok(error instanceof RateLimitedError)
      assert.equal(error.code, 'ERR_SLUICE_RATE_LIMITED')
      assert.equal(error.retryAfterMs, 600)
      assert.equal(error.decision.allowed, false)
      return true
    })
    assert.equal(await send('b'), 'sent b', 'keys are per argument')
    assert.deepEqual(calls, ['a', 'a', 'b'], 'the refused call never ran')
  })

  it('a store outage under a closed limit is told apart from a limit reached', async () => {
    const down = { consume: () => Promise.reject(new Error('connection refused')), reset: () => Promise.resolve() }
    const limiter = new Limiter({ store: down, policies: { algorithm: 'fixed-window', limit: 2, windowMs: 1000 }, onStoreFailure: 'closed' })
    const send = rateLimited(async () => 'sent', { limiter, keyPrefix: 'email' })
    await assert.rejects(send(), (error: unknown) => {
      assert.ok(error instanceof RateLimitedError)
      assert.equal(error.decision.degraded, true)
      assert.match(error.message, /^email is refused: its limit could not be checked \(store store-error\) and fails closed; retry after 1000 ms$/)
      return true
    })
  })

  it('decorates a method: Spring-style limit, window, keyPrefix and action', async () => {
    class Mailer {
      sent = 0
      @RateLimited({ limit: 3, windowMs: 60_000, keyPrefix: 'mailer', action: RateLimitAction.REJECT, key: (to: string) => to })
      async send(to: string): Promise<string> {
        this.sent++
        return to
      }
    }
    const mailer = new Mailer()
    for (let i = 0; i < 3; i++) assert.equal(await mailer.send('x'), 'x')
    await assert.rejects(mailer.send('x'), RateLimitedError)
    assert.equal(mailer.sent, 3, '`this` is the instance; the refused call did not run')
    assert.equal(await mailer.send('y'), 'y')
  })

  it('decorates a method with more parameters than its key uses', async () => {
    class Sender {
      @RateLimited({ limit: 1, windowMs: 60_000, key: (to: string) => to })
      async send(to: string, body: string, retries = 0): Promise<string> {
        return `${to}:${body}:${retries}`
      }
    }
    const sender = new Sender()
    assert.equal(await sender.send('a', 'hi'), 'a:hi:0')
    await assert.rejects(sender.send('a', 'again', 1), RateLimitedError)
    assert.equal(await sender.send('b', 'hi', 2), 'b:hi:2')
  })

  it('queue: waits for the reservation instead of failing', async (t) => {
    mock.timers.enable({ apis: ['setTimeout'] })
    t.after(() => mock.timers.reset())
    let now = 0
    const limiter = new Limiter({ policies: { algorithm: 'token-bucket', capacity: 1, refillTokens: 1, refillIntervalMs: 500 }, clock: () => now })
    const done: number[] = []
    const work = rateLimited(async (n: number) => { done.push(n) }, { limiter, keyPrefix: 'work', action: 'queue', maxWaitMs: 2000 })
    await work(1)
    const second = work(2)
    const third = work(3)
    await Promise.resolve()
    await new Promise((resolve) => setImmediate(resolve))
    assert.deepEqual(done, [1], 'the queued calls are waiting')
    now = 500
    mock.timers.tick(500)
    await second
    assert.deepEqual(done, [1, 2])
    now = 1000
    mock.timers.tick(500)
    await third
    assert.deepEqual(done, [1, 2, 3])
    // Four more at t=1000 wait 500, 1000, 1500 and 2000 ms; a fifth would wait
    // 2500 ms, beyond maxWaitMs, and fails with the time to retry.
    const queued = Array.from({ length: 5 }, () => work(9).catch((e: unknown) => e))
    const last = await queued[4]
    assert.ok(last instanceof RateLimitedError)
    assert.equal(last.retryAfterMs, 500)
    mock.timers.tick(3000)
    await Promise.all(queued)
  })

  it('refuses options that cannot work, at decoration time', () => {
    assert.throws(() => rateLimited(async () => 1, { windowMs: 1000 }), /limit and windowMs are required/)
    assert.throws(() => rateLimited(async () => 1, { limit: 1, windowMs: 1000, action: 'drop' as never }), /action must be 'reject' or 'queue'/)
    assert.throws(
      () => rateLimited(async () => 1, { policies: { algorithm: 'sliding-log', limit: 1, windowMs: 1000 }, action: 'queue' }),
      /sliding-log cannot reserve/,
    )
    // A misspelt key function would otherwise give every caller one shared limit.
    assert.throws(() => rateLimited(async () => 1, { limit: 1, windowMs: 1000, keyFn: () => 'k' } as never), /keyFn is not a rateLimited option/)
    // Options the wrapper would otherwise ignore: the shared limiter's own limits apply, a rejected call never waits.
    const shared = new Limiter({ policies: { algorithm: 'fixed-window', limit: 100, windowMs: 1000 } })
    assert.throws(() => rateLimited(async () => 1, { limiter: shared, limit: 1, windowMs: 60_000 }), /limiter cannot be combined with limit, windowMs, policies or store.*\(got "limit, windowMs"\)/)
    assert.throws(() => rateLimited(async () => 1, { limiter: shared, store: new MemoryStore() }), /limiter cannot be combined.*\(got "store"\)/)
    assert.throws(() => rateLimited(async () => 1, { limiter: {} as never }), /limiter must be a Limiter/)
    assert.throws(() => rateLimited(async () => 1, { limit: 1, windowMs: 1000, maxWaitMs: 500 }), /maxWaitMs applies to action 'queue' only/)
    assert.throws(() => rateLimited(async () => 1, { limit: 1, windowMs: 1000, keyPrefix: '' }), /keyPrefix must be a non-empty string/)
    // Anonymous functions on a shared limiter or store would all count under one default prefix.
    assert.throws(() => rateLimited(async () => 1, { limiter: shared }), /^ArgumentError: keyPrefix is required for an anonymous function given a limiter: the default prefix is the function's name \(got undefined\); give each function on the limiter a keyPrefix of its own/)
    assert.throws(() => rateLimited(async () => 1, { limit: 1, windowMs: 1000, store: new MemoryStore() }), /keyPrefix is required for an anonymous function given a store/)
    // A constant cost no call could pay was found only on the first call.
    assert.throws(() => rateLimited(async () => 1, { limit: 5, windowMs: 1000, cost: 6 }), /^ArgumentError: cost exceeds the limit 5 of policy "fixed-window:5\/1s", so it could never be allowed \(got 6\)/)
    assert.throws(() => rateLimited(async () => 1, { limit: 5, windowMs: 1000, cost: 0 }), /^ArgumentError: cost must be a positive integer \(got 0\)/)
    assert.doesNotThrow(() => rateLimited(async () => 1, { limit: 5, windowMs: 1000, cost: 5 }))
  })

  it('refuses a call whose key is not a string or a number, rather than share one limit among such callers', async () => {
    const send = rateLimited(async (user: { id?: string | number }) => user.id, { limit: 1, windowMs: 60_000, key: (user) => user.id as string | number })
    assert.equal(await send({ id: 7 }), 7)
    assert.equal(await send({ id: 'eve' }), 'eve')
    // Before, both read as "send:undefined": the second caller was refused for the first one's call.
    await assert.rejects(send({}), /key\(\.\.\.\) must return a non-empty string or a finite number.*\(got undefined\)/)
    await assert.rejects(send({}), ArgumentError)
    await assert.rejects(send({ id: '' }), /key\(\.\.\.\) must return/)
    await assert.rejects(send({ id: { nested: 1 } as never }), /key\(\.\.\.\) must return/)
  })

  it('functions on one shared limiter count apart, by name or keyPrefix; anonymous ones of their own count alone', async () => {
    const shared = new Limiter({ policies: { algorithm: 'fixed-window', limit: 1, windowMs: 60_000 } })
    const sendEmail = rateLimited(async function sendEmail() { return 'email' }, { limiter: shared })
    const sendSms = rateLimited(async function sendSms() { return 'sms' }, { limiter: shared })
    const ping = rateLimited(async () => 'ping', { limiter: shared, keyPrefix: 'ping' })
    assert.deepEqual([await sendEmail(), await sendSms(), await ping()], ['email', 'sms', 'ping'])
    await assert.rejects(sendEmail(), RateLimitedError)
    const first = rateLimited(async () => 1, { limit: 1, windowMs: 60_000 })
    const second = rateLimited(async () => 2, { limit: 1, windowMs: 60_000 })
    assert.deepEqual([await first(), await second()], [1, 2])
  })
})
