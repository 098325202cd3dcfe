import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { PartitionQuota, readAnnouncement, retryDelayMs, type Announcement } from '../../src/client/index.ts'

const told = (remaining: number, resetAfterMs: number, extra: Partial<Announcement> = {}): Announcement => ({
  quotas: [{ name: 'default', limit: 5, remaining, resetAfterMs, windowMs: 10_000 }],
  ...extra,
})
const nothing: Announcement = { quotas: [] }

describe('the learned quota of one partition', () => {
  it('knows nothing at first: sends one request alone, then spends what the server announced and waits for its reset', () => {
    const quota = new PartitionQuota(60_000)
    assert.equal(quota.admit(0).kind, 'go')
    assert.deepEqual(quota.admit(1), { kind: 'response', reason: 'probe' })
    quota.settle(told(2, 10_000), 200, 5)
    assert.equal(quota.admit(10).kind, 'go')
    assert.equal(quota.admit(11).kind, 'go')
    assert.deepEqual(quota.admit(12), { kind: 'wait', until: 10_005, reason: 'quota' })
    quota.settle(told(1, 9_990), 200, 15)
    quota.settle(told(0, 9_990), 200, 15)
    // A reset says when more comes, not how much: one request asks, and its answer says what the others may spend.
    assert.equal(quota.admit(10_005).kind, 'go')
    assert.deepEqual(quota.admit(10_006), { kind: 'response', reason: 'quota' })
    quota.settle(told(3, 10_000), 200, 10_010)
    for (let i = 0; i < 3; i++) assert.equal(quota.admit(10_011).kind, 'go', `send ${i}`)
    assert.deepEqual(quota.admit(10_012), { kind: 'wait', until: 20_010, reason: 'quota' })
  })

  it('a token bucket announcing when its next token comes (t=1): after it, one request, not the whole bucket', () => {
    const quota = new PartitionQuota(60_000)
    quota.admit(0)
    quota.settle(told(0, 1_000), 200, 10)
    assert.deepEqual(quota.admit(20), { kind: 'wait', until: 1_010, reason: 'quota' })
    assert.equal(quota.admit(1_010).kind, 'go')
    // Five units were announced, but only one token has dripped in: the others wait for the answer that says so.
    assert.deepEqual(quota.admit(1_011), { kind: 'response', reason: 'quota' })
    quota.settle(told(0, 1_000), 200, 1_020)
    assert.deepEqual(quota.admit(1_021), { kind: 'wait', until: 2_020, reason: 'quota' })
  })

  it('a reset passing with units still left (a server sending t=0) lets requests go on, up to those units, then asks', () => {
    const quota = new PartitionQuota(60_000)
    quota.admit(0)
    quota.settle(told(3, 0), 200, 0)
    for (let i = 0; i < 3; i++) assert.equal(quota.admit(1).kind, 'go', `send ${i}`)
    assert.deepEqual(quota.admit(1), { kind: 'response', reason: 'quota' })
  })

  it('a reset policy the next answer leaves out is taken at its whole limit, less what is in flight; one never limited, forgotten', () => {
    const quota = new PartitionQuota(60_000)
    quota.admit(0)
    quota.settle({ quotas: [{ name: 'hour', limit: 5, remaining: 0, resetAfterMs: 1_000, windowMs: 3_600_000 }, { name: 'unnamed', remaining: 0, resetAfterMs: 1_000 }] }, 200, 0)
    assert.equal(quota.admit(500).kind, 'wait')
    assert.equal(quota.admit(1_000).kind, 'go')
    assert.equal(quota.admit(1_001).kind, 'response')
    quota.settle(nothing, 200, 1_010)
    for (let i = 0; i < 5; i++) assert.equal(quota.admit(1_011).kind, 'go', `send ${i}`)
    assert.deepEqual(quota.admit(1_012), { kind: 'response', reason: 'quota' }, 'the hour is spent and its reset unknown')
  })

  it('a server that announces nothing gets everything once its first answer is in', () => {
    const quota = new PartitionQuota(60_000)
    quota.admit(0)
    quota.settle(nothing, 200, 1)
    for (let i = 0; i < 100; i++) assert.equal(quota.admit(2).kind, 'go')
  })

  it('counts requests still in flight against what a response announces', () => {
    const quota = new PartitionQuota(60_000)
    quota.admit(0)
    quota.settle(told(10, 9_000), 200, 0)
    for (let i = 0; i < 4; i++) assert.equal(quota.admit(0).kind, 'go')
    // The first answer says 3 are left, but 3 others are still on their way: none can be assumed free.
    quota.settle(told(3, 9_000), 200, 10)
    assert.equal(quota.admit(11).kind, 'wait')
    // A late answer from the same window cannot raise the estimate back.
    quota.settle(told(4, 9_000), 200, 12)
    assert.equal(quota.admit(13).kind, 'wait')
  })

  it('a sliding window: the lowest count\'s reset is the one to wait for, and a late answer with more is not a new window', () => {
    const quota = new PartitionQuota(60_000)
    quota.admit(0)
    // More than 4 only in 18 s; then, fresher, more than 0 in 10 s.
    quota.settle(told(4, 18_000), 200, 0)
    for (let i = 0; i < 4; i++) assert.equal(quota.admit(1).kind, 'go')
    quota.settle(told(0, 10_000), 200, 5)
    // An earlier request's answer, overtaken on the way.
    quota.settle(told(3, 17_000), 200, 6)
    assert.deepEqual(quota.admit(7), { kind: 'wait', until: 10_005, reason: 'quota' })
  })

  it('a new window announced by the server replaces the estimate', () => {
    const quota = new PartitionQuota(60_000)
    quota.admit(0)
    quota.settle(told(0, 1_000), 200, 0)
    assert.equal(quota.admit(500).kind, 'wait')
    quota.admit(1_000)
    quota.settle(told(4, 10_000), 200, 1_010)
    assert.equal(quota.admit(1_020).kind, 'go')
  })

  it('a 429 blocks the partition until Retry-After, which wins over the RateLimit fields', () => {
    const quota = new PartitionQuota(60_000)
    quota.admit(0)
    const { retryAt } = quota.settle(told(0, 2_000, { retryAfterMs: 7_000 }), 429, 100)
    assert.equal(retryAt, 7_100)
    assert.deepEqual(quota.admit(200), { kind: 'wait', until: 7_100, reason: 'retry-after' })
    assert.equal(quota.admit(7_100).kind, 'go')
  })

  it('Retry-After sooner than a spent quota\'s reset wins: then one request asks, instead of waiting for the reset', () => {
    const quota = new PartitionQuota(60_000)
    quota.admit(0)
    // A bucket's server: full again in 100 s, but the call can pass in 1 s.
    quota.settle(told(0, 100_000, { retryAfterMs: 1_000 }), 429, 0)
    assert.deepEqual(quota.admit(500), { kind: 'wait', until: 1_000, reason: 'retry-after' })
    assert.equal(quota.admit(1_000).kind, 'go')
    assert.deepEqual(quota.admit(1_001), { kind: 'response', reason: 'quota' })
  })

  it('a server slip (Retry-After or a reset of years) silences the partition for a day at most, then it asks again', () => {
    const DAY = 86_400_000
    const slips: Array<Record<string, string>> = [
      { 'retry-after': '99999999999' },
      { 'ratelimit-limit': '5', 'ratelimit-remaining': '0', 'ratelimit-reset': String(2 ** 53) },
      { 'x-ratelimit-limit': '5', 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '999999999' },
    ]
    for (const fields of slips) {
      const quota = new PartitionQuota(60_000)
      quota.admit(0)
      quota.settle(readAnnouncement((name) => fields[name], 0), 429, 0)
      assert.equal(quota.admit(DAY - 1).kind, 'wait', JSON.stringify(fields))
      assert.equal(quota.admit(DAY + 1_000).kind, 'go', JSON.stringify(fields))
    }
  })

  it('a 429 without Retry-After waits for the announced reset', () => {
    const quota = new PartitionQuota(60_000)
    quota.admit(0)
    assert.equal(quota.settle(told(0, 3_000), 429, 0).retryAt, 3_000)
  })

  it('"t=0" with nothing left still waits up to a second (servers that round down)', () => {
    const quota = new PartitionQuota(60_000)
    quota.admit(0)
    quota.settle(told(0, 0), 200, 0)
    assert.deepEqual(quota.admit(1), { kind: 'wait', until: 1000, reason: 'quota' })
  })

  it('a quota with no reset at all (Spring Cloud Gateway) waits a window once spent', () => {
    const quota = new PartitionQuota(60_000)
    quota.admit(0)
    quota.settle({ quotas: [{ name: 'default', limit: 20, remaining: 0, windowMs: 2000 }] }, 200, 0)
    assert.deepEqual(quota.admit(1), { kind: 'wait', until: 2000, reason: 'quota' })
  })

  it('after a 429 that announced nothing, one request at a time until the probe period ends', () => {
    const quota = new PartitionQuota(60_000)
    quota.admit(0)
    quota.settle(nothing, 200, 0)
    quota.admit(0)
    quota.admit(0)
    assert.equal(quota.settle({ quotas: [], retryAfterMs: 1000 }, 429, 0).retryAt, 1000)
    assert.equal(quota.admit(1000).kind, 'response', 'the other request is still in flight')
    quota.settle(nothing, 200, 1001)
    assert.equal(quota.admit(1002).kind, 'go')
    assert.deepEqual(quota.admit(1003), { kind: 'response', reason: 'probe' })
    quota.settle(nothing, 200, 1004)
    assert.equal(quota.admit(61_000).kind, 'go')
    assert.equal(quota.admit(61_000).kind, 'go', 'the probe period is over')
  })

  it('a 503 without Retry-After does not block the partition', () => {
    const quota = new PartitionQuota(60_000)
    quota.admit(0)
    assert.equal(quota.settle(nothing, 503, 0).retryAt, undefined)
    assert.equal(quota.admit(1).kind, 'go')
  })

  it('keeps the policies a server keeps announcing, not every name it ever sent', () => {
    // A server that names a fresh policy in every response (an id in the name), beside its real one.
    const quota = new PartitionQuota(60_000)
    const window = { resetAfterMs: 60_000, windowMs: 60_000 }
    for (let i = 0; i < 5_000; i++) {
      assert.equal(quota.admit(i).kind, 'go', `request ${i}`)
      quota.settle({ quotas: [{ name: 'main', limit: 1_000_000, remaining: 1_000_000 - i - 1, ...window }, { name: `request-${i}`, limit: 100, remaining: 99, ...window }] }, 200, i)
    }
    const known = quota.knownPolicies().map((policy) => policy.name)
    assert.equal(known.length, 64)
    assert.ok(known.includes('main') && known.includes('request-4999') && !known.includes('request-0'))
    // The policy it keeps announcing is still enforced.
    quota.admit(5_000)
    quota.settle({ quotas: [{ name: 'main', limit: 1_000_000, remaining: 0, ...window }] }, 200, 5_000)
    assert.deepEqual(quota.admit(5_001), { kind: 'wait', until: 65_000, reason: 'quota' })
  })

  describe('requests that take several units (rateLimit.cost)', () => {
    /** An LLM API's token bucket: 10,000 a minute, one every 6 ms. */
    const tokens = (remaining: number, resetAfterMs = 6): Announcement => ({
      quotas: [{ name: 'requests', limit: 100, remaining: 99, resetAfterMs: 600, unitMs: 600 }, { name: 'tokens', limit: 10_000, remaining, resetAfterMs, unitMs: 6 }],
    })

    it('a bucket short of a request\'s tokens: it waits until they have dripped in, one every unitMs after the next', () => {
      const quota = new PartitionQuota(60_000)
      quota.admit(0, { tokens: 500 })
      quota.settle(tokens(1_000), 200, 10, { tokens: 500 })
      assert.equal(quota.admit(11, { tokens: 600 }).kind, 'go')
      // 400 left of the 1,000 announced: 800 more needs the next (at 16) and 399 more, 6 ms apart.
      assert.deepEqual(quota.admit(12, { tokens: 800 }), { kind: 'wait', until: 16 + 399 * 6, reason: 'quota' })
      // A request that takes few tokens is not held by the big one's wait; the requests it does not name cost 1 each.
      assert.equal(quota.admit(12, { tokens: 300 }).kind, 'go')
      assert.deepEqual(quota.admit(13, { tokens: 800 }), { kind: 'wait', until: 16 + 699 * 6, reason: 'quota' })
      // By then the bucket has refilled what it needs.
      assert.equal(quota.admit(16 + 699 * 6, { tokens: 800 }).kind, 'go')
      assert.equal(quota.admit(16 + 699 * 6, { tokens: 1 }).kind, 'wait')
    })

    it('one taking more than a policy\'s whole quota is never sent; 0 units of a spent policy are not held by it', () => {
      const quota = new PartitionQuota(60_000)
      quota.admit(0)
      quota.settle(tokens(0), 200, 0)
      assert.deepEqual(quota.admit(1, { tokens: 10_001 }), { kind: 'never', policy: 'tokens', units: 10_001, limit: 10_000 })
      assert.equal(quota.admit(1, { tokens: 1 }).kind, 'wait')
      assert.equal(quota.admit(1, { tokens: 0 }).kind, 'go')
    })

    it('counts the units of requests in flight, per policy, against what an answer announces', () => {
      const quota = new PartitionQuota(60_000)
      quota.admit(0)
      quota.settle(tokens(10_000, 0), 200, 0)
      for (let i = 0; i < 3; i++) assert.equal(quota.admit(1, { tokens: 2_000 }).kind, 'go')
      // The first answer says 8,000 left; the two others in flight take 4,000 of them.
      quota.settle(tokens(8_000, 12_000), 200, 2, { tokens: 2_000 })
      assert.equal(quota.admit(3, { tokens: 4_000 }).kind, 'go')
      assert.equal(quota.admit(3, { tokens: 1 }).kind, 'wait')
      // A number takes that many from every policy: 100 requests' worth is the whole requests quota.
      assert.deepEqual(quota.admit(3, 101), { kind: 'never', policy: 'requests', units: 101, limit: 100 })
      // Requests that took no tokens leave nothing behind once answered: the next answer is read as it stands.
      const free = new PartitionQuota(60_000)
      free.admit(0)
      free.settle(tokens(10_000, 0), 200, 0)
      for (let i = 0; i < 2; i++) assert.equal(free.admit(1, { tokens: 0 }).kind, 'go')
      free.settle(tokens(10_000, 0), 200, 2, { tokens: 0 })
      free.settle(tokens(10_000, 0), 200, 3, { tokens: 0 })
      assert.equal(free.admit(4, { tokens: 10_000 }).kind, 'go')
    })

    it('a window\'s quota short of a request\'s units: it waits for the reset, then goes alone to ask', () => {
      const quota = new PartitionQuota(60_000)
      quota.admit(0)
      quota.settle(told(3, 10_000), 200, 0)
      assert.deepEqual(quota.admit(1, 4), { kind: 'wait', until: 10_000, reason: 'quota' })
      assert.equal(quota.admit(1, 3).kind, 'go')
      quota.settle(told(0, 9_999), 200, 2, 3)
      assert.deepEqual(quota.admit(3, 1), { kind: 'wait', until: 10_001, reason: 'quota' })
      // A reset says when more comes, not how much: the request goes alone, and its answer says.
      assert.equal(quota.admit(10_001, 4).kind, 'go')
      assert.deepEqual(quota.admit(10_001, 1), { kind: 'response', reason: 'quota' })
    })
  })
})

