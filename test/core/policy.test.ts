import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { Limiter, PolicyError, ArgumentError, resolvePolicies, resolvePolicy, type Policy } from '../../src/index.ts'
import { checkMaxWait } from '../../src/core/policy.ts'

function policyError(input: unknown, field: string, message: RegExp) {
  assert.throws(() => resolvePolicy(input), (error: unknown) => {
    assert.ok(error instanceof PolicyError, `expected PolicyError, got ${String(error)}`)
    assert.equal(error.code, 'ERR_SLUICE_POLICY')
    assert.equal(error.field, field)
    assert.match(error.message, message)
    return true
  })
}

describe('policy validation', () => {
  it('names the field and the bad value', () => {
    policyError({ algorithm: 'fixed-window', limit: 0, windowMs: 1000 }, 'limit', /limit must be a positive integer \(got 0\)/)
    policyError({ algorithm: 'fixed-window', limit: 10, windowMs: -5 }, 'windowMs', /got -5/)
    policyError({ algorithm: 'sliding-log', limit: Number.NaN, windowMs: 1000 }, 'limit', /finite number \(got NaN\)/)
    policyError({ algorithm: 'sliding-window', limit: 5, windowMs: Infinity }, 'windowMs', /finite number \(got Infinity\)/)
    policyError({ algorithm: 'token-bucket', capacity: 1.5, refillTokens: 1, refillIntervalMs: 1 }, 'capacity', /positive integer \(got 1.5\)/)
    policyError({ algorithm: 'token-bucket', capacity: '10', refillTokens: 1, refillIntervalMs: 1 }, 'capacity', /got "10"\); write it as a number, without quotes: 10$/)
    // A duration where milliseconds go (as YAML users write a window) says how many.
    policyError({ algorithm: 'fixed-window', limit: 10, windowMs: '1m' }, 'windowMs', /finite number \(got "1m"\); windowMs is in milliseconds: 60000 for 1m$/)
    policyError({ algorithm: 'fixed-window', limit: 1000, windowMs: '1d' }, 'windowMs', /; windowMs is in milliseconds: 86400000 for 1d$/)
    policyError({ algorithm: 'token-bucket', capacity: 10, refillTokens: 1, refillIntervalMs: '1.5s' }, 'refillIntervalMs', /; refillIntervalMs is in milliseconds: 1500 for 1\.5s$/)
    policyError({ algorithm: 'fixed-window', limit: '1m', windowMs: 1000 }, 'limit', /finite number \(got "1m"\)$/)
    policyError({ algorithm: 'token-bucket', capacity: 10, refillTokens: 1 }, 'refillIntervalMs', /refillIntervalMs is required$/)
    policyError({ algorithm: 'leaky-bucket', capacity: 10, leakTokens: 1, leakIntervalMs: 0 }, 'leakIntervalMs', /got 0/)
    policyError({ algorithm: 'leaky-bucket', capacity: 10, leakTokens: 1, leakIntervalMs: 10, mode: 'queue' }, 'mode', /police, shape/)
    policyError({ algorithm: 'token-bucket', capacity: 10, refillTokens: 1, refillIntervalMs: 10, refill: 'lazy' }, 'refill', /greedy, interval/)
  })

  it('rejects an unknown algorithm, unknown keys and non-objects', () => {
    policyError({ algorithm: 'gcra', limit: 1 }, 'algorithm', /must be one of fixed-window, sliding-log, sliding-window, token-bucket, leaky-bucket \(got "gcra"\)/)
    policyError({ limit: 1, windowMs: 1 }, 'algorithm', /^algorithm is required: one of fixed-window, sliding-log, sliding-window, token-bucket, leaky-bucket$/)
    policyError({ algorithm: 'fixed-window', limit: 10, windowMs: 1000, window: 60 }, 'window', /not a field of a fixed-window policy/)
    policyError({ algorithm: 'token-bucket', capacity: 10, refillTokens: 1, refillIntervalMs: 1000, limit: 5 }, 'limit', /not a field/)
    policyError(null, 'policy', /must be an object/)
    policyError('fixed-window', 'policy', /must be an object/)
  })

  it('names the field of ours for another library\'s name, with its unit where the units differ', () => {
    const messageOf = (raw: Record<string, unknown>) => {
      try { resolvePolicy(raw) } catch (error) { return (error as Error).message.split('; ').slice(1).join('; ') }
      return undefined
    }
    assert.equal(messageOf({ algorithm: 'fixed-window', points: 10, windowMs: 1000 }), "rate-limiter-flexible's points is limit here")
    assert.equal(messageOf({ algorithm: 'token-bucket', points: 10, refillTokens: 1, refillIntervalMs: 1000 }), "rate-limiter-flexible's points is capacity here")
    assert.equal(messageOf({ algorithm: 'sliding-log', limit: 10, duration: 60 }), "rate-limiter-flexible's duration is windowMs here, in milliseconds, where duration is seconds")
    assert.equal(messageOf({ algorithm: 'sliding-window', max: 10, windowMs: 1000 }), "express-rate-limit's and @fastify/rate-limit's max is limit here")
    assert.equal(messageOf({ algorithm: 'leaky-bucket', capacity: 3, rate: 5, leakIntervalMs: 1000 }), 'a rate is leakTokens per leakIntervalMs here')
    assert.equal(messageOf({ algorithm: 'token-bucket', burstCapacity: 10, refillTokens: 1, refillIntervalMs: 1000 }), "Spring Cloud Gateway's burstCapacity is capacity here")
    assert.equal(messageOf({ algorithm: 'fixed-window', capacity: 10, windowMs: 1000 }), "a window's capacity is limit here")
    // A slip of one of ours is still the hint; a name no library uses has none.
    assert.equal(messageOf({ algorithm: 'fixed-window', limt: 10, windowMs: 1000 }), 'did you mean "limit"?')
    assert.equal(messageOf({ algorithm: 'fixed-window', limit: 10, windowMs: 1000, constructor: 1 }), '')
  })

  it('refuses numbers too large for exact integer arithmetic', () => {
    policyError({ algorithm: 'token-bucket', capacity: 2 ** 40, refillTokens: 1, refillIntervalMs: 2 ** 20 }, 'capacity', /below 2\^53/)
    policyError({ algorithm: 'fixed-window', limit: 2 ** 60, windowMs: 1000 }, 'limit', /at most/)
    // A modest limit over a huge window: the message shows the window, which is what to change.
    policyError({ algorithm: 'sliding-window', limit: 100, windowMs: 2 ** 50 }, 'limit', /^limit is too large: limit x windowMs \(1125899906842624\) must stay below 2\^53 for exact arithmetic \(got 100\)$/)
  })

  it('derives readable names, accepts custom ones, and refuses duplicates', () => {
    assert.equal(resolvePolicy({ algorithm: 'fixed-window', limit: 100, windowMs: 60_000 }).name, 'fixed-window:100/1m')
    assert.equal(resolvePolicy({ algorithm: 'token-bucket', capacity: 20, refillTokens: 5, refillIntervalMs: 1000 }).name, 'token-bucket:20@5/1s')
    assert.equal(resolvePolicy({ algorithm: 'leaky-bucket', capacity: 3, leakTokens: 1, leakIntervalMs: 250, mode: 'shape' }).name, 'leaky-bucket:3@1/250ms:shape')
    assert.equal(resolvePolicy({ algorithm: 'sliding-log', limit: 5, windowMs: 1000, name: 'burst' }).name, 'burst')
    policyError({ algorithm: 'sliding-log', limit: 5, windowMs: 1000, name: 'has space' }, 'name', /printable ASCII/)
    policyError({ algorithm: 'sliding-log', limit: 5, windowMs: 1000, name: 'a{b}' }, 'name', /braces/)
    assert.throws(
      () => resolvePolicies([{ algorithm: 'fixed-window', limit: 1, windowMs: 1000 }, { algorithm: 'fixed-window', limit: 1, windowMs: 1000 }]),
      /used by two policies/,
    )
    assert.throws(() => resolvePolicies([]), ArgumentError)
  })

  it('blockMs: a positive integer on any policy that refuses, part of the derived name', () => {
    assert.equal(resolvePolicy({ algorithm: 'fixed-window', limit: 5, windowMs: 900_000, blockMs: 3_600_000 }).name, 'fixed-window:5/15m!1h')
    assert.equal(resolvePolicy({ algorithm: 'token-bucket', capacity: 5, refillTokens: 1, refillIntervalMs: 1000, blockMs: 1500, name: 'login' }).name, 'login')
    assert.equal(resolvePolicy({ algorithm: 'leaky-bucket', capacity: 5, leakTokens: 1, leakIntervalMs: 1000, blockMs: 60_000 }).blockMs, 60_000)
    assert.equal('blockMs' in resolvePolicy({ algorithm: 'sliding-log', limit: 5, windowMs: 1000 }), false)
    policyError({ algorithm: 'fixed-window', limit: 5, windowMs: 1000, blockMs: 0 }, 'blockMs', /positive integer \(got 0\)/)
    policyError({ algorithm: 'sliding-window', limit: 5, windowMs: 1000, blockMs: '1h' }, 'blockMs', /finite number \(got "1h"\)/)
    policyError({ algorithm: 'sliding-log', limit: 5, windowMs: 1000, blockMs: 2.5 }, 'blockMs', /got 2.5/)
    policyError({ algorithm: 'sliding-log', limit: 5, windowMs: 1000, blockMs: 2 ** 50 }, 'blockMs', /at most 315360000000 \(ten years\)/)
    policyError({ algorithm: 'leaky-bucket', capacity: 5, leakTokens: 1, leakIntervalMs: 1000, mode: 'shape', blockMs: 1000 }, 'blockMs', /shape-mode leaky bucket queues them/)
    const blocking: Policy = { algorithm: 'token-bucket', capacity: 5, refillTokens: 1, refillIntervalMs: 1000, blockMs: 1000 }
    assert.throws(() => checkMaxWait(100, resolvePolicies(blocking)), /maxWaitMs .*refuses, it does not queue/)
    assert.equal(checkMaxWait(0, resolvePolicies(blocking)), 0)
    // A store outside the process (neither needs to answer here): shards and leases cannot keep a block.
    const remote = { consume: async () => [], reset: async () => {} }
    assert.throws(() => new Limiter({ policies: blocking, store: remote, shards: 2 }), /shards .*"token-bucket:5@1\/1s!1s"'s blockMs: a block on one shard would leave the others open/)
    assert.throws(() => new Limiter({ policies: blocking, store: remote, lease: { units: 2 } }), /lease .*blockMs: calls served from a lease would not see the block/)
  })

  it('freezes resolved policies and fills defaults', () => {
    const policy = resolvePolicy({ algorithm: 'token-bucket', capacity: 2, refillTokens: 1, refillIntervalMs: 10 })
    assert.equal(Object.isFrozen(policy), true)
    assert.equal('refill' in policy && policy.refill, 'greedy')
  })

  it('checks costs and options at the call, naming the policy a cost can never fit', () => {
    const limiter = new Limiter({ policies: [{ algorithm: 'fixed-window', limit: 10, windowMs: 1000, name: 'big' }, { algorithm: 'token-bucket', capacity: 3, refillTokens: 1, refillIntervalMs: 1000, name: 'small' }] })
    assert.throws(() => limiter.limitSync('k', { cost: 4 }), /cost exceeds the limit 3 of policy "small"/)
    for (const cost of [0, -1, 1.5, Number.NaN, '2']) {
      assert.throws(() => limiter.limitSync('k', { cost: cost as number }), (e: unknown) => e instanceof ArgumentError && e.argument === 'cost')
    }
    assert.throws(() => limiter.limitSync('k', { maxWaitMs: -1 }), /maxWaitMs must be/)
    assert.throws(() => limiter.limitSync('k', { weight: 2 } as never), /weight is not a limit option/)
    for (const options of [null, 3, 'cost']) {
      assert.throws(() => limiter.limitSync('k', options as never), (e: unknown) => e instanceof ArgumentError && e.argument === 'options')
    }
    assert.throws(() => limiter.limitSync(''), /key must be a non-empty string/)
    assert.throws(() => limiter.limitSync(42 as never), /key must be a non-empty string \(got 42\)/)
    assert.throws(() => new Limiter({ policies: [], prefix: 'x' }), /at least one policy/)
    // Near 17,000 a Redis call could not even be built ("Maximum call stack size exceeded" on every decision).
    const many = (n: number) => Array.from({ length: n }, (_, i) => ({ algorithm: 'fixed-window' as const, name: `p${i}`, limit: 5, windowMs: 1000 }))
    assert.equal(new Limiter({ policies: many(1000) }).policies.length, 1000)
    assert.throws(() => new Limiter({ policies: many(1001) }), /^ArgumentError: policies must hold at most 1000 policies: each decision reads and writes every one \(got an array of 1001\)$/)
    assert.throws(() => new Limiter({ policies: { algorithm: 'fixed-window', limit: 1, windowMs: 1 }, prefix: 'a b' }), /prefix/)
    assert.throws(() => new Limiter({ policies: { algorithm: 'fixed-window', limit: 1, windowMs: 1 }, storeTimeout: 5 } as never), /storeTimeout is not a Limiter option/)
  })
})
