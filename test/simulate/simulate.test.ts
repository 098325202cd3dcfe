import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { defaultPolicies } from '../../src/simulate/command.ts'
import { simulate } from '../../src/simulate/simulate.ts'
import { parseCsv, pattern, PATTERNS, TrafficError, type Traffic } from '../../src/simulate/traffic.ts'

const LIMIT = 100
const WINDOW = 60_000

describe('simulator', () => {
  it('draws a pattern of 1.5 million events against a large limit, and refuses one that would exhaust memory, naming the largest limit it takes', () => {
    // push(...events) with a window of 285,000 arrivals overflowed the call stack.
    assert.equal(pattern('morning-ramp', { limit: 100_000, windowMs: 60_000 }).events.length, 1_501_928)
    assert.throws(() => pattern('attack', { limit: 1_000_000, windowMs: 60_000 }),
      /^SluiceError: the attack pattern at a limit of 1000000 makes about 110,000,000 events, more than the 5,000,000 a simulation replays; use a limit of at most 45454 for it$/)
  })

  it('boundary burst: the fixed window admits 2x the limit in one window\'s span, the sliding log exactly the limit', () => {
    const simulation = simulate(pattern('boundary-burst', { limit: LIMIT, windowMs: WINDOW }), defaultPolicies(LIMIT, WINDOW))
    const byName = new Map(simulation.results.map((result) => [result.policy.name, result]))
    assert.equal(byName.get('fixed-window')?.worstWindow.admitted, 2 * LIMIT)
    assert.equal(byName.get('sliding-log')?.worstWindow.admitted, LIMIT)
    assert.equal(byName.get('sliding-log')?.rejectedFraction, 0.5)
    // The counter errs a little; the buckets admit their capacity plus what refills during the burst.
    const counter = byName.get('sliding-window')?.worstWindow.admitted as number
    assert.ok(counter > LIMIT && counter < 1.1 * LIMIT, `sliding window: ${counter}`)
  })

  it('the counter\'s false allows and denies match a brute-force comparison with the exact rule', () => {
    for (const name of PATTERNS) {
      const traffic = pattern(name, { limit: 20, windowMs: 10_000 })
      const [result] = simulate(traffic, { algorithm: 'sliding-window', limit: 20, windowMs: 10_000 }).results
      assert.ok(result?.counterError !== undefined)
      // For every decision, count by brute force what the same key had admitted in (t - window, t].
      let falseAllows = 0
      let falseDenies = 0
      traffic.events.forEach((event, i) => {
        let used = 0
        for (let j = 0; j < i; j++) {
          const earlier = traffic.events[j]!
          if (earlier.key === event.key && result.decisions[j] && earlier.at > event.at - 10_000) used += earlier.cost
        }
        const exact = used + event.cost <= 20
        if (result.decisions[i] && !exact) falseAllows++
        if (!result.decisions[i] && exact) falseDenies++
      })
      assert.deepEqual(result.counterError, { falseAllows, falseDenies, decisions: traffic.events.length }, name)
    }
  })

  it('the worst window is the brute-force maximum over every window of the policy\'s length', () => {
    const traffic = pattern('batch-spikes', { limit: 30, windowMs: 5_000 })
    for (const result of simulate(traffic, defaultPolicies(30, 5_000)).results) {
      let best = 0
      const admitted = traffic.events.filter((_, i) => result.decisions[i])
      for (const start of admitted) {
        const inside = admitted.filter((e) => e.key === start.key && e.at >= start.at && e.at < start.at + result.windowMs)
        best = Math.max(best, inside.reduce((sum, e) => sum + e.cost, 0))
      }
      assert.equal(result.worstWindow.admitted, best, result.policy.name)
    }
  })

  it('timelines add up: offered and admitted per bucket sum to the totals', () => {
    const simulation = simulate(pattern('attack', { limit: 50, windowMs: 10_000 }), defaultPolicies(50, 10_000))
    for (const result of simulation.results) {
      assert.equal(result.timeline.offered.reduce((a, b) => a + b, 0), result.offered)
      assert.equal(result.timeline.admitted.reduce((a, b) => a + b, 0), result.admitted)
    }
    // Users at half the limit are never refused; the attacker is.
    const traffic = pattern('attack', { limit: 50, windowMs: 10_000 })
    const [log] = simulate(traffic, { algorithm: 'sliding-log', limit: 50, windowMs: 10_000 }).results
    traffic.events.forEach((event, i) => {
      if (event.key.startsWith('user-')) assert.equal(log?.decisions[i], true, `${event.key} at ${event.at}`)
    })
  })

  it('a shaping leaky bucket delays instead of refusing, and its admissions are counted when they leave', () => {
    const traffic: Traffic = { name: 't', description: '', durationMs: 10_000, events: Array.from({ length: 5 }, () => ({ at: 0, key: 'k', cost: 1 })) }
    const [result] = simulate(traffic, { algorithm: 'leaky-bucket', mode: 'shape', capacity: 10, leakTokens: 1, leakIntervalMs: 1000 }, { bucketMs: 1000 }).results
    assert.equal(result?.admitted, 5)
    assert.deepEqual(result?.timeline.admitted.slice(0, 5), [1, 1, 1, 1, 1])
    assert.equal(result?.delayedMs, 0 + 1000 + 2000 + 3000 + 4000)
  })
})