describe('a quota of content bytes (qu="content-bytes")', () => {
  it('prices a request at its body size for each such policy the cost does not name, at least 1; a number is the caller\'s count for all', () => {
    const quota = new PartitionQuota(60_000)
    assert.equal(quota.priced(undefined, 300), undefined, 'nothing learned yet: the default, 1 from each')
    quota.admit(0)
    quota.settle({ quotas: [{ name: 'bytes', limit: 1000, remaining: 900, resetAfterMs: 60_000, contentBytes: true }, { name: 'requests', limit: 10, remaining: 9, resetAfterMs: 60_000 }] }, 200, 0)
    assert.deepEqual(quota.priced(undefined, 300), { bytes: 300 })
    assert.deepEqual(quota.priced(undefined, 0), { bytes: 1 }, 'a body-less request still takes a unit: a spent quota holds it')
    assert.deepEqual(quota.priced(undefined, undefined), { bytes: 1 }, 'a stream of unknown length')
    assert.deepEqual(quota.priced({ requests: 2 }, 300), { requests: 2, bytes: 300 })
    assert.deepEqual(quota.priced({ bytes: 5 }, 300), { bytes: 5 }, 'named by the caller: theirs')
    assert.equal(quota.priced(4, 300), 4)
    // A later answer that describes no unit (RateLimit without RateLimit-Policy) leaves it as it was.
    quota.admit(1)
    quota.settle({ quotas: [{ name: 'bytes', remaining: 800, resetAfterMs: 59_000 }] }, 200, 1)
    assert.deepEqual(quota.priced(undefined, 900), { bytes: 900 })
    assert.deepEqual(quota.admit(2, { bytes: 900 }), { kind: 'wait', until: 59_001, reason: 'quota' })
  })
})

