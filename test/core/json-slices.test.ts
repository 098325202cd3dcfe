/**
 * The gateway's /status JSON, written a slice at a time: the same text as
 * `JSON.stringify(value, null, 2)`, with the event loop let go between slices.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import fc from 'fast-check'
import { prettyJsonSlices } from '../../src/core/json-slices.ts'
import { turnsOfEventLoopDuring } from '../helpers.ts'

async function written(value: unknown, depth?: number, valuesPerSlice?: number): Promise<{ text: string; slices: number }> {
  let text = ''
  let slices = 0
  for await (const slice of prettyJsonSlices(value, depth, valuesPerSlice)) {
    text += slice
    slices++
  }
  return { text, slices }
}

/** What JSON leaves out or spells its own way, at every level a container may be written entry by entry. */
const awkward = {
  text: 'quote " backslash \\ newline \n tab \t ünïcödé ✓ \u2028 \u0000',
  numbers: [0, -0, 1e21, 1e-7, 0.1 + 0.2, Number.NaN, Number.POSITIVE_INFINITY, -1],
  left: { out: undefined, fn: () => 1, symbol: Symbol('s'), kept: true },
  holes: [undefined, () => 1, Symbol('s'), null],
  empty: { array: [], object: {}, nested: [[], {}, [[]]] },
  onlyLeftOut: { out: undefined },
  date: new Date(Date.UTC(2026, 10, 28, 4, 48)),
  keyed: { toJSON: (key: string) => `given key ${key}` },
  inArray: [{ toJSON: (key: string) => ({ key }) }],
  boxed: [new Number(3), new String('s'), new Boolean(false)],
  map: new Map([['a', 1]]),
  deep: { a: { b: { c: { d: [1, { e: 2 }] } } } },
  'key "quoted"\n': 1,
}

describe('prettyJsonSlices', () => {
  it('writes JSON.stringify(value, null, 2), byte for byte, at every depth and slice size', async () => {
    for (const depth of [0, 1, 2, 3, 6]) {
      for (const valuesPerSlice of [1, 2, 1_000]) {
        assert.equal((await written(awkward, depth, valuesPerSlice)).text, JSON.stringify(awkward, null, 2), `depth ${depth}, ${valuesPerSlice} a slice`)
      }
    }
    for (const top of [undefined, null, 1, 'text', [], {}, [undefined], new Date(0), { toJSON: () => undefined }]) {
      assert.equal((await written(top)).text, JSON.stringify(top, null, 2) ?? '', `top-level ${String(top)}`)
    }
  })

  it('agrees with JSON.stringify on random values', async () => {
    await fc.assert(fc.asyncProperty(fc.jsonValue(), fc.integer({ min: 0, max: 4 }), fc.integer({ min: 1, max: 5 }), async (value, depth, valuesPerSlice) => {
      assert.equal((await written(value, depth, valuesPerSlice)).text, JSON.stringify(value, null, 2))
    }), { numRuns: 300 })
  })

  it('fails as JSON.stringify does on a cycle or a BigInt', async () => {
    const cyclic: Record<string, unknown> = { name: 'loop' }
    cyclic.self = { back: cyclic }
    await assert.rejects(written(cyclic, 1), TypeError)
    await assert.rejects(written({ count: 10n }), TypeError)
  })

  it('lets the event loop turn between slices of a large value', async () => {
    // As /status has them: a list of routes, and a key's quota under thousands of policies.
    const status = {
      routes: Array.from({ length: 5_000 }, (_, i) => ({ name: `r${i}`, limits: [{ name: `l${i}`, capacity: 100 }] })),
      watched: { 'ip:127.0.0.1': Object.fromEntries(Array.from({ length: 5_000 }, (_, i) => [`l${i}`, { limit: 100, remaining: 99 }])) },
    }
    const { result, turns } = await turnsOfEventLoopDuring(() => written(status, 3, 1_000))
    assert.equal(result.text, JSON.stringify(status, null, 2))
    assert.equal(result.slices, 16, '10,000 route fields and 5,000 quotas, 1,000 a slice, and the rest')
    assert.ok(turns >= 15, `the loop turned ${turns} times while they were written in 16 slices`)
  })
})
