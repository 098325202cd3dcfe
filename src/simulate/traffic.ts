/**
 * Traffic to replay: built-in shapes that show where the algorithms differ,
 * and a CSV importer for the user's own logs. Times are milliseconds from the
 * start of the simulation; the simulated clock starts on a window boundary.
 */
import { SluiceError } from '../core/errors.ts'

export interface TrafficEvent {
  /** Milliseconds since the start of the simulation. */
  at: number
  key: string
  cost: number
}

export interface Traffic {
  name: string
  description: string
  /** Sorted by `at`. */
  events: TrafficEvent[]
  durationMs: number
}

/** The most events one simulation replays, from a pattern or a CSV file. */
export const MAX_EVENTS = 5_000_000
/** Longer than any recording: a span beyond it is a unit mistake (the simulated clock also ends at the year 9999). */
const MAX_SPAN_MS = 100 * 365.25 * 24 * 3600 * 1000

export const PATTERNS = ['steady', 'boundary-burst', 'morning-ramp', 'batch-spikes', 'attack'] as const
export type PatternName = (typeof PATTERNS)[number]

/** The limit the built-in shapes are drawn against: `limit` units per `windowMs`. */
export interface Scale {
  limit: number
  windowMs: number
}

/** A small seeded generator (mulberry32), so a pattern (or a test's random trace) is the same on every run. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** `count` events spread evenly over [from, to). */
function even(key: string, from: number, to: number, count: number): TrafficEvent[] {
  const step = (to - from) / count
  return Array.from({ length: count }, (_, i) => ({ at: Math.floor(from + i * step), key, cost: 1 }))
}

/** Poisson arrivals at `perWindow` events per window, from `from` to `to`. */
function poisson(key: string, from: number, to: number, perWindow: number, windowMs: number, next: () => number): TrafficEvent[] {
  const events: TrafficEvent[] = []
  const meanGap = windowMs / perWindow
  for (let at = from + -Math.log(1 - next()) * meanGap; at < to; at += -Math.log(1 - next()) * meanGap) {
    events.push({ at: Math.floor(at), key, cost: 1 })
  }
  return events
}

/** Events each pattern below makes per unit of the limit (its expected count over its whole duration): keep in step with the shapes. */
const EVENTS_PER_LIMIT: Record<PatternName, number> = { steady: 9, 'boundary-burst': 2, 'morning-ramp': 15, 'batch-spikes': 10.4, attack: 110 }

export function pattern(name: PatternName, scale: Scale): Traffic {
  const { limit, windowMs: w } = scale
  // Checked before a single event is made: a pattern drawn against a huge limit would exhaust the heap.
  const expected = Math.round(EVENTS_PER_LIMIT[name] * limit)
  if (expected > MAX_EVENTS) {
    throw new SluiceError('ERR_SLUICE_ARGUMENT', `the ${name} pattern at a limit of ${limit} makes about ${expected.toLocaleString('en-US')} events, more than the ${MAX_EVENTS.toLocaleString('en-US')} a simulation replays; use a limit of at most ${Math.floor(MAX_EVENTS / EVENTS_PER_LIMIT[name])} for it`)
  }
  const next = seededRandom(42)
  let events: TrafficEvent[]
  let durationMs: number
  let description: string
  switch (name) {
    case 'steady':
      durationMs = 6 * w
      description = `one client at 1.5x the limit, evenly spaced, for 6 windows`
      events = even('client', 0, durationMs, Math.round(1.5 * limit * 6))
      break
    case 'boundary-burst': {
      // The limit just before a window boundary and again just after it: the classic fixed-window flaw.
      durationMs = 4 * w
      const edge = Math.max(1, Math.floor(w / 20))
      description = `one client sends the limit in the last 5% of window 2 and again in the first 5% of window 3`
      events = [...even('client', 2 * w - edge, 2 * w, limit), ...even('client', 2 * w, 2 * w + edge, limit)]
      break
    }
    case 'morning-ramp': {
      durationMs = 10 * w
      description = `one client ramping from nothing to 3x the limit over 10 windows`
      events = []
      for (let window = 0; window < 10; window++) {
        const perWindow = Math.max(1, Math.round((3 * limit * (window + 0.5)) / 10))
        events = events.concat(poisson('client', window * w, (window + 1) * w, perWindow, w, next))
      }
      break
    }
    case 'batch-spikes': {
      durationMs = 8 * w
      description = `background at 0.3x the limit, and every 2 windows a batch of 2x the limit within 5% of a window`
      events = poisson('client', 0, durationMs, 0.3 * limit, w, next)
      for (let start = w / 2; start < durationMs; start += 2 * w) events = events.concat(even('client', start, start + w / 20, 2 * limit))
      break
    }
    case 'attack': {
      durationMs = 6 * w
      description = `one attacker at 20x the limit among 10 users at 0.5x each (each key limited on its own)`
      events = poisson('attacker', w, 5 * w, 20 * limit, w, next)
      // concat, not push(...): spread as arguments, a large array overflows the call stack.
      for (let user = 0; user < 10; user++) events = events.concat(poisson(`user-${user}`, 0, durationMs, 0.5 * limit, w, next))
      break
    }
  }
  events.sort((a, b) => a.at - b.at)
  return { name, description, events, durationMs }
}

