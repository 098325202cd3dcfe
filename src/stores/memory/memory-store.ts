/**
 * The embedded default store: algorithm state in a bounded Map inside this
 * process. Every call reads, decides and writes synchronously, so concurrent
 * async callers can never interleave inside one decision.
 */
import { evaluate, NO_WAIT, step, type AlgorithmState, type Transition } from '../../algorithms/index.ts'
import { monotonicClock, type Clock } from '../../core/clock.ts'
import { ArgumentError, asError } from '../../core/errors.ts'
import { checkOptions } from '../../core/options.ts'
import type { PolicyDecision, ResolvedPolicy } from '../../core/types.ts'
import type { StoreCall, SyncStore } from '../store.ts'

export interface MemoryStoreOptions {
  /**
   * Most keys held at once (one per key and policy). When full, the least
   * recently used key is forgotten, which lets that key start afresh: size it
   * above the number of keys active within your longest window. Default 1,000,000.
   */
  maxKeys?: number
  /** Time source when the limiter has no clock of its own. Default: a monotonic wall clock. */
  clock?: Clock
}

/** A key's state, linked into the recency list (head = least recently used). */
interface Entry {
  key: string
  /** The namespace map (prefix, policy name, algorithm) that holds this entry. */
  space: Map<string, Entry>
  /** Undefined once expired: the entry then decides as a missing key until it is written again or swept. */
  state: AlgorithmState | undefined
  /** Epoch ms after which the state no longer matters (a missing key decides the same). */
  expiresAt: number
  /** Epoch ms until which a policy with `blockMs` refuses this key (0: not blocked); the entry is kept until then. */
  blockedUntil: number
  older: Entry | undefined
  newer: Entry | undefined
}

const MEMORY_STORE_OPTIONS = new Set(['maxKeys', 'clock'])

/** How many entries the sweeper inspects per new key. */
const SWEEP_STEPS = 2

