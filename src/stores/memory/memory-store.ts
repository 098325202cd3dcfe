/**
 * The embedded default store: algorithm state in a bounded Map inside this
 * process. Every call reads, decides and writes synchronously, so concurrent
 * async callers can never interleave inside one decision.
 */
import { evaluate, NO_WAIT, step, type AlgorithmState, type Transition } from '../../algorithms/index.ts'
import { monotonicClock, readClock, type Clock } from '../../core/clock.ts'
import { ArgumentError, asError } from '../../core/errors.ts'
import { checkOptions } from '../../core/options.ts'
import type { PolicyDecision, ResolvedPolicy } from '../../core/types.ts'
import type { StoreCall, SyncStore } from '../store.ts'

export interface MemoryStoreOptions {
  /**
   * Most keys held at once (one per key and policy). When full, the least
   * recently used key of the policy holding the most keys is forgotten, which
   * lets that key start afresh: size it above the number of keys active within
   * your longest window. Default 1,000,000.
   */
  maxKeys?: number
  /** Time source when the limiter has no clock of its own. Default: a monotonic wall clock. */
  clock?: Clock
}

/** A key's state, linked into its space's recency list (oldest = least recently used). */
interface Entry {
  key: string
  /** The namespace (prefix, policy name, algorithm) that holds this entry. */
  space: Space
  /** Undefined once expired: the entry then decides as a missing key until it is written again or swept. */
  state: AlgorithmState | undefined
  /** Epoch ms after which the state no longer matters (a missing key decides the same). */
  expiresAt: number
  /** Epoch ms until which a policy with `blockMs` refuses this key (0: not blocked); the entry is kept until then. */
  blockedUntil: number
  older: Entry | undefined
  newer: Entry | undefined
}

/**
 * The keys of one (prefix, policy name, algorithm), with their own recency
 * list: when the store is full it forgets from the space holding the most
 * keys, so a flood of new keys under one policy (an attacker rotating
 * addresses) pushes out its own kind, not another policy's state (a day's
 * quota, a login block, requests in progress).
 */
class Space {
  readonly entries = new Map<string, Entry>()
  oldest: Entry | undefined = undefined
  newest: Entry | undefined = undefined
  /** The sweeper's position: it walks from oldest to newest, deleting expired entries. */
  cursor: Entry | undefined = undefined
  /** Position in the store's list of spaces; -1 while not in it (new, or dropped once empty). */
  index = -1

  constructor(readonly name: string) {}
}

const MEMORY_STORE_OPTIONS = new Set(['maxKeys', 'clock'])

/** How many entries the sweeper inspects, in the space that gained it, per new key. */
const SWEEP_STEPS = 2
/** How many spaces the store compares, when full, to find the largest. */
const LARGEST_SAMPLE = 64

export class MemoryStore implements SyncStore {
  readonly maxKeys: number
  /** A call's `keys` are decided in one synchronous step. */
  readonly spansKeys = true
  private readonly clock: Clock
  /**
   * One space per (prefix, policy name, algorithm) that holds keys, by name; its
   * map is keyed by the caller's key as given: no per-call key building.
   */
  private readonly spaces = new Map<string, Space>()
  /**
   * The same spaces in a list that a second sweeper walks, one space per new
   * key: it reclaims expired keys of policies no longer called, and drops
   * spaces left empty, so policy names that keep changing (a client's servers
   * name them) do not pile up.
   */
  private readonly spaceList: Space[] = []
  private nextVisit = 0
  /** The space with the most keys when last looked for, or inserted into since with more. */
  private largest: Space | undefined
  /** The last namespace each policy object was used with, to skip even the namespace lookup. */
  private readonly spaceOf = new WeakMap<ResolvedPolicy, { prefix: string; space: Space }>()
  private lastPolicy: ResolvedPolicy | undefined
  private lastPrefix = ''
  private lastSpace: Space | undefined
  private count = 0

  constructor(options: MemoryStoreOptions = {}) {
    checkOptions('options', 'a MemoryStore option', options, MEMORY_STORE_OPTIONS)
    const maxKeys = options.maxKeys ?? 1_000_000
    if (!Number.isSafeInteger(maxKeys) || maxKeys < 1) {
      throw new ArgumentError('maxKeys', options.maxKeys, 'must be a positive integer')
    }
    if (options.clock !== undefined && typeof options.clock !== 'function') {
      throw new ArgumentError('clock', options.clock, 'must be a function returning epoch milliseconds')
    }
    this.maxKeys = maxKeys
    const clock = options.clock
    this.clock = clock === undefined ? monotonicClock : () => readClock(clock)
  }

  /** Number of keys held (expired ones not yet swept included). */
  get size(): number {
    return this.count
  }

