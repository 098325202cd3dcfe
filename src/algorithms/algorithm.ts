/**
 * The contract every algorithm file implements. An algorithm is a pure
 * state-transition function: no I/O, no clock reads, no globals. The Redis Lua
 * scripts mirror these functions line for line, so every quantity is an
 * integer (milliseconds, units scaled to integers) and every division is
 * floored or ceiled explicitly: the two languages then agree bit for bit.
 */
import type { PolicyDecision, ResolvedPolicyOf, AlgorithmName } from '../core/types.ts'

export interface AlgorithmOptions {
  /** How long an allowed call may be told to wait (reservations); 0 = no waiting. */
  maxWaitMs: number
}

export const NO_WAIT: AlgorithmOptions = Object.freeze({ maxWaitMs: 0 })

export interface Transition<S> {
  decision: PolicyDecision
  /** The state to store if the call is committed (allowed with a cost above 0). */
  state: S
  /** How long the stored state matters; after it a missing key decides the same way. */
  ttlMs: number
}

export type AlgorithmFn<A extends AlgorithmName, S> = (
  state: S | undefined,
  now: number,
  cost: number,
  policy: ResolvedPolicyOf<A>,
  options: AlgorithmOptions,
) => Transition<S>

/** Integer ceiling of a / b for non-negative integers a and positive b. */
export function ceilDiv(a: number, b: number): number {
  return Math.ceil(a / b)
}
