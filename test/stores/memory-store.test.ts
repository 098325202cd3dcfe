import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { Limiter, MemoryStore, type Policy } from '../../src/index.ts'

const oneBySecond: Policy = { algorithm: 'fixed-window', limit: 1, windowMs: 1000 }

describe('MemoryStore', () => {
  it('never holds more than maxKeys: 2,000,000 distinct keys through maxKeys 100,000', () => {
    const store = new MemoryStore({ maxKeys: 100_000 })
    const limiter = new Limiter({ policies: { algorithm: 'token-bucket', capacity: 5, refillTokens: 1, refillIntervalMs: 60_000 }, store, clock: () => 1_000_000 })
    let largest = 0
    for (let i = 0; i < 2_000_000; i++) {
      limiter.limitSync(`client-${i}`)
      if (store.size > largest) largest = store.size
    }
    assert.equal(largest, 100_000)
  })

  it('evicts the least recently used key first; a refused key counts as used', () => {
    const store = new MemoryStore({ maxKeys: 3 })
    const limiter = new Limiter({ policies: oneBySecond, store, clock: () => 0 })
    for (const key of ['a', 'b', 'c']) limiter.limitSync(key)
    assert.equal(limiter.limitSync('a').allowed, false) // touches a: b is now the oldest
    limiter.limitSync('d') // evicts b
    assert.equal(store.size, 3)
    assert.equal(limiter.limitSync('a').allowed, false, 'a is still remembered')
    assert.equal(limiter.limitSync('c').allowed, false, 'c is still remembered')
    assert.equal(limiter.limitSync('b').allowed, true, 'b was forgotten')
  })

  it('drops expired state: an idle key decides as new, and the sweeper reclaims idle keys', () => {
    let now = 0
    const store = new MemoryStore()
    const limiter = new Limiter({ policies: oneBySecond, store, clock: () => now })
    for (let i = 0; i < 1000; i++) limiter.limitSync(`idle-${i}`)
    assert.equal(store.size, 1000)
    now = 10_000 // all 1000 windows are over
    for (let i = 0; i < 1000; i++) limiter.limitSync(`fresh-${i}`)
    assert.ok(store.size < 1100, `expired keys were swept as new keys arrived (size ${store.size})`)
  })


  it('a call that finds a key expired charges it anew, even when the same call adds a key and sweeps', () => {
    let now = 0
    const store = new MemoryStore()
    const perSecond: Policy = { algorithm: 'fixed-window', limit: 3, windowMs: 1000, name: 'second' }
    const perMinute: Policy = { algorithm: 'fixed-window', limit: 100, windowMs: 60_000, name: 'minute' }
    const alone = new Limiter({ policies: perSecond, store, clock: () => now })
    // Same prefix and policy name: both limiters keep "second" in one place.
    const both = new Limiter({ policies: [perMinute, perSecond], store, clock: () => now })
    alone.limitSync('k')
    now = 5000 // "second" has expired; "minute" is new, and adding it runs the sweeper
    assert.equal(both.limitSync('k').allowed, true)
    assert.equal(alone.peekSync('k').remaining, 2, 'the call was counted in "second"')
    assert.equal(store.size, 2)
  })
  it('uses an injected clock when the limiter has none', () => {
    let now = 0
    const store = new MemoryStore({ clock: () => now })
    const limiter = new Limiter({ policies: oneBySecond, store })
    assert.equal(limiter.limitSync('k').allowed, true)
    assert.equal(limiter.limitSync('k').allowed, false)
    now = 1000
    assert.equal(limiter.limitSync('k').allowed, true)
  })

  it('refuses bad options with a clear error', () => {
    assert.throws(() => new MemoryStore({ maxKeys: 0 }), /maxKeys must be a positive integer \(got 0\)/)
    assert.throws(() => new MemoryStore({ clock: 5 as never }), /clock must be a function/)
    assert.throws(() => new MemoryStore({ max: 5 } as never), /max is not a MemoryStore option \(known: maxKeys, clock\)/)
    assert.throws(() => new MemoryStore(null as never), /options must be an object/)
  })

  it('a limiter refuses a store too small for one key of its: with one entry per policy, it would evict its own state and never refuse', () => {
    const policies: Policy[] = [{ ...oneBySecond, name: 'a' }, { ...oneBySecond, name: 'b' }, { ...oneBySecond, name: 'c' }]
    assert.throws(() => new Limiter({ policies, store: new MemoryStore({ maxKeys: 2 }) }), /^ArgumentError: store\.maxKeys is below the 3 entries each key takes here \(one per policy\).*\(got 2\)$/)
    assert.throws(() => new Limiter({ policies, store: new MemoryStore(), fallbackStore: new MemoryStore({ maxKeys: 1 }) }), /^ArgumentError: fallbackStore\.maxKeys is below the 3 entries/)
    const limiter = new Limiter({ policies, store: new MemoryStore({ maxKeys: 3 }), clock: () => 0 })
    assert.equal(limiter.limitSync('k').allowed, true)
    assert.equal(limiter.limitSync('k').allowed, false, 'three entries fit: the key is remembered')
  })
})
