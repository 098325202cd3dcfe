import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { didYouMean } from '../../src/core/suggest.ts'
import { createRateLimitHandler, Limiter, resolvePolicy } from '../../src/index.ts'

describe('did you mean', () => {
  it('names the known option a misspelt one stands for: case, - and _, plural for singular, a slip of a letter or two', () => {
    const known = ['limit', 'windowMs', 'refillTokens', 'method', 'trustProxy', 'capacity', 'policies']
    const meant = (name: string) => didYouMean(name, known)
    assert.equal(meant('windowMS'), 'did you mean "windowMs"?')
    assert.equal(meant('window_ms'), 'did you mean "windowMs"?')
    assert.equal(meant('refill-tokens'), 'did you mean "refillTokens"?')
    assert.equal(meant('methods'), 'did you mean "method"?')
    assert.equal(meant('trustProxies'), 'did you mean "trustProxy"?')
    assert.equal(meant('policy'), 'did you mean "policies"?')
    assert.equal(meant('limt'), 'did you mean "limit"?')
    assert.equal(meant('capcaity'), 'did you mean "capacity"?')
    // One word of the other: fail-open for open, leaky for leaky-bucket; a slip of one letter comes first.
    assert.equal(didYouMean('fail-open', ['fallback', 'open', 'closed']), 'did you mean "open"?')
    assert.equal(didYouMean('leaky', ['token-bucket', 'leaky-bucket']), 'did you mean "leaky-bucket"?')
    assert.equal(didYouMean('check-confg', ['check', 'check-config']), 'did you mean "check-config"?')
  })

  it('names none where no one option is clearly meant: another word, a short name, two as close', () => {
    assert.equal(didYouMean('zzz', ['limit', 'windowMs']), undefined)
    assert.equal(didYouMean('burst', ['limit', 'windowMs']), undefined)
    assert.equal(didYouMean('x', ['a', 'y']), undefined)
    assert.equal(didYouMean('x-y', ['y', 'open']), undefined)
    // A name far longer than any slip (a key of a large wrong file) is not measured against each option.
    assert.equal(didYouMean('limit'.repeat(1_000_000), ['limit', 'windowMs']), undefined)
    assert.equal(didYouMean('limitz', ['limit', 'limits']), undefined)
  })

  it('ends the errors of options, match options, policy fields and algorithms', () => {
    const policies = { algorithm: 'fixed-window' as const, limit: 5, windowMs: 1000 }
    assert.throws(() => new Limiter({ policies, prefx: 'x' } as never), /^.*prefx is not a Limiter option \(known: .*\) \(got "x"\); did you mean "prefix"\?$/)
    assert.throws(() => createRateLimitHandler({ rules: [{ match: { methods: ['POST'] } as never, policies }] }), /match\.methods is not a match option .*; did you mean "method"\?$/)
    assert.throws(() => resolvePolicy({ algorithm: 'fixed-window', limit: 5, windowMS: 1000 }), /windowMS is not a field of a fixed-window policy .* \(got 1000\); did you mean "windowMs"\?$/)
    assert.throws(() => resolvePolicy({ algorithm: 'token_bucket', capacity: 5 }), /algorithm must be one of .* \(got "token_bucket"\); did you mean "token-bucket"\?$/)
    assert.throws(() => resolvePolicy({ algorithm: 'token-bucket', capacity: 5, refillTokens: 1, refillIntervalMs: 1000, refill: 'Greedy' }), /refill must be one of greedy, interval \(got "Greedy"\); did you mean "greedy"\?$/)
    assert.throws(() => new Limiter({ policies, zzz: 1 } as never), (error: Error) => !error.message.includes('did you mean'))
    // Milliseconds written as a duration or as text say what to write.
    assert.throws(() => new Limiter({ policies, storeTimeoutMs: '200ms' } as never), /\(got "200ms"\); storeTimeoutMs is in milliseconds: 200 for 200ms$/)
    assert.throws(() => new Limiter({ policies: { algorithm: 'token-bucket', capacity: 5, refillTokens: 1, refillIntervalMs: 1000 } }).limitSync('k', { maxWaitMs: '2s' } as never), /\(got "2s"\); maxWaitMs is in milliseconds: 2000 for 2s$/)
    // A name without its unit is the name with it.
    assert.throws(() => resolvePolicy({ algorithm: 'fixed-window', limit: 5, window: 1000 }), /; did you mean "windowMs"\?$/)
    assert.throws(() => new Limiter({ policies, storeTimeout: 50 } as never), /; did you mean "storeTimeoutMs"\?$/)
  })

  it('ends the errors of a Limiter given another thing\'s option with where it goes', () => {
    const policies = { algorithm: 'fixed-window' as const, limit: 5, windowMs: 1000 }
    assert.throws(() => new Limiter({ algorithm: 'fixed-window', limit: 5, windowMs: 1000 } as never), /^ArgumentError: algorithm is not a Limiter option .*; a policy's field: new Limiter\(\{ policies: \{ algorithm, limit, windowMs \} \}\)$/)
    assert.throws(() => new Limiter({ policies, maxKeys: 10 } as never), /; a MemoryStore option: new Limiter\(\{ store: new MemoryStore\(\{ maxKeys \}\), policies \}\)$/)
    assert.throws(() => new Limiter({ policies, url: 'redis://127.0.0.1' } as never), /; a RedisStore option: new Limiter\(\{ store: new RedisStore\(\{ url \}\), policies \}\)$/)
    assert.throws(() => new Limiter({ policies, maxWaitMs: 100 } as never), /; an option of each call: limiter\.limit\(key, \{ cost, maxWaitMs \}\)$/)
    assert.throws(() => new Limiter({ points: 5, duration: 1 } as never), /^ArgumentError: points is not a Limiter option .*; rate-limiter-flexible's \{ points, duration \} is here policies: \{ algorithm: 'fixed-window', limit: points, windowMs: duration \* 1000 \}$/)
    assert.throws(() => new Limiter({ policies, keyPrefix: 'login' } as never), /; rate-limiter-flexible's keyPrefix is here prefix$/)
    // A misspelling is the likelier reading.
    assert.throws(() => new Limiter({ policie: policies } as never), /; did you mean "policies"\?$/)
    // An inherited name is no option of anything.
    assert.throws(() => new Limiter(JSON.parse('{"policies": {"algorithm": "fixed-window", "limit": 1, "windowMs": 1}, "constructor": 1, "__proto__": 1}')), (error: Error) => /constructor is not a Limiter option/.test(error.message) && !/; /.test(error.message.split('(got')[1] ?? ''))
  })

  it('ends the errors of values that must be one of a few: a word around one (fail-open), another spelling (draft10, inflight)', () => {
    const policies = { algorithm: 'fixed-window' as const, limit: 5, windowMs: 1000 }
    assert.throws(() => new Limiter({ policies, onStoreFailure: 'fail-open' } as never), /onStoreFailure must be 'open', 'closed' or 'fallback' \(got "fail-open"\); did you mean "open"\?$/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies }], headers: { standard: 'draft10' } as never }), /standard must be .* \(got "draft10"\); did you mean "draft-10"\?$/)
    assert.throws(() => createRateLimitHandler({ rules: [{ name: 'r', policies, count: 'inflight' as never }] }), /rule "r" count must be .* \(got "inflight"\); did you mean "in-flight"\?$/)
    assert.throws(() => createRateLimitHandler({ rules: [{ policies }], emptyKey: 'deny' as never }), (error: Error) => /emptyKey must be/.test(error.message) && !error.message.includes('did you mean'))
  })
})
