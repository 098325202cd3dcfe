/**
 * Guards every call to a store that can fail (Redis): a timeout no decision
 * outlives, and a circuit that stops calling a broken store, probes it in the
 * background, lets calls try the store again when the probe answers (the
 * first that fails opens it again), and counts the store back when one of
 * them succeeds. Nothing here keeps a timer beyond one call, and no caller
 * ever waits on a probe.
 */
import type { Clock } from '../core/clock.ts'

/** Why a decision could not come from the store. */
export type FailureReason = 'timeout' | 'store-error' | 'circuit-open'

export type Outcome<T> = { ok: true; value: T } | { ok: false; reason: FailureReason; error?: unknown }

export interface CircuitOptions {
  /** Consecutive failures that open the circuit. Default 3. */
  failures?: number
  /** While open, how often a background probe tries the store. Default 1000 ms. */
  probeIntervalMs?: number
}

export class Circuit {
  private consecutiveFailures = 0
  /** Epoch ms until which the store is not called; 0 while closed. */
  private openUntil = 0
  private probing = false
  /** Opened since the store last answered: the next answer is a recovery. */
  private recovering = false
  private readonly failureLimit: number
  private readonly probeIntervalMs: number

  constructor(
    private readonly timeoutMs: number,
    options: CircuitOptions,
    private readonly clock: Clock,
    /** Checks the store (cheaply); resolves when it answers. */
    private readonly probe: () => Promise<unknown>,
    /**
     * Called once each time the store answers a call again after the circuit
     * opened: not when a probe answers, since a store can answer a probe (a
     * PING) and still refuse every call (a Redis refusing writes).
     */
    private readonly onRecovery: () => void,
  ) {
    this.failureLimit = options.failures ?? 3
    this.probeIntervalMs = options.probeIntervalMs ?? 1000
  }

  get isOpen(): boolean {
    return this.openUntil !== 0
  }

  async run<T>(operation: () => Promise<T>): Promise<Outcome<T>> {
    if (this.openUntil !== 0) {
      if (this.clock() >= this.openUntil) this.startProbe()
      return { ok: false, reason: 'circuit-open' }
    }
    const outcome = await withTimeout(operation, this.timeoutMs)
    if (outcome.ok) {
      this.consecutiveFailures = 0
      if (this.recovering) {
        this.recovering = false
        this.onRecovery()
      }
    } else if (++this.consecutiveFailures >= this.failureLimit) this.open()
    return outcome
  }

  private open(): void {
    this.openUntil = this.clock() + this.probeIntervalMs
    this.recovering = true
  }

  /** One probe at a time, in the background: the call that triggered it does not wait. */
  private startProbe(): void {
    if (this.probing) return
    this.probing = true
    void withTimeout(this.probe, this.timeoutMs).then((outcome) => {
      this.probing = false
      if (!outcome.ok) {
        this.open()
        return
      }
      // Half open: calls go to the store again, and the first that fails opens the circuit again.
      this.openUntil = 0
      this.consecutiveFailures = this.failureLimit - 1
    })
  }
}

/**
 * Runs `operation`, giving up after `timeoutMs`. A late answer or a late
 * failure is swallowed: it can neither decide nor surface as an unhandled
 * rejection. The timer is cleared as soon as either side settles.
 */
export function withTimeout<T>(operation: () => Promise<T>, timeoutMs: number): Promise<Outcome<T>> {
  return new Promise((resolve) => {
    let settled = false
    const timer = setTimeout(() => {
      settled = true
      resolve({ ok: false, reason: 'timeout' })
    }, timeoutMs)
    let pending: Promise<T>
    try {
      pending = operation()
    } catch (error) {
      pending = Promise.reject(error)
    }
    pending.then(
      (value) => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        resolve({ ok: true, value })
      },
      (error: unknown) => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        resolve({ ok: false, reason: 'store-error', error })
      },
    )
  })
}