export class MemoryStore implements SyncStore {
  readonly maxKeys: number
  private readonly clock: Clock
  /** One map per (prefix, policy name, algorithm), keyed by the caller's key as given: no per-call key building. */
  private readonly spaces = new Map<string, Map<string, Entry>>()
  /** The last namespace each policy object was used with, to skip even the namespace lookup. */
  private readonly spaceOf = new WeakMap<ResolvedPolicy, { prefix: string; space: Map<string, Entry> }>()
  private lastPolicy: ResolvedPolicy | undefined
  private lastPrefix = ''
  private lastSpace: Map<string, Entry> | undefined
  private count = 0
  private oldest: Entry | undefined
  private newest: Entry | undefined
  /**
   * The sweeper's position: it walks from oldest to newest, a few entries per
   * new key, deleting expired ones, so idle keys are reclaimed without timers.
   */
  private cursor: Entry | undefined

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
    this.clock = options.clock ?? monotonicClock
  }

  /** Number of keys held (expired ones not yet swept included). */
  get size(): number {
    return this.count
  }

  consumeSync(call: StoreCall): PolicyDecision[] {
    const now = call.now ?? this.clock()
    const { policies, key, cost } = call
    const options = call.maxWaitMs === 0 ? NO_WAIT : { maxWaitMs: call.maxWaitMs }
    if (policies.length === 1 && cost > 0 && (policies[0] as ResolvedPolicy).blockMs === undefined) {
      // The common case without the composite bookkeeping: same rule, commit iff allowed.
      const policy = policies[0] as ResolvedPolicy
      const space = this.space(call.prefix, policy)
      const entry = this.read(space, key, now)
      const transition = step(policy, entry?.state, now, cost, options)
      if (transition.decision.allowed) {
        this.write(space, key, entry, transition, now)
        if (entry === undefined) this.reclaim(now, 1)
      }
      return [transition.decision]
    }
    const spaces = policies.map((policy) => this.space(call.prefix, policy))
    const entries = spaces.map((space) => this.read(space, key, now))
    // Blocks are read only for limiters that have them: no array per call for the others.
    const blockedUntil = policies.some((policy) => policy.blockMs !== undefined) ? entries.map((entry) => entry?.blockedUntil) : undefined
    const { decisions, commit, blocks } = evaluate(policies, entries.map((entry) => entry?.state), now, cost, options, blockedUntil)
    let added = 0
    if (commit !== undefined) {
      for (let i = 0; i < commit.length; i++) {
        this.write(spaces[i] as Map<string, Entry>, key, entries[i], commit[i] as Transition<AlgorithmState>, now)
        if (entries[i] === undefined) added++
      }
    }
    if (blocks !== undefined) {
      for (let i = 0; i < blocks.length; i++) {
        const until = blocks[i]
        if (until === undefined) continue
        const entry = entries[i] ?? this.write(spaces[i] as Map<string, Entry>, key, undefined, { state: undefined, ttlMs: 0 }, now)
        entry.blockedUntil = until
        if (entries[i] === undefined) added++
      }
    }
    if (added > 0) this.reclaim(now, added)
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
      const entry = this.space(prefix, policy).get(key)
      if (entry !== undefined) this.remove(entry)
    }
  }

  reset(prefix: string, key: string, policies: readonly ResolvedPolicy[]): Promise<void> {
    this.resetSync(prefix, key, policies)
    return Promise.resolve()
  }

  /** Forgets every key. */
  clear(): void {
    for (const space of this.spaces.values()) space.clear()
    this.count = 0
    this.oldest = this.newest = this.cursor = undefined
  }

  private space(prefix: string, policy: ResolvedPolicy): Map<string, Entry> {
    // Most stores serve one limiter: the last namespace answers without a lookup.
    if (policy === this.lastPolicy && prefix === this.lastPrefix) return this.lastSpace as Map<string, Entry>
    const space = this.lookupSpace(prefix, policy)
    this.lastPolicy = policy
    this.lastPrefix = prefix
    this.lastSpace = space
    return space
  }

  private lookupSpace(prefix: string, policy: ResolvedPolicy): Map<string, Entry> {
    const cached = this.spaceOf.get(policy)
    if (cached !== undefined && cached.prefix === prefix) return cached.space
    // NUL cannot occur in a prefix or a policy name, so distinct triples never collide. The algorithm
    // is part of the namespace: a policy name that a new config gives another algorithm starts afresh
    // (as the Redis store reads another algorithm's state as none), not from a state of another shape.
    const name = `${prefix}\u0000${policy.name}\u0000${policy.algorithm}`
    let space = this.spaces.get(name)
    if (space === undefined) {
      space = new Map()
      this.spaces.set(name, space)
    }
    this.spaceOf.set(policy, { prefix, space })
    return space
  }

  private read(space: Map<string, Entry>, key: string, now: number): Entry | undefined {
    const entry = space.get(key)
    if (entry === undefined) return undefined
    // An expired state decides as a missing key. The entry stays, to be
    // overwritten by this call (a key back after its window costs no delete
    // and re-insert), else swept.
    if (entry.expiresAt <= now) entry.state = undefined
    // A refused key is touched too: the keys hammering hardest are the last ones to forget.
    this.touch(entry)
    return entry
  }

  private write(space: Map<string, Entry>, key: string, existing: Entry | undefined, transition: { state: AlgorithmState | undefined; ttlMs: number }, now: number): Entry {
    const expiresAt = now + transition.ttlMs
    if (existing !== undefined) {
      existing.state = transition.state
      existing.expiresAt = expiresAt
      return existing
    }
    const entry: Entry = { key, space, state: transition.state, expiresAt, blockedUntil: 0, older: this.newest, newer: undefined }
    if (this.newest === undefined) this.oldest = entry
    else this.newest.newer = entry
    this.newest = entry
    space.set(key, entry)
    this.count++
    return entry
  }

  /**
   * After a call added keys, once all its writes are done (an entry the call
   * holds, expired when read, must not be swept before it is overwritten):
   * sweep a few per key added, then forget the least recently used beyond maxKeys.
   */
  private reclaim(now: number, added: number): void {
    this.sweep(now, added * SWEEP_STEPS)
    while (this.count > this.maxKeys && this.oldest !== undefined) this.remove(this.oldest)
  }

  private sweep(now: number, steps: number): void {
    for (let i = 0; i < steps; i++) {
      const entry = this.cursor ?? this.oldest
      if (entry === undefined) return
      this.cursor = entry.newer
      if (entry.expiresAt <= now && entry.blockedUntil <= now) this.remove(entry)
    }
  }

  /** Moves the entry to the newest end of the recency list. */
  private touch(entry: Entry): void {
    if (entry === this.newest) return
    this.unlink(entry)
    entry.older = this.newest
    entry.newer = undefined
    if (this.newest === undefined) this.oldest = entry
    else this.newest.newer = entry
    this.newest = entry
  }

  private remove(entry: Entry): void {
    this.unlink(entry)
    if (entry.space.delete(entry.key)) this.count--
  }

  private unlink(entry: Entry): void {
    if (this.cursor === entry) this.cursor = entry.newer
    if (entry.older === undefined) this.oldest = entry.newer
    else entry.older.newer = entry.newer
    if (entry.newer === undefined) this.newest = entry.older
    else entry.newer.older = entry.older
    entry.older = entry.newer = undefined
  }
}