describe('a quota of requests in progress at once (qu="concurrent-requests")', () => {
  const inProgress = (remaining: number, limit = 2): Announcement => ({ quotas: [{ name: 'exports', limit, remaining, concurrent: true }] })

  it('holds each request from its sending to the end of its body: at the limit, the next waits for one of them to end', () => {
    const quota = new PartitionQuota(60_000)
    assert.equal(quota.admit(0).kind, 'go')
    const first = quota.settle(inProgress(1), 200, 10)
    assert.deepEqual(first, { retryAt: undefined, held: [['exports', 1]] })
    assert.equal(quota.admit(11).kind, 'go')
    // Two in progress (one answered, its body still coming; one on its way): a third would be refused.
    assert.deepEqual(quota.admit(12), { kind: 'response', reason: 'quota' })
    const second = quota.settle(inProgress(0), 200, 20)
    assert.deepEqual(quota.admit(21), { kind: 'response', reason: 'quota' }, 'an answer is not the end of its body')
    quota.release(first.held)
    assert.equal(quota.admit(22).kind, 'go')
    assert.deepEqual(quota.admit(23), { kind: 'response', reason: 'quota' })
    assert.equal(quota.idle(23), false)
    quota.release(second.held)
    quota.release(quota.settle(inProgress(1), 200, 30).held)
    assert.equal(quota.holds, false)
    assert.equal(quota.idle(31), true)
    quota.admit(31)
    quota.settle(inProgress(1), 200, 32)
    assert.equal(quota.holds, true)
    assert.equal(quota.idle(33), false, 'a partition whose responses hold units is not forgotten')
  })

  it('a request the quota does not count (cost 0) goes; one taking more than the whole quota never would', () => {
    const quota = new PartitionQuota(60_000)
    quota.admit(0)
    const held = quota.settle(inProgress(1, 1), 200, 10).held
    assert.equal(quota.admit(11, { exports: 0 }).kind, 'go')
    quota.settle(inProgress(0, 1), 200, 12, { exports: 0 })
    assert.deepEqual(quota.admit(13, { exports: 2 }), { kind: 'never', policy: 'exports', units: 2, limit: 1 })
    quota.release(held)
    assert.equal(quota.holds, false)
    assert.equal(quota.admit(14).kind, 'go')
  })

  it('what the server counts beyond this partition\'s own (other callers) is believed for a second, then one request asks', () => {
    const quota = new PartitionQuota(60_000)
    quota.admit(0)
    // Limit 2, none left with this one in progress: the other is someone else's.
    const held = quota.settle(inProgress(0), 200, 100).held
    assert.deepEqual(quota.admit(200), { kind: 'wait', until: 1_100, reason: 'quota' })
    quota.release(held)
    assert.equal(quota.admit(300).kind, 'go')
    assert.deepEqual(quota.admit(301), { kind: 'wait', until: 1_100, reason: 'quota' })
    // A second on, the answer on its way says whether theirs has ended: the rest wait for it.
    assert.deepEqual(quota.admit(1_100), { kind: 'response', reason: 'quota' })
    quota.release(quota.settle(inProgress(1), 200, 1_200).held)
    assert.equal(quota.admit(1_201).kind, 'go')
    assert.equal(quota.admit(1_201).kind, 'go')
    assert.deepEqual(quota.admit(1_202), { kind: 'response', reason: 'quota' })
  })

  it('beside a rate quota: each is kept by its own rule, and a wait for the rate wins over a wait for requests to end', () => {
    const quota = new PartitionQuota(60_000)
    quota.admit(0)
    const both = (inProgressLeft: number, rateLeft: number): Announcement => ({
      quotas: [{ name: 'exports', limit: 1, remaining: inProgressLeft, concurrent: true }, { name: 'hour', limit: 2, remaining: rateLeft, resetAfterMs: 5_000, windowMs: 3_600_000 }],
    })
    const held = quota.settle(both(0, 1), 200, 10).held
    assert.deepEqual(quota.admit(11), { kind: 'response', reason: 'quota' })
    quota.release(held)
    assert.equal(quota.admit(12).kind, 'go')
    quota.release(quota.settle(both(0, 0), 200, 20).held)
    assert.deepEqual(quota.admit(21), { kind: 'wait', until: 5_020, reason: 'quota' })
  })
})

describe('retry delays', () => {
  const options = { baseDelayMs: 100, maxDelayMs: 10_000 }

  it('full jitter on exponential back-off when the server gave no time', () => {
    assert.equal(retryDelayMs(1, undefined, undefined, options, () => 0.999), 99)
    assert.equal(retryDelayMs(3, undefined, undefined, options, () => 0.5), 200)
    assert.equal(retryDelayMs(20, undefined, undefined, options, () => 0.5), 5000)
    assert.equal(retryDelayMs(1, undefined, undefined, options, () => 0), 0)
  })

  it('never before the server\'s time, spread over the window after it', () => {
    assert.equal(retryDelayMs(1, 1000, undefined, options, () => 0), 1000)
    assert.equal(retryDelayMs(1, 1000, undefined, options, () => 0.5), 1500)
    assert.equal(retryDelayMs(1, 1000, 4000, options, () => 0.5), 3000)
    assert.equal(retryDelayMs(1, 60_000, 60_000, options, () => 1), 70_000)
  })
})
