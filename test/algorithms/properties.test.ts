import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import fc from 'fast-check'
import { fcOptions } from '../helpers.ts'
import { algorithms, combine, RESERVABLE, resolvePolicy, type Policy, type ResolvedPolicy } from '../../src/index.ts'

const policyArb: fc.Arbitrary<Policy> = fc.oneof(
  fc.record({
    algorithm: fc.constantFrom('fixed-window' as const, 'sliding-log' as const, 'sliding-window' as const),
    limit: fc.integer({ min: 1, max: 30 }),
    windowMs: fc.integer({ min: 1, max: 2000 }),
  }),
  fc.record({
    algorithm: fc.constant('token-bucket' as const),
    capacity: fc.integer({ min: 1, max: 30 }),
    refillTokens: fc.integer({ min: 1, max: 10 }),
    refillIntervalMs: fc.integer({ min: 1, max: 2000 }),
    refill: fc.constantFrom('greedy' as const, 'interval' as const),
  }),
  fc.record({
    algorithm: fc.constant('leaky-bucket' as const),
    capacity: fc.integer({ min: 1, max: 30 }),
    leakTokens: fc.integer({ min: 1, max: 10 }),
    leakIntervalMs: fc.integer({ min: 1, max: 2000 }),
    mode: fc.constantFrom('police' as const, 'shape' as const),
  }),
)

const traceArb = fc.array(
  fc.record({ gap: fc.integer({ min: 0, max: 700 }), cost: fc.integer({ min: 1, max: 30 }), wait: fc.integer({ min: 0, max: 3000 }) }),
  // Long traces: fast-check's default size bias would keep most of them under ten calls.
  { minLength: 1, maxLength: 120, size: 'max' },
)

interface Admission { at: number; effectiveAt: number; cost: number }

/** How long the policy takes to forget a full count: a window, or a bucket's time to refill or drain from capacity. */
function emptiesIn(policy: ResolvedPolicy): number {
  if (policy.algorithm === 'token-bucket') return Math.ceil(policy.capacity / policy.refillTokens) * policy.refillIntervalMs
  if (policy.algorithm === 'leaky-bucket') return Math.ceil((policy.capacity * policy.leakIntervalMs) / policy.leakTokens)
  return policy.windowMs
}

interface Replayed { admitted: Admission[]; state: algorithms.AlgorithmState | undefined; t: number }

/**
 * Replays a trace through the pure step, checking per-call invariants; returns the admissions.
 * `from`: the state and time to go on from (a state another policy of the same algorithm left).
 */
function replay(policy: ResolvedPolicy, trace: Array<{ gap: number; cost: number; wait: number }>, from?: Replayed): Admission[] {
  return replayFrom(policy, trace, from).admitted
}

function replayFrom(policy: ResolvedPolicy, trace: Array<{ gap: number; cost: number; wait: number }>, from?: Replayed, maxMs = Number.MAX_SAFE_INTEGER): Replayed {
  const limit = 'limit' in policy ? policy.limit : policy.capacity
  const canReserve = RESERVABLE.has(policy.algorithm)
  let state = from?.state
  let t = from?.t ?? 1_000_000
  const admitted: Admission[] = []
  for (const call of trace) {
    t += call.gap
    const cost = Math.min(call.cost, limit)
    const options = { maxWaitMs: canReserve ? call.wait : 0 }
    const { decision: d, state: next, ttlMs } = algorithms.step(policy, state, t, cost, options)
    for (const field of ['remaining', 'retryAfterMs', 'waitMs', 'resetAfterMs'] as const) {
      assert.ok(Number.isSafeInteger(d[field]) && d[field] >= 0, `${field} = ${d[field]}`)
    }
    for (const field of ['retryAfterMs', 'waitMs', 'resetAfterMs'] as const) assert.ok(d[field] <= maxMs, `${field} = ${d[field]} > ${maxMs}`)
    if (d.allowed) {
      assert.equal(d.retryAfterMs, 0)
      const shapeUncapped = policy.algorithm === 'leaky-bucket' && policy.mode === 'shape' && options.maxWaitMs === 0
      if (!shapeUncapped) assert.ok(d.waitMs <= options.maxWaitMs, `waitMs ${d.waitMs} > maxWaitMs ${options.maxWaitMs}`)
      // After ttlMs, the stored state decides exactly as a missing key would.
      const later = t + ttlMs
      assert.deepEqual(algorithms.step(policy, next, later, 1, algorithms.NO_WAIT).decision, algorithms.step(policy, undefined, later, 1, algorithms.NO_WAIT).decision)
      // moreAfterMs (what the reset header fields carry): with none left, when a call of cost 1 could pass,
      // exactly (a fixed window reserved ahead says its reset); with units left, the reset.
      const more = algorithms.step(policy, next, t, d.remaining + 1, algorithms.NO_WAIT).decision
      assert.equal(more.allowed, false, 'more than remaining does not fit now')
      const bucket = policy.algorithm.endsWith('bucket')
      if (!bucket && (d.remaining > 0 || d.waitMs > 0)) assert.ok(d.moreAfterMs === d.resetAfterMs && d.moreAfterMs >= more.retryAfterMs)
      else assert.equal(d.moreAfterMs, more.retryAfterMs, `a unit more than ${d.remaining}`)
      admitted.push({ at: t, effectiveAt: t + d.waitMs, cost })
      state = next
    } else {
      assert.ok(d.retryAfterMs > 0 && d.waitMs === 0)
      const more = algorithms.step(policy, state, t, d.remaining + 1, algorithms.NO_WAIT).decision
      if (!policy.algorithm.endsWith('bucket') && (d.remaining > 0 || policy.algorithm === 'fixed-window')) assert.ok(d.moreAfterMs >= more.retryAfterMs)
      else assert.equal(d.moreAfterMs, more.retryAfterMs, `refused: a unit more than ${d.remaining}`)
      // retryAfterMs is exact: refused 1 ms earlier, allowed at that moment.
      const retry = t + d.retryAfterMs
      assert.equal(algorithms.step(policy, state, retry, cost, options).decision.allowed, true, `not allowed at retry time ${retry}`)
      assert.equal(algorithms.step(policy, state, retry - 1, cost, options).decision.allowed, false, `already allowed before retry time`)
    }
  }
  return { admitted, state, t }
}

