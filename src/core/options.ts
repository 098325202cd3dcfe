import { ArgumentError } from './errors.ts'

/** An options object, checked whole: anything but an object is refused, and so is any name in it not `known`. */
export function checkOptions(argument: string, what: string, options: unknown, known: ReadonlySet<string>): asserts options is object {
  if (typeof options !== 'object' || options === null) throw new ArgumentError(argument, options, `must be an object like { ${[...known].join(', ')} }`)
  rejectUnknown(what, options, known)
}

/** Unknown options are refused, not ignored: a misspelt option would silently do nothing. */
export function rejectUnknown(what: string, options: object, known: ReadonlySet<string>): void {
  // Names alone (no [name, value] pair per option): this runs on every call given options.
  for (const name of Object.keys(options)) {
    if (known.has(name)) continue
    const value: unknown = (options as Record<string, unknown>)[name]
    if (value !== undefined) throw new ArgumentError(name, value, `is not ${what} (known: ${[...known].join(', ')})`, didYouMean(name, known))
  }
}

/**
 * `did you mean "windowMs"?` for a name that is one of `known` misspelt: in
 * another case or with `-` / `_` (`windowMS`, `refill_tokens`), a plural for a
 * singular or the other way round (`methods`), with a word around it
 * (`fail-open` for `open`), or a slip of a letter or two (`limt`, `capcity`).
 * Undefined when no one name is clearly meant.
 */
export function didYouMean(name: string, known: Iterable<string>): string | undefined {
  const folded = fold(name)
  const words = name.split(/[-_\s]+/).map(fold)
  let best: string | undefined
  let bestDistance = Infinity
  let tied = false
  for (const candidate of known) {
    const other = fold(candidate)
    const distance = other === folded || pluralOf(other) === folded || pluralOf(folded) === other ? 0
      // One word of several is the name (`fail-open` for `open`): nearer than any slip.
      : words.length > 1 && other.length >= 3 && words.includes(other) ? 0.5
      : editDistance(folded, other)
    if (distance < bestDistance) [best, bestDistance, tied] = [candidate, distance, false]
    else if (distance === bestDistance) tied = true
  }
  // A slip, not another word: at most two edits, and fewer than a third of the name.
  const close = bestDistance === 0 || (bestDistance <= 2 && bestDistance * 3 < folded.length)
  return best !== undefined && close && !tied ? `did you mean "${best}"?` : undefined
}

/** didYouMean for a value that must be one of `choices`: a string misspelt, as options' names are. */
export function choiceHint(value: unknown, choices: readonly string[]): string | undefined {
  return typeof value === 'string' ? didYouMean(value, choices) : undefined
}

function pluralOf(name: string): string {
  return /[^aeiou]y$/.test(name) ? `${name.slice(0, -1)}ies` : /(s|x|ch|sh)$/.test(name) ? `${name}es` : `${name}s`
}

function fold(name: string): string {
  return name.toLowerCase().replace(/[-_]/g, '')
}

/** Edits (insert, delete, substitute, swap two neighbours) from one to the other. Names are short: a row at a time is plenty. */
function editDistance(a: string, b: string): number {
  let beforeLast: number[] = []
  let last = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const row = [i]
    for (let j = 1; j <= b.length; j++) {
      const substitution = (last[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1)
      let distance = Math.min((last[j] as number) + 1, (row[j - 1] as number) + 1, substitution)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) distance = Math.min(distance, (beforeLast[j - 2] as number) + 1)
      row.push(distance)
    }
    beforeLast = last
    last = row
  }
  return last[b.length] as number
}

/** A flag that must be a real boolean: a string such as 'false' (from an environment variable) would be truthy. */
export function checkBoolean(name: string, value: unknown): void {
  if (value !== undefined && typeof value !== 'boolean') throw new ArgumentError(name, value, 'must be true or false')
}