describe('CSV traffic', () => {
  it('reads ms and ISO timestamps, keys and costs, with a header and comments', () => {
    const traffic = parseCsv('timestamp,key,cost\n# a comment\n1700000000000,alice\n1700000000500,bob,3\n2023-11-14T22:13:21Z,alice\n')
    assert.deepEqual(traffic.events, [
      { at: 0, key: 'alice', cost: 1 },
      { at: 500, key: 'bob', cost: 3 },
      { at: 1000, key: 'alice', cost: 1 },
    ])
  })

  it('reads 10-digit numbers as epoch seconds (date +%s, nginx $msec), says so, and reads them as ms under timeUnit ms', () => {
    const text = '# exported from nginx\ntime,client\n1700000000.123,alice\n1700000001.5,bob\n1700000002,alice\n1700000002.0009,bob\n'
    const seconds = parseCsv(text, 'access.csv')
    assert.deepEqual(seconds.events.map((e) => e.at), [0, 1377, 1877, 1877])
    assert.match(seconds.description, /numeric timestamps read as epoch seconds \(--time-unit ms reads them as milliseconds\)/)
    const ms = parseCsv(text, 'access.csv', 'ms')
    assert.deepEqual(ms.events.map((e) => e.at), [0, 1, 2, 2])
    assert.doesNotMatch(ms.description, /seconds/)
    assert.deepEqual(parseCsv('1700000000000,a\n1700000000100,a\n', 'x', 's').events.length, 2)
    // Epoch ms and relative ms stay ms; sub-millisecond digits are dropped (the engine's clock counts whole ms).
    assert.deepEqual(parseCsv('1700000000000,a\n1700000000100.9,a\n').events.map((e) => e.at), [0, 100])
    assert.deepEqual(parseCsv('0,a\n0.5,a\n1.25,a\n999999999,a\n').events.map((e) => e.at), [0, 0, 1, 999999999])
    for (const event of parseCsv('0.75,a\n3.999,a\n').events) assert.ok(Number.isSafeInteger(event.at), String(event.at))
  })

  it('reads 16- and 19-digit numbers as epoch micro- and nanoseconds, and any numbers so under timeUnit us or ns', () => {
    // One second of traffic: as milliseconds it would be a quarter of an hour (micro) or eleven days (nano).
    const micro = parseCsv('1700000000000000,a\n1700000000250999,b\n1700000001000000,a\n', 'envoy.csv')
    assert.deepEqual(micro.events.map((e) => e.at), [0, 250, 1000])
    assert.match(micro.description, /numeric timestamps read as epoch microseconds \(--time-unit ms reads them as milliseconds\)/)
    const nano = parseCsv('1700000000000000000,a\n1700000000250999999,b\n1700000001000000000,a\n')
    assert.deepEqual(nano.events.map((e) => e.at), [0, 250, 1000])
    assert.match(nano.description, /epoch nanoseconds/)
    // Relative ones, given the unit; digits below a millisecond are cut, not rounded.
    assert.deepEqual(parseCsv('0,a\n999,a\n1000,a\n2500000,a\n', 'x', 'us').events.map((e) => e.at), [0, 0, 1, 2500])
    assert.deepEqual(parseCsv('0,a\n999999,a\n1000000,a\n', 'x', 'ns').events.map((e) => e.at), [0, 0, 1])
    assert.doesNotMatch(parseCsv('0,a\n', 'x', 'us').description, /epoch/)
    // Epoch milliseconds stay milliseconds.
    assert.deepEqual(parseCsv('1700000000000,a\n1700000000250,a\n').events.map((e) => e.at), [0, 250])
  })

  it('refuses a number too large for its unit (beyond 2^53 ms) rather than reading it rounded', () => {
    assert.throws(() => parseCsv('1,a\n99999999999999999999,a\n'), /line 2: timestamp 99999999999999999999 is too large for milliseconds \(more than 2\^53 ms\); give the unit with --time-unit \(ms, s, us, ns\)$/m)
    assert.throws(() => parseCsv('100000000000000000000,a\n'), /line 1: timestamp 100000000000000000000 is too large for milliseconds/)
    assert.throws(() => parseCsv('1700000000000000000,a\n', 'x', 'ms'), /too large for milliseconds/)
    assert.throws(() => parseCsv('9007199254740992,a\n', 'x', 's'), /too large for seconds/)
  })

  it('rejects malformed lines, every one with its line number', () => {
    const text = ['ts,key', '100,a', 'yesterday,b', '200', '300,c,0', '50,d', '400,e,1,extra', '500,f'].join('\n')
    assert.throws(() => parseCsv(text), (error: unknown) => {
      assert.ok(error instanceof TrafficError)
      assert.equal(error.code, 'ERR_SLUICE_TRAFFIC')
      assert.deepEqual(error.problems.map((p) => p.line), [3, 4, 5, 6, 7])
      assert.match(error.message, /^line 3: timestamp "yesterday" is neither a number \(milliseconds or epoch seconds\) nor an ISO 8601 date$/m)
      assert.match(error.message, /^line 4: expected "timestamp,key" or "timestamp,key,cost", got 1 field\(s\)$/m)
      assert.match(error.message, /^line 5: cost must be a positive integer, got "0"$/m)
      assert.match(error.message, /^line 6: timestamp 50 is earlier than the line before; sort the file by time$/m)
      return true
    })
    assert.throws(() => parseCsv('# nothing\n'), /no events/)
    // Nanoseconds read as milliseconds: a span no recording has, and past the simulated clock's end.
    assert.throws(() => parseCsv('0,a\n1000,a\n9007199254740991,a\n'), /line 3: timestamp 9007199254740991 is more than 100 years after the first line's; are the timestamps in micro- or nanoseconds\? Say so with --time-unit us or ns$/)
  })
})