  consumeSync(call: StoreCall): PolicyDecision[] {
    const now = call.now ?? this.clock()
    const { policies, cost, keys } = call
    const options = call.maxWaitMs === 0 ? NO_WAIT : { maxWaitMs: call.maxWaitMs }
    if (policies.length === 1 && cost > 0 && (policies[0] as ResolvedPolicy).blockMs === undefined) {
      // The common case without the composite bookkeeping: same rule, commit iff allowed.
      const policy = policies[0] as ResolvedPolicy
      const key = keys === undefined ? call.key : keys[0] as string
      const space = this.space(call.prefix, policy)
      const entry = this.read(space, key, now)
      const transition = step(policy, entry?.state, now, cost, options)
      if (transition.decision.allowed) {
        this.write(space, key, entry, transition, now)
        if (entry === undefined) {
          this.sweep(space, now, SWEEP_STEPS)
          this.reclaim(now)
        }
      }
      return [transition.decision]
    }
    const keyOf = (i: number): string => (keys === undefined ? call.key : keys[i] as string)
    const spaces = policies.map((policy) => this.space(call.prefix, policy))
    const entries = spaces.map((space, i) => this.read(space, keyOf(i), now))
    // Blocks are read only for limiters that have them: no array per call for the others.
    const blockedUntil = policies.some((policy) => policy.blockMs !== undefined) ? entries.map((entry) => entry?.blockedUntil) : undefined
    const { decisions, commit, blocks } = evaluate(policies, entries.map((entry) => entry?.state), now, cost, options, blockedUntil)
    // The spaces that gained a key: swept, and the store trimmed, once every write of the call is done
    // (an entry the call holds, expired when read, must not be swept before it is overwritten).
    let gained: Space[] | undefined
    if (commit !== undefined) {
      for (let i = 0; i < commit.length; i++) {
        this.write(spaces[i] as Space, keyOf(i), entries[i], commit[i] as Transition<AlgorithmState>, now)
        if (entries[i] === undefined) (gained ??= []).push(spaces[i] as Space)
      }
    }
    if (blocks !== undefined) {
      for (let i = 0; i < blocks.length; i++) {
        const until = blocks[i]
        if (until === undefined) continue
        const entry = entries[i] ?? this.write(spaces[i] as Space, keyOf(i), undefined, { state: undefined, ttlMs: 0 }, now)
        entry.blockedUntil = until
        if (entries[i] === undefined) (gained ??= []).push(spaces[i] as Space)
      }
    }
    if (gained !== undefined) {
      for (const space of gained) this.sweep(space, now, SWEEP_STEPS)
      this.reclaim(now)
    }
    return decisions
  }

  consume(call: StoreCall): Promise<PolicyDecision[]> {
    try {
      return Promise.resolve(this.consumeSync(call))
    } catch (error) {
      return Promise.reject(asError(error))
    }
  }

  resetSync(prefix: string, key: string, policies: readonly ResolvedPolicy[]): void {
    for (const policy of policies) {
      const entry = this.space(prefix, policy).entries.get(key)
      if (entry !== undefined) this.remove(entry)
    }
  }

  reset(prefix: string, key: string, policies: readonly ResolvedPolicy[]): Promise<void> {
    this.resetSync(prefix, key, policies)
    return Promise.resolve()
  }

  /** Forgets every key. */
  clear(): void {
    for (const space of this.spaceList) {
      space.entries.clear()
      space.oldest = space.newest = space.cursor = undefined
      space.index = -1
    }
    this.spaces.clear()
    this.spaceList.length = 0
    this.largest = undefined
    this.count = 0
  }

  private space(prefix: string, policy: ResolvedPolicy): Space {
    // Most stores serve one limiter: the last namespace answers without a lookup, while it is still the store's.
    const last = this.lastSpace
    if (policy === this.lastPolicy && prefix === this.lastPrefix && last !== undefined && last.index !== -1) return last
    const space = this.lookupSpace(prefix, policy)
    this.lastPolicy = policy
    this.lastPrefix = prefix
    this.lastSpace = space
    return space
  }

  /**
   * The space of (prefix, policy): the store's, or a new one that joins the
   * store with its first key (a call that only reads leaves nothing behind).
   */
  private lookupSpace(prefix: string, policy: ResolvedPolicy): Space {
    const cached = this.spaceOf.get(policy)
    if (cached !== undefined && cached.prefix === prefix && cached.space.index !== -1) return cached.space
    // NUL cannot occur in a prefix or a policy name, so distinct triples never collide. The algorithm
    // is part of the namespace: a policy name that a new config gives another algorithm starts afresh
    // (as the Redis store reads another algorithm's state as none), not from a state of another shape.
    const name = `${prefix}\u0000${policy.name}\u0000${policy.algorithm}`
    const space = this.spaces.get(name) ?? new Space(name)
    this.spaceOf.set(policy, { prefix, space })
    return space
  }

