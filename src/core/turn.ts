/**
 * Resolves once the event loop has polled for I/O again: work done in slices
 * awaits it between two, so that the requests arriving meanwhile are served.
 * One `setImmediate` is not enough when the work runs in an I/O callback (a
 * request, a worker's message): immediates set there run before the loop
 * polls again, so two slices would run back to back.
 *
 * Several pieces of work in slices at once (two scrapers, a /status read
 * during a reload) take turns: one slice is let go per poll, the first to
 * wait first, rather than each of them once per poll, which would hold the
 * requests for a slice of each.
 */
export function letIoIn(): Promise<void> {
  return new Promise((resolve) => {
    waiting.push(resolve)
    if (waiting.length === 1) afterNextPoll(letNextIn)
  })
}

const waiting: Array<() => void> = []

function afterNextPoll(then: () => void): void {
  setImmediate(() => setImmediate(then))
}

function letNextIn(): void {
  waiting.shift()?.()
  if (waiting.length > 0) afterNextPoll(letNextIn)
}

/** Items of a long list (routes, rules) worked through between two pauses: a few milliseconds of work. */
export const ITEMS_PER_SLICE = 250

/** `items.map(map)`, letting I/O in after every `perSlice` items: for lists of thousands whose items each take some work. */
export async function mapInSlices<T, R>(items: readonly T[], map: (item: T, index: number) => R, perSlice = ITEMS_PER_SLICE): Promise<R[]> {
  const mapped: R[] = []
  for (const [index, item] of items.entries()) {
    mapped.push(map(item, index))
    if ((index + 1) % perSlice === 0) await letIoIn()
  }
  return mapped
}

/** A builder that pauses (`yield`) after each slice of its work (see buildPipeline), run to its end at once. */
export function runToEnd<R>(building: Generator<void, R, void>): R {
  for (;;) {
    const step = building.next()
    if (step.done === true) return step.value
  }
}

/** A builder that pauses after each slice of its work, run with I/O let in at each pause: for lists of thousands. */
export async function runInSlices<R>(building: Generator<void, R, void>): Promise<R> {
  for (;;) {
    const step = building.next()
    if (step.done === true) return step.value
    await letIoIn()
  }
}