/** Largest summed cost of admissions whose time lies in any span [a, a + spanMs). */
function busiest(admitted: Admission[], spanMs: number, time: (a: Admission) => number): number {
  const sorted = [...admitted].sort((a, b) => time(a) - time(b))
  let best = 0
  for (let i = 0; i < sorted.length; i++) {
    let sum = 0
    for (let j = i; j < sorted.length && time(sorted[j] as Admission) < time(sorted[i] as Admission) + spanMs; j++) sum += (sorted[j] as Admission).cost
    best = Math.max(best, sum)
  }
  return best
}

describe('properties on random traces', () => {
  it('remaining never negative, retryAfterMs exact, reservations within maxWaitMs, state expires cleanly', () => {
    fc.assert(fc.property(policyArb, traceArb, (input, trace) => { replay(resolvePolicy(input), trace) }), fcOptions(400))
  })

  it('never admits more in a window than the algorithm allows', () => {
    fc.assert(
      fc.property(policyArb, traceArb, (input, trace) => {
        const policy = resolvePolicy(input)
        const admitted = replay(policy, trace)
        switch (policy.algorithm) {
          case 'fixed-window': {
            const perWindow = new Map<number, number>()
            for (const a of admitted) {
              const w = Math.floor(a.effectiveAt / policy.windowMs)
              perWindow.set(w, (perWindow.get(w) ?? 0) + a.cost)
            }
            for (const used of perWindow.values()) assert.ok(used <= policy.limit)
            break
          }
          case 'sliding-log':
            assert.ok(busiest(admitted, policy.windowMs, (a) => a.at) <= policy.limit)
            break
          case 'sliding-window':
            assert.ok(busiest(admitted, policy.windowMs, (a) => a.at) < 2 * policy.limit)
            break
          case 'token-bucket':
          case 'leaky-bucket': {
            const [tokens, interval] = policy.algorithm === 'token-bucket'
              ? [policy.refillTokens, policy.refillIntervalMs]
              : [policy.leakTokens, policy.leakIntervalMs]
            // In any span of length L at most capacity + the refill of L (plus one batch for interval
            // refill). Waits are whole milliseconds, so reserved calls can start up to 1 ms after their
            // tokens accrued: the refill of a span of L, not L - 1, bounds them.
            for (const span of [1, interval, 3 * interval + 7]) {
              const batch = 'refill' in policy && policy.refill === 'interval' ? tokens : 0
              const bound = policy.capacity + Math.floor((span * tokens) / interval) + batch
              assert.ok(busiest(admitted, span, (a) => a.effectiveAt) <= bound, `span ${span}`)
            }
            break
          }
        }
      }),
      fcOptions(400),
    )
  })

  it('a policy whose numbers a new config changes (same name, same algorithm) goes on from its state with every invariant kept', () => {
    // Windows read a stored window start onto the new grid; buckets read their level at the new rate.
    const changed = fc.tuple(policyArb, policyArb).filter(([a, b]) => a.algorithm === b.algorithm)
    fc.assert(
      fc.property(changed, traceArb, traceArb, (inputs, before, after) => {
        const [old, next] = inputs.map((input) => resolvePolicy(input)) as [ResolvedPolicy, ResolvedPolicy]
        // No wait longer than the longest reservation plus what each policy takes to empty, twice over.
        const bound = 3000 + 2 * (emptiesIn(old) + emptiesIn(next))
        replayFrom(next, after, replayFrom(old, before), bound)
      }),
      fcOptions(400),
    )
  })

  it('a composite call decides as its policies would alone: allowed only where all allow; a refusal names one that refused, with its retry time', () => {
    fc.assert(
      fc.property(fc.array(policyArb, { minLength: 2, maxLength: 3 }), traceArb, (inputs, trace) => {
        const policies = inputs.map((input, i) => resolvePolicy({ ...input, name: `p${i}` }))
        const capacity = Math.min(...policies.map((p) => ('limit' in p ? p.limit : p.capacity)))
        const canReserve = policies.every((p) => RESERVABLE.has(p.algorithm))
        let states: Array<algorithms.AlgorithmState | undefined> = policies.map(() => undefined)
        let t = 1_000_000
        for (const call of trace) {
          t += call.gap
          const cost = Math.min(call.cost, capacity)
          const options = { maxWaitMs: canReserve ? call.wait : 0 }
          const own = policies.map((policy, i) => algorithms.step(policy, states[i], t, cost, options))
          const { decisions, commit } = algorithms.evaluate(policies, states, t, cost, options)
          assert.deepEqual(decisions.map((d) => d.allowed), own.map((o) => o.decision.allowed))
          if (commit !== undefined) {
            states = commit.map((transition) => transition.state)
          } else {
            const refusals = own.filter((o) => !o.decision.allowed).map((o) => o.decision)
            const decision = combine(decisions)
            assert.ok(refusals.some((r) => r.policy === decision.policy), `binding ${decision.policy} did not refuse`)
            assert.equal(decision.retryAfterMs, Math.max(...refusals.map((r) => r.retryAfterMs)))
          }
        }
      }),
      fcOptions(300),
    )
  })

  it('blockMs: nothing passes a policy between its refusal and the end of its block; the block ends on time; outside blocks it decides as without one', () => {
    fc.assert(
      fc.property(fc.array(policyArb, { minLength: 1, maxLength: 3 }), fc.array(fc.integer({ min: 1, max: 3000 }), { minLength: 3, maxLength: 3 }), traceArb, (inputs, blockLengths, trace) => {
        const policies = inputs.map((input, i) => resolvePolicy(input.algorithm === 'leaky-bucket' && input.mode === 'shape' ? { ...input, name: `p${i}` } : { ...input, name: `p${i}`, blockMs: blockLengths[i] }))
        const capacity = Math.min(...policies.map((p) => ('limit' in p ? p.limit : p.capacity)))
        let states: Array<algorithms.AlgorithmState | undefined> = policies.map(() => undefined)
        const blocked: Array<number | undefined> = policies.map(() => undefined)
        let t = 1_000_000
        for (const call of trace) {
          t += call.gap
          const cost = Math.min(call.cost, capacity)
          const { decisions, commit, blocks } = algorithms.evaluate(policies, states, t, cost, algorithms.NO_WAIT, blocked)
          decisions.forEach((decision, i) => {
            const until = blocked[i] ?? 0
            if (until > t) {
              assert.equal(decision.allowed, false, `p${i} allowed at ${t}, blocked until ${until}`)
              assert.equal(decision.retryAfterMs, until - t)
              assert.equal(decision.remaining, 0)
            } else if (!decision.allowed && policies[i]?.blockMs !== undefined) {
              // Its own refusal: blocked from now for blockMs, said in the decision.
              assert.equal(blocks?.[i], t + (policies[i]?.blockMs as number))
              assert.ok(decision.retryAfterMs >= (policies[i]?.blockMs as number))
            } else {
              // Not blocked: exactly what the algorithm alone says.
              const own = algorithms.evaluate([policies[i] as ResolvedPolicy], [states[i]], t, cost, algorithms.NO_WAIT).decisions[0]
              assert.equal(decision.allowed, own?.allowed, `p${i} at ${t}`)
            }
          })
          assert.equal(commit !== undefined, decisions.every((decision) => decision.allowed))
          if (commit !== undefined) states = commit.map((transition) => transition.state)
          blocks?.forEach((until, i) => { if (until !== undefined) blocked[i] = until })
        }
      }),
      fcOptions(300),
    )
  })
})