  private read(space: Space, key: string, now: number): Entry | undefined {
    const entry = space.entries.get(key)
    if (entry === undefined) return undefined
    // An expired state decides as a missing key. The entry stays, to be
    // overwritten by this call (a key back after its window costs no delete
    // and re-insert), else swept.
    if (entry.expiresAt <= now) entry.state = undefined
    // A refused key is touched too: the keys hammering hardest are the last ones to forget.
    this.touch(entry)
    return entry
  }

  private write(space: Space, key: string, existing: Entry | undefined, transition: { state: AlgorithmState | undefined; ttlMs: number }, now: number): Entry {
    const expiresAt = now + transition.ttlMs
    if (existing !== undefined) {
      existing.state = transition.state
      existing.expiresAt = expiresAt
      return existing
    }
    if (space.index === -1) this.join(space)
    const entry: Entry = { key, space, state: transition.state, expiresAt, blockedUntil: 0, older: space.newest, newer: undefined }
    if (space.newest === undefined) space.oldest = entry
    else space.newest.newer = entry
    space.newest = entry
    space.entries.set(key, entry)
    this.count++
    if (this.largest === undefined || space.entries.size > this.largest.entries.size) this.largest = space
    return entry
  }

  /**
   * After a call added keys, once all its writes are done: a few steps of the
   * sweeper across spaces, then forget beyond maxKeys, the least recently used
   * key of the largest space first.
   */
  private reclaim(now: number): void {
    this.visitNextSpaces(now)
    while (this.count > this.maxKeys) {
      const victim = this.findLargest()
      if (victim?.oldest === undefined) return
      this.remove(victim.oldest)
    }
  }

  /**
   * The largest of: the space last found largest (or one that outgrew it
   * since), and up to LARGEST_SAMPLE spaces from the sweeper's place (every
   * space, in a store with fewer). Sweeps shrink spaces without telling, so it
   * looks again each time.
   */
  private findLargest(): Space | undefined {
    const list = this.spaceList
    let largest = this.largest !== undefined && this.largest.index !== -1 ? this.largest : undefined
    const sample = Math.min(list.length, LARGEST_SAMPLE)
    for (let i = 0; i < sample; i++) {
      const space = list[(this.nextVisit + i) % list.length] as Space
      if (largest === undefined || space.entries.size > largest.entries.size) largest = space
    }
    // Nothing held in the sample: the keys are elsewhere.
    if (largest !== undefined && largest.entries.size === 0) {
      for (const space of list) if (space.entries.size > largest.entries.size) largest = space
    }
    this.largest = largest
    return largest
  }

  private join(space: Space): void {
    space.index = this.spaceList.length
    this.spaceList.push(space)
    this.spaces.set(space.name, space)
  }

  /**
   * Sweeps one entry in each of the next SWEEP_STEPS spaces in turn, dropping
   * those left with no keys. A drop takes no step: each space is dropped once,
   * so the cost stays constant per key added, and spaces cannot pile up faster
   * than the sweeper goes.
   */
  private visitNextSpaces(now: number): void {
    const list = this.spaceList
    for (let steps = SWEEP_STEPS; steps > 0 && list.length > 0;) {
      if (this.nextVisit >= list.length) this.nextVisit = 0
      const space = list[this.nextVisit] as Space
      this.sweep(space, now, 1)
      if (space.entries.size > 0) {
        this.nextVisit++
        steps--
        continue
      }
      // The last space moves into its place, and is visited next.
      const last = list.pop() as Space
      if (last !== space) {
        list[space.index] = last
        last.index = space.index
      }
      space.index = -1
      space.oldest = space.newest = space.cursor = undefined
      this.spaces.delete(space.name)
      if (this.largest === space) this.largest = undefined
    }
  }

  private sweep(space: Space, now: number, steps: number): void {
    for (let i = 0; i < steps; i++) {
      const entry = space.cursor ?? space.oldest
      if (entry === undefined) return
      space.cursor = entry.newer
      if (entry.expiresAt <= now && entry.blockedUntil <= now) this.remove(entry)
    }
  }

  /** Moves the entry to the newest end of its space's recency list. */
  private touch(entry: Entry): void {
    const space = entry.space
    if (entry === space.newest) return
    this.unlink(entry)
    entry.older = space.newest
    entry.newer = undefined
    if (space.newest === undefined) space.oldest = entry
    else space.newest.newer = entry
    space.newest = entry
  }

  private remove(entry: Entry): void {
    this.unlink(entry)
    if (entry.space.entries.delete(entry.key)) this.count--
  }

  private unlink(entry: Entry): void {
    const space = entry.space
    if (space.cursor === entry) space.cursor = entry.newer
    if (entry.older === undefined) space.oldest = entry.newer
    else entry.older.newer = entry.newer
    if (entry.newer === undefined) space.newest = entry.older
    else entry.newer.older = entry.older
    entry.older = entry.newer = undefined
  }
}