export interface LineProblem {
  line: number
  problem: string
}

/** A CSV file the importer could not read: every malformed line, with its number. */
export class TrafficError extends SluiceError {
  readonly problems: LineProblem[]

  constructor(problems: LineProblem[]) {
    const shown = problems.slice(0, 20).map(({ line, problem }) => (line > 0 ? `line ${line}: ${problem}` : problem))
    if (problems.length > 20) shown.push(`... and ${problems.length - 20} more malformed lines`)
    super('ERR_SLUICE_TRAFFIC', shown.join('\n'))
    this.problems = problems
  }
}

export const NUMERIC_UNITS = ['ms', 's', 'us', 'ns'] as const
type NumericUnit = (typeof NUMERIC_UNITS)[number]
/** How numeric timestamps are read; `auto` takes the epoch unit a number's size can only be. */
export type TimeUnit = 'auto' | NumericUnit
export const isNumericUnit = (text: string): text is NumericUnit => (NUMERIC_UNITS as readonly string[]).includes(text)

/**
 * Epoch seconds now have 10 digits (`date +%s`, nginx's `$msec`): as
 * milliseconds they would be January 1970, and a relative recording does
 * not start 11 days in. Epoch milliseconds have 13 digits, microseconds 16
 * (Envoy, Go's `UnixMicro`) and nanoseconds 19 (`date +%s%N`, OpenTelemetry).
 * Each band below holds one unit's epoch times (seconds from 2001, the others
 * from 1973, all until the year 5138), which no other unit's epoch times and
 * no relative recording reach.
 */
const EPOCH_UNITS: ReadonlyArray<{ unit: NumericUnit; from: number; below: number }> = [
  { unit: 's', from: 1e9, below: 1e11 },
  { unit: 'us', from: 1e14, below: 1e17 },
  { unit: 'ns', from: 1e17, below: 1e20 },
]
const UNIT_NAMES: Record<NumericUnit, string> = { s: 'seconds', ms: 'milliseconds', us: 'microseconds', ns: 'nanoseconds' }

/**
 * A numeric timestamp in whole milliseconds, sub-millisecond digits dropped
 * (the clock's resolution) by cutting decimal digits, without binary
 * rounding; undefined when the milliseconds are beyond 2^53.
 */
function numericMs(stamp: string, unit: NumericUnit): number | undefined {
  const [whole, fraction = ''] = stamp.split('.') as [string, string | undefined]
  const ms =
    unit === 's' ? Number(whole) * 1000 + Number(fraction.slice(0, 3).padEnd(3, '0'))
    : unit === 'ms' ? Number(whole)
    : Number(whole.slice(0, unit === 'us' ? -3 : -6) || '0')
  return Number.isSafeInteger(ms) ? ms : undefined
}

