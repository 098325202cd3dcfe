/**
 * Path patterns compiled to matchers whose time is linear in the path's length.
 *
 * A pattern with one wildcard becomes a regular expression, which V8 runs
 * fastest. Two or more wildcards in a regular expression can backtrack
 * polynomially on a path an attacker chooses (`/x/*-*-*` took minutes on
 * 8,000 dashes), so those patterns run as a set of states stepped once per
 * character instead: time at most path length x pattern length, whatever
 * the path.
 */

/**
 * A `**` segment is zero or more segments (`/orders/**` is `/orders` and
 * everything below it, as in Spring's path patterns); `**` within a segment
 * anything; `*` anything within one segment; everything else literal. A
 * trailing slash names the same resource to most routers (Express's default,
 * Fastify's ignoreTrailingSlash), so a pattern without one matches with one too.
 */
export function compileGlob(pattern: string, caseSensitive: boolean): (path: string) => boolean {
  const parts = pattern.split(WILDCARDS)
  const wildcards = parts.filter((part) => part === '/**' || part === '**' || part === '*').length
  if (wildcards <= 1) {
    const regex = globRegex(pattern, caseSensitive)
    return (path) => regex.test(path)
  }
  return stepper(parts, !pattern.endsWith('/'), caseSensitive)
}

const WILDCARDS = /(\/\*\*(?=\/|$)|\*\*|\*)/

/** The pattern as a regular expression: what it means, and how patterns of one wildcard are matched. */
export function globRegex(pattern: string, caseSensitive: boolean): RegExp {
  const source = pattern.split(WILDCARDS).map((part) => {
    if (part === '/**') return '(?:/.*)?'
    if (part === '**') return '.*'
    if (part === '*') return '[^/]*'
    return part.replace(/[.+?^${}()|[\]\\]/g, '\\$&')
  }).join('')
  return new RegExp(`^${source}${pattern.endsWith('/') ? '' : '/?'}$`, caseSensitive ? '' : 'i')
}

const CHAR = 0
const SEGMENT = 1 // any character but `/`, any number of times
const ANY = 2 // any character, any number of times
const NONE = -1
const SLASH = 0x2f

/**
 * The pattern as states: state i consumes the character `codes[i]` and moves
 * to i + 1 (CHAR), or consumes any character (any but `/` for SEGMENT) and
 * stays (reaching i + 1 without consuming too); `skips[i]`, when set, is
 * reached from i without consuming anything. The matcher keeps the list of
 * states the path read so far can be in, and steps it once per character.
 */
function stepper(parts: readonly string[], optionalTrailingSlash: boolean, caseSensitive: boolean): (path: string) => boolean {
  const kinds: number[] = []
  const codes: number[] = []
  const skips: number[] = []
  const push = (kind: number, code = NONE, skip = NONE) => { kinds.push(kind); codes.push(code); skips.push(skip) }
  for (const part of parts) {
    if (part === '/**') {
      // `(?:/.*)?`: a slash and anything after it, or nothing.
      push(CHAR, SLASH, kinds.length + 2)
      push(ANY)
    } else if (part === '**') {
      push(ANY)
    } else if (part === '*') {
      push(SEGMENT)
    } else {
      // UTF-16 units, as the path is read (and as a regular expression without `u` reads both).
      for (let i = 0; i < part.length; i++) push(CHAR, caseSensitive ? part.charCodeAt(i) : foldCode(part.charCodeAt(i)))
    }
  }
  if (optionalTrailingSlash) push(CHAR, SLASH, kinds.length + 1)
  const accept = kinds.length
  let current = new Int32Array(accept + 1)
  let next = new Int32Array(accept + 1)
  let size = 0
  // The step at which each state was last added, so that a list holds each state once.
  const added = new Uint32Array(accept + 1)
  let step = 0
  const nextStep = () => {
    step = step === 0xffffffff ? 1 : step + 1
    if (step === 1) added.fill(0)
  }
  // Adds state i and what it reaches without consuming (always a later state, so this ends).
  const add = (list: Int32Array, i: number): void => {
    if (added[i] === step) return
    added[i] = step
    list[size++] = i
    if (i === accept) return
    if (kinds[i] !== CHAR) add(list, i + 1)
    const skip = skips[i] as number
    if (skip !== NONE) add(list, skip)
  }
  return (path) => {
    nextStep()
    size = 0
    add(current, 0)
    for (let at = 0; at < path.length && size > 0; at++) {
      const raw = path.charCodeAt(at)
      const code = caseSensitive ? raw : foldCode(raw)
      const count = size
      nextStep()
      size = 0
      for (let k = 0; k < count; k++) {
        const i = current[k] as number
        if (i === accept) continue
        const kind = kinds[i]
        if (kind === CHAR) {
          if (codes[i] === code) add(next, i + 1)
        } else if (kind === ANY || raw !== SLASH) {
          add(next, i)
        }
      }
      ;[current, next] = [next, current]
    }
    for (let k = 0; k < size; k++) if (current[k] === accept) return true
    return false
  }
}

/** Text as the case-insensitive matchers compare it: two texts they take as equal fold alike. */
export function foldCase(text: string): string {
  // toUpperCase folds printable ASCII as Canonicalize does; anything else one unit at a time (`ß` stays, where toUpperCase gives `SS`).
  if (!NON_ASCII.test(text)) return text.toUpperCase()
  let folded = ''
  for (let i = 0; i < text.length; i++) folded += String.fromCharCode(foldCode(text.charCodeAt(i)))
  return folded
}

const NON_ASCII = /[^ -~]/

/** A UTF-16 unit as a case-insensitive regular expression (no `u` flag) compares it: ECMAScript's Canonicalize. */
function foldCode(code: number): number {
  if (code < 0x80) return code >= 0x61 && code <= 0x7a ? code - 0x20 : code
  const upper = String.fromCharCode(code).toUpperCase()
  if (upper.length !== 1) return code
  const folded = upper.charCodeAt(0)
  return folded < 0x80 ? code : folded
}
