import { ArgumentError } from './errors.ts'

/** Unknown options are refused, not ignored: a misspelt option would silently do nothing. */
export function rejectUnknown(what: string, options: object, known: ReadonlySet<string>): void {
  for (const [name, value] of Object.entries(options)) {
    if (!known.has(name) && value !== undefined) {
      throw new ArgumentError(name, value, `is not ${what} (known: ${[...known].join(', ')})`)
    }
  }
}