/**
 * `timestamp,key[,cost]` per line; an optional header line before the
 * first event; `#` comments. Timestamps are milliseconds (epoch or relative),
 * epoch seconds, micro- or nanoseconds, or ISO 8601 dates; they are shifted so the first is 0, and
 * must not go backwards. Every malformed line is reported, with its number,
 * in one error.
 */
export function parseCsv(text: string, name = 'csv', timeUnit: TimeUnit = 'auto'): Traffic {
  const problems: LineProblem[] = []
  const events: TrafficEvent[] = []
  let first: number | undefined
  let previous = -Infinity
  let unit: NumericUnit | undefined = timeUnit === 'auto' ? undefined : timeUnit
  let headerAllowed = true
  const lines = text.split(/\r?\n/)
  for (let index = 0; index < lines.length; index++) {
    const lineNumber = index + 1
    const line = (lines[index] as string).trim()
    if (line === '' || line.startsWith('#')) continue
    const fields = line.split(',').map((field) => field.trim())
    if (headerAllowed && /^[a-z_ ]+$/i.test(fields[0] ?? '')) {
      headerAllowed = false
      continue
    }
    headerAllowed = false
    if (fields.length < 2 || fields.length > 3) {
      problems.push({ line: lineNumber, problem: `expected "timestamp,key" or "timestamp,key,cost", got ${fields.length} field(s)` })
      continue
    }
    const [stamp, key, costField] = fields as [string, string, string | undefined]
    let time: number
    if (/^\d+(\.\d+)?$/.test(stamp)) {
      if (unit === undefined) {
        const value = Number(stamp)
        unit = EPOCH_UNITS.find((epoch) => value >= epoch.from && value < epoch.below)?.unit ?? 'ms'
      }
      const ms = numericMs(stamp, unit)
      if (ms === undefined) {
        problems.push({ line: lineNumber, problem: `timestamp ${stamp.slice(0, 40)} is too large for ${UNIT_NAMES[unit]} (more than 2^53 ms); give the unit with --time-unit (ms, s, us, ns)` })
        continue
      }
      time = ms
    } else {
      time = /^\d{4}-\d\d-\d\d/.test(stamp) ? Date.parse(stamp) : Number.NaN
    }
    if (!Number.isFinite(time)) {
      problems.push({ line: lineNumber, problem: `timestamp ${JSON.stringify(stamp.slice(0, 40))} is neither a number (milliseconds or epoch seconds) nor an ISO 8601 date` })
      continue
    }
    if (key === '' || key.length > 256) {
      problems.push({ line: lineNumber, problem: 'key must be 1 to 256 characters' })
      continue
    }
    const cost = costField === undefined ? 1 : Number(costField)
    if (!Number.isSafeInteger(cost) || cost < 1) {
      problems.push({ line: lineNumber, problem: `cost must be a positive integer, got ${JSON.stringify(costField)}` })
      continue
    }
    if (time < previous) {
      problems.push({ line: lineNumber, problem: `timestamp ${stamp} is earlier than the line before; sort the file by time` })
      continue
    }
    if (first !== undefined && time - first > MAX_SPAN_MS) {
      problems.push({ line: lineNumber, problem: `timestamp ${stamp} is more than 100 years after the first line's; are the timestamps in micro- or nanoseconds? Say so with --time-unit us or ns` })
      break
    }
    previous = time
    first ??= time
    if (events.length >= MAX_EVENTS) {
      problems.push({ line: lineNumber, problem: `more than ${MAX_EVENTS} events; replay a sample` })
      break
    }
    events.push({ at: time - first, key, cost })
  }
  if (problems.length > 0) throw new TrafficError(problems)
  if (events.length === 0) throw new TrafficError([{ line: 0, problem: 'no events: the file holds no "timestamp,key" line' }])
  const last = events[events.length - 1] as TrafficEvent
  const read = unit !== undefined && unit !== 'ms' ? `, numeric timestamps read as ${timeUnit === 'auto' ? 'epoch ' : ''}${UNIT_NAMES[unit]}${timeUnit === 'auto' ? ' (--time-unit ms reads them as milliseconds)' : ''}` : ''
  return { name, description: `recorded traffic${read}, replayed from its first line`, events, durationMs: Math.max(1, last.at + 1) }
}
