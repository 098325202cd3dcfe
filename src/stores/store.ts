/**
 * The store contract. A store persists algorithm state atomically and nothing
 * else: it runs the one composite step (`evaluate` in algorithms/, or its Lua
 * mirror) over the call's policies, and writes all their states or none.
 */
import type { PolicyDecision, ResolvedPolicy } from '../core/types.ts'

export interface StoreCall {
  /** Key namespace of the limiter (its `prefix`). */
  prefix: string
  /** The caller's key (user id, IP, API key, ...). */
  key: string
  policies: readonly ResolvedPolicy[]
  /**
   * Each policy's own key, in policy order, where the call spans several keys
   * (a user's limit and a global one, decided together); undefined: `key` for
   * every policy.
   */
  keys?: readonly string[]
  /** Units to charge; 0 is a peek and changes nothing. */
  cost: number
  /** How long an allowed call may be told to wait; 0 = no reservation. */
  maxWaitMs: number
  /** "Now" from an injected clock; undefined lets the store use its own time source. */
  now: number | undefined
}

export interface Store {
  /** One decision per policy, in policy order, decided and written atomically. */
  consume(call: StoreCall): Promise<PolicyDecision[]>
  /** Forgets the key's state in every given policy. */
  reset(prefix: string, key: string, policies: readonly ResolvedPolicy[]): Promise<void>
  /** Resolves when the store answers; used to probe a store that has been failing. */
  ping?(): Promise<void>
  /**
   * True when the store decides a call's `keys` together, atomically, whatever
   * they are. A store that does not say is not trusted to: calls with `keys` are
   * refused there, unless `spanOf` says they can go together.
   */
  readonly spansKeys?: boolean
  /**
   * Where only some keys can be decided together (a Redis Cluster: a script
   * touches one hash slot), what a key must share with the others of its call:
   * keys for which it returns the same string are decided together, atomically.
   */
  spanOf?(key: string): string
}

/** Whether one call of the store can decide these keys together. */
export function spans(store: Store, keys: readonly string[]): boolean {
  if (store.spansKeys === true) return true
  if (store.spanOf === undefined) return false
  const span = store.spanOf(keys[0] as string)
  for (let i = 1; i < keys.length; i++) if (store.spanOf(keys[i] as string) !== span) return false
  return true
}

/** A store that can decide without a promise (in-process stores). */
export interface SyncStore extends Store {
  consumeSync(call: StoreCall): PolicyDecision[]
  resetSync(prefix: string, key: string, policies: readonly ResolvedPolicy[]): void
}

export function isSyncStore(store: Store): store is SyncStore {
  return typeof (store as Partial<SyncStore>).consumeSync === 'function'
}

const DECISION_NUMBERS = ['limit', 'remaining', 'resetAfterMs', 'moreAfterMs', 'retryAfterMs', 'waitMs'] as const

/**
 * What is wrong with a store's answer to a call of `policies` policies (to
 * follow "its answer"): not one decision per policy, or a decision without
 * its verdict and numbers. Undefined for a well-formed answer. sluice's own
 * stores are not asked: a store of the caller's making is, so that a wrong
 * answer fails as that store's error rather than as a TypeError from deep
 * inside, or as a decision made of undefined.
 */
export function answerProblem(answer: unknown, policies: number): string | undefined {
  if (!Array.isArray(answer)) return `is not a list of decisions (${answer === null ? 'null' : typeof answer})`
  if (answer.length !== policies) return `has ${answer.length} decisions for a call of ${policies} policies`
  for (let i = 0; i < answer.length; i++) {
    const decision = answer[i] as Partial<Record<string, unknown>> | null
    if (typeof decision !== 'object' || decision === null) return `has decision ${i} that is not an object`
    if (typeof decision.allowed !== 'boolean') return `has decision ${i} whose allowed is not true or false`
    const field = DECISION_NUMBERS.find((name) => typeof decision[name] !== 'number' || !((decision[name] as number) >= 0))
    if (field !== undefined) return `has decision ${i} whose ${field} is not a number of 0 or more`
  }
  return undefined
}
