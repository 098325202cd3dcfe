/**
 * `JSON.stringify(value, null, 2)` written a slice at a time. The gateway's
 * `/status` lists every route and each watched key's quota under every
 * policy: with thousands of routes it is megabytes, and stringified in one
 * piece it held the requests the gateway serves for a tenth of a second.
 */
import { ITEMS_PER_SLICE, letIoIn } from './turn.ts'

const INDENT = '  '

/**
 * The text of `JSON.stringify(value, null, 2)`, byte for byte, in slices.
 * Arrays and objects nested less than `depth` levels deep (`value` itself at
 * level 0) are written an entry at a time, the values at `depth` whole by
 * `JSON.stringify`; after every `valuesPerSlice` of those the event loop is
 * let go, so that a listener sends each slice as it comes and serves its other
 * requests between them. For /status, 3: each route's fields and each
 * watched key's quota under one policy. Rejects where `JSON.stringify`
 * throws (a cycle, a BigInt). A `toJSON` is called once, given its key, as
 * JSON.stringify calls it. A value that changes while the slices are written
 * is written as it stands when its turn comes.
 */
export async function* prettyJsonSlices(value: unknown, depth = 3, valuesPerSlice = ITEMS_PER_SLICE): AsyncGenerator<string> {
  const root = toJsonValue(value, '')
  if (leftOut(root)) return
  const out = { text: '' }
  let inSlice = 0
  for (const _ of write(root, 0, depth, out)) {
    if (++inSlice < valuesPerSlice) continue
    yield out.text
    out.text = ''
    inSlice = 0
    await letIoIn()
  }
  yield out.text
}

/**
 * Appends the text of `json` (a value through its `toJSON`, not one JSON
 * leaves out), written at `level`, to `out.text`; yields after each value it
 * stringifies whole, the unit of a slice's work.
 */
function* write(json: unknown, level: number, depth: number, out: { text: string }): Generator<void> {
  if (level >= depth || json === null || typeof json !== 'object' || isBoxedPrimitive(json)) {
    const text = JSON.stringify(json, null, INDENT)
    out.text += level === 0 ? text : text.replaceAll('\n', `\n${INDENT.repeat(level)}`)
    yield
    return
  }
  const inner = `\n${INDENT.repeat(level + 1)}`
  const outer = `\n${INDENT.repeat(level)}`
  if (Array.isArray(json)) {
    if (json.length === 0) {
      out.text += '[]'
      return
    }
    for (let index = 0; index < json.length; index++) {
      out.text += index === 0 ? `[${inner}` : `,${inner}`
      const item = toJsonValue(json[index], String(index))
      if (leftOut(item)) out.text += 'null'
      else yield* write(item, level + 1, depth, out)
    }
    out.text += `${outer}]`
    return
  }
  let first = true
  for (const name of Object.keys(json)) {
    const entry = toJsonValue((json as Record<string, unknown>)[name], name)
    if (leftOut(entry)) continue
    out.text += `${first ? '{' : ','}${inner}${JSON.stringify(name)}: `
    first = false
    yield* write(entry, level + 1, depth, out)
  }
  out.text += first ? '{}' : `${outer}}`
}

/** What JSON has no text for: an object leaves the entry out, an array writes `null`. */
function leftOut(json: unknown): boolean {
  return json === undefined || typeof json === 'function' || typeof json === 'symbol'
}

/** A value as JSON.stringify sees it: through its `toJSON`, as `Date`s have. */
function toJsonValue(value: unknown, key: string): unknown {
  if (value !== null && (typeof value === 'object' || typeof value === 'bigint')) {
    const toJSON = (value as { toJSON?: unknown }).toJSON
    if (typeof toJSON === 'function') return (toJSON as (key: string) => unknown).call(value, key)
  }
  return value
}

/** `new Number(1)` and kin, which JSON writes as the primitive inside. */
function isBoxedPrimitive(value: object): boolean {
  return value instanceof Number || value instanceof String || value instanceof Boolean
}
