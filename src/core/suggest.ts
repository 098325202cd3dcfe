/**
 * What a misspelt name most likely stands for, for the errors that refuse it.
 * No imports: errors.ts and options.ts both use it.
 */

const MAX_NAME_LENGTH = 100

/**
 * `did you mean "windowMs"?` for a name that is one of `known` misspelt: in
 * another case or with `-` / `_` (`windowMS`, `refill_tokens`), a plural for a
 * singular or the other way round (`methods`), a slip of a letter or two
 * (`limt`, `capcity`), or one word of the other (`fail-open` for `open`).
 * Undefined when no one name is clearly meant.
 */
export function didYouMean(name: string, known: Iterable<string>): string | undefined {
  // No slip is this long, and the edit distance takes time in the product of the lengths (a key of a large wrong file).
  if (name.length > MAX_NAME_LENGTH) return undefined
  const folded = fold(name)
  let best: string | undefined
  let bestDistance = Infinity
  let tied = false
  for (const candidate of known) {
    const other = fold(candidate)
    // `window` for `windowMs`, `storeTimeout` for `storeTimeoutMs`: the name without its unit.
    const distance = other === folded || other === `${folded}ms` || pluralOf(other) === folded || pluralOf(folded) === other ? 0
      // One word of several is the other name (`fail-open` for `open`, `burst` for `boundary-burst`):
      // after a slip of one letter (`check-confg` is `check-config`, not `check`), before two.
      : sharesWord(name, candidate) ? 1.5
      : editDistance(folded, other)
    if (distance < bestDistance) [best, bestDistance, tied] = [candidate, distance, false]
    else if (distance === bestDistance) tied = true
  }
  // A slip, not another word: at most two edits, and fewer than a third of the name.
  const close = bestDistance === 0 || (bestDistance <= 2 && bestDistance * 3 < folded.length)
  return best !== undefined && close && !tied ? `did you mean "${best}"?` : undefined
}

/** `text`, then `; hint` where there is one: how every refusal ends with what was meant. */
export function withHint(text: string, hint: string | undefined): string {
  return hint === undefined ? text : `${text}; ${hint}`
}

/** didYouMean for a value that must be one of `choices`: a string misspelt, as options' names are. */
export function choiceHint(value: unknown, choices: readonly string[]): string | undefined {
  return typeof value === 'string' ? didYouMean(value, choices) : undefined
}

/** Whether one name is a word (three letters or more) of the other, which has several. */
function sharesWord(a: string, b: string): boolean {
  const within = (word: string, of: string) => {
    const words = of.split(/[-_\s]+/).map(fold)
    return words.length > 1 && fold(word).length >= 3 && words.includes(fold(word))
  }
  return within(a, b) || within(b, a)
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
