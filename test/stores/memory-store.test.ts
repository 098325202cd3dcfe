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

  it('a flood of new keys under one policy forgets its own kind, not another policy\'s state', () => {
    const store = new MemoryStore({ maxKeys: 1000 })
    const clock = () => 0
    const daily = new Limiter({ policies: { algorithm: 'fixed-window', limit: 3, windowMs: 86_400_000, name: 'day' }, store, clock, prefix: 'tenant' })
    const login = new Limiter({ policies: { algorithm: 'fixed-window', limit: 5, windowMs: 900_000, name: 'login', blockMs: 3_600_000 }, store, clock, prefix: 'login' })
    const perIp = new Limiter({ policies: { algorithm: 'fixed-window', limit: 100, windowMs: 60_000, name: 'ip' }, store, clock, prefix: 'ip' })
    for (let i = 0; i < 3; i++) daily.limitSync('acme')
    for (let i = 0; i < 6; i++) login.limitSync('alice') // the sixth is refused and blocks alice for an hour
    for (let i = 0; i < 20; i++) daily.limitSync(`tenant-${i}`)
    assert.equal(daily.limitSync('acme').allowed, false)
    assert.equal(login.limitSync('alice').allowed, false)
    // An attacker rotating addresses: ten times the store's size in new per-IP keys, acme and alice not called meanwhile.
    for (let i = 0; i < 10_000; i++) perIp.limitSync(`2001:db8:${i.toString(16)}::/56`)
    assert.ok(store.size <= 1000, `size ${store.size}`)
    assert.equal(daily.limitSync('acme').allowed, false, 'the day\'s quota is still spent')
    assert.equal(login.limitSync('alice').allowed, false, 'the block still holds')
    assert.equal(daily.peekSync('tenant-0').remaining, 2, 'the other tenants are still counted')
    // Within the flooded policy, the least recently used went first.
    assert.equal(perIp.peekSync('2001:db8:0::/56').remaining, 100, 'the first flooded key was forgotten')
    assert.equal(perIp.peekSync('2001:db8:270f::/56').remaining, 99, 'the last is remembered')
  })

  it('once the policy that flooded is no larger than the others, each gives up its least recently used', () => {
    const store = new MemoryStore({ maxKeys: 10 })
    const clock = () => 0
    const a = new Limiter({ policies: { ...oneBySecond, name: 'a' }, store, clock })
    const b = new Limiter({ policies: { ...oneBySecond, name: 'b' }, store, clock })
    for (let i = 0; i < 5; i++) a.limitSync(`a${i}`)
    for (let i = 0; i < 5; i++) b.limitSync(`b${i}`)
    b.limitSync('b5') // b holds 6: its oldest, b0, goes
    assert.equal(store.size, 10)
    assert.equal(b.peekSync('b0').remaining, 1)
    assert.equal(a.peekSync('a4').remaining, 0, 'a kept all five')
    a.limitSync('a5') // a and b both hold 5 before it: a now holds 6, and gives up a0
    assert.equal(a.peekSync('a0').remaining, 1)
    assert.equal(b.peekSync('b1').remaining, 0)
    assert.equal(store.size, 10)
  })

  it('never holds more than maxKeys across several policies, a limiter with two of them among them', () => {
    const store = new MemoryStore({ maxKeys: 5000 })
    const clock = () => 0
    const limiters = [
      new Limiter({ policies: [{ ...oneBySecond, name: 'x' }, { algorithm: 'token-bucket', capacity: 5, refillTokens: 1, refillIntervalMs: 60_000, name: 'y' }], store, clock }),
      new Limiter({ policies: { ...oneBySecond, name: 'z' }, store, clock }),
      new Limiter({ policies: { algorithm: 'sliding-log', limit: 3, windowMs: 60_000, name: 'w' }, store, clock }),
    ]
    let largest = 0
    for (let i = 0; i < 60_000; i++) {
      ;(limiters[i % 7 === 0 ? 0 : i % 2 === 0 ? 1 : 2] as Limiter).limitSync(`k${i}`)
      largest = Math.max(largest, store.size)
    }
    assert.equal(largest, 5000)
    // The last key of each is remembered whole (both policies of the first limiter).
    assert.equal((limiters[0] as Limiter).peekSync('k59997').remaining, 0)
    assert.equal((limiters[1] as Limiter).peekSync('k59998').remaining, 0)
    assert.equal((limiters[2] as Limiter).peekSync('k59999').remaining, 2)
  })

  it('reclaims the expired keys of a policy no longer called, and forgets policies left with no keys', () => {
    let now = 0
    const store = new MemoryStore()
    // How many policies the store holds is not public; heap figures would be too coarse to see it.
    const spaces = () => (store as unknown as { spaces: Map<string, unknown> }).spaces.size
    const old = new Limiter({ policies: { ...oneBySecond, name: 'old' }, store, clock: () => now })
    for (let i = 0; i < 1000; i++) old.limitSync(`idle-${i}`)
    now = 10_000
    const current = new Limiter({ policies: { ...oneBySecond, name: 'current' }, store, clock: () => now })
    for (let i = 0; i < 2500; i++) current.limitSync(`fresh-${i}`)
    assert.equal(store.size, 2500, 'the old policy\'s 1000 expired keys were swept')
    // A policy name per call (a server naming a new policy in each response, read by a client): each key
    // expires after a second, and neither the keys nor the names pile up.
    for (let i = 0; i < 20_000; i++) {
      now += 10
      new Limiter({ policies: { ...oneBySecond, name: `p${i}` }, store, clock: () => now }).limitSync('k')
      if (i % 2 === 0) void current.peekSync(`never-${i}`)
    }
    assert.ok(store.size < 2700, `size ${store.size}`)
    assert.ok(spaces() < 700, `${spaces()} policies held`)
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

  it('refuses what its injected clock gives that is not epoch milliseconds, as the limiter does: a refusal with no numbers was the answer', async () => {
    for (const clock of [() => Number.NaN, () => 'now', async () => 1000, () => Promise.reject(new Error('time server down'))]) {
      const limiter = new Limiter({ policies: oneBySecond, store: new MemoryStore({ clock: clock as never }) })
      assert.throws(() => limiter.limitSync('k'), /^ArgumentError: clock\(\) must return epoch milliseconds: a number from 0 to 253402300799999/, String(clock))
    }
    await new Promise((resolve) => setImmediate(resolve))
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
