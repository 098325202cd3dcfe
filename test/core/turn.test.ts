/**
 * Work done in slices lets the requests in between two: one slice per turn of
 * the event loop, however many pieces of work are in slices at once.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { letIoIn } from '../../src/core/turn.ts'

describe('letIoIn', () => {
  it('lets one slice go per turn of the loop, in turns, when several pieces of work are sliced at once', async () => {
    let turn = 0
    let counting = true
    const count = () => {
      turn++
      if (counting) setImmediate(count)
    }
    setImmediate(count)
    const ran: Array<{ work: number; turn: number }> = []
    const work = async (id: number) => {
      for (let slice = 0; slice < 5; slice++) {
        await letIoIn()
        ran.push({ work: id, turn })
      }
    }
    try {
      await Promise.all([work(0), work(1), work(2)])
    } finally {
      counting = false
    }
    assert.equal(ran.length, 15)
    // Each slice in a turn of its own, the three pieces of work taking turns.
    for (let i = 1; i < ran.length; i++) assert.ok((ran[i]?.turn ?? 0) > (ran[i - 1]?.turn ?? 0), `slices ${i - 1} and ${i} ran in turn ${ran[i]?.turn}`)
    assert.deepEqual(ran.slice(0, 6).map((slice) => slice.work), [0, 1, 2, 0, 1, 2])
  })
})
