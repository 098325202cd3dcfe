/**
 * The client as an undici interceptor: one request waits for its turn, is
 * dispatched, and when refused is dispatched again after its delay, its
 * refused responses never reaching the caller's handler. The caller sees one
 * controller for the whole life of the request, whatever the attempts.
 */
import type { Dispatcher } from 'undici'
import type { HeaderLookup } from './headers.ts'
import type { Trip } from './client.ts'
import type { Held, RequestCost } from './quota.ts'
import { asError } from '../core/errors.ts'
import { sleep } from './sleep.ts'

/** A partition as the interceptor sees it: a request it sent came to nothing, or a response it handed on ended. */
export interface Settles {
  abandon(cost: RequestCost): void
  release(held: Held | undefined): void
}

/** What the client lends the interceptor: the two halves of a trip. */
export interface TripSteps<P extends Settles> {
  depart(trip: Trip): Promise<P>
  arrive(trip: Trip, partition: P, status: number, header: HeaderLookup): number | undefined
}

/** The controller the caller holds: forwards to the current attempt's, and cancels a wait. */
class StableController implements Dispatcher.DispatchController {
  target: Dispatcher.DispatchController | undefined
  private wasPaused = false
  private abortReason: Error | null = null
  readonly waiting = new AbortController()

  get aborted(): boolean {
    return this.abortReason !== null || (this.target?.aborted ?? false)
  }

  get paused(): boolean {
    return this.wasPaused
  }

  get reason(): Error | null {
    return this.abortReason ?? this.target?.reason ?? null
  }

  abort(reason: Error): void {
    this.abortReason = reason
    this.waiting.abort(reason)
    this.target?.abort(reason)
  }

  pause(): void {
    this.wasPaused = true
    this.target?.pause()
  }

  resume(): void {
    this.wasPaused = false
    this.target?.resume()
  }

  attach(target: Dispatcher.DispatchController): void {
    this.target = target
    if (this.abortReason !== null) target.abort(this.abortReason)
    else if (this.wasPaused) target.pause()
  }
}

export class InterceptedRequest<P extends Settles> {
  private readonly controller = new StableController()
  private finished = false

  constructor(
    private readonly dispatch: Dispatcher.Dispatch,
    private readonly options: Dispatcher.DispatchOptions,
    private readonly handler: Dispatcher.DispatchHandler,
    private readonly steps: TripSteps<P>,
  ) {}

  start(plan: (signal: AbortSignal) => Trip): void {
    // The caller's abort (its signal, or a timeout) reaches us through this controller, even while waiting.
    this.handler.onRequestStart?.(this.controller, {})
    let trip: Trip
    try {
      trip = plan(this.controller.waiting.signal)
    } catch (error) {
      this.fail(error)
      return
    }
    void this.attempt(trip)
  }

  private async attempt(trip: Trip): Promise<void> {
    let partition: P
    try {
      partition = await this.steps.depart(trip)
    } catch (error) {
      this.fail(error)
      return
    }
    let settled = false
    let retryInMs: number | undefined
    const forward = this.handler
    const stable = this.controller
    const attemptHandler: Dispatcher.DispatchHandler = {
      onRequestStart: (controller) => stable.attach(controller),
      onRequestUpgrade: (_controller, statusCode, headers, socket) => forward.onRequestUpgrade?.(stable, statusCode, headers, socket),
      onResponseStart: (_controller, statusCode, headers, statusMessage) => {
        settled = true
        retryInMs = this.steps.arrive(trip, partition, statusCode, (name) => {
          const value = headers[name]
          return Array.isArray(value) ? value.join(', ') : value
        })
        if (retryInMs === undefined) forward.onResponseStart?.(stable, statusCode, headers, statusMessage)
      },
      onResponseData: (_controller, chunk) => {
        if (retryInMs === undefined) forward.onResponseData?.(stable, chunk)
      },
      onResponseEnd: (_controller, trailers) => {
        partition.release(trip.held)
        if (retryInMs === undefined) {
          this.finished = true
          forward.onResponseEnd?.(stable, trailers)
          return
        }
        // The refused response has been read to its end (its connection is free): wait, then go again.
        sleep(retryInMs, trip.signal).then(() => this.attempt(trip), (error: unknown) => this.fail(error))
      },
      onResponseError: (_controller, error) => {
        if (!settled) partition.abandon(trip.cost)
        else partition.release(trip.held)
        this.fail(error)
      },
    }
    try {
      this.dispatch(this.options, attemptHandler)
    } catch (error) {
      partition.abandon(trip.cost)
      this.fail(error)
    }
  }

  private fail(error: unknown): void {
    if (this.finished) return
    this.finished = true
    this.handler.onResponseError?.(this.controller, asError(error))
  }
}
