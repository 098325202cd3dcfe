/**
 * The embedded default store: algorithm state in a bounded Map inside this
 * process. Every call reads, decides and writes synchronously, so concurrent
 * async callers can never interleave inside one decision.
 */
import { evaluate, NO_WAIT, type AlgorithmState, type Transition } from '../../algorithms/index.ts'
import { monotonicClock, type Clock } from '../../core/clock.ts'
import { ArgumentError } from '../../core/errors.ts'
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
  state: AlgorithmState
  /** Epoch ms after which the state no longer matters (a missing key decides the same). */
  expiresAt: number
  older: Entry | undefined
  newer: Entry | undefined
}

/** How many entries the sweeper inspects per new key. */
const SWEEP_STEPS = 2

export class MemoryStore implements SyncStore {
  readonly maxKeys: number
  private readonly clock: Clock
  private readonly entries = new Map<string, Entry>()
  private oldest: Entry | undefined
  private newest: Entry | undefined
  /**
   * The sweeper's position: it walks from oldest to newest, a few entries per
   * new key, deleting expired ones, so idle keys are reclaimed without timers.
   */
  private cursor: Entry | undefined

  constructor(options: MemoryStoreOptions = {}) {
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
    return this.entries.size
  }

  consumeSync(call: StoreCall): PolicyDecision[] {
    const now = call.now ?? this.clock()
    const { policies } = call
    const options = call.maxWaitMs === 0 ? NO_WAIT : { maxWaitMs: call.maxWaitMs }
    const keys = policies.map((policy) => entryKey(call.prefix, policy.name, call.key))
    const states = keys.map((key) => this.read(key, now))
    const { decisions, commit } = evaluate(policies, states, now, call.cost, options)
    if (commit !== undefined) {
      for (let i = 0; i < commit.length; i++) this.write(keys[i] as string, commit[i] as Transition<AlgorithmState>, now)
    }
    return decisions
  }

  consume(call: StoreCall): Promise<PolicyDecision[]> {
    try {
      return Promise.resolve(this.consumeSync(call))
    } catch (error) {
      return Promise.reject(error instanceof Error ? error : new Error(String(error)))
    }
  }

  resetSync(prefix: string, key: string, policies: readonly ResolvedPolicy[]): void {
    for (const policy of policies) {
      const entry = this.entries.get(entryKey(prefix, policy.name, key))
      if (entry !== undefined) this.remove(entry)
    }
  }

  reset(prefix: string, key: string, policies: readonly ResolvedPolicy[]): Promise<void> {
    this.resetSync(prefix, key, policies)
    return Promise.resolve()
  }

  /** Forgets every key. */
  clear(): void {
    this.entries.clear()
    this.oldest = this.newest = this.cursor = undefined
  }

  private read(key: string, now: number): AlgorithmState | undefined {
    const entry = this.entries.get(key)
    if (entry === undefined) return undefined
    if (entry.expiresAt <= now) {
      this.remove(entry)
      return undefined
    }
    // A refused key is touched too: the keys hammering hardest are the last ones to forget.
    this.touch(entry)
    return entry.state
  }

  private write(key: string, transition: Transition<AlgorithmState>, now: number): void {
    const expiresAt = now + transition.ttlMs
    const existing = this.entries.get(key)
    if (existing !== undefined) {
      existing.state = transition.state
      existing.expiresAt = expiresAt
      return
    }
    const entry: Entry = { key, state: transition.state, expiresAt, older: this.newest, newer: undefined }
    if (this.newest === undefined) this.oldest = entry
    else this.newest.newer = entry
    this.newest = entry
    this.entries.set(key, entry)
    this.sweep(now)
    if (this.entries.size > this.maxKeys && this.oldest !== undefined) this.remove(this.oldest)
  }

  private sweep(now: number): void {
    for (let i = 0; i < SWEEP_STEPS; i++) {
      const entry = this.cursor ?? this.oldest
      if (entry === undefined) return
      this.cursor = entry.newer
      if (entry.expiresAt <= now) this.remove(entry)
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
    this.entries.delete(entry.key)
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

/** NUL cannot occur in a prefix or a policy name, so distinct triples never collide. */
function entryKey(prefix: string, policy: string, key: string): string {
  return `${prefix}\u0000${policy}\u0000${key}`
}
