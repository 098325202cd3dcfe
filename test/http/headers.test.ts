import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import fc from 'fast-check'
import { parseDictionary, parseList, serializeDictionary, serializeList, type Item } from 'structured-headers'
import { fcOptions, onVirtualClock } from '../helpers.ts'
import { rateLimitHeaders, windowSeconds, type Policy, type PolicyDecision, type ResolvedPolicy } from '../../src/index.ts'

const policies: Policy[] = [
  { algorithm: 'fixed-window', limit: 100, windowMs: 60_000, name: 'minute' },
  { algorithm: 'token-bucket', capacity: 20, refillTokens: 2, refillIntervalMs: 1000, name: 'burst' },
]

function decided() {
  const clock = onVirtualClock(policies, 30_000)
  const decision = clock.at(30_000)
  return { decision, resolved: clock.limiter.policies }
}

describe('rate-limit header fields', () => {
  it('draft-10: one item per policy, parseable as RFC 9651 lists', () => {
    const { decision, resolved } = decided()
    const headers = new Map(rateLimitHeaders(decision, resolved, {}, 'user:42', 30_000))
    assert.equal(headers.get('RateLimit-Policy'), '"minute";q=100;w=60, "burst";q=20;w=10')
    assert.equal(headers.get('RateLimit'), '"minute";r=99;t=30, "burst";r=19;t=1')
    const parsed = parseList(headers.get('RateLimit') as string)
    assert.deepEqual(parsed.map(([name, params]) => [name, params.get('r')]), [['minute', 99], ['burst', 19]])
  })

  it('pk: a byte sequence derived from the key, the same for the same key, never the key itself', () => {
    const { decision, resolved } = decided()
    const one = new Map(rateLimitHeaders(decision, resolved, { standard: 'draft-8', partitionKey: true }, 'user:42', 30_000))
    const again = new Map(rateLimitHeaders(decision, resolved, { partitionKey: true }, 'user:42', 30_000))
    const other = new Map(rateLimitHeaders(decision, resolved, { partitionKey: true }, 'user:43', 30_000))
    const pkOf = (value: string | undefined) => parseList(value as string)[0]?.[1].get('pk') as ArrayBuffer
    const pk = Buffer.from(pkOf(one.get('RateLimit')))
    assert.equal(pk.length, 12)
    assert.ok(!pk.toString().includes('42'))
    assert.deepEqual(pk, Buffer.from(pkOf(again.get('RateLimit-Policy'))))
    assert.notDeepEqual(pk, Buffer.from(pkOf(other.get('RateLimit'))))
  })

  it('draft-7 is a dictionary for the binding policy; none sends nothing', () => {
    const { decision, resolved } = decided()
    const headers = new Map(rateLimitHeaders(decision, resolved, { standard: 'draft-7' }, 'k', 30_000))
    assert.equal(headers.get('RateLimit-Policy'), '100;w=60, 20;w=10')
    const dictionary = parseDictionary(headers.get('RateLimit') as string)
    assert.deepEqual([dictionary.get('limit')?.[0], dictionary.get('remaining')?.[0], dictionary.get('reset')?.[0]], [20, 19, 1])
    assert.deepEqual(rateLimitHeaders(decision, resolved, { standard: false }, 'k', 30_000), [])
  })

  it('a bucket with nothing left says when its next unit comes, not when it is full; a refusal says what Retry-After says, in every shape', () => {
    // 20 tokens, 2 a second: drained, it is full again in 10 s but has a token in 0.5 s.
    const clock = onVirtualClock([{ algorithm: 'token-bucket', capacity: 20, refillTokens: 2, refillIntervalMs: 1000, name: 'burst' }], 30_000)
    for (let i = 0; i < 19; i++) clock.at(30_000)
    const fields = (decision: ReturnType<typeof clock.at>) => ({
      ...Object.fromEntries(rateLimitHeaders(decision, clock.limiter.policies, { legacy: true }, 'k', 30_000)),
      ...Object.fromEntries(rateLimitHeaders(decision, clock.limiter.policies, { standard: 'draft-7' }, 'k', 30_000)),
      'RateLimit-Reset': new Map(rateLimitHeaders(decision, clock.limiter.policies, { standard: 'draft-6' }, 'k', 30_000)).get('RateLimit-Reset'),
    })
    const last = clock.at(30_000)
    assert.deepEqual([last.allowed, last.remaining, last.resetAfterMs], [true, 0, 10_000])
    const expected = { RateLimit: 'limit=20, remaining=0, reset=1', 'RateLimit-Reset': '1', 'X-RateLimit-Reset': '31' }
    assert.deepEqual(pick(fields(last), ['RateLimit', 'RateLimit-Reset', 'X-RateLimit-Reset']), expected)
    assert.equal(new Map(rateLimitHeaders(last, clock.limiter.policies, {}, 'k', 30_000)).get('RateLimit'), '"burst";r=0;t=1')
    const refused = clock.at(30_000)
    assert.deepEqual([refused.allowed, refused.retryAfterMs], [false, 500])
    assert.deepEqual(pick(fields(refused), ['RateLimit', 'RateLimit-Reset', 'X-RateLimit-Reset']), expected)
    // One token back, and one spent: nothing left again, the next in half a second.
    const later = clock.at(30_500)
    assert.equal(new Map(rateLimitHeaders(later, clock.limiter.policies, {}, 'k', 30_500)).get('RateLimit'), '"burst";r=0;t=1')
  })

  it('a sliding log with nothing left says when its oldest entry leaves, not its newest', () => {
    const clock = onVirtualClock([{ algorithm: 'sliding-log', limit: 3, windowMs: 10_000, name: 'log' }])
    clock.at(0)
    clock.at(4_000)
    const last = clock.at(8_000)
    assert.deepEqual([last.remaining, last.resetAfterMs], [0, 10_000])
    // The entry of t=0 leaves at 10 s: one more call can pass 2 s from now (the whole log is gone only in 10 s).
    assert.equal(new Map(rateLimitHeaders(last, clock.limiter.policies, {}, 'k', 8_000)).get('RateLimit'), '"log";r=0;t=2')
    assert.equal(clock.at(9_999).allowed, false)
    assert.equal(clock.at(10_000).allowed, true)
  })

  it('a concurrency (in-flight) policy: quota unit concurrent-requests, no window; no t where it is optional, the refusal hint where a reset is required', () => {
    const clock = onVirtualClock([
      { algorithm: 'sliding-log', limit: 2, windowMs: 600_000, name: 'in-progress' },
      { algorithm: 'fixed-window', limit: 100, windowMs: 60_000, name: 'minute' },
    ], 30_000)
    const inFlight = new Set(['in-progress'])
    clock.at(30_000)
    const last = clock.at(30_000)
    const fields = (options: Parameters<typeof rateLimitHeaders>[2]) => new Map(rateLimitHeaders(last, clock.limiter.policies, options, 'k', 30_000, 1, inFlight))
    assert.equal(fields({}).get('RateLimit-Policy'), '"in-progress";q=2;qu="concurrent-requests", "minute";q=100;w=60')
    assert.equal(fields({}).get('RateLimit'), '"in-progress";r=0, "minute";r=98;t=30')
    assert.deepEqual(parseList(fields({ standard: 'draft-8' }).get('RateLimit-Policy') as string)[0]?.[1].get('qu'), 'concurrent-requests')
    // The single-valued shapes carry the binding policy (the one with nothing left), whose reset they must give.
    assert.equal(fields({ standard: 'draft-7' }).get('RateLimit'), 'limit=2, remaining=0, reset=1')
    assert.equal(fields({ standard: 'draft-7' }).get('RateLimit-Policy'), '2;qu="concurrent-requests", 100;w=60')
    assert.equal(fields({ legacy: true }).get('X-RateLimit-Reset'), '31')
    // Unnamed, the same policy is an ordinary sliding log of ten minutes.
    assert.equal(new Map(rateLimitHeaders(last, clock.limiter.policies, {}, 'k', 30_000)).get('RateLimit'), '"in-progress";r=0;t=600, "minute";r=98;t=30')
  })

  it('a limit beyond the 15 digits a structured-field integer holds is sent as the largest one, in every shape', () => {
    const largest = 999_999_999_999_999
    const huge: Policy[] = [
      { algorithm: 'fixed-window', limit: Number.MAX_SAFE_INTEGER, windowMs: 60_000, name: 'huge' },
      { algorithm: 'token-bucket', capacity: 2 ** 52, refillTokens: 1, refillIntervalMs: 1, name: 'slow' },
    ]
    const clock = onVirtualClock(huge, 30_000)
    const decision = clock.at(30_000)
    const draft10 = new Map(rateLimitHeaders(decision, clock.limiter.policies, {}, 'k', 30_000))
    assert.deepEqual(parseList(draft10.get('RateLimit-Policy') as string).map(([, params]) => [params.get('q'), params.get('w')]), [[largest, 60], [largest, Math.ceil(2 ** 52 / 1000)]])
    assert.deepEqual(parseList(draft10.get('RateLimit') as string).map(([, params]) => params.get('r')), [largest, largest])
    const draft7 = new Map(rateLimitHeaders(decision, clock.limiter.policies, { standard: 'draft-7' }, 'k', 30_000))
    assert.equal(parseDictionary(draft7.get('RateLimit') as string).get('limit')?.[0], largest)
    assert.deepEqual(parseList(draft7.get('RateLimit-Policy') as string).map(([q]) => q), [largest, largest])
    const draft6 = new Map(rateLimitHeaders(decision, clock.limiter.policies, { standard: 'draft-6', legacy: true }, 'k', 30_000))
    assert.equal(draft6.get('X-RateLimit-Limit'), String(2 ** 52), 'plain integers are not limited')
  })

  it('every shape is what the structured-fields serializer writes, on random policies and traces', () => {
    const sf = (n: number) => Math.min(n, 999_999_999_999_999)
    const seconds = (ms: number) => Math.max(0, Math.ceil(ms / 1000))
    const bigOrSmall = fc.oneof(fc.integer({ min: 1, max: 50 }), fc.constantFrom(1_000_000_000, 2 ** 52, Number.MAX_SAFE_INTEGER))
    const policyArb: fc.Arbitrary<Policy> = fc.oneof(
      fc.record({ algorithm: fc.constantFrom('fixed-window' as const, 'sliding-log' as const, 'sliding-window' as const), limit: fc.integer({ min: 1, max: 50 }), windowMs: fc.integer({ min: 1, max: 90_000 }) }),
      fc.record({ algorithm: fc.constant('fixed-window' as const), limit: bigOrSmall, windowMs: fc.integer({ min: 1, max: 90_000 }) }),
      fc.record({ algorithm: fc.constant('token-bucket' as const), capacity: fc.oneof(fc.integer({ min: 1, max: 50 }), fc.constant(2 ** 40)), refillTokens: fc.integer({ min: 1, max: 10 }), refillIntervalMs: fc.integer({ min: 1, max: 5000 }) }),
      fc.record({ algorithm: fc.constant('leaky-bucket' as const), capacity: fc.integer({ min: 1, max: 50 }), leakTokens: fc.integer({ min: 1, max: 10 }), leakIntervalMs: fc.integer({ min: 1, max: 5000 }) }),
    )
    const named = fc.array(policyArb, { minLength: 1, maxLength: 3 }).map((list) => list.map((policy, i) => ({ ...policy, name: `p${i}` })))
    const gaps = fc.array(fc.integer({ min: 0, max: 3000 }), { minLength: 1, maxLength: 40 })
    fc.assert(
      fc.property(named, gaps, (list, trace) => {
        const clock = onVirtualClock(list)
        const resolved: readonly ResolvedPolicy[] = clock.limiter.policies
        let t = 0
        for (const gap of trace) {
          t += gap
          const decision = clock.at(t)
          const binding = decision.policies.find((p) => p.policy === decision.policy) ?? decision.policies[0]
          assert.ok(binding !== undefined)
          // The reset each field carries, in seconds: when there is more than it left (exact: test/algorithms),
          // and for a refusal, Retry-After's.
          const resetSeconds = (p: PolicyDecision): [number, number] => {
            const ms = p.allowed ? p.moreAfterMs : p.retryAfterMs
            return [seconds(ms), seconds(ms)]
          }
          const within = (value: unknown, [low, high]: [number, number], what: string) =>
            assert.ok(typeof value === 'number' && value >= sf(low) && value <= sf(high), `${what}: ${String(value)} not in [${low}, ${high}]`)
          const unnamed = serializeList(decision.policies.map((p, i): Item => [sf(p.limit), new Map([['w', sf(windowSeconds(resolved[i] as ResolvedPolicy))]])]))
          const draft7 = new Map(rateLimitHeaders(decision, resolved, { standard: 'draft-7' }, 'k', t))
          assert.equal(draft7.get('RateLimit-Policy'), unnamed)
          const dictionary = parseDictionary(draft7.get('RateLimit') as string)
          assert.equal(draft7.get('RateLimit'), serializeDictionary(new Map([
            ['limit', [sf(binding.limit), new Map()]],
            ['remaining', [sf(binding.remaining), new Map()]],
            ['reset', dictionary.get('reset') as Item],
          ])))
          within(dictionary.get('reset')?.[0], resetSeconds(binding), 'draft-7 reset')
          assert.equal(new Map(rateLimitHeaders(decision, resolved, { standard: 'draft-6' }, 'k', t)).get('RateLimit-Policy'), unnamed)
          const draft10 = new Map(rateLimitHeaders(decision, resolved, {}, 'k', t))
          assert.equal(draft10.get('RateLimit-Policy'), serializeList(decision.policies.map((p, i): Item => [p.policy, new Map([['q', sf(p.limit)], ['w', sf(windowSeconds(resolved[i] as ResolvedPolicy))]])])))
          const items = parseList(draft10.get('RateLimit') as string)
          assert.equal(draft10.get('RateLimit'), serializeList(decision.policies.map((p, i): Item => [p.policy, new Map([['r', sf(p.remaining)], ['t', (items[i] as Item)[1].get('t') as number]])])))
          decision.policies.forEach((p, i) => within((items[i] as Item)[1].get('t'), resetSeconds(p), `${p.policy} t`))
        }
      }),
      fcOptions(300),
    )
  })
})

function pick(record: Record<string, string | undefined>, names: string[]): Record<string, string | undefined> {
  return Object.fromEntries(names.map((name) => [name, record[name]]))
}
